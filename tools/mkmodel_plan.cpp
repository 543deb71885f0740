#include "tools/mkmodel_plan.h"

#include <cmath>
#include <cstdlib>

namespace zenmoe::tools {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Block number N of a `blk.N.` name, -1 for global tensors.
int64_t block_number(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::strtoll(name.c_str() + 4, nullptr, 10);
}

bool fits(GgmlType t, int64_t ne0) {
  const TypeGeometry* g = type_geometry(t);
  return g && ne0 % g->block_elems == 0;
}

// llama-quantize's fallback when the row length is not a multiple of the block (spec §3.8).
GgmlType fallback(GgmlType t, int64_t ne0) {
  if (fits(t, ne0)) return t;
  GgmlType f = GgmlType::F16;
  switch (t) {
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: f = GgmlType::Q4_0; break;
    default: break;
  }
  return fits(f, ne0) ? f : GgmlType::F16;
}

GgmlType q4_k_s_type(const std::string& name, int64_t n_layer, int64_t n_expert) {
  if (name == "output.weight") return GgmlType::Q6_K;
  if (contains(name, "ffn_down")) {
    const int64_t layer = block_number(name);
    return layer >= 0 && layer < n_layer / 8 ? GgmlType::Q5_K : GgmlType::Q4_K;
  }
  if (contains(name, "attn_output.weight") && n_expert == 8) return GgmlType::Q5_K;
  return GgmlType::Q4_K;
}

float inv_sqrt(int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); }

struct Planner {
  const ModelConfig& c;
  QuantMode mode;
  std::vector<TensorPlan> out;

  void add(std::string name, std::vector<int64_t> dims, float mean, float stddev) {
    TensorPlan t;
    t.type = choose_tensor_type(mode, name, dims, c.n_layer, c.n_expert);
    t.name = std::move(name);
    t.dims = std::move(dims);
    t.mean = mean;
    t.stddev = stddev;
    out.push_back(std::move(t));
  }
  void matrix(const std::string& name, std::vector<int64_t> dims, float gain = 1.0f) {
    const float s = gain * inv_sqrt(dims[0]);
    add(name, std::move(dims), 0.0f, s);
  }
  void norm(const std::string& name, int64_t n) { add(name, {n}, 1.0f, 0.05f); }
  // Projections that write into the residual stream are scaled by 1/sqrt(2 * layers) (the
  // GPT-2 initialisation): a random deep network built with unit gain everywhere is chaotic,
  // so rounding-level differences between two correct engines would grow into different
  // logits, which trained models do not do.
  float residual_gain() const { return 1.0f / std::sqrt(2.0f * static_cast<float>(c.n_layer)); }

  void attention(const std::string& p) {
    const int64_t H = c.n_head, D = c.n_embd;
    norm(p + "attn_norm.weight", D);
    norm(p + "attn_q_a_norm.weight", c.q_lora);
    norm(p + "attn_kv_a_norm.weight", c.kv_lora);
    matrix(p + "attn_q_a.weight", {D, c.q_lora});
    matrix(p + "attn_q_b.weight", {c.q_lora, H * (c.qk_nope + c.qk_rope)});
    matrix(p + "attn_kv_a_mqa.weight", {D, c.kv_lora + c.qk_rope});
    matrix(p + "attn_k_b.weight", {c.qk_nope, c.kv_lora, H});
    matrix(p + "attn_v_b.weight", {c.kv_lora, c.v_head, H});
    matrix(p + "attn_output.weight", {H * c.v_head, D}, residual_gain());
    norm(p + "ffn_norm.weight", D);
  }
  void dense_ffn(const std::string& p) {
    matrix(p + "ffn_gate.weight", {c.n_embd, c.n_ff});
    matrix(p + "ffn_up.weight", {c.n_embd, c.n_ff});
    matrix(p + "ffn_down.weight", {c.n_ff, c.n_embd}, residual_gain());
  }
  void moe_ffn(const std::string& p) {
    const int64_t D = c.n_embd, Fe = c.n_ff_exp, E = c.n_expert, Fs = c.n_ff_exp * c.n_expert_shared;
    matrix(p + "ffn_gate_inp.weight", {D, E});
    add(p + "exp_probs_b.bias", {E}, 0.0f, 0.05f);
    matrix(p + "ffn_gate_exps.weight", {D, Fe, E});
    matrix(p + "ffn_up_exps.weight", {D, Fe, E});
    matrix(p + "ffn_down_exps.weight", {Fe, D, E}, residual_gain());
    matrix(p + "ffn_gate_shexp.weight", {D, Fs});
    matrix(p + "ffn_up_shexp.weight", {D, Fs});
    matrix(p + "ffn_down_shexp.weight", {Fs, D}, residual_gain());
  }
};

}  // namespace

Expected<QuantMode> parse_quant_mode(const std::string& s) {
  if (s == "q4_k_s" || s == "Q4_K_S") return QuantMode::Q4_K_S;
  if (s == "f16" || s == "F16") return QuantMode::F16;
  if (s == "bf16" || s == "BF16") return QuantMode::BF16;
  if (s == "q8_0" || s == "Q8_0") return QuantMode::Q8_0;
  if (s == "q4_k" || s == "Q4_K") return QuantMode::Q4_K;
  return Error{"unknown --quant '" + s + "' (q4_k_s, f16, bf16, q8_0, q4_k)"};
}

const char* quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::Q4_K_S: return "q4_k_s";
    case QuantMode::F16: return "f16";
    case QuantMode::BF16: return "bf16";
    case QuantMode::Q8_0: return "q8_0";
    case QuantMode::Q4_K: return "q4_k";
  }
  return "?";
}

uint32_t quant_file_type(QuantMode m) {
  switch (m) {
    case QuantMode::Q4_K_S: return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S
    case QuantMode::F16: return 1;
    case QuantMode::BF16: return 32;
    case QuantMode::Q8_0: return 7;
    case QuantMode::Q4_K: return 15;  // MOSTLY_Q4_K_M: what a pure Q4_K file reports
  }
  return 0;
}

GgmlType choose_tensor_type(QuantMode mode, const std::string& name,
                            const std::vector<int64_t>& dims, int64_t n_layer, int64_t n_expert) {
  const bool keep_f32 = dims.size() <= 1 || contains(name, "_norm.weight") ||
                        contains(name, "ffn_gate_inp.weight") ||
                        name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0;
  if (keep_f32) return GgmlType::F32;
  GgmlType t = GgmlType::F16;
  switch (mode) {
    case QuantMode::Q4_K_S: t = q4_k_s_type(name, n_layer, n_expert); break;
    case QuantMode::F16: t = GgmlType::F16; break;
    case QuantMode::BF16: t = GgmlType::BF16; break;
    case QuantMode::Q8_0: t = GgmlType::Q8_0; break;
    case QuantMode::Q4_K: t = GgmlType::Q4_K; break;
  }
  return fallback(t, dims[0]);
}

int64_t TensorPlan::rows() const {
  int64_t r = 1;
  for (size_t k = 1; k < dims.size(); ++k) r *= dims[k];
  return r;
}

uint64_t TensorPlan::nbytes() const {
  const int64_t rb = row_bytes(type, dims[0]);
  return rb < 0 ? 0 : static_cast<uint64_t>(rb) * static_cast<uint64_t>(rows());
}

std::vector<TensorPlan> plan_tensors(const ModelConfig& cfg, QuantMode mode) {
  Planner p{cfg, mode, {}};
  p.add("token_embd.weight", {cfg.n_embd, cfg.n_vocab}, 0.0f, 1.0f);
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    const std::string pre = "blk." + std::to_string(il) + ".";
    p.attention(pre);
    if (il < cfg.n_dense_lead)
      p.dense_ffn(pre);
    else
      p.moe_ffn(pre);
  }
  p.norm("output_norm.weight", cfg.n_embd);
  p.matrix("output.weight", {cfg.n_embd, cfg.n_vocab}, kOutputGain);
  return std::move(p.out);
}

void add_model_metadata(const ModelConfig& c, QuantMode mode, gguf::Metadata& m) {
  using gguf::Value;
  auto u32 = [](int64_t v) { return Value::u32(static_cast<uint32_t>(v)); };
  auto f32 = [](double v) { return Value::f32(static_cast<float>(v)); };
  const std::string a = "deepseek2.";
  m.set("general.architecture", Value::string("deepseek2"));
  m.set("general.type", Value::string("model"));
  m.set("general.name", Value::string(c.name));
  m.set("general.file_type", Value::u32(quant_file_type(mode)));
  m.set("general.quantization_version", Value::u32(2));
  m.set("general.alignment", Value::u32(32));
  m.set(a + "block_count", u32(c.n_layer));
  m.set(a + "context_length", u32(c.n_ctx));
  m.set(a + "embedding_length", u32(c.n_embd));
  m.set(a + "feed_forward_length", u32(c.n_ff));
  m.set(a + "attention.head_count", u32(c.n_head));
  m.set(a + "attention.head_count_kv", u32(1));  // MLA: one shared latent KV head
  m.set(a + "rope.freq_base", f32(c.rope_base));
  m.set(a + "attention.layer_norm_rms_epsilon", f32(c.rms_eps));
  m.set(a + "expert_count", u32(c.n_expert));
  m.set(a + "expert_used_count", u32(c.n_expert_used));
  m.set(a + "expert_group_count", u32(c.n_expert_groups));
  m.set(a + "expert_group_used_count", u32(c.n_group_used));
  m.set(a + "expert_gating_func", Value::u32(c.expert_gating_func));
  m.set(a + "rope.scaling.type", Value::string("yarn"));
  m.set(a + "rope.scaling.factor", f32(c.rope_factor));
  m.set(a + "rope.scaling.original_context_length", u32(c.rope_orig_ctx));
  m.set(a + "rope.scaling.yarn_beta_fast", f32(c.yarn_beta_fast));
  m.set(a + "rope.scaling.yarn_beta_slow", f32(c.yarn_beta_slow));
  m.set(a + "leading_dense_block_count", u32(c.n_dense_lead));
  m.set(a + "vocab_size", u32(c.n_vocab));
  m.set(a + "attention.q_lora_rank", u32(c.q_lora));
  m.set(a + "attention.kv_lora_rank", u32(c.kv_lora));
  m.set(a + "attention.key_length", u32(c.kv_lora + c.qk_rope));
  m.set(a + "attention.value_length", u32(c.kv_lora));
  m.set(a + "attention.key_length_mla", u32(c.qk_nope + c.qk_rope));
  m.set(a + "attention.value_length_mla", u32(c.v_head));
  m.set(a + "expert_feed_forward_length", u32(c.n_ff_exp));
  m.set(a + "expert_shared_count", u32(c.n_expert_shared));
  m.set(a + "expert_weights_scale", f32(c.expert_weights_scale));
  m.set(a + "expert_weights_norm", Value::boolean(c.expert_weights_norm));
  m.set(a + "rope.dimension_count", u32(c.qk_rope));
  m.set(a + "rope.scaling.yarn_log_multiplier", f32(c.yarn_log_mul));
}

}  // namespace zenmoe::tools
