#include "tools/mkmodel_config.h"

#include "tools/args.h"

namespace zenmoe::tools {
namespace {

// Kimi-K2 proportions shared by every preset: MLA 128/64/128, sigmoid routing with bias and
// renormalisation, scale 2.827, one group, YaRN factor 32 over 4096, rope base 50000.
ModelConfig kimi_like(std::string preset) {
  ModelConfig c;
  c.preset = preset;
  c.name = "zenmoe-synthetic-" + preset;
  return c;
}

ModelConfig tiny() {  // the oracle tiny model's dimensions (a few tens of MB)
  ModelConfig c = kimi_like("tiny");
  c.n_embd = 256; c.n_layer = 4; c.n_dense_lead = 1; c.n_ff = 768;
  c.n_head = 8; c.q_lora = 256; c.kv_lora = 512;
  c.n_expert = 32; c.n_expert_used = 8; c.n_expert_shared = 1; c.n_ff_exp = 256;
  c.n_vocab = 512; c.n_ctx = 131072;
  return c;
}

ModelConfig small() {  // the README demo: ~240 MB at Q4_K_S
  ModelConfig c = kimi_like("small");
  c.n_embd = 1024; c.n_layer = 8; c.n_dense_lead = 1; c.n_ff = 2816;
  c.n_head = 16; c.q_lora = 512; c.kv_lora = 512;
  c.n_expert = 32; c.n_expert_used = 8; c.n_expert_shared = 1; c.n_ff_exp = 512;
  c.n_vocab = 1024; c.n_ctx = 32768;
  return c;
}

ModelConfig bench() {  // Kimi-K2 scaled down: ~1.3 GB, ~279 MB read per token at Q4_K_S
  ModelConfig c = kimi_like("bench");
  c.n_embd = 2048; c.n_layer = 12; c.n_dense_lead = 1; c.n_ff = 4608;
  c.n_head = 16; c.q_lora = 768; c.kv_lora = 512;
  c.n_expert = 64; c.n_expert_used = 8; c.n_expert_shared = 1; c.n_ff_exp = 512;
  c.n_vocab = 1024; c.n_ctx = 32768;
  return c;
}

ModelConfig kimi_k2() {  // the true Kimi-K2 dimensions; use --layers for a slice
  ModelConfig c = kimi_like("kimi-k2");
  c.n_embd = 7168; c.n_layer = 61; c.n_dense_lead = 1; c.n_ff = 18432;
  c.n_head = 64; c.q_lora = 1536; c.kv_lora = 512;
  c.n_expert = 384; c.n_expert_used = 8; c.n_expert_shared = 1; c.n_ff_exp = 2048;
  c.n_vocab = 163840; c.n_ctx = 131072;
  return c;
}

struct IntFlag {
  const char* name;
  int64_t ModelConfig::*field;
  int64_t lo, hi;
  const char* help;
};

const IntFlag kIntFlags[] = {
    {"layers", &ModelConfig::n_layer, 1, 1024, "number of layers (block_count)"},
    {"hidden", &ModelConfig::n_embd, 32, 65536, "hidden size (embedding_length)"},
    {"heads", &ModelConfig::n_head, 1, 1024, "attention heads"},
    {"experts", &ModelConfig::n_expert, 1, 4096, "routed experts per MoE layer"},
    {"experts-used", &ModelConfig::n_expert_used, 1, 4096, "routed experts used per token"},
    {"shared-experts", &ModelConfig::n_expert_shared, 1, 64, "shared experts"},
    {"expert-ffn", &ModelConfig::n_ff_exp, 32, 65536, "expert feed-forward size"},
    {"ffn", &ModelConfig::n_ff, 32, 262144, "dense feed-forward size"},
    {"dense-layers", &ModelConfig::n_dense_lead, 0, 1024, "leading dense layers"},
    {"q-lora", &ModelConfig::q_lora, 32, 65536, "MLA query low rank"},
    {"kv-lora", &ModelConfig::kv_lora, 32, 65536, "MLA key/value low rank"},
    {"qk-nope", &ModelConfig::qk_nope, 32, 1024, "per-head key dims without rope"},
    {"qk-rope", &ModelConfig::qk_rope, 2, 1024, "per-head rope dims"},
    {"v-head", &ModelConfig::v_head, 32, 1024, "per-head value dims"},
    {"expert-groups", &ModelConfig::n_expert_groups, 1, 4096, "expert groups"},
    {"expert-groups-used", &ModelConfig::n_group_used, 1, 4096, "expert groups kept per token"},
    {"vocab", &ModelConfig::n_vocab, 261, 1 << 24, "vocabulary size (built-in tokenizer)"},
    {"ctx", &ModelConfig::n_ctx, 1, 1 << 24, "training context length"},
    {"rope-orig-ctx", &ModelConfig::rope_orig_ctx, 1, 1 << 24, "YaRN original context"},
};

struct FloatFlag {
  const char* name;
  double ModelConfig::*field;
  double lo, hi;
  const char* help;
};

const FloatFlag kFloatFlags[] = {
    {"rope-base", &ModelConfig::rope_base, 1.0, 1e9, "rope frequency base"},
    {"rope-factor", &ModelConfig::rope_factor, 1.0, 1e6, "YaRN scaling factor"},
    {"expert-scale", &ModelConfig::expert_weights_scale, 0.0, 1e3, "routed weights scale"},
};

Status require(bool ok, const std::string& message) {
  return ok ? Status::ok() : Status(Error{message});
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"tiny", "small", "bench", "kimi-k2"};
  return names;
}

Expected<ModelConfig> preset_config(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "small") return small();
  if (name == "bench") return bench();
  if (name == "kimi-k2") return kimi_k2();
  return Error{"unknown preset '" + name + "' (tiny, small, bench, kimi-k2)"};
}

const std::vector<FlagSpec>& dimension_flags() {
  static const std::vector<FlagSpec> specs = [] {
    std::vector<FlagSpec> s;
    for (const auto& f : kIntFlags) s.push_back({f.name, "", true, f.help});
    for (const auto& f : kFloatFlags) s.push_back({f.name, "", true, f.help});
    s.push_back({"name", "", true, "general.name"});
    return s;
  }();
  return specs;
}

Status apply_dimension_flags(const Args& args, ModelConfig& cfg) {
  for (const auto& f : kIntFlags) {
    auto v = args.get_int(f.name, cfg.*f.field, f.lo, f.hi);
    if (!v) return Error{v.error()};
    cfg.*f.field = *v;
  }
  for (const auto& f : kFloatFlags) {
    auto v = args.get_double(f.name, cfg.*f.field, f.lo, f.hi);
    if (!v) return Error{v.error()};
    cfg.*f.field = *v;
  }
  if (args.has("name")) cfg.name = args.get("name");
  return Status::ok();
}

Status validate_config(const ModelConfig& c) {
  const std::string E = std::to_string(c.n_expert);
  ZENMOE_RETURN_IF_ERROR(require(c.n_dense_lead <= c.n_layer,
      "--dense-layers " + std::to_string(c.n_dense_lead) + " exceeds --layers " + std::to_string(c.n_layer)));
  ZENMOE_RETURN_IF_ERROR(require(c.n_expert_used <= c.n_expert,
      "--experts-used " + std::to_string(c.n_expert_used) + " exceeds --experts " + E));
  ZENMOE_RETURN_IF_ERROR(require(c.qk_rope % 2 == 0, "--qk-rope must be even (rope rotates pairs)"));
  ZENMOE_RETURN_IF_ERROR(require(c.n_expert % c.n_expert_groups == 0,
      "--experts " + E + " is not a multiple of --expert-groups " + std::to_string(c.n_expert_groups)));
  const bool grouped = c.n_expert_groups > 1;
  ZENMOE_RETURN_IF_ERROR(require(
      grouped ? (c.n_group_used >= 1 && c.n_group_used < c.n_expert_groups) : c.n_group_used == 1,
      "--expert-groups-used must be 1 without groups and below --expert-groups with them"));
  ZENMOE_RETURN_IF_ERROR(require(
      !grouped || c.n_expert_used <= c.n_group_used * (c.n_expert / c.n_expert_groups),
      "--experts-used cannot be reached from the kept expert groups"));
  ZENMOE_RETURN_IF_ERROR(require(c.n_vocab >= 1, "the vocabulary is empty"));
  // Matrix element counts must stay far from int64 limits even for a full Kimi-K2.
  const int64_t biggest = c.n_embd * c.n_ff_exp * c.n_expert;
  ZENMOE_RETURN_IF_ERROR(require(biggest < (int64_t{1} << 40),
      "expert tensors of " + std::to_string(biggest) + " elements are too large"));
  return Status::ok();
}

}  // namespace zenmoe::tools
