#include "ir/graph.h"

#include <utility>

namespace zenmoe::ir {

namespace {

struct OpEntry {
  OpKind op;
  const char* name;
};

constexpr OpEntry kOps[] = {
    {OpKind::Embed, "embed"},
    {OpKind::RmsNorm, "rms_norm"},
    {OpKind::Quantize, "quantize"},
    {OpKind::MatMul, "matmul"},
    {OpKind::MatMulId, "matmul_id"},
    {OpKind::Reshape, "reshape"},
    {OpKind::Slice, "slice"},
    {OpKind::Rope, "rope"},
    {OpKind::MlaAttention, "mla_attention"},
    {OpKind::MhaAttention, "mha_attention"},
    {OpKind::Router, "router"},
    {OpKind::SwiGlu, "swiglu"},
    {OpKind::WeightedSum, "weighted_sum"},
    {OpKind::Add, "add"},
    {OpKind::GateUpSwiGlu, "gate_up_swiglu"},
    {OpKind::MatMulAdd, "matmul_add"},
    {OpKind::MatMulIdSum, "matmul_id_sum"},
    {OpKind::GateUpSwiGluId, "gate_up_swiglu_id"},
    {OpKind::RmsNormQuantize, "rms_norm_quantize"},
};

}  // namespace

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input: return "input";
    case ValueKind::Weight: return "weight";
    case ValueKind::State: return "state";
    case ValueKind::Temp: return "temp";
  }
  return "?";
}

const char* op_name(OpKind op) {
  for (const auto& e : kOps)
    if (e.op == op) return e.name;
  return "?";
}

bool op_from_name(std::string_view name, OpKind* out) {
  for (const auto& e : kOps) {
    if (name == e.name) {
      *out = e.op;
      return true;
    }
  }
  return false;
}

const AttrValue* Node::attr(std::string_view key) const {
  for (const auto& a : attrs)
    if (a.key == key) return &a.value;
  return nullptr;
}

int64_t Node::attr_int(std::string_view key, int64_t def) const {
  const AttrValue* v = attr(key);
  return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : def;
}

float Node::attr_float(std::string_view key, float def) const {
  const AttrValue* v = attr(key);
  return v && std::holds_alternative<float>(*v) ? std::get<float>(*v) : def;
}

std::string Node::attr_str(std::string_view key, std::string def) const {
  const AttrValue* v = attr(key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : def;
}

void set_int_attr(std::vector<Attr>& attrs, std::string_view key, int64_t v) {
  for (Attr& a : attrs)
    if (a.key == key) {
      a.value = v;
      return;
    }
  attrs.push_back({std::string(key), v});
}

int64_t Graph::attr_int(std::string_view key, int64_t def) const {
  for (const auto& a : attrs)
    if (a.key == key) return std::holds_alternative<int64_t>(a.value) ? std::get<int64_t>(a.value) : def;
  return def;
}

int Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

int Graph::find(std::string_view name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int>(i);
  return -1;
}

int Graph::add_node(OpKind op, std::vector<int> inputs, std::vector<int> outs,
                    std::vector<Attr> attrs) {
  nodes.push_back(Node{op, std::move(inputs), std::move(outs), std::move(attrs)});
  return static_cast<int>(nodes.size()) - 1;
}

std::string dim_string(int64_t d) {
  if (d == kDimTokens) return "T";
  if (d == kDimContext) return "C";
  return std::to_string(d);
}

std::string type_string(const Value& v) {
  std::string s = type_name(v.type);
  s += '[';
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (i) s += ',';
    s += dim_string(v.shape[i]);
  }
  s += ']';
  return s;
}

int64_t element_count(const std::vector<int64_t>& shape, int64_t n_tokens, int64_t n_ctx) {
  int64_t n = 1;
  for (int64_t d : shape) {
    int64_t v = d == kDimTokens ? n_tokens : d == kDimContext ? n_ctx : d;
    if (v < 0) return -1;
    n *= v;
  }
  return n;
}

}  // namespace zenmoe::ir
