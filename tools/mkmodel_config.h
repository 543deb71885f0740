// Hyperparameters of a synthetic deepseek2 model and the named presets of `zenmoe mkmodel`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::tools {

class Args;
struct FlagSpec;

// deepseek2 hyperparameters (spec §4.1); field names follow the GGUF keys.
struct ModelConfig {
  std::string preset;             // preset it started from
  std::string name;               // general.name
  int64_t n_embd = 0;             // embedding_length (hidden)
  int64_t n_layer = 0;            // block_count
  int64_t n_dense_lead = 0;       // leading_dense_block_count
  int64_t n_ff = 0;               // feed_forward_length (dense layers)
  int64_t n_head = 0;             // attention.head_count
  int64_t q_lora = 0;             // attention.q_lora_rank
  int64_t kv_lora = 0;            // attention.kv_lora_rank
  int64_t qk_nope = 128;          // key_length_mla - rope dims
  int64_t qk_rope = 64;           // rope.dimension_count
  int64_t v_head = 128;           // attention.value_length_mla
  int64_t n_expert = 0;           // expert_count
  int64_t n_expert_used = 0;      // expert_used_count
  int64_t n_expert_shared = 0;    // expert_shared_count
  int64_t n_ff_exp = 0;           // expert_feed_forward_length
  int64_t n_expert_groups = 1;    // expert_group_count
  int64_t n_group_used = 1;       // expert_group_used_count
  int64_t n_vocab = 0;            // vocab_size (built-in tokenizer size)
  int64_t n_ctx = 0;              // context_length
  int64_t rope_orig_ctx = 4096;   // rope.scaling.original_context_length
  double rope_base = 50000.0;     // rope.freq_base
  double rope_factor = 32.0;      // rope.scaling.factor
  double yarn_log_mul = 0.1;      // rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim)
  double yarn_beta_fast = 1.0, yarn_beta_slow = 1.0;  // written, not read by llama.cpp
  double expert_weights_scale = 2.827;
  bool expert_weights_norm = true;
  uint32_t expert_gating_func = 2;  // sigmoid
  double rms_eps = 1e-6;
};

// Names accepted by --preset: tiny, small, bench, kimi-k2.
const std::vector<std::string>& preset_names();
Expected<ModelConfig> preset_config(const std::string& name);

// The dimension flags (--hidden, --heads, ...) that override a preset.
const std::vector<FlagSpec>& dimension_flags();
// Applies the dimension flags present in `args` to `cfg`.
Status apply_dimension_flags(const Args& args, ModelConfig& cfg);

// Checks that the dimensions describe a model llama.cpp can load (every error names the
// flag to change).
Status validate_config(const ModelConfig& cfg);

}  // namespace zenmoe::tools
