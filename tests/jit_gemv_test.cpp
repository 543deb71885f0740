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

// Row-per-lane formats: Q8_0 and Q4_0 (K a multiple of 32) and the plain float formats.
using FormatLevel = std::pair<GgmlType, IsaLevel>;
class Rows16Gemv : public ::testing::TestWithParam<FormatLevel> {};

std::vector<int64_t> legal_ks(GgmlType f) {
  if (f == GgmlType::Q8_0 || f == GgmlType::Q4_0) return {32, 96, 256, 2048, 7168, 18432};
  if (f == GgmlType::Q5_K || f == GgmlType::Q6_K) return {256, 512, 2048, 7168, 18432};
  return {1, 7, 16, 33, 256, 2048, 7168};
}

TEST_P(Rows16Gemv, AllK) {
  const auto [f, level] = GetParam();
  for (int64_t k : legal_ks(f))
    for (int64_t rows : {1, 3, 17})
      GemvTester().format(f).isa(level).cols(k).rows(k > 2048 ? rows : rows + 16).Test();
  GemvTester().format(f).isa(level).cols(18432 - (f == GgmlType::F32 ? 32 : 0)).rows(2).Test();
  GemvTester().format(f).isa(level).cols(256).rows(48).Test();
}

TEST_P(Rows16Gemv, UnalignedOutputAndAccumulate) {
  const auto [f, level] = GetParam();
  for (int off : {1, 3})
    for (bool acc : {false, true}) GemvTester().format(f).isa(level).cols(2048).rows(37).y_offset(off).accumulate(acc).Test();
}

TEST_P(Rows16Gemv, DataKinds) {
  const auto [f, level] = GetParam();
  for (Data data : {Data::kZeroScales, Data::kExtreme, Data::kAdversarial, Data::kExact})
    for (int64_t k : {256, 2048}) GemvTester().format(f).isa(level).cols(k).rows(19).data(data).Test();
  for (uint32_t s = 2; s < 5; ++s) GemvTester().format(f).isa(level).cols(512).rows(33).seed(s).Test();
  GemvTester().format(f).isa(level).cols(512).rows(33).prefetch(0).Test();
}

std::vector<FormatLevel> rows16_variants() {
  std::vector<FormatLevel> out;
  for (GgmlType f : {GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (const auto& v : variants(f)) out.push_back(v);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Host, Rows16Gemv, ::testing::ValuesIn(rows16_variants()),
                         [](const ::testing::TestParamInfo<FormatLevel>& i) {
                           return std::string(format_short_name(i.param.first)) + "_" + isa::level_name(i.param.second);
                         });

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
