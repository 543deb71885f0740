// Every GEMM kernel (KernelOp::kGemm / kGemmAccumulate) the host can run, through a fluent
// tester in the style of the GemvTester:
//   GemmTester().format(GgmlType::Q4_K).isa(IsaLevel::kAvx512Vnni).cols(2048).rows(13).tokens(17).Test();
// Packs GGUF weights with the production packer, runs the kernel over n activation rows with
// the given row range and strides, and checks each token's outputs against the reference
// vec_dot (bound of spec §2.12 as in jit_gemv_tester.h), the scalar GEMM reference and the
// GEMV kernel of the same level; repeat runs must be bit-identical and every element outside
// the computed rows (row-range complement, stride padding, guards) must be untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/registry.h"
#include "codegen/x64/generators.h"
#include "jit_gemv_tester.h"

namespace zenmoe {
namespace {

using isa::IsaLevel;
using testing::Data;

constexpr float kSentinel = -12345.678f;
constexpr int64_t kGuard = 16;

class GemmTester {
 public:
  GemmTester& format(GgmlType v) { format_ = v; return *this; }
  GemmTester& isa(IsaLevel v) { isa_ = v; return *this; }
  GemmTester& rows(int64_t v) { rows_ = v; return *this; }
  GemmTester& cols(int64_t v) { cols_ = v; return *this; }
  GemmTester& tokens(int64_t v) { n_ = v; return *this; }
  GemmTester& range(int64_t r0, int64_t r1) { r0_ = r0; r1_ = r1; return *this; }
  GemmTester& x_pad(int64_t bytes) { x_pad_ = bytes; return *this; }  // beyond one activation row
  GemmTester& y_pad(int64_t floats) { y_pad_ = floats; return *this; }  // beyond `rows`
  GemmTester& accumulate(bool v) { accumulate_ = v; return *this; }
  GemmTester& data(Data v) { data_ = v; return *this; }
  GemmTester& row_block(int v) { row_block_ = v; return *this; }
  GemmTester& seed(uint32_t v) { seed_ = v; return *this; }
  // Also run with x_rows / y_rows: tokens read and write rows of other buffers in another order.
  GemmTester& indexed(bool v) { indexed_ = v; return *this; }
  // Run the GemmCall through the GEMV descriptor's kernel instead (Kernel::gemm on a GEMV):
  // every token's outputs must then be bit-identical to the GEMV's for that token alone.
  GemmTester& through_gemv(bool v) { through_gemv_ = v; return *this; }

  KernelDesc desc(IsaLevel level, bool gemm) const {
    const KernelOp op = gemm ? (accumulate_ ? KernelOp::kGemmAccumulate : KernelOp::kGemm)
                             : (accumulate_ ? KernelOp::kGemvAccumulate : KernelOp::kGemv);
    KernelDesc d = gemm ? default_gemm_desc(format_, static_cast<int32_t>(cols_), {level, isa::Tuning::kGeneric}, op)
                        : default_gemv_desc(format_, static_cast<int32_t>(cols_), {level, isa::Tuning::kGeneric}, op);
    if (row_block_ != 0) d.row_block = static_cast<uint16_t>(row_block_);
    return d;
  }

  void Test() const;

 private:
  void check_indexed(const Kernel& k, const PackedWeights& p, const std::vector<uint8_t>& x, int64_t xs,
                     const std::vector<float>& y0, const std::vector<float>& alpha, const std::vector<float>& got) const;
  void make_weights(std::mt19937& rng, std::vector<uint8_t>* w) const;
  void make_activations(std::mt19937& rng, int64_t xs, std::vector<uint8_t>* x) const;
  double bound(const uint8_t* wrow, const uint8_t* x) const;
  // Runs `k` as a GEMM over a copy of y0; returns the whole buffer (guards included).
  std::vector<float> run(const Kernel& k, const PackedWeights& p, const std::vector<uint8_t>& x, int64_t xs,
                         const std::vector<float>& y0, const std::vector<float>& alpha) const;

  GgmlType format_ = GgmlType::Q4_K;
  IsaLevel isa_ = IsaLevel::kScalar;
  int64_t rows_ = 1, cols_ = 256, n_ = 1, r0_ = -1, r1_ = -1, x_pad_ = 0, y_pad_ = 0;
  bool accumulate_ = false, indexed_ = false, through_gemv_ = false;
  Data data_ = Data::kRandom;
  int row_block_ = 0;
  uint32_t seed_ = 1;
};

void GemmTester::make_weights(std::mt19937& rng, std::vector<uint8_t>* w) const {
  w->assign(static_cast<size_t>(rows_ * row_bytes(format_, cols_)), 0);
  const int64_t nb = rows_ * cols_ / type_geometry(format_)->block_elems;
  if (format_ == GgmlType::Q4_K) return testing::fill_q4k(data_, rng, nb, w->data());
  if (format_ == GgmlType::Q5_K) return testing::fill_q5k(data_, rng, nb, w->data());
  if (format_ == GgmlType::Q6_K) return testing::fill_q6k(data_, rng, nb, w->data());
  testing::fill_q32(format_, data_, rng, nb, w->data());
}

void GemmTester::make_activations(std::mt19937& rng, int64_t xs, std::vector<uint8_t>* x) const {
  const GgmlType act = format_traits(format_)->vec_dot_type;
  x->assign(static_cast<size_t>(n_ * xs), 0xA5);  // stride padding holds garbage
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(cols_));
  for (int64_t t = 0; t < n_; ++t) {
    for (int64_t i = 0; i < cols_; ++i) {
      float v = u(rng) * (1.0f + float(t % 5));
      if (data_ == Data::kExtreme) v = (i % 2 ? 1.0f : -1.0f) * 1e4f;
      if (data_ == Data::kAdversarial) v = (i % 2 ? 1.0f : -1.0f) * (1.0f + 1e-3f * float(i % 7));
      if (data_ == Data::kZeroScales && (i / 256 + t) % 2 == 1) v = 0.0f;
      f[static_cast<size_t>(i)] = v;
    }
    uint8_t* row = x->data() + t * xs;
    ref::quantize_row(act, f.data(), row, cols_);
    if (data_ != Data::kExact) continue;
    // Power-of-two activation scales keep every partial sum exact (as in the GEMV tests).
    if (act == GgmlType::Q8_K) {
      for (int64_t b = 0; b < cols_ / kQK_K; ++b) {
        const float d = 1.0f / 128.0f;
        std::memcpy(row + b * sizeof(BlockQ8_K), &d, 4);
      }
    } else {
      for (int64_t b = 0; b < cols_ / kQK; ++b) {
        const uint16_t d = 0x2000;
        std::memcpy(row + b * sizeof(BlockQ8_0), &d, 2);
      }
    }
  }
}

// Spec §2.12 bound of jit_gemv_tester.h: same integers, float sums in another order.
double GemmTester::bound(const uint8_t* wrow, const uint8_t* x) const {
  const double u = std::ldexp(1.0, -24);
  switch (format_) {
    case GgmlType::Q4_K: return 2.0 * double(cols_ / kQK_K + 14) * u * testing::kquant_terms<BlockQ4_K>(wrow, x, cols_ / kQK_K);
    case GgmlType::Q5_K: return 2.0 * double(cols_ / kQK_K + 14) * u * testing::kquant_terms<BlockQ5_K>(wrow, x, cols_ / kQK_K);
    case GgmlType::Q6_K: return 2.0 * double(cols_ / kQK_K + 14) * u * testing::q6k_terms(wrow, x, cols_ / kQK_K);
    default: return 2.0 * double(cols_ / kQK + 14) * u * testing::q32_terms(format_, wrow, x, cols_ / kQK);
  }
}

std::vector<float> GemmTester::run(const Kernel& k, const PackedWeights& p, const std::vector<uint8_t>& x,
                                   int64_t xs, const std::vector<float>& y0, const std::vector<float>& alpha) const {
  std::vector<float> buf(y0);
  GemmCall c;
  c.w = p.data.get();
  c.x = x.data();
  c.y = buf.data() + kGuard;
  c.r0 = r0_ < 0 ? 0 : r0_;
  c.r1 = r1_ < 0 ? rows_ : r1_;
  c.n = n_;
  c.x_stride = xs;
  c.y_stride = rows_ + y_pad_;
  c.alpha = alpha.data();
  k.gemm(c);
  return buf;
}

// The same call through row indices: x rows stored in reverse order after two spare rows,
// outputs written in reverse order after three untouched rows. Each token's result must be
// bit-identical to the plain call's, and nothing else may be written.
void GemmTester::check_indexed(const Kernel& k, const PackedWeights& p, const std::vector<uint8_t>& x, int64_t xs,
                               const std::vector<float>& y0, const std::vector<float>& alpha,
                               const std::vector<float>& got) const {
  const int64_t ys = rows_ + y_pad_, ny = n_ + 3;
  std::vector<int32_t> xi(static_cast<size_t>(n_)), yi(static_cast<size_t>(n_));
  std::vector<uint8_t> xp(static_cast<size_t>((n_ + 2) * xs), 0xA5);
  std::vector<float> yp(static_cast<size_t>(ny * ys + 2 * kGuard), kSentinel);
  for (int64_t t = 0; t < n_; ++t) {
    xi[t] = static_cast<int32_t>(n_ + 1 - t);
    yi[t] = static_cast<int32_t>(n_ + 2 - t);
    std::memcpy(xp.data() + xi[t] * xs, x.data() + t * xs, static_cast<size_t>(xs));
    std::copy_n(y0.begin() + kGuard + t * ys, ys, yp.begin() + kGuard + yi[t] * ys);
  }
  GemmCall c;
  c.w = p.data.get();
  c.x = xp.data();
  c.y = yp.data() + kGuard;
  c.r0 = r0_ < 0 ? 0 : r0_;
  c.r1 = r1_ < 0 ? rows_ : r1_;
  c.n = n_;
  c.x_stride = xs;
  c.y_stride = ys;
  c.alpha = alpha.data();
  c.x_rows = xi.data();
  c.y_rows = yi.data();
  k.gemm(c);
  for (int64_t e = -kGuard; e < ny * ys + kGuard; ++e) {
    const int64_t j = e >= 0 ? e / ys : -1, t = n_ + 2 - j;
    const float want = j >= 3 && j < ny ? got[size_t(kGuard + t * ys + e % ys)] : kSentinel;
    ASSERT_EQ(testing::detail::bits(yp[size_t(kGuard + e)]), testing::detail::bits(want)) << "indexed, element " << e;
  }
}

void GemmTester::Test() const {
  std::mt19937 rng(seed_ * 7919u + static_cast<uint32_t>(rows_ * 31 + cols_ + n_ * 1009));
  const int64_t r0 = r0_ < 0 ? 0 : r0_, r1 = r1_ < 0 ? rows_ : r1_;
  const KernelDesc d = desc(isa_, !through_gemv_);
  SCOPED_TRACE(std::string(through_gemv_ ? "through the GEMV, " : "") + instance_name(d) + " rows " + std::to_string(rows_) + " [" + std::to_string(r0) + ", " +
               std::to_string(r1) + ") n " + std::to_string(n_));
  std::vector<uint8_t> w, x;
  make_weights(rng, &w);
  const GgmlType act = format_traits(format_)->vec_dot_type;
  const int64_t xs = row_bytes(act, cols_) + x_pad_, ys = rows_ + y_pad_;
  make_activations(rng, xs, &x);
  auto k = global_registry().get(d);
  ASSERT_TRUE(k.has_value()) << k.error();
  auto ref_k = global_registry().get(desc(IsaLevel::kScalar, true));
  ASSERT_TRUE(ref_k.has_value()) << ref_k.error();
  Expected<PackedWeights> packed = pack_weights(format_, d.row_block, w.data(), w.size(), rows_, cols_);
  ASSERT_TRUE(packed.has_value()) << packed.error();

  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> y0(static_cast<size_t>(n_ * ys + 2 * kGuard), kSentinel), alpha(static_cast<size_t>(n_));
  for (int64_t t = 0; t < n_; ++t) {
    alpha[t] = u(rng) * 0.75f;
    for (int64_t r = 0; r < ys && accumulate_; ++r) y0[kGuard + t * ys + r] = u(rng);
  }
  const std::vector<float> got = run(**k, *packed, x, xs, y0, alpha);
  const std::vector<float> again = run(**k, *packed, x, xs, y0, alpha);
  const std::vector<float> scalar = run(**ref_k, *packed, x, xs, y0, alpha);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(testing::detail::bits(got[i]), testing::detail::bits(again[i])) << "repeat run differs at " << i;
  // The descriptor's target has no GFNI; where the kernel has a GFNI form the host runs (Q5_0),
  // that one gives the same bits.
  if (gfni_kernel(d.weight, d.isa, d.op) && isa::host_features().gfni) {
    KernelDesc g = d;
    g.gfni = true;
    auto gk = global_registry().get(g);
    ASSERT_TRUE(gk.has_value()) << gk.error();
    const std::vector<float> gf = run(**gk, *packed, x, xs, y0, alpha);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(testing::detail::bits(got[i]), testing::detail::bits(gf[i])) << "the GFNI kernel differs at " << i;
  }
  if (indexed_) {
    check_indexed(**k, *packed, x, xs, y0, alpha, got);
    check_indexed(**ref_k, *packed, x, xs, y0, alpha, scalar);
  }

  // The GEMV kernel of the same level (when it exists), one call per token.
  std::vector<float> gemv(y0);
  auto gk = global_registry().get(desc(isa_, false));
  for (int64_t t = 0; t < n_ && gk.has_value(); ++t) {
    GemvCall c;
    c.w = packed->data.get();
    c.x = x.data() + t * xs;
    c.y = gemv.data() + kGuard + t * ys;
    c.r0 = r0;
    c.r1 = r1;
    c.alpha = alpha[t];
    (**gk)(c);
  }

  const int64_t rb = row_bytes(format_, cols_);
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t e = static_cast<int64_t>(i) - kGuard, t = e / ys, r = e % ys;
    const bool inside = e >= 0 && e < n_ * ys && r >= r0 && r < r1;
    if (!inside) {
      ASSERT_EQ(testing::detail::bits(got[i]), testing::detail::bits(y0[i])) << "element " << e << " was written";
      continue;
    }
    const uint8_t* xt = x.data() + t * xs;
    const float dot = ref::vec_dot_row(format_, w.data() + r * rb, xt, cols_);
    const float want = accumulate_ ? y0[i] + alpha[t] * dot : dot;
    double b = bound(w.data() + r * rb, xt) * (accumulate_ ? std::abs(alpha[t]) : 1.0f);
    if (accumulate_) b += std::ldexp(std::abs(double(y0[i])) + std::abs(double(alpha[t] * dot)), -22);
    if (data_ == Data::kExact && !accumulate_) {
      ASSERT_EQ(testing::detail::bits(got[i]), testing::detail::bits(want)) << "token " << t << " row " << r;
    }
    ASSERT_LE(std::abs(double(got[i]) - double(want)), b) << "token " << t << " row " << r << ": " << got[i] << " vs " << want;
    ASSERT_LE(std::abs(double(got[i]) - double(scalar[i])), 2 * b) << "token " << t << " row " << r << " vs scalar GEMM";
    if (through_gemv_) {
      ASSERT_EQ(testing::detail::bits(got[i]), testing::detail::bits(gemv[i])) << "token " << t << " row " << r << " vs GEMV";
    } else if (gk.has_value()) {
      ASSERT_LE(std::abs(double(got[i]) - double(gemv[i])), 2 * b) << "token " << t << " row " << r << " vs GEMV";
    }
  }
}

std::vector<IsaLevel> host_levels(GgmlType f) {
  std::vector<IsaLevel> out;
  for (IsaLevel l : implemented_gemm_levels(f))
    if (isa::host_supports(l)) out.push_back(l);
  return out;
}

using FormatLevel = std::pair<GgmlType, IsaLevel>;
class Gemm : public ::testing::TestWithParam<FormatLevel> {
 protected:
  GemmTester T() const { return GemmTester().format(GetParam().first).isa(GetParam().second); }
};

TEST_P(Gemm, TokensAndK) {
  for (int64_t k : {256, 2048, 7168})
    for (int64_t n : {1, 2, 3, 5, 8, 17, 64})
      for (int64_t rows : {1, 3, 21}) T().cols(k).tokens(n).rows(rows).Test();
}

TEST_P(Gemm, RowRanges) {
  const int64_t rows = 45;
  for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{5, 30}, {8, 16}, {0, 1}, {44, 45}, {17, 17}, {3, 45}})
    for (int64_t n : {1, 9}) T().cols(512).rows(rows).tokens(n).range(r0, r1).Test();
}

TEST_P(Gemm, StridesAndAccumulate) {
  for (bool acc : {false, true})
    for (int64_t n : {1, 7, 17}) {
      T().cols(2048).rows(19).tokens(n).x_pad(100).y_pad(7).accumulate(acc).Test();
      T().cols(256).rows(33).tokens(n).range(2, 31).y_pad(1).accumulate(acc).Test();
    }
}

TEST_P(Gemm, RowIndices) {
  for (bool acc : {false, true})
    for (int64_t n : {1, 7, 20}) T().cols(512).rows(37).tokens(n).range(3, 35).y_pad(2).accumulate(acc).indexed(true).Test();
}

TEST_P(Gemm, DataKinds) {
  for (Data data : {Data::kZeroScales, Data::kExtreme, Data::kAdversarial, Data::kExact})
    for (int64_t k : {256, 2048}) T().cols(k).rows(9).tokens(11).data(data).Test();
  for (uint32_t s = 2; s < 5; ++s) T().cols(512).rows(17).tokens(10).seed(s).Test();
}

std::vector<FormatLevel> gemm_variants() {
  std::vector<FormatLevel> out;
  for (GgmlType f : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_0})
    for (IsaLevel l : host_levels(f)) out.emplace_back(f, l);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Host, Gemm, ::testing::ValuesIn(gemm_variants()),
                         [](const ::testing::TestParamInfo<FormatLevel>& i) {
                           return std::string(format_short_name(i.param.first)) + "_" + isa::level_name(i.param.second);
                         });

class Q4KGemmRowBlocks : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(Q4KGemmRowBlocks, AllLegal) {
  // The packed layout (and hence the GEMV) may use any even row block; the GEMM follows it.
  for (int rb : {2, 4, 6, 8, 16})
    for (int64_t n : {3, 8, 12})
      GemmTester().format(GgmlType::Q4_K).isa(GetParam()).row_block(rb).cols(512).rows(35).tokens(n).Test();
}

INSTANTIATE_TEST_SUITE_P(Host, Q4KGemmRowBlocks, ::testing::ValuesIn(host_levels(GgmlType::Q4_K)),
                         [](const ::testing::TestParamInfo<IsaLevel>& i) { return std::string(isa::level_name(i.param)); });

class Q80GemmOddBlocks : public ::testing::TestWithParam<IsaLevel> {};

// Q8_0 and Q5_0 blocks are 32 wide: a single block and odd block counts (the last record, an
// even block's, holds its codes first); K = 128 is deepseek2's attn_k_b.
TEST_P(Q80GemmOddBlocks, AgreeWithReference) {
  for (GgmlType f : {GgmlType::Q8_0, GgmlType::Q5_0})
    for (int64_t k : {32, 96, 128, 288})
      for (int64_t n : {1, 5, 17}) GemmTester().format(f).isa(GetParam()).cols(k).rows(19).tokens(n).Test();
}

INSTANTIATE_TEST_SUITE_P(Host, Q80GemmOddBlocks, ::testing::ValuesIn(host_levels(GgmlType::Q8_0)),
                         [](const ::testing::TestParamInfo<IsaLevel>& i) { return std::string(isa::level_name(i.param)); });

// A few tokens through the Q4_K and Q6_K GEMV kernels' GemmCall: on AVX-512 VNNI hosts, passes
// of up to 4 tokens over the weights (gemv_q4k_few_avx512.cpp, gemv_q6k_few_avx512.cpp), else
// one GEMV per token; either way each token's outputs are the GEMV's bits.
class FewTokens : public ::testing::TestWithParam<FormatLevel> {
 protected:
  GemmTester T() const { return GemmTester().format(GetParam().first).isa(GetParam().second).through_gemv(true); }
};

TEST_P(FewTokens, TokensAndK) {
  for (int64_t k : {256, 2048, 7168})
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 9})
      for (int64_t rows : {1, 8, 21}) T().cols(k).tokens(n).rows(rows).Test();
}

TEST_P(FewTokens, RowRangesStridesAndAccumulate) {
  for (bool acc : {false, true})
    for (int64_t n : {2, 3, 4, 7}) {
      for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{5, 30}, {8, 16}, {0, 1}, {44, 45}, {17, 17}})
        T().cols(512).rows(45).tokens(n).range(r0, r1).accumulate(acc).Test();
      T().cols(2048).rows(19).tokens(n).x_pad(100).y_pad(7).accumulate(acc).Test();
      T().cols(512).rows(37).tokens(n).range(3, 35).y_pad(2).accumulate(acc).indexed(true).Test();
    }
}

TEST_P(FewTokens, DataKinds) {
  for (Data data : {Data::kZeroScales, Data::kExtreme, Data::kAdversarial, Data::kExact})
    for (int64_t n : {2, 4, 6}) T().cols(2048).rows(17).tokens(n).data(data).Test();
}

std::vector<FormatLevel> few_token_variants() {
  std::vector<FormatLevel> out;
  for (GgmlType f : {GgmlType::Q4_K, GgmlType::Q6_K})
    for (IsaLevel l : host_levels(f)) out.emplace_back(f, l);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Host, FewTokens, ::testing::ValuesIn(few_token_variants()),
                         [](const ::testing::TestParamInfo<FormatLevel>& i) {
                           return std::string(format_short_name(i.param.first)) + "_" + isa::level_name(i.param.second);
                         });

// The few-token kernels' own single-token entry (a pass of one) and GemmCalls of one token give
// the GEMV's bits too; descriptors they are not made for are refused.
TEST(FewTokensKernel, OneTokenPassEqualsTheGemv) {
  if (!isa::host_supports(IsaLevel::kAvx512Vnni)) GTEST_SKIP() << "host lacks AVX512_VNNI";
  for (GgmlType f : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(format_short_name(f));
    auto generate = f == GgmlType::Q4_K ? x64::generate_gemv_q4k_few_avx512 : x64::generate_gemv_q6k_few_avx512;
    std::mt19937 rng(11);
    const int64_t rows = 21, k = 2048;
    std::vector<uint8_t> w(static_cast<size_t>(rows * row_bytes(f, k)));
    if (f == GgmlType::Q4_K) testing::fill_q4k(Data::kRandom, rng, rows * k / 256, w.data());
    else testing::fill_q6k(Data::kRandom, rng, rows * k / 256, w.data());
    std::vector<float> xf(static_cast<size_t>(k));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : xf) v = u(rng);
    std::vector<uint8_t> x(static_cast<size_t>(row_bytes(GgmlType::Q8_K, k)));
    ref::quantize_row(GgmlType::Q8_K, xf.data(), x.data(), k);
    for (KernelOp op : {KernelOp::kGemv, KernelOp::kGemvAccumulate}) {
      const KernelDesc d =
          default_gemv_desc(f, static_cast<int32_t>(k), {IsaLevel::kAvx512Vnni, isa::Tuning::kGeneric}, op);
      auto p = pack_weights(f, d.row_block, w.data(), w.size(), rows, k);
      ASSERT_TRUE(p.has_value()) << p.error();
      auto gemv = global_registry().get(d);
      ASSERT_TRUE(gemv.has_value()) << gemv.error();
      EXPECT_TRUE((*gemv)->several_tokens());
      auto few = generate(d);
      ASSERT_TRUE(few.has_value()) << few.error();
      std::vector<float> want(static_cast<size_t>(rows), 0.5f), got(want), one(want);
      GemvCall c;
      c.w = p->data.get();
      c.x = x.data();
      c.r0 = 3;
      c.r1 = 19;
      c.alpha = -0.75f;
      c.y = want.data();
      (**gemv)(c);
      c.y = got.data();
      (*few)->run(c);
      GemmCall g;
      g.w = p->data.get();
      g.x = x.data();
      g.y = one.data();
      g.r0 = 3;
      g.r1 = 19;
      g.n = 1;
      const float alpha = -0.75f;
      g.alpha = &alpha;
      (*few)->run_gemm(g);
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(testing::detail::bits(got[r]), testing::detail::bits(want[r])) << "row " << r;
        EXPECT_EQ(testing::detail::bits(one[r]), testing::detail::bits(want[r])) << "row " << r;
      }
    }
    KernelDesc bad = default_gemv_desc(f, 2048, {IsaLevel::kAvx512Vnni, isa::Tuning::kGeneric});
    bad.op = KernelOp::kGateUpSwiglu;
    EXPECT_FALSE(generate(bad).has_value());
  }
  KernelDesc bad = default_gemv_desc(GgmlType::Q4_K, 2048, {IsaLevel::kAvx512Vnni, isa::Tuning::kGeneric});
  bad.row_block = 4;
  EXPECT_FALSE(x64::generate_gemv_q4k_few_avx512(bad).has_value());
}

TEST(JitGemm, HostRunsAVnniQ4KGemmWhenItHasVnni) {
  // Guards against the variant list silently shrinking to the scalar reference.
  const size_t want = isa::host_supports(IsaLevel::kAvx512Vnni) ? 2u : 1u;
  EXPECT_GE(host_levels(GgmlType::Q4_K).size(), want) << isa::describe_host();
}

TEST(JitGemm, DescriptorNamesAndValidation) {
  const isa::Target t{IsaLevel::kAvx512Vnni, isa::Tuning::kZen4};
  KernelDesc d = default_gemm_desc(GgmlType::Q4_K, 2048, t);
  EXPECT_EQ(canonical_name(d), "gemm_q4k_q8k_f32_8r__avx512vnni_zen4");
  EXPECT_EQ(d.prefetch, 0);
  EXPECT_EQ(d.row_block, default_gemv_desc(GgmlType::Q4_K, 2048, t).row_block);
  EXPECT_TRUE(validate(d).is_ok());
  d.op = KernelOp::kGemmAccumulate;
  EXPECT_EQ(canonical_name(d), "gemmacc_q4k_q8k_f32_8r__avx512vnni_zen4");
  d.prefetch = 512;
  EXPECT_FALSE(validate(d).is_ok());
  d = default_gemm_desc(GgmlType::Q4_K, kGemmMaxCols + 256, t);
  EXPECT_FALSE(validate(d).is_ok());
}

TEST(JitGemm, GemvKernelRunsAGemmCallPerToken) {
  // Kernel::gemm on a GEMV descriptor is one GEMV per token: same bits as separate calls.
  auto k = global_registry().get(default_gemv_desc(GgmlType::Q4_K, 256, {IsaLevel::kScalar, isa::Tuning::kGeneric}));
  ASSERT_TRUE(k.has_value()) << k.error();
  std::mt19937 rng(3);
  std::vector<uint8_t> w(2 * sizeof(BlockQ4_K));
  testing::fill_q4k(Data::kRandom, rng, 2, w.data());
  auto p = pack_weights(GgmlType::Q4_K, 8, w.data(), w.size(), 2, 256);
  ASSERT_TRUE(p.has_value()) << p.error();
  std::vector<float> f(512);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : f) v = u(rng);
  std::vector<BlockQ8_K> x(2);
  ref::quantize_row(GgmlType::Q8_K, f.data(), x.data(), 512);
  float y[4] = {0, 0, 0, 0}, want[4] = {0, 0, 0, 0};
  GemmCall c;
  c.w = p->data.get();
  c.x = x.data();
  c.y = y;
  c.r1 = 2;
  c.n = 2;
  c.x_stride = sizeof(BlockQ8_K);
  c.y_stride = 2;
  (*k)->gemm(c);
  for (int t = 0; t < 2; ++t) {
    GemvCall g;
    g.w = p->data.get();
    g.x = &x[t];
    g.y = want + 2 * t;
    g.r1 = 2;
    (**k)(g);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(testing::detail::bits(y[i]), testing::detail::bits(want[i])) << i;
}

}  // namespace
}  // namespace zenmoe
