// Every GEMV kernel variant the host can run against the scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/registry.h"
#include "kernels/pack.h"
#include "kernels/ref/quant.h"
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
  // prefetchnta instead of prefetcht0, over the start prefetches and a partial stream walk.
  for (int ns : {1, 2, 4})
    GemvTester().format(GgmlType::Q4_K).isa(GetParam()).prefetch(4096).prefetch_hint(PrefetchHint::kNta)
        .streams(GetParam() >= IsaLevel::kAvx2 ? ns : 1).cols(2048).rows(8 * 9 + 3).accumulate(ns == 2).Test();
}

// Row groups streamed side by side: a thread's groups split into equal runs, the rest (fewer
// than the stream count) one at a time; row ranges that start and end inside groups.
TEST_P(Q4KGemv, Streams) {
  if (GetParam() < IsaLevel::kAvx2) GTEST_SKIP() << "the scalar reference walks one stream";
  const std::vector<int> blocks = GetParam() == IsaLevel::kAvx2 ? std::vector<int>{2, 8} : std::vector<int>{2, 8, 16};
  for (int ns : {1, 2, 4})
    for (int rb : blocks)
      for (int64_t rows : {int64_t{3}, int64_t{5} * rb + 3, int64_t{9} * rb, int64_t{13} * rb + 1})
        for (bool acc : {false, true})
          GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(rows > 64 ? 2048 : 512).rows(rows).row_block(rb)
              .streams(ns).accumulate(acc).Test();
  GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(7168).rows(40).streams(4).prefetch(0).Test();
  // The largest distance a descriptor takes: the start prefetches still fit the kernel.
  GemvTester().format(GgmlType::Q4_K).isa(GetParam()).cols(7168).rows(40).streams(4).prefetch(1 << 16).Test();
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

// Row-per-lane formats: Q8_0, Q4_0 and Q5_0 (K a multiple of 32) and the plain float formats.
using FormatLevel = std::pair<GgmlType, IsaLevel>;
class Rows16Gemv : public ::testing::TestWithParam<FormatLevel> {};

std::vector<int64_t> legal_ks(GgmlType f) {
  if (f == GgmlType::Q8_0 || f == GgmlType::Q4_0 || f == GgmlType::Q5_0) return {32, 96, 128, 256, 2048, 7168, 18432};
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
  // prefetchnta instead of prefetcht0, every line and (where the kernel has it) one per KiB.
  const KernelDesc d = GemvTester().format(f).isa(level).cols(7168).desc();
  for (int stride : {64, 1024}) {
    if (stride > 64 && d.prefetch_stride <= 64) continue;
    GemvTester().format(f).isa(level).cols(7168).rows(16 * 3 + 5).prefetch(d.prefetch > 0 ? d.prefetch : 4096)
        .prefetch_stride(stride).prefetch_hint(PrefetchHint::kNta).Test();
  }
}

// Where the kernel honours a prefetch stride, every legal stride and distance gives the same
// results over K that leave a partial iteration (the unrolled tail) and K shorter than one.
TEST_P(Rows16Gemv, PrefetchStrides) {
  const auto [f, level] = GetParam();
  const KernelDesc probe = GemvTester().format(f).isa(level).cols(256).prefetch(4096).prefetch_stride(1024).desc();
  const bool strided = (f == GgmlType::F32 || f == GgmlType::F16 || f == GgmlType::BF16) ? level >= IsaLevel::kAvx512
                       : (f == GgmlType::Q8_0 || f == GgmlType::Q4_0 || f == GgmlType::Q5_0) ? level >= IsaLevel::kAvx512Vnni
                                                                                        : false;
  if (!strided) {
    // The other kernels prefetch every line: a larger stride is refused, not silently ignored.
    EXPECT_NE(validate(probe).message().find("prefetch less than every line"), std::string::npos)
        << validate(probe).message();
    return;
  }
  ASSERT_TRUE(validate(probe).is_ok()) << validate(probe).message();
  const std::vector<int64_t> ks = legal_ks(f);
  for (int stride : {64, 128, 512, 1024, 4096})
    for (int pf : {64, 4096, 16384})
      for (int64_t k : {ks[0], ks[1], int64_t{2048}, int64_t{7168}})
        GemvTester().format(f).isa(level).cols(k).rows(k >= 7168 ? 3 : 19).prefetch(pf).prefetch_stride(stride).Test();
}

// Where the kernel walks several groups side by side, every stream count gives correct rows
// over thread ranges with and without a remainder; elsewhere more than one is refused.
TEST_P(Rows16Gemv, Streams) {
  const auto [f, level] = GetParam();
  const KernelDesc probe = GemvTester().format(f).isa(level).cols(256).streams(2).desc();
  const bool plain = f == GgmlType::F32 || f == GgmlType::F16 || f == GgmlType::BF16;
  const bool streams = f == GgmlType::Q8_0 || f == GgmlType::Q4_0 || f == GgmlType::Q5_0 || f == GgmlType::Q5_K;
  if (!((streams && level >= IsaLevel::kAvx512Vnni) || (plain && level >= IsaLevel::kAvx512))) {
    EXPECT_NE(validate(probe).message().find("side by side"), std::string::npos) << validate(probe).message();
    return;
  }
  ASSERT_TRUE(validate(probe).is_ok()) << validate(probe).message();
  for (int ns : {1, 2, 4})
    for (int64_t rows : {int64_t{5}, int64_t{16 * 5 + 3}, int64_t{16 * 9}, int64_t{16 * 13 + 1}})
      for (bool acc : {false, true})
        GemvTester().format(f).isa(level).cols(rows > 100 ? 2048 : 512).rows(rows).streams(ns).accumulate(acc).Test();
  // Every line prefetched (stride 64) and no prefetch: the other two prefetch paths.
  GemvTester().format(f).isa(level).cols(7168).rows(70).streams(4).prefetch(4096).prefetch_stride(64).Test();
  GemvTester().format(f).isa(level).cols(7168).rows(70).streams(4).prefetch(0).Test();
  // Plain formats take any K: k steps left after the unrolled loop, for every stream.
  if (plain)
    for (int64_t k : {int64_t{7}, int64_t{33}, int64_t{1030}})
      GemvTester().format(f).isa(level).cols(k).rows(16 * 9 + 5).streams(4).accumulate(k == 33).Test();
}

std::vector<FormatLevel> rows16_variants() {
  std::vector<FormatLevel> out;
  for (GgmlType f : {GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F32,
                     GgmlType::F16, GgmlType::BF16})
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

// The AVX2 kernels of these formats keep the AVX-512 kernel's float operation order (same
// integer sums, same accumulators), so a model's logits do not depend on which one runs.
std::vector<float> run_level(GgmlType f, IsaLevel level, const PackedWeights& w, const std::vector<uint8_t>& x) {
  const KernelDesc d = default_gemv_desc(f, static_cast<int32_t>(w.layout.cols), {level, isa::Tuning::kGeneric});
  std::vector<float> y(static_cast<size_t>(w.layout.rows), -1.0f);
  auto k = global_registry().get(d);
  EXPECT_TRUE(k.has_value()) << k.error();
  if (!k) return y;
  GemvCall c;
  c.w = w.data.get();
  c.x = x.data();
  c.y = y.data();
  c.r0 = 0;
  c.r1 = w.layout.rows;
  (**k)(c);
  return y;
}

// The AVX2 kernel of format f and every AVX-512 level up to VNNI the host runs, over the same
// packed rows of K = kCols.
void expect_avx2_and_avx512_agree(GgmlType f, int64_t kCols) {
  constexpr int64_t kRowsN = 37;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(kRowsN * kCols)), xf(static_cast<size_t>(kCols));
  for (float& v : wf) v = nd(rng);
  for (float& v : xf) v = nd(rng);
  SCOPED_TRACE(std::string(type_name(f)) + " K " + std::to_string(kCols));
  const int64_t rb = row_bytes(f, kCols);
  std::vector<uint8_t> w(static_cast<size_t>(rb * kRowsN));
  for (int64_t r = 0; r < kRowsN; ++r) ref::quantize_row(f, wf.data() + r * kCols, w.data() + r * rb, kCols);
  const GgmlType act = default_gemv_desc(f, kCols, {IsaLevel::kAvx2, isa::Tuning::kGeneric}).act;
  std::vector<uint8_t> x(static_cast<size_t>(row_bytes(act, kCols)));
  ref::quantize_row(act, xf.data(), x.data(), kCols);
  auto packed = pack_weights(f, 16, w.data(), w.size(), kRowsN, kCols);
  ASSERT_TRUE(packed.has_value()) << packed.error();
  const std::vector<float> a = run_level(f, IsaLevel::kAvx2, *packed, x);
  for (IsaLevel l : {IsaLevel::kAvx512, IsaLevel::kAvx512Vnni}) {
    if (!isa::host_supports(l)) continue;  // every level this host runs is compared
    const std::vector<float> b = run_level(f, l, *packed, x);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << isa::level_name(l) << " row " << i;
  }
}

TEST(JitGemv, Avx2AndAvx512KernelsAgreeBitForBit) {
  for (GgmlType f : {GgmlType::Q4_0, GgmlType::Q5_K, GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    expect_avx2_and_avx512_agree(f, 2048);
  // An odd K ending in the unrolled loops' tails (BF16: a last column pair with one column).
  for (GgmlType f : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) expect_avx2_and_avx512_agree(f, 1031);
}

TEST(JitGemv, EveryRowPerLaneFormatHasAnAvx2Kernel) {
  // Hosts without AVX-512 must not fall back to the scalar reference for any packed format.
  for (GgmlType f : {GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F32, GgmlType::F16,
                     GgmlType::BF16}) {
    const std::vector<IsaLevel> levels = implemented_levels(f);
    EXPECT_NE(std::find(levels.begin(), levels.end(), IsaLevel::kAvx2), levels.end()) << type_name(f);
  }
}

}  // namespace
}  // namespace zenmoe
