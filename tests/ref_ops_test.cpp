#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace zenmoe::ref {
namespace {

// Spec §4.6: probs, bias and the expected routing with and without groups.
constexpr float kProbs[8] = {0.9f, 0.1f, 0.2f, 0.01f, 0.8f, 0.7f, 0.05f, 0.6f};
constexpr float kBias[8] = {0, 0, 0.65f, 0, 0, 0, 0, 0};

// Logits whose sigmoid is exactly the given probabilities (up to f32 rounding).
std::vector<float> logits_for(const float* p, int n) {
  std::vector<float> l(n);
  for (int i = 0; i < n; ++i) l[i] = std::log(p[i] / (1.0f - p[i]));
  return l;
}

RouterConfig spec_router(int groups) {
  RouterConfig c;
  c.n_expert = 8;
  c.n_expert_used = 2;
  c.n_groups = groups;
  c.n_group_used = groups > 1 ? 2 : 1;
  c.gating_func = 2;
  c.norm_weights = true;
  c.weights_scale = 2.5f;
  return c;
}

TEST(RefRouter, SpecExampleWithGroups) {
  auto logits = logits_for(kProbs, 8);
  int32_t ex[2];
  float w[2];
  ASSERT_TRUE(route(spec_router(4), logits.data(), kBias, ex, w).is_ok());
  EXPECT_EQ(ex[0], 0);
  EXPECT_EQ(ex[1], 4);
  EXPECT_NEAR(w[0], 1.3235294f, 1e-6);
  EXPECT_NEAR(w[1], 1.1764706f, 1e-6);
}

TEST(RefRouter, SpecExampleWithoutGroups) {
  auto logits = logits_for(kProbs, 8);
  int32_t ex[2];
  float w[2];
  ASSERT_TRUE(route(spec_router(1), logits.data(), kBias, ex, w).is_ok());
  EXPECT_EQ(ex[0], 0);
  EXPECT_EQ(ex[1], 2);
  // Weights come from the unbiased probs 0.9 and 0.2: normalised then scaled by 2.5.
  EXPECT_NEAR(w[0], 2.5f * 0.9f / 1.1f, 1e-6);
  EXPECT_NEAR(w[1], 2.5f * 0.2f / 1.1f, 1e-6);
}

TEST(RefRouter, SoftmaxGatingWithoutNormOrScale) {
  RouterConfig c;
  c.n_expert = 4;
  c.n_expert_used = 2;
  c.gating_func = 1;
  const float logits[4] = {0.0f, 2.0f, 1.0f, -1.0f};
  int32_t ex[2];
  float w[2];
  ASSERT_TRUE(route(c, logits, nullptr, ex, w).is_ok());
  const double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(ex[0], 1);
  EXPECT_EQ(ex[1], 2);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.0) / z, 1e-6);
}

TEST(RefRouter, NormClampsTinySums) {
  RouterConfig c;
  c.n_expert = 2;
  c.n_expert_used = 1;
  c.norm_weights = true;
  const float logits[2] = {-30.0f, -40.0f};  // sigmoid ≈ 9.4e-14
  int32_t ex[1];
  float w[1];
  ASSERT_TRUE(route(c, logits, nullptr, ex, w).is_ok());
  EXPECT_EQ(ex[0], 0);
  EXPECT_FLOAT_EQ(w[0], (1.0f / (1.0f + std::exp(30.0f))) / 6.103515625e-5f);
}

TEST(RefRouter, RejectsBadConfigs) {
  float logits[8] = {};
  int32_t ex[8];
  float w[8];
  RouterConfig c = spec_router(3);  // 8 experts do not split into 3 groups
  EXPECT_FALSE(route(c, logits, nullptr, ex, w).is_ok());
  c = spec_router(4);
  c.n_group_used = 4;
  EXPECT_FALSE(check_router(c).is_ok());
  c = spec_router(1);
  c.n_expert_used = 9;
  EXPECT_FALSE(check_router(c).is_ok());
  c = spec_router(1);
  c.gating_func = 4;
  Status s = check_router(c);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("gating"), std::string::npos);
}

TEST(RefRmsNorm, SpecExample) {
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 1, 1, 1};
  float y[4];
  rms_norm(x, w, y, 4, 1e-6f);
  EXPECT_NEAR(y[0], 0.365148f, 1e-6);
  EXPECT_NEAR(y[1], 0.730297f, 1e-6);
  EXPECT_NEAR(y[2], 1.095445f, 1e-6);
  EXPECT_NEAR(y[3], 1.460593f, 1e-6);
  // Same scale in f32 as ggml: 1/sqrtf(7.5 + 1e-6).
  EXPECT_EQ(y[0], 1.0f * (1.0f / std::sqrt(7.5f + 1e-6f)));
}

TEST(RefRmsNorm, WeightAppliedAfterScaleAndInPlace) {
  std::vector<float> x = {0.5f, -1.5f, 2.0f};
  const float w[3] = {2.0f, 0.5f, -1.0f};
  const float scale = 1.0f / std::sqrt(static_cast<float>((0.25 + 2.25 + 4.0) / 3.0) + 1e-5f);
  rms_norm(x.data(), w, x.data(), 3, 1e-5f);
  EXPECT_EQ(x[0], (0.5f * scale) * 2.0f);
  EXPECT_EQ(x[1], (-1.5f * scale) * 0.5f);
  EXPECT_EQ(x[2], (2.0f * scale) * -1.0f);
}

TEST(RefElementwise, SiluSigmoidSwigluAdd) {
  const float x[3] = {-2.0f, 0.0f, 3.0f};
  const float u[3] = {1.5f, 4.0f, -0.5f};
  float s[3], si[3], sw[3], a[3];
  silu(x, s, 3);
  sigmoid(x, si, 3);
  swiglu(x, u, sw, 3);
  add(x, u, a, 3);
  for (int i = 0; i < 3; ++i) {
    const double sg = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    EXPECT_NEAR(si[i], sg, 1e-7);
    EXPECT_NEAR(s[i], x[i] * sg, 1e-6);
    EXPECT_NEAR(sw[i], x[i] * sg * u[i], 1e-6);
    EXPECT_EQ(a[i], x[i] + u[i]);
  }
  float y[3] = {1, 1, 1};
  axpy(2.0f, x, y, 3);
  EXPECT_EQ(y[0], -3.0f);
  EXPECT_EQ(y[2], 7.0f);
}

TEST(RefSoftmax, NormalisesScalesAndMasks) {
  const float x[5] = {1.0f, 3.0f, 2.0f, 100.0f, -100.0f};
  float y[5];
  softmax(x, y, 5, 0.5f, 3);  // the last two are masked (causal)
  const double z = std::exp(0.5) + std::exp(1.5) + std::exp(1.0);
  EXPECT_NEAR(y[0], std::exp(0.5) / z, 1e-6);
  EXPECT_NEAR(y[1], std::exp(1.5) / z, 1e-6);
  EXPECT_NEAR(y[2], std::exp(1.0) / z, 1e-6);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(RefSoftmax, LargeLogitsStayFinite) {
  std::vector<float> x = {1000.0f, 999.0f, -1000.0f};
  softmax(x.data(), x.data(), 3, 1.0f, 3);
  EXPECT_NEAR(x[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(x[1], std::exp(-1.0) / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(x[2], 0.0f);
}

YarnMeta kimi_k25() { return YarnMeta{true, 64.0f, 1.0f, 1.0f, true}; }
YarnMeta kimi_k2() { return YarnMeta{true, 32.0f, 1.0f, 1.0f, true}; }
YarnMeta deepseek_v3() { return YarnMeta{true, 40.0f, 1.0f, 1.0f, true}; }

TEST(RefYarn, AttnFactorAndKqScaleMatchSpec) {
  EXPECT_NEAR(yarn_attn_factor(deepseek_v3()), 0.730519984f, 1e-6);
  EXPECT_NEAR(yarn_attn_factor(kimi_k2()), 0.742625585f, 1e-6);
  EXPECT_NEAR(yarn_attn_factor(kimi_k25()), 0.706270399f, 1e-6);
  EXPECT_NEAR(deepseek2_kq_scale(deepseek_v3(), 192), 0.135233779f, 1e-7);
  EXPECT_NEAR(deepseek2_kq_scale(kimi_k2(), 192), 0.130860800f, 1e-7);
  EXPECT_NEAR(deepseek2_kq_scale(kimi_k25(), 192), 0.144679626f, 1e-7);
  YarnMeta none;  // no YaRN: plain 1/sqrt(192)
  EXPECT_NEAR(deepseek2_kq_scale(none, 192), 0.0721688f, 1e-7);
  EXPECT_EQ(yarn_attn_factor(none), 1.0f);
}

TEST(RefYarn, CorrDims) {
  float d[2];
  rope_corr_dims(deepseek2_rope_params(deepseek_v3(), 64, 10000.0f, 4096), d);
  EXPECT_EQ(d[0], 10.0f);
  EXPECT_EQ(d[1], 23.0f);
  rope_corr_dims(deepseek2_rope_params(kimi_k25(), 64, 50000.0f, 4096), d);
  EXPECT_EQ(d[0], 8.0f);
  EXPECT_EQ(d[1], 20.0f);
  RopeParams hf_k2 = deepseek2_rope_params(kimi_k2(), 64, 50000.0f, 4096);
  hf_k2.beta_fast = 1.0f;  // Kimi-K2-Instruct's HF value
  rope_corr_dims(hf_k2, d);
  EXPECT_EQ(d[0], 19.0f);
  EXPECT_EQ(d[1], 20.0f);
}

// Relative tolerance for thetas: ggml's running f32 product drifts by a few ulps per pair.
void expect_theta(float got, double want) { EXPECT_NEAR(got, want, std::abs(want) * 4e-6) << want; }

TEST(RefRope, KimiK25ThetasAtPosition1000) {
  const RopeParams p = deepseek2_rope_params(kimi_k25(), 64, 50000.0f, 4096);
  std::vector<float> th(32);
  rope_thetas(p, 1000, th.data());
  EXPECT_EQ(th[0], 1000.0f);
  expect_theta(th[8], 66.8740305);
  expect_theta(th[14], 4.46584875);
  expect_theta(th[20], 0.0180702339);
  expect_theta(th[31], 4.38220646e-4);
  std::vector<float> cache(64);
  rope_cache(p, 1000, cache.data());
  // The YaRN magnitude is cancelled by attn_factor: m = 1 up to f32 rounding.
  EXPECT_NEAR(cache[0], 0.562379076f, 2e-6);
  EXPECT_NEAR(cache[1], 0.826879541f, 2e-6);
}

TEST(RefRope, DeepSeekV3ThetasAtPosition1000) {
  const RopeParams p = deepseek2_rope_params(deepseek_v3(), 64, 10000.0f, 4096);
  std::vector<float> th(32);
  rope_thetas(p, 1000, th.data());
  expect_theta(th[8], 100.0);
  expect_theta(th[14], 12.4479559);
  expect_theta(th[20], 0.790569415);
  expect_theta(th[31], 3.33380358e-3);
}

TEST(RefRope, RotatesAdjacentPairsAndLeavesTheRest) {
  const RopeParams p = deepseek2_rope_params(kimi_k25(), 4, 50000.0f, 4096);
  std::vector<float> cache(4);
  rope_cache(p, 7, cache.data());
  // Two heads of 6 floats; only the first 4 of each are rotated.
  std::vector<float> x = {1, 0, 0.5f, -2, 9, 9, 0, 1, 3, 4, 8, 8};
  std::vector<float> orig = x;
  rope_norm(p, 7, x.data(), 2, 6);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 2; ++i) {
      const float c = cache[2 * i], s = cache[2 * i + 1];
      const float x0 = orig[h * 6 + 2 * i], x1 = orig[h * 6 + 2 * i + 1];
      EXPECT_EQ(x[h * 6 + 2 * i], x0 * c - x1 * s);
      EXPECT_EQ(x[h * 6 + 2 * i + 1], x0 * s + x1 * c);
    }
    EXPECT_EQ(x[h * 6 + 4], orig[h * 6 + 4]);
    EXPECT_EQ(x[h * 6 + 5], orig[h * 6 + 5]);
  }
  // Position 0 is the identity rotation (times m ≈ 1).
  rope_cache(p, 0, cache.data());
  EXPECT_NEAR(cache[0], 1.0f, 1e-6);
  EXPECT_EQ(cache[1], 0.0f);
}

TEST(RefRope, WithoutYarnUsesPlainFrequencies) {
  RopeParams p;
  p.n_dims = 8;
  p.freq_base = 10000.0f;
  std::vector<float> th(4);
  rope_thetas(p, 3, th.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(th[i], 3.0 * std::pow(10000.0, -2.0 * i / 8), 1e-5);
}

}  // namespace
}  // namespace zenmoe::ref
