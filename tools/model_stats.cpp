#include "tools/model_stats.h"

namespace zenmoe::tools {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace

const char* role_name(WeightRole r) {
  switch (r) {
    case WeightRole::Embedding: return "embedding";
    case WeightRole::Output: return "output";
    case WeightRole::Attention: return "attention";
    case WeightRole::DenseFfn: return "dense_ffn";
    case WeightRole::Router: return "router";
    case WeightRole::RoutedExperts: return "routed_experts";
    case WeightRole::SharedExperts: return "shared_experts";
    case WeightRole::Norm: return "norms";
    case WeightRole::Other: return "other";
  }
  return "other";
}

WeightRole classify_tensor(std::string_view name) {
  if (contains(name, "_norm")) return WeightRole::Norm;
  if (name.rfind("token_embd.", 0) == 0) return WeightRole::Embedding;
  if (name.rfind("output.", 0) == 0) return WeightRole::Output;
  if (contains(name, "ffn_gate_inp") || contains(name, "exp_probs_b")) return WeightRole::Router;
  if (contains(name, "_exps")) return WeightRole::RoutedExperts;
  if (contains(name, "_shexp")) return WeightRole::SharedExperts;
  if (contains(name, ".attn_")) return WeightRole::Attention;
  if (contains(name, ".ffn_gate.") || contains(name, ".ffn_up.") || contains(name, ".ffn_down."))
    return WeightRole::DenseFfn;
  return WeightRole::Other;
}

Expected<ModelStats> compute_stats(const std::vector<TensorDesc>& tensors, int64_t n_expert,
                                   int64_t n_expert_used) {
  if (n_expert < 0 || n_expert_used < 0 || n_expert_used > n_expert)
    return Error{"expert_used_count " + std::to_string(n_expert_used) +
                 " does not fit expert_count " + std::to_string(n_expert)};
  ModelStats st;
  st.n_expert = n_expert;
  st.n_expert_used = n_expert_used;
  bool has_output = false;
  const TensorDesc* embd = nullptr;
  for (const auto& t : tensors) {
    const WeightRole role = classify_tensor(t.name);
    const uint64_t params = static_cast<uint64_t>(t.n_elements());
    uint64_t act_params = params, act_bytes = t.nbytes;
    if (role == WeightRole::RoutedExperts) {
      const int64_t e = t.ne[2];
      if (n_expert == 0 || e != n_expert)
        return Error{"tensor '" + t.name + "' has " + std::to_string(e) +
                     " expert slices but expert_count is " + std::to_string(n_expert)};
      act_params = params / e * n_expert_used;
      act_bytes = t.nbytes / e * n_expert_used;
    } else if (role == WeightRole::Embedding) {
      const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
      act_params = static_cast<uint64_t>(t.ne[0]);
      act_bytes = rows ? t.nbytes / rows : 0;
      embd = &t;
    } else if (role == WeightRole::Output) {
      has_output = true;
    }
    RoleTotals& r = st.by_role[static_cast<int>(role)];
    ++r.tensors;
    r.params += params;
    r.bytes += t.nbytes;
    r.active_params += act_params;
    r.active_bytes += act_bytes;
  }
  if (!has_output && embd) {  // tied head: every logit reads a full embedding row
    st.tied_output = true;
    RoleTotals& o = st.by_role[static_cast<int>(WeightRole::Output)];
    o.active_params += static_cast<uint64_t>(embd->n_elements());
    o.active_bytes += embd->nbytes;
  }
  for (const auto& r : st.by_role) {
    st.total_params += r.params;
    st.total_bytes += r.bytes;
    st.active_params += r.active_params;
    st.active_bytes += r.active_bytes;
  }
  return st;
}

std::vector<TensorDesc> describe_tensors(const gguf::Model& model) {
  std::vector<TensorDesc> out;
  out.reserve(model.tensors().size());
  for (const auto& t : model.tensors()) {
    TensorDesc d;
    d.name = t.name;
    d.type = t.type;
    for (int k = 0; k < 4; ++k) d.ne[k] = t.ne[k];
    d.nbytes = t.nbytes;
    out.push_back(std::move(d));
  }
  return out;
}

Expected<ModelStats> compute_stats(const gguf::Model& model) {
  const gguf::Metadata& md = model.metadata();
  const std::string arch = md.get_string_or("general.architecture", "");
  uint64_t e = 0, used = 0;
  if (!arch.empty()) {
    if (md.has(arch + ".expert_count")) {
      auto v = md.get_uint(arch + ".expert_count");
      if (!v) return Error{v.error()};
      e = *v;
    }
    if (md.has(arch + ".expert_used_count")) {
      auto v = md.get_uint(arch + ".expert_used_count");
      if (!v) return Error{v.error()};
      used = *v;
    }
  }
  if (e > (uint64_t{1} << 32) || used > (uint64_t{1} << 32))
    return Error{"expert counts " + std::to_string(e) + " / " + std::to_string(used) + " are not plausible"};
  return compute_stats(describe_tensors(model), static_cast<int64_t>(e), static_cast<int64_t>(used));
}

}  // namespace zenmoe::tools
