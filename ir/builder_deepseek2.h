// Graph builder for general.architecture = "deepseek2" (DeepSeek-V3, Kimi-K2, Kimi-K2.5):
// hyper-parameters read as llama.cpp reads them (spec §4.1, defaults included), tensors
// checked against the shapes of spec §4.2, forward pass of spec §4.4 with activation
// quantisation where ggml's CPU backend does it (spec §2.12).
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ir/model_info.h"
#include "kernels/status.h"

namespace zenmoe::ir {

struct Deepseek2Params {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
  int64_t n_ff = 0;               // dense layers' FFN width
  int64_t n_layer_dense_lead = 0; // layers 0 .. n-1 are dense, the rest MoE
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_embd_head_k = 0;      // key_length (MLA files: kv_lora + rope = 576)
  int64_t n_embd_head_v = 0;      // value_length (MLA files: kv_lora = 512)
  bool is_mla = false;            // key_length_mla and value_length_mla both non-zero
  int64_t head_k = 0;             // per-head K after decompression (nope + rope, 192)
  int64_t head_v = 0;             // per-head V (128)
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t n_rot = 0;              // rope dims per head (64)
  int64_t qk_nope = 0;            // head_k - n_rot
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_expert_shared = 0;
  int64_t n_ff_exp = 0;
  int64_t n_expert_groups = 1;
  int64_t n_group_used = 1;
  int64_t gating_func = 1;        // 1 softmax, 2 sigmoid
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;
  float rms_eps = 0.0f;
  // RoPE / YaRN as llama.cpp derives them.
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;        // 1 / rope.scaling.factor
  bool yarn = false;
  int64_t n_ctx_orig = 0;
  float rope_yarn_log_mul = 0.0f; // mscale_all_dim (GGUF value / 0.1)
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor
  float beta_fast = 32.0f;        // llama.cpp ignores the GGUF keys for deepseek2
  float beta_slow = 1.0f;
  // Derived (spec §4.5).
  float ext_factor = 0.0f;        // 1 with YaRN
  float attn_factor = 1.0f;       // rope kernel magnitude input (llama-context)
  float kq_scale = 0.0f;          // mscale² / sqrt(head_k)
};

// Reads and checks the hyper-parameters. Errors name the file and the key.
Expected<Deepseek2Params> deepseek2_params(const ModelInfo& info);

// Checks the architecture, every tensor's presence, shape and type, and builds the graph:
// inputs "tokens" and "positions" (i32 [T]), output "logits" (f32 [n_vocab, T]), one KV
// cache state per layer.
Expected<Graph> build_deepseek2(const ModelInfo& info);


}  // namespace zenmoe::ir
