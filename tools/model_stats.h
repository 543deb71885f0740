// Parameter and byte accounting of a MoE model: total parameters, active parameters per
// token and weight bytes read per decoded token. Works from a tensor list so `mkmodel` can
// report a model before writing it and `inspect` / benchmarks from an opened GGUF.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"
#include "runtime/gguf.h"

namespace zenmoe::tools {

// What a weight is used for; decides how much of it one decoded token reads.
enum class WeightRole : int {
  Embedding,      // token_embd: one row per token
  Output,         // output head (all of it)
  Attention,      // attn_* matrices
  DenseFfn,       // ffn_gate / ffn_up / ffn_down of dense layers
  Router,         // ffn_gate_inp, exp_probs_b
  RoutedExperts,  // *_exps: only expert_used_count of expert_count slices
  SharedExperts,  // *_shexp
  Norm,           // *_norm
  Other,          // anything else: counted as read in full
};
inline constexpr int kWeightRoleCount = 9;
const char* role_name(WeightRole r);  // "embedding", "routed_experts", ...
WeightRole classify_tensor(std::string_view name);

struct TensorDesc {
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t nbytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

struct RoleTotals {
  int tensors = 0;
  uint64_t params = 0, bytes = 0;                // whole model
  uint64_t active_params = 0, active_bytes = 0;  // read for one decoded token
};

struct ModelStats {
  uint64_t total_params = 0, total_bytes = 0;
  uint64_t active_params = 0;  // parameters used per token
  uint64_t active_bytes = 0;   // weight bytes read per decoded token
  int64_t n_expert = 0, n_expert_used = 0;
  bool tied_output = false;  // no output.weight: the head reads token_embd in full
  std::array<RoleTotals, kWeightRoleCount> by_role{};
  bool is_moe() const { return n_expert > 0; }
};

// Accounting rules per decoded token: routed expert tensors ({.., .., E}) contribute
// n_expert_used / n_expert of their bytes; the embedding one row; a missing output.weight
// means the head reads all of token_embd; everything else (attention, dense FFN, shared
// experts, router, norms, output head) is read in full. Errors: inconsistent expert counts,
// an expert tensor whose last dimension is not n_expert.
Expected<ModelStats> compute_stats(const std::vector<TensorDesc>& tensors, int64_t n_expert,
                                   int64_t n_expert_used);

// The tensor list of an opened model, and its stats with the expert counts read from
// `<general.architecture>.expert_count` / `.expert_used_count` (0 when absent: dense model).
std::vector<TensorDesc> describe_tensors(const gguf::Model& model);
Expected<ModelStats> compute_stats(const gguf::Model& model);

}  // namespace zenmoe::tools
