// F16 rows of the MLA latent cache: the AVX-512 conversions (vcvtps2ph, vcvtph2ps) give the
// reference's bits for every input class (zeros, subnormals on both sides, rounding ties,
// overflow, infinities, NaNs with payloads, random bit patterns) and every row tail, and write
// nothing past the row.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "codegen/isa.h"
#include "kernels/ref/fp16.h"
#include "runtime/kv_f16.h"

namespace zenmoe {
namespace {

TEST(KvCacheF16, RoundingIsBitIdenticalToTheReference) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159265f, 65504.0f, 65519.0f, 65520.0f, -65536.0f, 1e-40f,
                          6e-8f, 3e-8f, 2.98e-8f, 6.1e-5f, 6.097e-5f, std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFFC12345u),
                          std::bit_cast<float>(0x3F801000u), std::bit_cast<float>(0x3F803000u),  // ties: down, up
                          std::bit_cast<float>(0x3F801001u)};
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 4000; ++i) x.push_back(std::bit_cast<float>(bits(rng)));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < 1000; ++i) x.push_back(nd(rng));
  for (bool fast : {false, true}) {
    if (fast && !isa::host_supports(isa::IsaLevel::kAvx512)) continue;
    for (size_t n : {x.size(), size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{31}}) {
      std::vector<f16_t> got(n + 1, 0xABCD);
      kv_f16_round_row(x.data(), got.data(), static_cast<int64_t>(n), fast);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], ref::fp32_to_fp16(x[i])) << "element " << i << " bits " << std::bit_cast<uint32_t>(x[i])
                                                   << (fast ? " avx512" : "");
      EXPECT_EQ(got[n], 0xABCD) << "wrote past the row";
    }
  }
}

TEST(KvCacheF16, WideningIsBitIdenticalToTheReference) {
  // Every f16 value; a signalling NaN (exponent all ones, quiet bit clear, payload non-zero)
  // comes back as a NaN, quieted by the instruction.
  std::vector<f16_t> h(65536 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<f16_t>(i);
  for (bool fast : {false, true}) {
    if (fast && !isa::host_supports(isa::IsaLevel::kAvx512)) continue;
    for (size_t n : {h.size(), size_t{1}, size_t{15}, size_t{16}, size_t{17}}) {
      std::vector<float> got(n + 1, -7.0f);
      kv_f16_widen_row(h.data(), got.data(), static_cast<int64_t>(n), fast);
      for (size_t i = 0; i < n; ++i) {
        const f16_t v = h[i];
        const bool signalling = (v & 0x7C00u) == 0x7C00u && (v & 0x0200u) == 0 && (v & 0x01FFu) != 0;
        if (signalling)
          ASSERT_TRUE(std::isnan(got[i])) << "f16 " << v;
        else
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(ref::fp16_to_fp32(v))) << "f16 " << v;
      }
      EXPECT_EQ(got[n], -7.0f) << "wrote past the row";
    }
  }
}

}  // namespace
}  // namespace zenmoe
