#include "kernels/ref/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace zenmoe::ref {

// ---- norms and elementwise ---------------------------------------------------------------

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);  // f32 square
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * scale;  // ggml's rms_norm output, rounded before the weight mul
    y[i] = w ? v * w[i] : v;
  }
}

void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void axpy(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

// ---- softmax ----------------------------------------------------------------------------

void softmax(const float* x, float* y, int64_t n, float scale, int64_t n_visible) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float mx = neg_inf;
  for (int64_t i = 0; i < n; ++i) {
    const float v = i < n_visible ? x[i] * scale : neg_inf;
    y[i] = v;
    mx = std::max(mx, v);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = i < n_visible ? std::exp(y[i] - mx) : 0.0f;
    y[i] = e;
    sum += static_cast<double>(e);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// ---- RoPE -----------------------------------------------------------------------------------

namespace {

constexpr float kPi = 3.14159265358979323846f;

// ggml_rope_yarn_corr_dim: the dimension at which `n_rot` rotations fit the original context.
float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * kPi)) / (2.0f * std::log(base));
}

float ramp(float low, float high, int pair) {
  const float y = (static_cast<float>(pair) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

void rope_corr_dims(const RopeParams& p, float dims[2]) {
  const float start = std::floor(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
  const float end = std::ceil(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
  dims[0] = std::max(0.0f, start);
  dims[1] = std::min(static_cast<float>(p.n_dims - 1), end);
}

void rope_thetas(const RopeParams& p, int64_t pos, float* theta) {
  float corr[2];
  rope_corr_dims(p, corr);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  float extrap = static_cast<float>(pos);
  for (int i = 0; i < p.n_dims / 2; ++i) {
    const float interp = p.freq_scale * extrap;
    float t = interp;
    if (p.ext_factor != 0.0f) {
      const float mix = ramp(corr[0], corr[1], i) * p.ext_factor;
      t = interp * (1.0f - mix) + extrap * mix;
    }
    theta[i] = t;
    extrap *= theta_scale;  // ggml's running product, not pow per pair
  }
}

void rope_cache(const RopeParams& p, int64_t pos, float* cache) {
  const int half = p.n_dims / 2;
  std::vector<float> theta(static_cast<size_t>(half));
  rope_thetas(p, pos, theta.data());
  float m = p.attn_factor;
  // ggml multiplies YaRN's magnitude correction in; llama.cpp pre-divides attn_factor by it.
  if (p.ext_factor != 0.0f) m *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  for (int i = 0; i < half; ++i) {
    cache[2 * i] = std::cos(theta[i]) * m;
    cache[2 * i + 1] = std::sin(theta[i]) * m;
  }
}

void rope_apply_norm(const float* cache, int n_dims, const float* x, float* y) {
  for (int i0 = 0; i0 < n_dims; i0 += 2) {
    const float c = cache[i0], s = cache[i0 + 1];
    const float x0 = x[i0], x1 = x[i0 + 1];
    y[i0] = x0 * c - x1 * s;
    y[i0 + 1] = x0 * s + x1 * c;
  }
}

void rope_norm(const RopeParams& p, int64_t pos, float* x, int n_heads, int64_t stride) {
  std::vector<float> cache(static_cast<size_t>(p.n_dims));
  rope_cache(p, pos, cache.data());
  for (int h = 0; h < n_heads; ++h) rope_apply_norm(cache.data(), p.n_dims, x + h * stride, x + h * stride);
}

// ---- attention scales ---------------------------------------------------------------------

namespace {

float effective_factor(const YarnMeta& m) { return m.factor > 0.0f ? m.factor : 1.0f; }

float get_mscale(float scale, float mscale) {
  return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
}

}  // namespace

float yarn_attn_factor(const YarnMeta& m) {
  float attn = 1.0f;
  if (m.yarn) {
    const float factor = effective_factor(m);
    if (m.mscale_all_dim != 0.0f) {
      // llama-context assumes HF's mscale == 1, except the DeepSeek-V2 case (mscale_all_dim
      // != 1) where it takes mscale = mscale_all_dim.
      const float mscale = (m.deepseek2 && m.mscale_all_dim != 1.0f) ? m.mscale_all_dim : 1.0f;
      attn = get_mscale(factor, mscale) / get_mscale(factor, m.mscale_all_dim);
    } else {
      attn = get_mscale(factor, 1.0f);
    }
    attn *= 1.0f / (1.0f + 0.1f * std::log(factor));  // cancels ggml's magnitude correction
  }
  return attn * m.rope_attn_factor;
}

float deepseek2_kq_scale(const YarnMeta& m, int head_dim_k) {
  const float freq_scale = 1.0f / effective_factor(m);
  const float attn_factor = yarn_attn_factor(m);
  const float attn_factor_org = attn_factor * (1.0f + 0.1f * std::log(1.0f / freq_scale));
  const float mscale = attn_factor_org * (1.0f + 0.1f * m.mscale_all_dim * std::log(1.0f / freq_scale));
  return 1.0f * mscale * mscale / std::sqrt(static_cast<float>(head_dim_k));
}

RopeParams deepseek2_rope_params(const YarnMeta& m, int n_dims, float freq_base, int n_ctx_orig) {
  RopeParams p;
  p.n_dims = n_dims;
  p.freq_base = freq_base;
  p.freq_scale = 1.0f / effective_factor(m);
  p.n_ctx_orig = n_ctx_orig;
  p.ext_factor = m.yarn ? 1.0f : 0.0f;
  p.attn_factor = yarn_attn_factor(m);
  return p;
}

// ---- MoE router ---------------------------------------------------------------------------

Status check_router(const RouterConfig& c) {
  if (c.n_expert <= 0) return Error{"router: expert count must be positive, got " + std::to_string(c.n_expert)};
  if (c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)
    return Error{"router: experts used " + std::to_string(c.n_expert_used) + " not in [1, " +
                 std::to_string(c.n_expert) + "]"};
  if (c.gating_func != 1 && c.gating_func != 2)
    return Error{"router: unsupported expert gating function " + std::to_string(c.gating_func) +
                 " (1 softmax and 2 sigmoid are supported)"};
  if (c.n_groups > 1) {
    if (c.n_expert % c.n_groups != 0)
      return Error{"router: " + std::to_string(c.n_expert) + " experts do not split into " +
                   std::to_string(c.n_groups) + " groups"};
    if (c.n_group_used <= 0 || c.n_group_used >= c.n_groups)
      return Error{"router: groups used " + std::to_string(c.n_group_used) + " not in [1, " +
                   std::to_string(c.n_groups - 1) + "]"};
    if (c.n_group_used * (c.n_expert / c.n_groups) < c.n_expert_used)
      return Error{"router: the " + std::to_string(c.n_group_used) + " kept groups hold fewer than " +
                   std::to_string(c.n_expert_used) + " experts"};
  } else if (c.n_groups < 1) {
    return Error{"router: group count must be positive, got " + std::to_string(c.n_groups)};
  }
  return Status::ok();
}

namespace {

// Indices of the k largest values, descending; equal values keep the lower index first.
std::vector<int32_t> top_k(const std::vector<float>& v, int k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// Sets the selection score of every expert outside the n_group_used best groups to -inf.
void mask_groups(const RouterConfig& c, std::vector<float>& sel) {
  const int per_group = c.n_expert / c.n_groups;
  const int best = std::min(2, per_group);
  std::vector<float> gscore(static_cast<size_t>(c.n_groups));
  for (int g = 0; g < c.n_groups; ++g) {
    std::vector<float> group(sel.begin() + g * per_group, sel.begin() + (g + 1) * per_group);
    double s = 0.0;  // ggml_sum_rows accumulates in double
    for (int32_t i : top_k(group, best)) s += static_cast<double>(group[i]);
    gscore[g] = static_cast<float>(s);
  }
  std::vector<char> keep(static_cast<size_t>(c.n_groups), 0);
  for (int32_t g : top_k(gscore, c.n_group_used)) keep[g] = 1;
  for (int g = 0; g < c.n_groups; ++g)
    if (!keep[g])
      std::fill(sel.begin() + g * per_group, sel.begin() + (g + 1) * per_group,
                -std::numeric_limits<float>::infinity());
}

}  // namespace

Status route(const RouterConfig& c, const float* logits, const float* bias, int32_t* experts,
             float* weights) {
  ZENMOE_RETURN_IF_ERROR(check_router(c));
  const int64_t n = c.n_expert;
  std::vector<float> probs(static_cast<size_t>(n));
  if (c.gating_func == 1)
    softmax(logits, probs.data(), n, 1.0f, n);
  else
    sigmoid(logits, probs.data(), n);
  std::vector<float> sel = probs;
  if (bias)
    for (int64_t i = 0; i < n; ++i) sel[i] = probs[i] + bias[i];  // selection only
  if (c.n_groups > 1) mask_groups(c, sel);
  const std::vector<int32_t> top = top_k(sel, c.n_expert_used);
  double sum = 0.0;
  for (int k = 0; k < c.n_expert_used; ++k) {
    experts[k] = top[k];
    weights[k] = probs[top[k]];
    sum += static_cast<double>(weights[k]);
  }
  if (c.norm_weights) {
    const float denom = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int k = 0; k < c.n_expert_used; ++k) weights[k] /= denom;
  }
  if (c.weights_scale != 0.0f && c.weights_scale != 1.0f)
    for (int k = 0; k < c.n_expert_used; ++k) weights[k] *= c.weights_scale;
  return Status::ok();
}

}  // namespace zenmoe::ref
