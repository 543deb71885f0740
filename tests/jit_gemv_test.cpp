// Every GEMV kernel variant the host can run against the scalar references.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/registry.h"
#include "jit_gemv_tester.h"

namespace zenmoe {
namespace {

using isa::IsaLevel;
using testing::Data;
using testing::GemvTester;

// (format, level) pairs with a kernel that the host can run.
std::vector<std::pair<GgmlType, IsaLevel>> variants(GgmlType f) {
  std::vector<std::pair<GgmlType, IsaLevel>> out;
  for (IsaLevel l : implemented_levels(f))
    if (isa::host_supports(l)) out.emplace_back(f, l);
  return out;
}

class Q4KGemv : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(Q4KGemv, AllK) {
  for (int64_t k : {256, 512, 2048, 7168, 18432})
    for (int64_t rows : {1, 3, 13})
      GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(k).rows(k > 2048 ? rows : rows + 8).Test();
}

TEST_P(Q4KGemv, RowBlocks) {
  // AVX2 has 16 vector registers and blocks at most 8 rows.
  const std::vector<int> blocks = GetParam() == IsaLevel::kAvx2 ? std::vector<int>{2, 4, 6, 8}
                                                                : std::vector<int>{2, 4, 6, 8, 16};
  for (int rb : blocks)
    for (int64_t rows : {1, 5, 17, 33})
      GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(512).rows(rows).row_block(rb).Test();
}

TEST_P(Q4KGemv, UnalignedOutputAndAccumulate) {
  for (int off : {1, 3})
    for (bool acc : {false, true})
      GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(2048).rows(11).y_offset(off).accumulate(acc).Test();
}

TEST_P(Q4KGemv, DataKinds) {
  for (Data data : {Data::kZeroScales, Data::kExtreme, Data::kAdversarial, Data::kExact})
    for (int64_t k : {256, 2048})
      GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(k).rows(9).data(data).Test();
  GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(18432).rows(3).data(Data::kExtreme).Test();
}

TEST_P(Q4KGemv, TuningsAndPrefetch) {
  for (isa::Tuning t : {isa::Tuning::kGeneric, isa::Tuning::kZen4, isa::Tuning::kZen5})
    GemvTester().format(GgmlType::Q4_K).isa(GetParam()).tuning(t).cols(7168).rows(10).Test();
  for (int pf : {0, 64, 4096})
    GemvTester().format(GgmlType::Q4_K).isa(GetParam()).prefetch(pf).cols(2048).rows(10).Test();
}

TEST_P(Q4KGemv, Seeds) {
  for (uint32_t s = 2; s < 6; ++s)
    GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(512).rows(7).seed(s).Test();
}

std::vector<IsaLevel> q4k_levels() {
  std::vector<IsaLevel> out;
  for (const auto& v : variants(GgmlType::Q4_K)) out.push_back(v.second);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Host, Q4KGemv, ::testing::ValuesIn(q4k_levels()),
                         [](const ::testing::TestParamInfo<IsaLevel>& i) { return std::string(isa::level_name(i.param)); });

TEST(JitGemv, HostRunsAnAvx512Q4KKernelWhenItHasAvx512) {
  // Guards against the variant list silently shrinking to the scalar reference.
  if (isa::host_supports(IsaLevel::kAvx512Vnni)) {
    EXPECT_GE(q4k_levels().size(), 3u) << isa::describe_host();
  } else {
    EXPECT_GE(q4k_levels().size(), 1u);
  }
}

}  // namespace
}  // namespace zenmoe
