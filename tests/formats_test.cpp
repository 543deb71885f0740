#include <gtest/gtest.h>

#include "kernels/formats.h"

namespace zenmoe {
namespace {

TEST(TypeGeometry, MatchesGgmlTable) {
  EXPECT_EQ(type_geometry(GgmlType::Q4_K)->block_bytes, 144);
  EXPECT_EQ(type_geometry(GgmlType::Q4_K)->block_elems, 256);
  EXPECT_EQ(type_geometry(GgmlType::Q5_0)->block_bytes, 22);
  EXPECT_EQ(type_geometry(GgmlType::BF16)->block_bytes, 2);
  EXPECT_STREQ(type_name(GgmlType::Q6_K), "q6_K");
}

TEST(TypeGeometry, RemovedAndOutOfRangeIdsAreUnknown) {
  for (int32_t id : {4, 5, 31, 32, 33, 36, 37, 38, 43, -1, 1000}) EXPECT_EQ(type_geometry(id), nullptr) << id;
}

TEST(TypeGeometry, RowBytes) {
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 7168), 28 * 144);
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 100), -1);
  EXPECT_EQ(row_bytes(GgmlType::F16, 3), 6);
}

TEST(TypeGeometry, NamesRoundTrip) {
  GgmlType t;
  ASSERT_TRUE(type_from_name("Q4_K", &t));
  EXPECT_EQ(t, GgmlType::Q4_K);
  EXPECT_FALSE(type_from_name("q4_k_s", &t));
}

}  // namespace
}  // namespace zenmoe
