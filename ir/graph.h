// The graph IR: typed values and a small set of ops, enough to describe a deepseek2 forward
// pass at the level where activation formats are decided (every matmul names the format its
// activations are quantised to, as ggml's CPU backend does). Passes (fusion, partitioning,
// tiling) rewrite this structure; the printer and parser make it text for golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/formats.h"

namespace zenmoe::ir {

// Symbolic dimensions, resolved when the graph runs.
inline constexpr int64_t kDimTokens = -1;   // "T": tokens in the current batch
inline constexpr int64_t kDimContext = -2;  // "C": KV cache length (positions)

enum class ValueKind : uint8_t {
  Input,   // fed per eval: tokens, positions
  Weight,  // a tensor of the model file, named as in the file
  State,   // persists across evals: KV caches
  Temp,    // produced by exactly one node
};
const char* value_kind_name(ValueKind k);

// A typed value. Shapes are in ggml order: shape[0] is the contiguous dimension.
struct Value {
  std::string name;
  ValueKind kind = ValueKind::Temp;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> shape;
};

// Op semantics (shapes in ggml order; every op but quantize produces f32 or i32):
//   embed(table {D,V}, tokens i32 {T})                 -> {D,T}   row lookup, dequantised
//   rms_norm(x {N,..}, w f32 {N}) eps                   -> like x  per ne0 row
//   quantize(x f32 {K,..})                              -> same shape in the output's format
//   matmul(w {K,N}, x {K,..})                           -> {N,..}  x in w's activation format
//   matmul(w {K,N,B}, x {K,B,T})                        -> {N,B,T} one matrix per B index
//   matmul_id(w {K,N,E}, x {K,T}|{K,k,T}, ids i32 {k,T}) -> {N,k,T} expert ids[j,t] per slot
//   reshape(x)                                          -> output shape, same elements
//   slice(x) offset                                     -> output shape, ne0 window at offset
//   rope(x {n,..,T}, pos i32 {T}) n_dims mode freq_base freq_scale n_ctx_orig ext_factor
//        attn_factor beta_fast beta_slow                -> like x  (first n_dims of each row)
//   mla_attention(q_lat {R,H,T}, q_pe {r,H,T}, c {R,T}, k_pe {r,T}, cache f32 {R+r,C},
//        pos i32 {T}) scale                             -> {R,H,T} stores [c|k_pe] at pos,
//        attends causally over the cache, values = first R dims of each cache row
//   mha_attention(q_nope {n,H,T}, q_pe {r,H,T}, k_nope {n,H,T}, k_pe {r,T}, v {v,H,T},
//        k_cache f32 {n+r,H,C}, v_cache f32 {v,H,C}, pos i32 {T}) scale -> {v,H,T}
//   router(logits f32 {E,T}[, bias f32 {E}]) gating n_used n_groups n_group_used norm scale
//                                                       -> ids i32 {k,T}, weights f32 {k,T}
//   swiglu(gate, up)                                    -> silu(gate) * up
//   weighted_sum(y {D,k,T}, w {k,T})                    -> {D,T}   sum over k in slot order
//   add(a, b)                                           -> a + b (same shapes)
// Fused ops, made by the fusion pass (ir/fusion.h); each means the unfused sequence:
//   gate_up_swiglu(w_gate {K,F}, w_up {K,F}, x {K,..})  -> {F,..} in the output's format:
//        quantize(swiglu(matmul(w_gate, x), matmul(w_up, x)))
//   matmul_add(w {K,N}, x {K,..}, acc f32 {N,..})       -> f32 {N,..}: acc + matmul(w, x)
//   rms_norm_quantize(x {N,..}, w f32 {N}) eps          -> q [, y]: y = rms_norm(x, w),
//        q = quantize(y) in q's format; y only when something else reads it
//   matmul_id_sum(w {K,N,E}, x, ids i32 {k,T}, weights f32 {k,T}) -> f32 {N,T}:
//        weighted_sum(matmul_id(w, x, ids), weights)
//   gate_up_swiglu_id(w_gate {K,F,E}, w_up {K,F,E}, x {K,T}, ids i32 {k,T}) -> {F,k,T} in the
//        output's format: quantize(swiglu(matmul_id(w_gate, x, ids), matmul_id(w_up, x, ids)))
enum class OpKind : uint8_t {
  Embed, RmsNorm, Quantize, MatMul, MatMulId, Reshape, Slice, Rope, MlaAttention,
  MhaAttention, Router, SwiGlu, WeightedSum, Add, GateUpSwiGlu, MatMulAdd, RmsNormQuantize,
  MatMulIdSum, GateUpSwiGluId,
};
const char* op_name(OpKind op);
bool op_from_name(std::string_view name, OpKind* out);

// Attributes: integers, f32 scalars (every float the model uses is f32) and identifiers.
using AttrValue = std::variant<int64_t, float, std::string>;
struct Attr {
  std::string key;
  AttrValue value;
};

struct Node {
  OpKind op = OpKind::Add;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids (router has two, every other op one)
  std::vector<Attr> attrs;   // in a fixed order per op (the builder's), printed as given

  const AttrValue* attr(std::string_view key) const;
  // Typed getters: `def` when the attribute is absent or has another type.
  int64_t attr_int(std::string_view key, int64_t def = 0) const;
  float attr_float(std::string_view key, float def = 0.0f) const;
  std::string attr_str(std::string_view key, std::string def = "") const;
};

// Sets `key` to `v`, replacing an existing attribute of that key (pass annotations).
void set_int_attr(std::vector<Attr>& attrs, std::string_view key, int64_t v);

class Graph {
 public:
  std::string arch;              // e.g. "deepseek2"
  std::vector<Value> values;     // indexed by value id
  std::vector<Node> nodes;       // in execution order
  std::vector<int> outputs;      // value ids the caller reads (logits)
  std::vector<Attr> attrs;       // graph-wide pass annotations (memory plan), printed if any

  int64_t attr_int(std::string_view key, int64_t def = 0) const;  // `def` when absent

  int add_value(Value v);        // returns the new id (names are not checked here)
  int find(std::string_view name) const;  // -1 when absent
  // Appends a node; returns its index.
  int add_node(OpKind op, std::vector<int> inputs, std::vector<int> outputs,
               std::vector<Attr> attrs = {});
};

// "f32[256,T]"-style rendering of a value's type and shape.
std::string type_string(const Value& v);
std::string dim_string(int64_t d);  // "T", "C" or the number
// Number of elements with T and C given; -1 on a symbolic dim with no value.
int64_t element_count(const std::vector<int64_t>& shape, int64_t n_tokens, int64_t n_ctx);

}  // namespace zenmoe::ir
