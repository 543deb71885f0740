// A small deepseek2 model described in memory (metadata, tensor table, seeded weights) for
// the IR and reference executor tests: no file needed, every branch of the builder reachable.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ir/model_info.h"
#include "kernels/formats.h"
#include "kernels/ref/quant.h"
#include "runtime/ref_executor.h"

namespace zenmoe::testing {

struct TinySpec {
  bool mla = true;              // attn_k_b / attn_v_b (else legacy attn_kv_b)
  bool tied_output = false;     // no output.weight
  bool fused_gate_up = false;   // ffn_gate_up_exps instead of gate / up
  bool exp_probs_b = true;
  int64_t groups = 1, group_used = 1;
  int64_t gating = 2;           // 2 sigmoid, 1 softmax
  GgmlType wtype = GgmlType::F32;  // every matrix but the router
  GgmlType kb_type = GgmlType::F32;
  int64_t D = 32, H = 2, q_lora = 16, kv_lora = 32, nope = 16, rope = 8, dv = 16;
  int64_t E = 4, used = 2, Fe = 16, F = 24, vocab = 50, layers = 2, dense = 1;
};

inline ir::ModelInfo tiny_info(const TinySpec& s) {
  ir::ModelInfo m;
  m.source = "tiny.gguf";
  const std::string a = "deepseek2.";
  m.set_string("general.architecture", "deepseek2");
  m.set_int(a + "context_length", 4096);
  m.set_int(a + "embedding_length", s.D);
  m.set_int(a + "block_count", s.layers);
  m.set_int(a + "feed_forward_length", s.F);
  m.set_int(a + "leading_dense_block_count", s.dense);
  m.set_int(a + "attention.head_count", s.H);
  m.set_int(a + "attention.head_count_kv", s.mla ? 1 : s.H);
  m.set_int(a + "attention.key_length", s.mla ? s.kv_lora + s.rope : s.nope + s.rope);
  m.set_int(a + "attention.value_length", s.mla ? s.kv_lora : s.dv);
  if (s.mla) {
    m.set_int(a + "attention.key_length_mla", s.nope + s.rope);
    m.set_int(a + "attention.value_length_mla", s.dv);
  }
  m.set_int(a + "attention.q_lora_rank", s.q_lora);
  m.set_int(a + "attention.kv_lora_rank", s.kv_lora);
  m.set_float(a + "attention.layer_norm_rms_epsilon", 1e-6);
  m.set_int(a + "rope.dimension_count", s.rope);
  m.set_float(a + "rope.freq_base", 50000.0);
  m.set_string(a + "rope.scaling.type", "yarn");
  m.set_float(a + "rope.scaling.factor", 32.0);
  m.set_int(a + "rope.scaling.original_context_length", 4096);
  m.set_float(a + "rope.scaling.yarn_log_multiplier", 0.1f);
  m.set_int(a + "expert_count", s.E);
  m.set_int(a + "expert_used_count", s.used);
  m.set_int(a + "expert_shared_count", 1);
  m.set_int(a + "expert_feed_forward_length", s.Fe);
  m.set_int(a + "expert_group_count", s.groups);
  m.set_int(a + "expert_group_used_count", s.group_used);
  m.set_int(a + "expert_gating_func", s.gating);
  m.set_float(a + "expert_weights_scale", 2.827f);
  m.set_bool(a + "expert_weights_norm", true);
  m.set_int(a + "vocab_size", s.vocab);
  const GgmlType W = s.wtype, F32 = GgmlType::F32;
  m.add_tensor("token_embd.weight", W, {s.D, s.vocab});
  m.add_tensor("output_norm.weight", F32, {s.D});
  if (!s.tied_output) m.add_tensor("output.weight", W, {s.D, s.vocab});
  for (int64_t il = 0; il < s.layers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    m.add_tensor(p + "attn_norm.weight", F32, {s.D});
    m.add_tensor(p + "attn_q_a.weight", W, {s.D, s.q_lora});
    m.add_tensor(p + "attn_q_a_norm.weight", F32, {s.q_lora});
    m.add_tensor(p + "attn_q_b.weight", W, {s.q_lora, s.H * (s.nope + s.rope)});
    m.add_tensor(p + "attn_kv_a_mqa.weight", W, {s.D, s.kv_lora + s.rope});
    m.add_tensor(p + "attn_kv_a_norm.weight", F32, {s.kv_lora});
    if (s.mla) {
      m.add_tensor(p + "attn_k_b.weight", s.kb_type, {s.nope, s.kv_lora, s.H});
      m.add_tensor(p + "attn_v_b.weight", W, {s.kv_lora, s.dv, s.H});
    } else {
      m.add_tensor(p + "attn_kv_b.weight", W, {s.kv_lora, s.H * (s.nope + s.dv)});
    }
    m.add_tensor(p + "attn_output.weight", W, {s.H * s.dv, s.D});
    m.add_tensor(p + "ffn_norm.weight", F32, {s.D});
    if (il < s.dense) {
      m.add_tensor(p + "ffn_gate.weight", W, {s.D, s.F});
      m.add_tensor(p + "ffn_up.weight", W, {s.D, s.F});
      m.add_tensor(p + "ffn_down.weight", W, {s.F, s.D});
      continue;
    }
    m.add_tensor(p + "ffn_gate_inp.weight", F32, {s.D, s.E});
    if (s.exp_probs_b) m.add_tensor(p + "exp_probs_b.bias", F32, {s.E});
    if (s.fused_gate_up) {
      m.add_tensor(p + "ffn_gate_up_exps.weight", W, {s.D, 2 * s.Fe, s.E});
    } else {
      m.add_tensor(p + "ffn_gate_exps.weight", W, {s.D, s.Fe, s.E});
      m.add_tensor(p + "ffn_up_exps.weight", W, {s.D, s.Fe, s.E});
    }
    m.add_tensor(p + "ffn_down_exps.weight", W, {s.Fe, s.D, s.E});
    m.add_tensor(p + "ffn_gate_shexp.weight", W, {s.D, s.Fe});
    m.add_tensor(p + "ffn_up_shexp.weight", W, {s.D, s.Fe});
    m.add_tensor(p + "ffn_down_shexp.weight", W, {s.Fe, s.D});
  }
  return m;
}

// Seeded float values of every tensor (norms around 1, matrices scaled by their fan-in, the
// output head with a larger gain so the next-token distribution is not flat).
struct TinyWeights {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;  // float values, storage order
  std::vector<std::vector<uint8_t>> bytes; // in each tensor's type
  WeightTable table() const {
    WeightTable t;
    for (size_t i = 0; i < names.size(); ++i) t[names[i]] = WeightBytes{bytes[i].data(), bytes[i].size()};
    return t;
  }
};

inline std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& v, int64_t row) {
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(type, row) * static_cast<int64_t>(v.size()) / row));
  const int64_t rb = row_bytes(type, row);
  for (size_t r = 0; r * static_cast<size_t>(row) < v.size(); ++r)
    ref::quantize_row(type, v.data() + r * static_cast<size_t>(row), out.data() + r * static_cast<size_t>(rb), row);
  return out;
}

inline TinyWeights tiny_weights(const ir::ModelInfo& info, uint32_t seed) {
  TinyWeights w;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& t : info.tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    const bool norm = t.dims.size() == 1 && t.name.find("bias") == std::string::npos;
    const float gain = t.name == "output.weight" ? 4.0f : 1.0f;
    const float scale = gain / std::sqrt(static_cast<float>(t.dims[0]));
    for (auto& x : v) x = norm ? 1.0f + 0.1f * nd(rng) : (t.dims.size() == 1 ? 0.1f : scale) * nd(rng);
    if (t.name == "token_embd.weight")
      for (auto& x : v) x *= std::sqrt(static_cast<float>(t.dims[0]));
    w.names.push_back(t.name);
    w.bytes.push_back(encode(t.type, v, t.dims[0]));
    w.values.push_back(std::move(v));
  }
  return w;
}

}  // namespace zenmoe::testing
