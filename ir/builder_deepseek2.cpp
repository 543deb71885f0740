#include "ir/builder_deepseek2.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace zenmoe::ir {

namespace {

constexpr const char* kArch = "deepseek2";

std::string key(const char* suffix) { return std::string(kArch) + "." + suffix; }

// Unwraps an Expected into `dst`, returning the error from the enclosing function.
#define ZENMOE_ASSIGN(dst, expr)              \
  do {                                        \
    auto zenmoe_e_ = (expr);                  \
    if (!zenmoe_e_) return Error{zenmoe_e_.error()}; \
    dst = std::move(*zenmoe_e_);              \
  } while (0)

Status read_sizes(const ModelInfo& info, Deepseek2Params& p) {
  ZENMOE_ASSIGN(p.n_ctx_train, info.get_int(key("context_length")));
  ZENMOE_ASSIGN(p.n_embd, info.get_int(key("embedding_length")));
  ZENMOE_ASSIGN(p.n_layer, info.get_int(key("block_count")));
  ZENMOE_ASSIGN(p.n_ff, info.get_int_or(key("feed_forward_length"), 0));
  ZENMOE_ASSIGN(p.n_layer_dense_lead, info.get_int_or(key("leading_dense_block_count"), 0));
  ZENMOE_ASSIGN(p.n_head, info.get_int(key("attention.head_count")));
  ZENMOE_ASSIGN(p.n_head_kv, info.get_int_or(key("attention.head_count_kv"), p.n_head));
  const int64_t head_default = p.n_head > 0 ? p.n_embd / p.n_head : 0;
  ZENMOE_ASSIGN(p.n_embd_head_k, info.get_int_or(key("attention.key_length"), head_default));
  ZENMOE_ASSIGN(p.n_embd_head_v, info.get_int_or(key("attention.value_length"), head_default));
  int64_t k_mla = 0, v_mla = 0;
  ZENMOE_ASSIGN(k_mla, info.get_int_or(key("attention.key_length_mla"), 0));
  ZENMOE_ASSIGN(v_mla, info.get_int_or(key("attention.value_length_mla"), 0));
  p.is_mla = k_mla != 0 && v_mla != 0;
  p.head_k = p.is_mla ? k_mla : p.n_embd_head_k;
  p.head_v = p.is_mla ? v_mla : p.n_embd_head_v;
  if (!info.has(key("attention.q_lora_rank")))
    return Error{info.source + ": deepseek2 'lite' variants (no " + key("attention.q_lora_rank") +
                 ") are not supported"};
  ZENMOE_ASSIGN(p.q_lora_rank, info.get_int(key("attention.q_lora_rank")));
  ZENMOE_ASSIGN(p.kv_lora_rank, info.get_int(key("attention.kv_lora_rank")));
  ZENMOE_ASSIGN(p.n_rot, info.get_int_or(key("rope.dimension_count"), p.n_embd_head_k));
  p.qk_nope = p.head_k - p.n_rot;
  return Status::ok();
}

Status read_moe(const ModelInfo& info, Deepseek2Params& p) {
  ZENMOE_ASSIGN(p.n_expert, info.get_int_or(key("expert_count"), 0));
  ZENMOE_ASSIGN(p.n_expert_used, info.get_int_or(key("expert_used_count"), 0));
  const bool has_moe = p.n_layer_dense_lead < p.n_layer;
  ZENMOE_ASSIGN(p.n_expert_shared, has_moe ? info.get_int(key("expert_shared_count"))
                                            : info.get_int_or(key("expert_shared_count"), 0));
  ZENMOE_ASSIGN(p.n_ff_exp, has_moe ? info.get_int(key("expert_feed_forward_length"))
                                     : info.get_int_or(key("expert_feed_forward_length"), 0));
  ZENMOE_ASSIGN(p.n_expert_groups, info.get_int_or(key("expert_group_count"), 1));
  ZENMOE_ASSIGN(p.n_group_used, info.get_int_or(key("expert_group_used_count"), 1));
  ZENMOE_ASSIGN(p.gating_func, info.get_int_or(key("expert_gating_func"), 1));
  ZENMOE_ASSIGN(p.expert_weights_norm, info.get_bool_or(key("expert_weights_norm"), false));
  double scale = 0;
  ZENMOE_ASSIGN(scale, info.get_float_or(key("expert_weights_scale"), 0.0));
  p.expert_weights_scale = static_cast<float>(scale);
  if (p.n_expert_groups == 0) p.n_expert_groups = 1;
  return Status::ok();
}

// YaRN scalars exactly as llama-context.cpp and deepseek2.cpp compute them, in f32.
void derive_rope(Deepseek2Params& p) {
  p.ext_factor = p.yarn ? 1.0f : 0.0f;
  float attn_factor = 1.0f;
  if (p.ext_factor != 0.0f) {
    auto get_mscale = [](float s, float m) { return s <= 1.0f ? 1.0f : 0.1f * m * logf(s) + 1.0f; };
    const float factor = 1.0f / p.freq_scale;
    if (p.rope_yarn_log_mul != 0.0f) {
      const float mscale = p.rope_yarn_log_mul != 1.0f ? p.rope_yarn_log_mul : 1.0f;
      attn_factor = get_mscale(factor, mscale) / get_mscale(factor, p.rope_yarn_log_mul);
    } else {
      attn_factor = get_mscale(factor, 1.0f);
    }
    attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
  }
  p.attn_factor = attn_factor * p.rope_attn_factor;
  const float attn_factor_org = p.attn_factor * (1.0f + 0.1f * logf(1.0f / p.freq_scale));
  const float mscale =
      attn_factor_org * (1.0f + 0.1f * p.rope_yarn_log_mul * logf(1.0f / p.freq_scale));
  p.kq_scale = 1.0f * mscale * mscale / sqrtf(static_cast<float>(p.head_k));
}

Status read_rope(const ModelInfo& info, Deepseek2Params& p) {
  double v = 0;
  ZENMOE_ASSIGN(v, info.get_float(key("attention.layer_norm_rms_epsilon")));
  p.rms_eps = static_cast<float>(v);
  ZENMOE_ASSIGN(v, info.get_float_or(key("rope.freq_base"), 10000.0));
  p.freq_base = static_cast<float>(v);
  ZENMOE_ASSIGN(v, info.get_float_or(key("rope.scaling.factor"), 0.0));
  p.freq_scale = v == 0.0 ? 1.0f : 1.0f / static_cast<float>(v);
  std::string type;
  ZENMOE_ASSIGN(type, info.get_string_or(key("rope.scaling.type"), "linear"));
  if (type != "yarn" && type != "linear" && type != "none")
    return Error{info.source + ": rope.scaling.type '" + type + "' is not supported for deepseek2"};
  p.yarn = type == "yarn";
  ZENMOE_ASSIGN(p.n_ctx_orig, info.get_int_or(key("rope.scaling.original_context_length"),
                                              p.n_ctx_train));
  ZENMOE_ASSIGN(v, info.get_float_or(key("rope.scaling.yarn_log_multiplier"), 0.0));
  p.rope_yarn_log_mul = static_cast<float>(v) / 0.1f;
  ZENMOE_ASSIGN(v, info.get_float_or(key("rope.scaling.attn_factor"), 1.0));
  p.rope_attn_factor = static_cast<float>(v);
  derive_rope(p);
  return Status::ok();
}

Status check_params(const ModelInfo& info, const Deepseek2Params& p) {
  auto bad = [&](const std::string& what) { return Status(Error{info.source + ": " + what}); };
  if (p.n_embd <= 0 || p.n_layer <= 0 || p.n_head <= 0 || p.q_lora_rank <= 0 ||
      p.kv_lora_rank <= 0 || p.n_rot <= 0 || p.head_v <= 0 || p.n_vocab <= 0)
    return bad("deepseek2 sizes must be positive (embedding, blocks, heads, ranks, rope, vocab)");
  if (p.n_rot % 2 != 0 || p.qk_nope <= 0)
    return bad("rope.dimension_count " + std::to_string(p.n_rot) +
               " must be even and smaller than the key head size " + std::to_string(p.head_k));
  if (p.n_layer_dense_lead < 0 || p.n_layer_dense_lead > p.n_layer)
    return bad("leading_dense_block_count exceeds block_count");
  if (p.n_layer_dense_lead > 0 && p.n_ff <= 0)
    return bad("feed_forward_length is required for leading dense blocks");
  if (p.is_mla && (p.n_embd_head_k != p.kv_lora_rank + p.n_rot || p.n_head_kv != 1))
    return bad("MLA file needs key_length = kv_lora_rank + rope dims and head_count_kv = 1");
  if (p.n_layer_dense_lead == p.n_layer) return Status::ok();
  if (p.n_expert <= 0 || p.n_expert_used <= 0 || p.n_expert_used > p.n_expert || p.n_ff_exp <= 0)
    return bad("MoE blocks need expert_count >= expert_used_count > 0 and an expert FFN size");
  if (p.gating_func != 1 && p.gating_func != 2)
    return bad("expert_gating_func " + std::to_string(p.gating_func) +
               " is not supported (1 softmax, 2 sigmoid)");
  if (p.n_expert_groups > 1 && (p.n_expert % p.n_expert_groups != 0 || p.n_group_used <= 0 ||
                                p.n_group_used >= p.n_expert_groups))
    return bad("expert groups need expert_count % expert_group_count == 0 and "
               "0 < expert_group_used_count < expert_group_count");
  if (p.n_expert_groups > 1 && p.n_group_used * (p.n_expert / p.n_expert_groups) < p.n_expert_used)
    return bad("the kept expert groups hold fewer experts than expert_used_count");
  return Status::ok();
}

}  // namespace

Expected<Deepseek2Params> deepseek2_params(const ModelInfo& info) {
  Deepseek2Params p;
  ZENMOE_RETURN_IF_ERROR(read_sizes(info, p));
  ZENMOE_RETURN_IF_ERROR(read_moe(info, p));
  ZENMOE_RETURN_IF_ERROR(read_rope(info, p));
  if (info.has(key("vocab_size"))) {
    ZENMOE_ASSIGN(p.n_vocab, info.get_int(key("vocab_size")));
  } else if (auto it = info.meta.find("tokenizer.ggml.tokens"); it != info.meta.end()) {
    p.n_vocab = it->second.array_len;
  } else if (const TensorDesc* t = info.find_tensor("token_embd.weight"); t && t->dims.size() == 2) {
    p.n_vocab = t->dims[1];
  }
  ZENMOE_RETURN_IF_ERROR(check_params(info, p));
  return p;
}

namespace {

// Adds values and nodes to a graph; the first error (a missing or mis-shaped tensor) sticks
// and every later call becomes a no-op returning -1, so the layer code reads straight.
class Emitter {
 public:
  Emitter(Graph& g, const ModelInfo& info) : g_(g), info_(info) {}
  const Status& status() const { return status_; }
  bool ok() const { return status_.is_ok(); }
  const std::set<std::string>& used_tensors() const { return used_; }

  // A file tensor with the given dims (ggml order).
  int weight(const std::string& name, std::vector<int64_t> dims);
  bool has_tensor(const std::string& name) const { return info_.find_tensor(name) != nullptr; }
  int input(const std::string& name, GgmlType type, std::vector<int64_t> shape) {
    return g_.add_value(Value{name, ValueKind::Input, type, std::move(shape)});
  }
  int state(const std::string& name, std::vector<int64_t> shape) {
    return g_.add_value(Value{name, ValueKind::State, GgmlType::F32, std::move(shape)});
  }
  // One node with one f32 output (or `type`).
  int op(OpKind k, std::vector<int> in, const std::string& name, std::vector<int64_t> shape,
         std::vector<Attr> attrs = {}, GgmlType type = GgmlType::F32);
  // x converted to the activation format of weight w (a quantize node, shared per format).
  int activation_for(int w, int x);
  // y = w · x with x converted as ggml does.
  int matmul(int w, int x, const std::string& name);
  int matmul_id(int w, int x, int ids, const std::string& name);
  // The router node: outputs (ids i32 {k,T}, weights f32 {k,T}).
  std::pair<int, int> router(std::vector<int> in, const std::string& ids_name,
                             const std::string& w_name, int64_t k, std::vector<Attr> attrs);
  const Value& v(int id) const { return g_.values[static_cast<size_t>(id)]; }

 private:
  bool failed(std::initializer_list<int> ids) const {
    if (!ok()) return true;
    for (int id : ids)
      if (id < 0) return true;
    return false;
  }
  Graph& g_;
  const ModelInfo& info_;
  Status status_;
  std::set<std::string> used_;
  std::map<std::pair<int, GgmlType>, int> quantized_;
};

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

int Emitter::weight(const std::string& name, std::vector<int64_t> dims) {
  if (!ok()) return -1;
  if (int id = g_.find(name); id >= 0) return id;
  const TensorDesc* t = info_.find_tensor(name);
  if (!t) {
    status_ = Error{info_.source + ": tensor '" + name + "' is missing (expected shape " +
                    dims_string(dims) + ")"};
    return -1;
  }
  if (t->dims != dims) {
    status_ = Error{info_.source + ": tensor '" + name + "' has shape " + dims_string(t->dims) +
                    ", expected " + dims_string(dims)};
    return -1;
  }
  used_.insert(name);
  return g_.add_value(Value{name, ValueKind::Weight, t->type, std::move(dims)});
}

int Emitter::op(OpKind k, std::vector<int> in, const std::string& name,
                std::vector<int64_t> shape, std::vector<Attr> attrs, GgmlType type) {
  if (!ok()) return -1;
  for (int id : in)
    if (id < 0) return -1;
  int out = g_.add_value(Value{name, ValueKind::Temp, type, std::move(shape)});
  g_.add_node(k, std::move(in), {out}, std::move(attrs));
  return out;
}

int Emitter::activation_for(int w, int x) {
  if (failed({w, x})) return -1;
  const Value& wv = v(w);
  const FormatTraits* tr = format_traits(wv.type);
  if (!tr || !tr->vec_dot) {
    status_ = Error{info_.source + ": tensor '" + wv.name + "' has type " + type_name(wv.type) +
                    ", which zenmoe cannot multiply with"};
    return -1;
  }
  const GgmlType at = tr->vec_dot_type;
  if (at == v(x).type) return x;
  auto key = std::make_pair(x, at);
  if (auto it = quantized_.find(key); it != quantized_.end()) return it->second;
  const int64_t blk = type_geometry(at)->block_elems;
  if (v(x).shape[0] % blk != 0) {
    status_ = Error{info_.source + ": tensor '" + wv.name + "' rows of " +
                    std::to_string(v(x).shape[0]) + " are not a multiple of the " +
                    type_name(at) + " block"};
    return -1;
  }
  int q = op(OpKind::Quantize, {x}, v(x).name + "." + type_name(at), v(x).shape, {}, at);
  quantized_[key] = q;
  return q;
}

int Emitter::matmul(int w, int x, const std::string& name) {
  int xq = activation_for(w, x);
  if (failed({xq})) return -1;
  std::vector<int64_t> shape = v(x).shape;
  shape[0] = v(w).shape[1];
  return op(OpKind::MatMul, {w, xq}, name, shape);
}

int Emitter::matmul_id(int w, int x, int ids, const std::string& name) {
  int xq = activation_for(w, x);
  if (failed({xq, ids})) return -1;
  return op(OpKind::MatMulId, {w, xq, ids}, name, {v(w).shape[1], v(ids).shape[0], kDimTokens});
}

std::pair<int, int> Emitter::router(std::vector<int> in, const std::string& ids_name,
                                    const std::string& w_name, int64_t k,
                                    std::vector<Attr> attrs) {
  if (!ok()) return {-1, -1};
  for (int id : in)
    if (id < 0) return {-1, -1};
  int ids = g_.add_value(Value{ids_name, ValueKind::Temp, GgmlType::I32, {k, kDimTokens}});
  int w = g_.add_value(Value{w_name, ValueKind::Temp, GgmlType::F32, {k, kDimTokens}});
  g_.add_node(OpKind::Router, std::move(in), {ids, w}, std::move(attrs));
  return {ids, w};
}

constexpr int64_t T = kDimTokens;

struct LayerCtx {
  Emitter& e;
  const Deepseek2Params& p;
  std::string pre;  // "blk.N."
  int h;            // residual stream in
  int pos;          // positions input
  std::vector<Attr> rope_attrs;
};

std::vector<Attr> rope_attrs(const Deepseek2Params& p) {
  return {{"n_dims", p.n_rot},          {"mode", std::string("norm")},
          {"freq_base", p.freq_base},   {"freq_scale", p.freq_scale},
          {"n_ctx_orig", p.n_ctx_orig}, {"ext_factor", p.ext_factor},
          {"attn_factor", p.attn_factor}, {"beta_fast", p.beta_fast},
          {"beta_slow", p.beta_slow}};
}

int norm(Emitter& e, int x, int w, const std::string& name, float eps) {
  if (x < 0) return -1;
  return e.op(OpKind::RmsNorm, {x, w}, name, e.v(x).shape, {{"eps", eps}});
}

// Absorbed MLA (attn_k_b / attn_v_b): q_nope is mapped into the latent space per head, the
// cache holds [c | k_pe] per position, and the latent output is mapped back per head.
int attention_mla(LayerCtx& L, int q_nope, int q_pe, int c, int k_pe) {
  Emitter& e = L.e;
  const auto& p = L.p;
  int k_b = e.weight(L.pre + "attn_k_b.weight", {p.qk_nope, p.kv_lora_rank, p.n_head});
  int v_b = e.weight(L.pre + "attn_v_b.weight", {p.kv_lora_rank, p.head_v, p.n_head});
  int cache = e.state(L.pre + "kv_cache", {p.kv_lora_rank + p.n_rot, kDimContext});
  int q_lat = e.matmul(k_b, q_nope, L.pre + "q_lat");
  int o_lat = e.op(OpKind::MlaAttention, {q_lat, q_pe, c, k_pe, cache, L.pos}, L.pre + "o_lat",
                   {p.kv_lora_rank, p.n_head, T}, {{"scale", p.kq_scale}});
  int o = e.matmul(v_b, o_lat, L.pre + "o_heads");
  return e.op(OpKind::Reshape, {o}, L.pre + "o", {p.head_v * p.n_head, T});
}

// Legacy form (attn_kv_b): per-head keys and values decompressed from c, per-head caches.
int attention_legacy(LayerCtx& L, int q_nope, int q_pe, int c, int k_pe) {
  Emitter& e = L.e;
  const auto& p = L.p;
  const int64_t kv_w = p.qk_nope + p.head_v;
  int kv_b = e.weight(L.pre + "attn_kv_b.weight", {p.kv_lora_rank, p.n_head * kv_w});
  int k_cache = e.state(L.pre + "k_cache", {p.head_k, p.n_head, kDimContext});
  int v_cache = e.state(L.pre + "v_cache", {p.head_v, p.n_head, kDimContext});
  int kv = e.matmul(kv_b, c, L.pre + "kv");
  int kv_heads = e.op(OpKind::Reshape, {kv}, L.pre + "kv_heads", {kv_w, p.n_head, T});
  int k_nope = e.op(OpKind::Slice, {kv_heads}, L.pre + "k_nope", {p.qk_nope, p.n_head, T},
                    {{"offset", int64_t{0}}});
  int vv = e.op(OpKind::Slice, {kv_heads}, L.pre + "v", {p.head_v, p.n_head, T},
                {{"offset", p.qk_nope}});
  int o = e.op(OpKind::MhaAttention, {q_nope, q_pe, k_nope, k_pe, vv, k_cache, v_cache, L.pos},
               L.pre + "o_heads", {p.head_v, p.n_head, T}, {{"scale", p.kq_scale}});
  return e.op(OpKind::Reshape, {o}, L.pre + "o", {p.head_v * p.n_head, T});
}

// Returns h + attention(h) for one layer.
int attention_block(LayerCtx& L) {
  Emitter& e = L.e;
  const auto& p = L.p;
  const int64_t D = p.n_embd, H = p.n_head;
  int x = norm(e, L.h, e.weight(L.pre + "attn_norm.weight", {D}), L.pre + "attn_in", p.rms_eps);
  int q_a = e.weight(L.pre + "attn_q_a.weight", {D, p.q_lora_rank});
  int qa = e.matmul(q_a, x, L.pre + "qa");
  qa = norm(e, qa, e.weight(L.pre + "attn_q_a_norm.weight", {p.q_lora_rank}), L.pre + "qa_norm",
            p.rms_eps);
  int q = e.matmul(e.weight(L.pre + "attn_q_b.weight", {p.q_lora_rank, H * p.head_k}), qa,
                   L.pre + "q");
  int q_heads = e.op(OpKind::Reshape, {q}, L.pre + "q_heads", {p.head_k, H, T});
  int q_nope = e.op(OpKind::Slice, {q_heads}, L.pre + "q_nope", {p.qk_nope, H, T},
                    {{"offset", int64_t{0}}});
  int q_pe = e.op(OpKind::Slice, {q_heads}, L.pre + "q_pe", {p.n_rot, H, T},
                  {{"offset", p.qk_nope}});
  q_pe = e.op(OpKind::Rope, {q_pe, L.pos}, L.pre + "q_pe_rot", {p.n_rot, H, T}, L.rope_attrs);
  int kva = e.weight(L.pre + "attn_kv_a_mqa.weight", {D, p.kv_lora_rank + p.n_rot});
  int kvp = e.matmul(kva, x, L.pre + "kv_a");
  int c = e.op(OpKind::Slice, {kvp}, L.pre + "kv_c", {p.kv_lora_rank, T}, {{"offset", int64_t{0}}});
  int k_pe = e.op(OpKind::Slice, {kvp}, L.pre + "k_pe", {p.n_rot, T}, {{"offset", p.kv_lora_rank}});
  c = norm(e, c, e.weight(L.pre + "attn_kv_a_norm.weight", {p.kv_lora_rank}), L.pre + "kv_c_norm",
           p.rms_eps);
  k_pe = e.op(OpKind::Rope, {k_pe, L.pos}, L.pre + "k_pe_rot", {p.n_rot, T}, L.rope_attrs);
  int o = p.is_mla ? attention_mla(L, q_nope, q_pe, c, k_pe)
                   : attention_legacy(L, q_nope, q_pe, c, k_pe);
  int wo = e.weight(L.pre + "attn_output.weight", {H * p.head_v, D});
  int attn = e.matmul(wo, o, L.pre + "attn_out");
  return e.op(OpKind::Add, {L.h, attn}, L.pre + "attn_res", {D, T});
}

// down(silu(gate · x) * (up · x)) with plain matrices (dense layers, shared experts).
int plain_ffn(Emitter& e, int x, const std::string& pre, const std::string& sfx, int64_t D,
              int64_t F) {
  int gate = e.matmul(e.weight(pre + "ffn_gate" + sfx + ".weight", {D, F}), x, pre + "gate" + sfx);
  int up = e.matmul(e.weight(pre + "ffn_up" + sfx + ".weight", {D, F}), x, pre + "up" + sfx);
  int act = e.op(OpKind::SwiGlu, {gate, up}, pre + "act" + sfx, {F, T});
  return e.matmul(e.weight(pre + "ffn_down" + sfx + ".weight", {F, D}), act, pre + "down" + sfx);
}

std::vector<Attr> router_attrs(const Deepseek2Params& p) {
  return {{"gating", std::string(p.gating_func == 2 ? "sigmoid" : "softmax")},
          {"n_used", p.n_expert_used},
          {"n_groups", p.n_expert_groups},
          {"n_group_used", p.n_group_used},
          {"norm", int64_t{p.expert_weights_norm ? 1 : 0}},
          {"scale", p.expert_weights_scale}};
}

// Routed experts (router, per-slot gate/up/SwiGLU/down, weighted sum) plus shared experts.
int moe_ffn(LayerCtx& L, int x) {
  Emitter& e = L.e;
  const auto& p = L.p;
  const int64_t D = p.n_embd, E = p.n_expert, Fe = p.n_ff_exp, K = p.n_expert_used;
  int logits =
      e.matmul(e.weight(L.pre + "ffn_gate_inp.weight", {D, E}), x, L.pre + "router_logits");
  std::vector<int> rin = {logits};
  if (e.has_tensor(L.pre + "exp_probs_b.bias"))
    rin.push_back(e.weight(L.pre + "exp_probs_b.bias", {E}));
  auto [ids, w] = e.router(rin, L.pre + "expert_ids", L.pre + "expert_weights", K,
                           router_attrs(p));
  int gate = -1, up = -1;
  if (e.has_tensor(L.pre + "ffn_gate_up_exps.weight")) {
    // Fused tensor: rows 0..Fe-1 are gate, Fe..2Fe-1 are up.
    int gu_w = e.weight(L.pre + "ffn_gate_up_exps.weight", {D, 2 * Fe, E});
    int gu = e.matmul_id(gu_w, x, ids, L.pre + "gate_up_exps");
    gate = e.op(OpKind::Slice, {gu}, L.pre + "gate_exps", {Fe, K, T}, {{"offset", int64_t{0}}});
    up = e.op(OpKind::Slice, {gu}, L.pre + "up_exps", {Fe, K, T}, {{"offset", Fe}});
  } else {
    gate = e.matmul_id(e.weight(L.pre + "ffn_gate_exps.weight", {D, Fe, E}), x, ids,
                       L.pre + "gate_exps");
    up = e.matmul_id(e.weight(L.pre + "ffn_up_exps.weight", {D, Fe, E}), x, ids,
                     L.pre + "up_exps");
  }
  int act = e.op(OpKind::SwiGlu, {gate, up}, L.pre + "act_exps", {Fe, K, T});
  int down = e.matmul_id(e.weight(L.pre + "ffn_down_exps.weight", {Fe, D, E}), act, ids,
                         L.pre + "down_exps");
  int moe = e.op(OpKind::WeightedSum, {down, w}, L.pre + "moe_out", {D, T});
  if (p.n_expert_shared == 0) return moe;
  int sh = plain_ffn(e, x, L.pre, "_shexp", D, Fe * p.n_expert_shared);
  return e.op(OpKind::Add, {moe, sh}, L.pre + "ffn_out", {D, T});
}

// Returns the layer's output residual stream.
int layer(LayerCtx& L, int il) {
  Emitter& e = L.e;
  const auto& p = L.p;
  int h1 = attention_block(L);
  int x = norm(e, h1, e.weight(L.pre + "ffn_norm.weight", {p.n_embd}), L.pre + "ffn_in",
               p.rms_eps);
  int ffn = il < p.n_layer_dense_lead ? plain_ffn(e, x, L.pre, "", p.n_embd, p.n_ff)
                                      : moe_ffn(L, x);
  return e.op(OpKind::Add, {h1, ffn}, L.pre + "out", {p.n_embd, T});
}

Status check_all_used(const ModelInfo& info, const Emitter& e) {
  for (const auto& t : info.tensors)
    if (!e.used_tensors().count(t.name))
      return Error{info.source + ": unexpected tensor '" + t.name + "' for deepseek2"};
  return Status::ok();
}

}  // namespace

Expected<Graph> build_deepseek2(const ModelInfo& info) {
  std::string arch;
  ZENMOE_ASSIGN(arch, info.get_string("general.architecture"));
  if (arch != kArch)
    return Error{info.source + ": architecture '" + arch + "' is not supported (only deepseek2)"};
  Deepseek2Params p;
  ZENMOE_ASSIGN(p, deepseek2_params(info));
  Graph g;
  g.arch = kArch;
  Emitter e(g, info);
  int tokens = e.input("tokens", GgmlType::I32, {T});
  int pos = e.input("positions", GgmlType::I32, {T});
  int embd = e.weight("token_embd.weight", {p.n_embd, p.n_vocab});
  int h = e.op(OpKind::Embed, {embd, tokens}, "inp_embd", {p.n_embd, T});
  const std::vector<Attr> ra = rope_attrs(p);
  for (int64_t il = 0; il < p.n_layer && e.ok(); ++il) {
    LayerCtx L{e, p, "blk." + std::to_string(il) + ".", h, pos, ra};
    h = layer(L, static_cast<int>(il));
  }
  h = norm(e, h, e.weight("output_norm.weight", {p.n_embd}), "result_norm", p.rms_eps);
  int out = e.has_tensor("output.weight") ? e.weight("output.weight", {p.n_embd, p.n_vocab}) : embd;
  int logits = e.matmul(out, h, "logits");
  ZENMOE_RETURN_IF_ERROR(e.status());
  ZENMOE_RETURN_IF_ERROR(check_all_used(info, e));
  g.outputs.push_back(logits);
  return g;
}

}  // namespace zenmoe::ir
