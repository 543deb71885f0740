// Scalar reference versions of the non-matmul ops of a deepseek2 forward pass (spec §4.4-4.6).
// They define the numerics every fast kernel is checked against and follow ggml's CPU backend
// in the order and precision of each step (which sums run in double, which products in f32).
#pragma once

#include <cstdint>

#include "kernels/status.h"

namespace zenmoe::ref {

// ---- norms and elementwise ---------------------------------------------------------------

// y = x * (1/sqrtf(mean(x²) + eps)) * w. Like ggml: sum of the f32 squares in double, mean and
// the reciprocal square root in f32, then (x*scale) rounded to f32 and multiplied by w.
// w may be nullptr (no weight). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// z / (1 + expf(-z)) per element (ggml_silu_f32). y may alias x.
void silu(const float* x, float* y, int64_t n);
// 1 / (1 + expf(-z)) per element. y may alias x.
void sigmoid(const float* x, float* y, int64_t n);
// y = silu(gate) * up (ggml swiglu with split gate / up inputs). y may alias either input.
void swiglu(const float* gate, const float* up, float* y, int64_t n);
// y = a + b (residual add). y may alias a or b.
void add(const float* a, const float* b, float* y, int64_t n);
// y += s * x (weighted accumulation of expert outputs).
void axpy(float s, const float* x, float* y, int64_t n);

// ---- softmax ----------------------------------------------------------------------------

// ggml_soft_max_ext for one row: v = x*scale, entries at index >= n_visible masked to -inf
// (causal mask; pass n_visible = n for none), subtract the row max, expf, sum in double, then
// multiply by the f32 value of 1/sum. Masked entries come out exactly 0. y may alias x.
// Requires 1 <= n_visible <= n.
void softmax(const float* x, float* y, int64_t n, float scale, int64_t n_visible);

// ---- RoPE (YaRN, NORM mode: adjacent pairs) --------------------------------------------------

// Everything the rope kernel takes, as llama.cpp passes it to ggml_rope_ext.
struct RopeParams {
  int n_dims = 64;             // rotated dims per head (n_rot); pairs i = 0 .. n_dims/2-1
  float freq_base = 10000.0f;  // rope.freq_base
  float freq_scale = 1.0f;     // 1 / rope.scaling.factor (1 without scaling)
  int n_ctx_orig = 4096;       // rope.scaling.original_context_length
  float ext_factor = 0.0f;     // 1 with YaRN, 0 without
  float attn_factor = 1.0f;    // magnitude fed to the kernel (yarn_attn_factor() below)
  float beta_fast = 32.0f;     // llama.cpp's defaults; it ignores the GGUF keys for deepseek2
  float beta_slow = 1.0f;
};

// ggml_rope_yarn_corr_dims: {low, high} pair indices bounding the YaRN ramp.
void rope_corr_dims(const RopeParams& p, float dims[2]);

// Rotation angle of every pair at position `pos` (n_dims/2 values): theta_extrap built by
// repeated f32 multiplication from (float)pos, theta_interp = freq_scale*theta_extrap, mixed
// by the ramp on the pair index when ext_factor != 0.
void rope_thetas(const RopeParams& p, int64_t pos, float* theta);

// cos/sin table for `pos`, interleaved like ggml's cache: cache[2i] = cos(theta_i)*m,
// cache[2i+1] = sin(theta_i)*m with m = attn_factor * (1 + 0.1*ln(1/freq_scale)) under YaRN,
// attn_factor otherwise. `cache` holds n_dims floats.
void rope_cache(const RopeParams& p, int64_t pos, float* cache);

// Rotates the first n_dims values of one head with a cache from rope_cache():
// y[2i] = x[2i]c - x[2i+1]s, y[2i+1] = x[2i]s + x[2i+1]c. y may alias x.
void rope_apply_norm(const float* cache, int n_dims, const float* x, float* y);

// In place over `n_heads` heads whose rotated parts start `stride` floats apart.
void rope_norm(const RopeParams& p, int64_t pos, float* x, int n_heads, int64_t stride);

// ---- attention scales from metadata (spec §4.3, §4.5) ---------------------------------------

// The metadata numbers that decide the YaRN scales.
struct YarnMeta {
  bool yarn = false;             // rope.scaling.type == "yarn"
  float factor = 1.0f;           // rope.scaling.factor (1/freq_scale); 0 or absent -> 1
  float mscale_all_dim = 0.0f;   // rope.scaling.yarn_log_multiplier / 0.1
  float rope_attn_factor = 1.0f; // rope.scaling.attn_factor (default 1)
  bool deepseek2 = true;         // the DeepSeek-V2 special case of llama-context
};

// llama-context's yarn_attn_factor: the `attn_factor` of RopeParams (V3 0.730519984,
// K2 0.742625585, K2.5 0.706270399).
float yarn_attn_factor(const YarnMeta& m);

// deepseek2's kq_scale = mscale² / sqrtf(head_dim_k) with mscale = attn_factor_org *
// (1 + 0.1*mscale_all_dim*ln(factor)); head_dim_k is key_length_mla (192).
float deepseek2_kq_scale(const YarnMeta& m, int head_dim_k);

// RopeParams for a deepseek2 model from the same numbers (n_dims = rope.dimension_count).
RopeParams deepseek2_rope_params(const YarnMeta& m, int n_dims, float freq_base, int n_ctx_orig);

// ---- MoE router (spec §4.4 step 8, §4.6) -----------------------------------------------------

struct RouterConfig {
  int n_expert = 0;           // expert_count
  int n_expert_used = 0;      // expert_used_count (top-k)
  int n_groups = 1;           // expert_group_count (group-limited routing when > 1)
  int n_group_used = 1;       // expert_group_used_count
  int gating_func = 2;        // 1 softmax over all experts, 2 sigmoid
  bool norm_weights = false;  // expert_weights_norm
  float weights_scale = 0.0f; // expert_weights_scale (0 or 1: not applied)
};

// Checks the configuration (counts, group divisibility, gating function).
Status check_router(const RouterConfig& c);

// Routes one token: probs from `logits` (n_expert), selection scores probs + bias (bias may be
// nullptr), group-limited masking (group score = sum of its two best selection scores), the
// n_expert_used best selection scores (descending; ties keep the lower index first), weights
// taken from the unbiased probs, optionally divided by max(sum, 6.103515625e-5) and scaled.
// Writes n_expert_used ids to `experts` and weights to `weights`.
Status route(const RouterConfig& c, const float* logits, const float* bias, int32_t* experts,
             float* weights);

}  // namespace zenmoe::ref
