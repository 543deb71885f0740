// Fluent GEMV kernel tester (XNNPACK's GemmMicrokernelTester style):
//   GemvTester().rows(3).cols(2048).format(GgmlType::Q4_K).isa(IsaLevel::kAvx512Vnni).Test();
// Makes GGUF weight rows and an activation row, packs with the production packer, runs the
// registry's kernel over [0, rows) (and once more split at an awkward row), and checks every
// output against the reference vec_dot of kernels/ref within a bound derived from spec §2.12,
// bit-identical repeat runs, untouched guard elements around y, and the packed-layout
// reference of kernels/pack.h. The descriptor's target has no GFNI; where the format's kernel
// has a GFNI form and the host runs it (Q5_0, Q5_K), that one must give the same bits.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "codegen/registry.h"
#include "kernels/formats.h"
#include "kernels/pack.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"

namespace zenmoe::testing {

enum class Data {
  kRandom,       // random codes, scales, mins; activations quantised from random floats
  kZeroScales,   // every d = dmin = 0 (and some zero activation blocks)
  kExtreme,      // largest codes, scales 63, d and dmin at f16 extremes, activations ±127
  kAdversarial,  // alternating-sign activations against maximal codes: heavy cancellation
  kExact,        // small scales and power-of-two d: every order of float sums is exact
};

class GemvTester {
 public:
  GemvTester& rows(int64_t v) { rows_ = v; return *this; }
  GemvTester& cols(int64_t v) { cols_ = v; return *this; }
  GemvTester& format(GgmlType v) { format_ = v; return *this; }
  GemvTester& isa(isa::IsaLevel v) { isa_ = v; return *this; }
  GemvTester& tuning(isa::Tuning v) { tuning_ = v; return *this; }
  GemvTester& row_block(int v) { row_block_ = v; return *this; }
  GemvTester& data(Data v) { data_ = v; return *this; }
  GemvTester& accumulate(bool v) { accumulate_ = v; return *this; }
  GemvTester& y_offset(int v) { y_offset_ = v; return *this; }  // floats: misaligns y
  GemvTester& prefetch(int v) { prefetch_ = v; return *this; }  // 0 also clears the stride
  GemvTester& prefetch_stride(int v) { prefetch_stride_ = v; return *this; }
  GemvTester& streams(int v) { streams_ = v; return *this; }
  GemvTester& prefetch_hint(PrefetchHint v) { hint_ = static_cast<int>(v); return *this; }
  GemvTester& seed(uint32_t v) { seed_ = v; return *this; }

  KernelDesc desc() const {
    KernelDesc d = default_gemv_desc(format_, static_cast<int32_t>(cols_), {isa_, tuning_},
                                     accumulate_ ? KernelOp::kGemvAccumulate : KernelOp::kGemv);
    if (row_block_ != 0) d.row_block = static_cast<uint16_t>(row_block_);
    if (prefetch_ >= 0) d.prefetch = prefetch_;
    if (prefetch_ == 0) d.prefetch_stride = 0;
    if (prefetch_ == 0) d.prefetch_hint = PrefetchHint::kT0;
    if (prefetch_stride_ >= 0) d.prefetch_stride = static_cast<uint16_t>(prefetch_stride_);
    if (streams_ >= 0) d.streams = static_cast<uint8_t>(streams_);
    if (hint_ >= 0) d.prefetch_hint = static_cast<PrefetchHint>(hint_);
    return d;
  }

  void Test() const;

 private:
  void make_weights(std::mt19937& rng, std::vector<uint8_t>* w) const;
  void make_activations(std::mt19937& rng, std::vector<uint8_t>* x) const;
  double error_bound(const uint8_t* wrow, const uint8_t* x) const;

  int64_t rows_ = 1, cols_ = 256;
  GgmlType format_ = GgmlType::Q4_K;
  isa::IsaLevel isa_ = isa::IsaLevel::kScalar;
  isa::Tuning tuning_ = isa::Tuning::kGeneric;
  int row_block_ = 0;  // 0: the descriptor default for the format
  Data data_ = Data::kRandom;
  bool accumulate_ = false;
  int y_offset_ = 0;
  int prefetch_ = -1;
  int prefetch_stride_ = -1;
  int streams_ = -1;
  int hint_ = -1;
  uint32_t seed_ = 1;
};

// ---- implementation (header-only: tests are the only users) ----------------------------

namespace detail {

inline void q4k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

inline int q4k_code(const BlockQ4_K& b, int i) {
  const uint8_t byte = b.qs[32 * (i / 64) + i % 32];
  return (i % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace detail

// Q4_K and Q5_K super-blocks (Q5_K with its fifth bits): the same scale, min and code patterns.
template <typename Block>
inline void fill_kquant(Data data, std::mt19937& rng, int64_t nb, uint8_t* out) {
  constexpr bool kFifth = std::is_same_v<Block, BlockQ5_K>;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.05f);
  for (int64_t i = 0; i < nb; ++i) {
    Block b{};
    for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    if constexpr (kFifth)
      for (auto& q : b.qh) q = static_cast<uint8_t>(byte(rng));
    for (auto& s : b.scales) s = static_cast<uint8_t>(byte(rng));
    b.d = ref::fp32_to_fp16(scale(rng));
    b.dmin = ref::fp32_to_fp16(scale(rng));
    switch (data) {
      case Data::kRandom: break;
      case Data::kZeroScales: b.d = 0; b.dmin = 0; break;
      case Data::kExtreme:
        for (auto& q : b.qs) q = 0xFF;
        if constexpr (kFifth)
          for (auto& q : b.qh) q = 0xFF;  // every code 31
        for (auto& s : b.scales) s = 0xFF;
        // Alternate the largest normal f16 with the smallest subnormal.
        b.d = (i % 2) ? 0x7BFF : 0x0001;
        b.dmin = (i % 3) ? 0x0001 : 0x7BFF;
        break;
      case Data::kAdversarial:
        for (auto& q : b.qs) q = 0xFF;
        if constexpr (kFifth)
          for (size_t l = 0; l < sizeof b.qh; ++l) b.qh[l] = (l % 2) ? 0xFF : 0x00;  // 15 and 31 mixed
        b.dmin = 0;
        break;
      case Data::kExact:
        for (int k = 0; k < 12; ++k) b.scales[k] &= (k < 8 ? 0x03 : 0x33);
        b.d = 0x3C00;     // 1.0
        b.dmin = 0x3800;  // 0.5
        break;
    }
    std::memcpy(out + i * sizeof(Block), &b, sizeof b);
  }
}

inline void fill_q4k(Data data, std::mt19937& rng, int64_t nb, uint8_t* out) {
  fill_kquant<BlockQ4_K>(data, rng, nb, out);
}

// Q8_0 (int8 codes), Q4_0 (nibbles) and Q5_0 (fifth bits, then nibbles) blocks of 32.
inline size_t q32_block_bytes(GgmlType f) {
  return f == GgmlType::Q8_0 ? sizeof(BlockQ8_0) : f == GgmlType::Q5_0 ? sizeof(BlockQ5_0) : sizeof(BlockQ4_0);
}
inline void fill_q32(GgmlType f, Data data, std::mt19937& rng, int64_t nb, uint8_t* out) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.05f);
  const size_t bs = q32_block_bytes(f);
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = out + i * bs;
    uint16_t d = ref::fp32_to_fp16(scale(rng));
    for (size_t j = 2; j < bs; ++j) {
      int v = byte(rng);
      // Q8_0 -128 / 127; Q4_0 code 15; Q5_0 code 31
      if (data == Data::kExtreme) v = f == GgmlType::Q8_0 ? ((j % 2) ? 0x80 : 0x7F) : 0xFF;
      // Q8_0 127; Q4_0 code 0 (= -8); Q5_0 code 0 (= -16)
      if (data == Data::kAdversarial) v = f == GgmlType::Q8_0 ? 0x7F : 0x00;
      if (data == Data::kExact && f == GgmlType::Q8_0) v = (v % 16) - 8;                        // small codes
      blk[j] = static_cast<uint8_t>(v);
    }
    if (data == Data::kZeroScales) d = 0;
    if (data == Data::kExtreme) d = (i % 2) ? 0x7BFF : 0x0001;
    if (data == Data::kExact) d = 0x3C00;
    std::memcpy(blk, &d, 2);
  }
}

inline int q6k_code(const BlockQ6_K& b, int w) {
  const int h = w / 128, r = w % 128, quarter = r / 32, l = r % 32;
  const uint8_t lo_byte = b.ql[64 * h + l + 32 * (quarter & 1)];
  const int lo = quarter < 2 ? (lo_byte & 0x0F) : (lo_byte >> 4);
  return lo | (((b.qh[32 * h + l] >> (2 * quarter)) & 3) << 4);
}

inline void fill_q6k(Data data, std::mt19937& rng, int64_t nb, uint8_t* out) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.05f);
  for (int64_t i = 0; i < nb; ++i) {
    BlockQ6_K b{};
    for (auto& q : b.ql) q = static_cast<uint8_t>(byte(rng));
    for (auto& q : b.qh) q = static_cast<uint8_t>(byte(rng));
    for (auto& s : b.scales) s = static_cast<int8_t>(byte(rng) - 128);
    b.d = ref::fp32_to_fp16(scale(rng));
    switch (data) {
      case Data::kRandom: break;
      case Data::kZeroScales: b.d = 0; break;
      case Data::kExtreme:
        for (auto& q : b.ql) q = 0xFF;
        for (auto& q : b.qh) q = 0xFF;
        for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? 127 : -128);
        b.d = (i % 2) ? 0x7BFF : 0x0001;
        break;
      case Data::kAdversarial:
        for (auto& q : b.ql) q = 0x00;
        for (auto& q : b.qh) q = 0x00;  // every code -32
        for (auto& s : b.scales) s = 127;
        break;
      case Data::kExact:
        for (auto& s : b.scales) s = static_cast<int8_t>(byte(rng) % 3 - 1);
        b.d = 0x3C00;
        break;
    }
    std::memcpy(out + i * sizeof(BlockQ6_K), &b, sizeof b);
  }
}

inline double q6k_terms(const uint8_t* wrow, const uint8_t* x, int64_t nb) {
  double T = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ6_K w;
    BlockQ8_K a;
    std::memcpy(&w, wrow + b * sizeof w, sizeof w);
    std::memcpy(&a, x + b * sizeof a, sizeof a);
    double t = 0.0;
    for (int i = 0; i < 256; ++i) t += std::abs(double(w.scales[i / 16]) * (q6k_code(w, i) - 32) * a.qs[i]);
    T += std::abs(double(ref::fp16_to_fp32(w.d)) * double(a.d)) * t;
  }
  return T;
}

inline int q5k_code(const BlockQ5_K& b, int w) {
  const int s = w / 32, l = w % 32;
  return ((b.qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0x0F) | (((b.qh[l] >> s) & 1) << 4);
}

inline void fill_q5k(Data data, std::mt19937& rng, int64_t nb, uint8_t* out) {
  fill_kquant<BlockQ5_K>(data, rng, nb, out);
}

inline float plain_sample(Data data, std::mt19937& rng, int64_t i) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  switch (data) {
    case Data::kRandom: return u(rng);
    case Data::kZeroScales: return 0.0f;
    case Data::kExtreme: return (i % 2) ? 60000.0f : 1e-7f * float(i % 5);
    case Data::kAdversarial: return (i % 2 ? 1.0f : -1.0f) * (1000.0f + float(i % 3));
    case Data::kExact: return float(int(u(rng) * 8.0f));
  }
  return 0.0f;
}

inline void GemvTester::make_weights(std::mt19937& rng, std::vector<uint8_t>* w) const {
  const int64_t rb = row_bytes(format_, cols_);
  w->assign(static_cast<size_t>(rows_ * rb), 0);
  const int64_t nb = rows_ * cols_ / type_geometry(format_)->block_elems;
  if (format_ == GgmlType::Q4_K) return fill_q4k(data_, rng, nb, w->data());
  if (format_ == GgmlType::Q5_K) return fill_q5k(data_, rng, nb, w->data());
  if (format_ == GgmlType::Q6_K) return fill_q6k(data_, rng, nb, w->data());
  if (format_ == GgmlType::Q8_0 || format_ == GgmlType::Q4_0 || format_ == GgmlType::Q5_0)
    return fill_q32(format_, data_, rng, nb, w->data());
  std::vector<float> f(static_cast<size_t>(rows_ * cols_));
  for (int64_t i = 0; i < rows_ * cols_; ++i) f[static_cast<size_t>(i)] = plain_sample(data_, rng, i);
  ref::quantize_row(format_, f.data(), w->data(), rows_ * cols_);
}

inline void GemvTester::make_activations(std::mt19937& rng, std::vector<uint8_t>* x) const {
  const GgmlType act = format_traits(format_)->vec_dot_type;
  x->assign(static_cast<size_t>(row_bytes(act, cols_)), 0);
  std::vector<float> f(static_cast<size_t>(cols_));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const bool plain = act == GgmlType::F32 || act == GgmlType::F16 || act == GgmlType::BF16;
  for (int64_t i = 0; i < cols_; ++i) {
    float v = u(rng);
    if (plain) v = data_ == Data::kExact ? float(int(v * 8.0f)) : v;
    if (data_ == Data::kExtreme) v = (i % 2 ? 1.0f : -1.0f) * (plain ? 2.0f : 1e4f);
    if (data_ == Data::kAdversarial) v = (i % 2 ? 1.0f : -1.0f) * (1.0f + 1e-3f * float(i % 7));
    if (data_ == Data::kZeroScales && (i / 256) % 2 == 1) v = 0.0f;  // zero activation blocks
    f[static_cast<size_t>(i)] = v;
  }
  ref::quantize_row(act, f.data(), x->data(), cols_);
  if (data_ != Data::kExact || plain) return;
  // Exact: a power-of-two activation scale keeps every partial sum representable.
  if (act == GgmlType::Q8_K) {
    for (int64_t b = 0; b < cols_ / kQK_K; ++b) {
      const float d = 1.0f / 128.0f;
      std::memcpy(x->data() + b * sizeof(BlockQ8_K), &d, 4);
    }
  } else {
    for (int64_t b = 0; b < cols_ / kQK; ++b) {
      const uint16_t d = 0x2000;  // 2^-7
      std::memcpy(x->data() + b * sizeof(BlockQ8_0), &d, 2);
    }
  }
}

// T = the sum of |every float term| the kernel adds, for the bound below (Q4_K and Q5_K).
template <typename Block>
inline double kquant_terms(const uint8_t* wrow, const uint8_t* x, int64_t nb) {
  double T = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    Block w;
    BlockQ8_K a;
    std::memcpy(&w, wrow + b * sizeof w, sizeof w);
    std::memcpy(&a, x + b * sizeof a, sizeof a);
    double ts = 0.0, tm = 0.0;
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      detail::q4k_scale_min(w.scales, s, &sc, &m);
      double qs = 0.0, xs = 0.0;
      for (int i = 32 * s; i < 32 * s + 32; ++i) {
        int code;
        if constexpr (std::is_same_v<Block, BlockQ5_K>)
          code = q5k_code(w, i);
        else
          code = detail::q4k_code(w, i);
        qs += std::abs(code * a.qs[i]);
        xs += std::abs(a.qs[i]);
      }
      ts += sc * qs;
      tm += m * xs;
    }
    T += std::abs(double(a.d)) * (std::abs(double(ref::fp16_to_fp32(w.d))) * ts +
                                  std::abs(double(ref::fp16_to_fp32(w.dmin))) * tm);
  }
  return T;
}

inline double q32_terms(GgmlType f, const uint8_t* wrow, const uint8_t* x, int64_t nb) {
  const size_t bs = q32_block_bytes(f);
  double T = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w = wrow + b * bs;
    BlockQ8_0 a;
    std::memcpy(&a, x + b * sizeof a, sizeof a);
    uint16_t dw;
    std::memcpy(&dw, w, 2);
    double s = 0.0;
    uint32_t qh = 0;  // Q5_0: the fifth bits (spec §2.3)
    if (f == GgmlType::Q5_0) std::memcpy(&qh, w + 2, 4);
    for (int j = 0; j < 32; ++j) {
      int q = 0;
      if (f == GgmlType::Q8_0) {
        q = int8_t(w[2 + j]);
      } else {
        const uint8_t* qs = w + (f == GgmlType::Q5_0 ? 6 : 2);
        const int nibble = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
        q = f == GgmlType::Q5_0 ? (nibble | int((qh >> j) & 1) << 4) - 16 : nibble - 8;
      }
      s += std::abs(q * a.qs[j]);
    }
    T += std::abs(double(ref::fp16_to_fp32(dw)) * double(ref::fp16_to_fp32(a.d))) * s;
  }
  return T;
}

inline double plain_terms(GgmlType f, const uint8_t* wrow, const uint8_t* x, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  ref::dequantize_row(f, wrow, a.data(), n);
  ref::dequantize_row(f, x, b.data(), n);
  double T = 0.0;
  for (int64_t i = 0; i < n; ++i) T += std::abs(double(a[i]) * double(b[i]));
  return T;
}

// Spec §2.12: kernel and reference compute the same integers per block and differ only in
// how the float terms are summed. Each term passes through at most (blocks + 8 lane folds +
// a few) roundings on either side, so |kernel - ref| <= 2 * (blocks + 14) * 2^-24 * T with
// T the sum of the absolute values of all terms. Float formats: the kernel sums K/4 terms
// per accumulator then folds 4 accumulators; the reference rounds each f32 product once.
inline double GemvTester::error_bound(const uint8_t* wrow, const uint8_t* x) const {
  const double u = std::ldexp(1.0, -24);
  switch (format_) {
    case GgmlType::Q4_K: return 2.0 * double(cols_ / kQK_K + 14) * u * kquant_terms<BlockQ4_K>(wrow, x, cols_ / kQK_K);
    case GgmlType::Q5_K: return 2.0 * double(cols_ / kQK_K + 14) * u * kquant_terms<BlockQ5_K>(wrow, x, cols_ / kQK_K);
    case GgmlType::Q6_K: return 2.0 * double(cols_ / kQK_K + 14) * u * q6k_terms(wrow, x, cols_ / kQK_K);
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q5_0:
      return 2.0 * double(cols_ / kQK + 14) * u * q32_terms(format_, wrow, x, cols_ / kQK);
    default: return 2.0 * double(cols_ / 4 + 14) * u * plain_terms(format_, wrow, x, cols_);
  }
}

inline void GemvTester::Test() const {
  std::mt19937 rng(seed_ * 7919u + static_cast<uint32_t>(rows_ * 31 + cols_));
  std::vector<uint8_t> w, x;
  make_weights(rng, &w);
  make_activations(rng, &x);
  const KernelDesc d = desc();
  SCOPED_TRACE(instance_name(d) + " rows " + std::to_string(rows_));
  Expected<std::shared_ptr<const Kernel>> k = global_registry().get(d);
  ASSERT_TRUE(k.has_value()) << k.error();
  Expected<PackedWeights> packed = pack_weights(format_, d.row_block, w.data(), w.size(), rows_, cols_);
  ASSERT_TRUE(packed.has_value()) << packed.error();

  // y with guard elements on both sides; y_offset_ misaligns it.
  constexpr int kGuard = 16;
  const float alpha = 0.75f;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> y0(static_cast<size_t>(rows_));
  for (auto& v : y0) v = accumulate_ ? u(rng) : 0.0f;
  auto run_kernel = [&](const Kernel& kernel, std::vector<int64_t> cuts) {
    std::vector<float> buf(static_cast<size_t>(rows_ + 2 * kGuard + y_offset_), -12345.678f);
    float* y = buf.data() + kGuard + y_offset_;
    std::copy(y0.begin(), y0.end(), y);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      GemvCall c;
      c.w = packed->data.get();
      c.x = x.data();
      c.y = y;
      c.r0 = cuts[i];
      c.r1 = cuts[i + 1];
      c.alpha = alpha;
      kernel(c);
    }
    return buf;
  };
  auto run = [&](std::vector<int64_t> cuts) { return run_kernel(**k, std::move(cuts)); };
  const std::vector<float> once = run({0, rows_});
  const std::vector<float> again = run({0, rows_});
  const int64_t mid = rows_ / 2 + 1 < rows_ ? rows_ / 2 + 1 : rows_;
  const std::vector<float> split = run({0, 0, mid, rows_});
  const float* y = once.data() + kGuard + y_offset_;
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_EQ(detail::bits(once[i]), detail::bits(again[i])) << "repeat run differs at " << i;
    ASSERT_EQ(detail::bits(once[i]), detail::bits(split[i])) << "split row range differs at " << i;
  }
  if (gfni_kernel(d.weight, d.isa, d.op) && isa::host_features().gfni) {
    KernelDesc g = d;
    g.gfni = true;
    Expected<std::shared_ptr<const Kernel>> gk = global_registry().get(g);
    ASSERT_TRUE(gk.has_value()) << gk.error();
    const std::vector<float> gf = run_kernel(**gk, {0, mid, rows_});
    for (size_t i = 0; i < once.size(); ++i)
      ASSERT_EQ(detail::bits(once[i]), detail::bits(gf[i])) << "the GFNI kernel differs at " << i;
  }
  for (int i = 0; i < kGuard + y_offset_; ++i) ASSERT_EQ(once[static_cast<size_t>(i)], -12345.678f) << "guard before y";
  for (int i = 0; i < kGuard; ++i) ASSERT_EQ(y[rows_ + i], -12345.678f) << "guard after y";

  std::vector<float> yp(y0);
  ASSERT_TRUE(gemv_packed_ref(packed->layout, packed->data.get(), x.data(), yp.data(), 0, rows_,
                              accumulate_, alpha).is_ok());
  const int64_t rb = row_bytes(format_, cols_);
  for (int64_t r = 0; r < rows_; ++r) {
    const uint8_t* wrow = w.data() + r * rb;
    const float dot = ref::vec_dot_row(format_, wrow, x.data(), cols_);
    const float want = accumulate_ ? y0[r] + alpha * dot : dot;
    double bound = error_bound(wrow, x.data()) * (accumulate_ ? alpha : 1.0f);
    if (accumulate_) bound += std::ldexp(std::abs(double(y0[r])) + std::abs(double(alpha * dot)), -22);
    if (data_ == Data::kExact) {
      ASSERT_EQ(detail::bits(y[r]), detail::bits(want)) << "row " << r << ": " << y[r] << " vs ref " << want;
      ASSERT_EQ(detail::bits(yp[r]), detail::bits(want)) << "packed ref row " << r;
    } else {
      ASSERT_LE(std::abs(double(y[r]) - double(want)), bound) << "row " << r << ": " << y[r] << " vs ref " << want;
      ASSERT_LE(std::abs(double(yp[r]) - double(want)), bound) << "packed ref row " << r;
    }
  }
}

}  // namespace zenmoe::testing
