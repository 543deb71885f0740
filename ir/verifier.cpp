#include "ir/verifier.h"

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

namespace zenmoe::ir {

namespace {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += dim_string(s[i]);
  }
  return r + "]";
}

// Checks one node; `fail` records the first problem.
class NodeChecker {
 public:
  NodeChecker(const Graph& g, const Node& n) : g_(g), n_(n) {}
  std::string error;

  const Value& in(size_t i) const { return g_.values[static_cast<size_t>(n_.inputs[i])]; }
  const Value& out(size_t i) const { return g_.values[static_cast<size_t>(n_.outputs[i])]; }
  bool fail(const std::string& msg) {
    if (error.empty()) error = msg;
    return false;
  }
  bool arity(size_t lo, size_t hi, size_t outs) {
    if (n_.inputs.size() < lo || n_.inputs.size() > hi) {
      std::string range = std::to_string(lo);
      if (lo != hi) range += '-' + std::to_string(hi);
      return fail("takes " + range + " inputs, has " + std::to_string(n_.inputs.size()));
    }
    if (n_.outputs.size() != outs)
      return fail("has " + std::to_string(n_.outputs.size()) + " outputs, expected " +
                  std::to_string(outs));
    return true;
  }
  bool type_is(const Value& v, GgmlType t) {
    return v.type == t || fail("%" + v.name + " is " + type_name(v.type) + ", expected " +
                                   type_name(t));
  }
  bool shape_is(const Value& v, const Shape& s) {
    return v.shape == s || fail("%" + v.name + " has shape " + shape_str(v.shape) +
                                    ", expected " + shape_str(s));
  }
  bool rank_is(const Value& v, size_t r) {
    return v.shape.size() == r ||
           fail("%" + v.name + " has rank " + std::to_string(v.shape.size()) + ", expected " +
                std::to_string(r));
  }
  bool has_attr(const char* key, size_t type_index) {
    const AttrValue* a = n_.attr(key);
    return (a && a->index() == type_index) || fail(std::string("attribute '") + key +
                                                    "' is missing or of the wrong type");
  }
  bool f32_out_like(const Value& v) {
    return type_is(out(0), GgmlType::F32) && shape_is(out(0), v.shape);
  }

  bool check();

 private:
  bool embed();
  bool rms_norm();
  bool quantize();
  bool matmul();
  bool matmul_id();
  bool reshape();
  bool slice();
  bool rope();
  bool mla_attention();
  bool mha_attention();
  bool router();
  bool elementwise();
  bool weighted_sum();
  bool gate_up_swiglu();
  bool matmul_add();
  bool matmul_id_sum();
  bool gate_up_swiglu_id();
  bool rms_norm_quantize();

  const Graph& g_;
  const Node& n_;
};

bool NodeChecker::check() {
  switch (n_.op) {
    case OpKind::Embed: return embed();
    case OpKind::RmsNorm: return rms_norm();
    case OpKind::Quantize: return quantize();
    case OpKind::MatMul: return matmul();
    case OpKind::MatMulId: return matmul_id();
    case OpKind::Reshape: return reshape();
    case OpKind::Slice: return slice();
    case OpKind::Rope: return rope();
    case OpKind::MlaAttention: return mla_attention();
    case OpKind::MhaAttention: return mha_attention();
    case OpKind::Router: return router();
    case OpKind::SwiGlu:
    case OpKind::Add: return elementwise();
    case OpKind::WeightedSum: return weighted_sum();
    case OpKind::GateUpSwiGlu: return gate_up_swiglu();
    case OpKind::MatMulAdd: return matmul_add();
    case OpKind::MatMulIdSum: return matmul_id_sum();
    case OpKind::GateUpSwiGluId: return gate_up_swiglu_id();
    case OpKind::RmsNormQuantize: return rms_norm_quantize();
  }
  return fail("unknown op");
}

bool NodeChecker::embed() {
  if (!arity(2, 2, 1) || !rank_is(in(0), 2) || !type_is(in(1), GgmlType::I32) || !rank_is(in(1), 1))
    return false;
  const FormatTraits* tr = format_traits(in(0).type);
  if (!tr || !tr->to_float)
    return fail("%" + in(0).name + " has type " + type_name(in(0).type) + " with no dequantiser");
  return type_is(out(0), GgmlType::F32) && shape_is(out(0), {in(0).shape[0], in(1).shape[0]});
}

bool NodeChecker::rms_norm() {
  if (!arity(2, 2, 1) || !type_is(in(0), GgmlType::F32) || !type_is(in(1), GgmlType::F32) ||
      in(0).shape.empty() || !shape_is(in(1), {in(0).shape[0]}) || !has_attr("eps", 1))
    return false;
  return f32_out_like(in(0));
}

bool NodeChecker::quantize() {
  if (!arity(1, 1, 1) || !type_is(in(0), GgmlType::F32) || !shape_is(out(0), in(0).shape))
    return false;
  const FormatTraits* tr = format_traits(out(0).type);
  if (!tr || !tr->from_float || out(0).type == GgmlType::F32)
    return fail(std::string("cannot quantise to ") + type_name(out(0).type));
  if (in(0).shape.empty() || in(0).shape[0] % tr->block_elems != 0)
    return fail("rows of %" + in(0).name + " are not a multiple of the " + tr->name + " block");
  return true;
}

// The activation must already be in the weight's vec_dot format.
bool check_activation(NodeChecker& c, const Value& w, const Value& x) {
  if (w.kind != ValueKind::Weight) return c.fail("%" + w.name + " is not a weight");
  const FormatTraits* tr = format_traits(w.type);
  if (!tr || !tr->vec_dot)
    return c.fail("%" + w.name + " has type " + type_name(w.type) + " with no dot product");
  return c.type_is(x, tr->vec_dot_type);
}

bool NodeChecker::matmul() {
  if (!arity(2, 2, 1) || !check_activation(*this, in(0), in(1))) return false;
  const Shape& w = in(0).shape;
  const Shape& x = in(1).shape;
  if (w.size() == 2) {
    if (x.empty() || x[0] != w[0]) return fail("%" + in(1).name + " rows do not match %" + in(0).name);
    Shape o = x;
    o[0] = w[1];
    return type_is(out(0), GgmlType::F32) && shape_is(out(0), o);
  }
  if (w.size() != 3 || x.size() != 3 || x[0] != w[0] || x[1] != w[2])
    return fail("batched matmul needs w {K,N,B} and x {K,B,T}; got " + shape_str(w) + " and " +
                shape_str(x));
  return type_is(out(0), GgmlType::F32) && shape_is(out(0), {w[1], x[1], x[2]});
}

bool NodeChecker::matmul_id() {
  if (!arity(n_.op == OpKind::MatMulIdSum ? 4 : 3, n_.op == OpKind::MatMulIdSum ? 4 : 3, 1) ||
      !check_activation(*this, in(0), in(1)) || !rank_is(in(0), 3) ||
      !type_is(in(2), GgmlType::I32) || !rank_is(in(2), 2))
    return false;
  const Shape& w = in(0).shape;
  const Shape& x = in(1).shape;
  const Shape& ids = in(2).shape;
  const bool x_ok = (x.size() == 2 && x[1] == ids[1]) ||
                    (x.size() == 3 && x[1] == ids[0] && x[2] == ids[1]);
  if (!x_ok || x[0] != w[0])
    return fail("%" + in(1).name + " " + shape_str(x) + " does not fit %" + in(0).name + " " +
                shape_str(w) + " and ids " + shape_str(ids));
  if (n_.op == OpKind::MatMulIdSum)
    return type_is(in(3), GgmlType::F32) && shape_is(in(3), ids) && type_is(out(0), GgmlType::F32) &&
           shape_is(out(0), {w[1], ids[1]});
  return type_is(out(0), GgmlType::F32) && shape_is(out(0), {w[1], ids[0], ids[1]});
}

bool NodeChecker::matmul_id_sum() { return matmul_id(); }

bool NodeChecker::gate_up_swiglu_id() {
  if (!arity(4, 4, 1) || !check_activation(*this, in(0), in(2)) || !check_activation(*this, in(1), in(2)) ||
      !rank_is(in(0), 3) || !shape_is(in(1), in(0).shape) || !type_is(in(1), in(0).type) ||
      !type_is(in(3), GgmlType::I32) || !rank_is(in(3), 2) || !rank_is(in(2), 2))
    return false;
  const Shape& w = in(0).shape;
  const Shape& x = in(2).shape;
  const Shape& ids = in(3).shape;
  if (x[0] != w[0] || x[1] != ids[1])
    return fail("%" + in(2).name + " " + shape_str(x) + " does not fit %" + in(0).name + " " + shape_str(w) +
                " and ids " + shape_str(ids));
  const FormatTraits* tr = format_traits(out(0).type);
  if (!tr || !tr->from_float || w[1] % tr->block_elems != 0)
    return fail(std::string("cannot quantise the SwiGLU output to ") + type_name(out(0).type));
  return shape_is(out(0), {w[1], ids[0], ids[1]});
}

bool NodeChecker::reshape() {
  if (!arity(1, 1, 1) || !type_is(out(0), in(0).type)) return false;
  auto summary = [](const Shape& s) {
    int64_t n = 1, t = 0, c = 0;
    for (int64_t d : s) {
      if (d == kDimTokens) ++t;
      else if (d == kDimContext) ++c;
      else n *= d;
    }
    return std::vector<int64_t>{n, t, c};
  };
  if (summary(in(0).shape) != summary(out(0).shape))
    return fail("reshape " + shape_str(in(0).shape) + " -> " + shape_str(out(0).shape) +
                " changes the element count");
  return true;
}

bool NodeChecker::slice() {
  if (!arity(1, 1, 1) || !has_attr("offset", 0) || !type_is(in(0), GgmlType::F32) ||
      !type_is(out(0), GgmlType::F32))
    return false;
  const Shape& a = in(0).shape;
  const Shape& b = out(0).shape;
  const int64_t off = n_.attr_int("offset");
  if (a.size() != b.size() || a.empty() || !std::equal(a.begin() + 1, a.end(), b.begin() + 1) ||
      off < 0 || b[0] <= 0 || off + b[0] > a[0])
    return fail("slice " + shape_str(b) + " at offset " + std::to_string(off) +
                " does not fit in " + shape_str(a));
  return true;
}

bool NodeChecker::rope() {
  if (!arity(2, 2, 1) || !type_is(in(0), GgmlType::F32) || !type_is(in(1), GgmlType::I32) ||
      !rank_is(in(1), 1))
    return false;
  for (const char* k : {"freq_base", "freq_scale", "ext_factor", "attn_factor", "beta_fast",
                        "beta_slow"})
    if (!has_attr(k, 1)) return false;
  if (!has_attr("n_dims", 0) || !has_attr("n_ctx_orig", 0) || !has_attr("mode", 2)) return false;
  if (n_.attr_str("mode") != "norm") return fail("rope mode '" + n_.attr_str("mode") + "' is not supported");
  const int64_t nd = n_.attr_int("n_dims");
  if (nd <= 0 || nd % 2 || in(0).shape.empty() || nd > in(0).shape[0])
    return fail("rope n_dims " + std::to_string(nd) + " does not fit %" + in(0).name);
  if (in(0).shape.back() != in(1).shape[0]) return fail("rope positions do not match the tokens");
  return f32_out_like(in(0));
}

bool NodeChecker::mla_attention() {
  if (!arity(6, 6, 1) || !has_attr("scale", 1) || !rank_is(in(0), 3) || !rank_is(in(1), 3))
    return false;
  for (size_t i = 0; i < 4; ++i)
    if (!type_is(in(i), GgmlType::F32)) return false;
  const int64_t R = in(0).shape[0], H = in(0).shape[1], r = in(1).shape[0];
  if (!shape_is(in(0), {R, H, kDimTokens}) || !shape_is(in(1), {r, H, kDimTokens}) ||
      !shape_is(in(2), {R, kDimTokens}) || !shape_is(in(3), {r, kDimTokens}) ||
      !shape_is(in(4), {R + r, kDimContext}) || !type_is(in(4), GgmlType::F32) ||
      !shape_is(in(5), {kDimTokens}) || !type_is(in(5), GgmlType::I32))
    return false;
  if (in(4).kind != ValueKind::State) return fail("%" + in(4).name + " is not a state");
  return f32_out_like(in(0));
}

bool NodeChecker::mha_attention() {
  if (!arity(8, 8, 1) || !has_attr("scale", 1) || !rank_is(in(0), 3) || !rank_is(in(1), 3) ||
      !rank_is(in(4), 3))
    return false;
  for (size_t i = 0; i < 7; ++i)
    if (!type_is(in(i), GgmlType::F32)) return false;
  const int64_t n = in(0).shape[0], H = in(0).shape[1], r = in(1).shape[0], dv = in(4).shape[0];
  if (!shape_is(in(0), {n, H, kDimTokens}) || !shape_is(in(1), {r, H, kDimTokens}) ||
      !shape_is(in(2), {n, H, kDimTokens}) || !shape_is(in(3), {r, kDimTokens}) ||
      !shape_is(in(4), {dv, H, kDimTokens}) || !shape_is(in(5), {n + r, H, kDimContext}) ||
      !shape_is(in(6), {dv, H, kDimContext}) || !shape_is(in(7), {kDimTokens}) ||
      !type_is(in(7), GgmlType::I32))
    return false;
  if (in(5).kind != ValueKind::State || in(6).kind != ValueKind::State)
    return fail("mha_attention caches must be states");
  return type_is(out(0), GgmlType::F32) && shape_is(out(0), {dv, H, kDimTokens});
}

bool NodeChecker::router() {
  if (!arity(1, 2, 2) || !type_is(in(0), GgmlType::F32) || !rank_is(in(0), 2)) return false;
  const int64_t E = in(0).shape[0];
  if (n_.inputs.size() == 2 && (!type_is(in(1), GgmlType::F32) || !shape_is(in(1), {E})))
    return false;
  if (!has_attr("gating", 2) || !has_attr("n_used", 0) || !has_attr("n_groups", 0) ||
      !has_attr("n_group_used", 0) || !has_attr("norm", 0) || !has_attr("scale", 1))
    return false;
  const std::string gating = n_.attr_str("gating");
  if (gating != "sigmoid" && gating != "softmax") return fail("gating '" + gating + "' is unknown");
  const int64_t k = n_.attr_int("n_used"), ng = n_.attr_int("n_groups"),
                nu = n_.attr_int("n_group_used");
  if (k <= 0 || k > E || ng <= 0 || E % ng != 0 || (ng > 1 && (nu <= 0 || nu >= ng)))
    return fail("router sizes are inconsistent (experts " + std::to_string(E) + ", used " +
                std::to_string(k) + ", groups " + std::to_string(ng) + "/" + std::to_string(nu) + ")");
  const Shape o = {k, in(0).shape[1]};
  return type_is(out(0), GgmlType::I32) && shape_is(out(0), o) &&
         type_is(out(1), GgmlType::F32) && shape_is(out(1), o);
}

bool NodeChecker::elementwise() {
  if (!arity(2, 2, 1) || !type_is(in(0), GgmlType::F32) || !type_is(in(1), GgmlType::F32) ||
      !shape_is(in(1), in(0).shape))
    return false;
  return f32_out_like(in(0));
}

bool NodeChecker::weighted_sum() {
  if (!arity(2, 2, 1) || !type_is(in(0), GgmlType::F32) || !type_is(in(1), GgmlType::F32) ||
      !rank_is(in(0), 3) || !shape_is(in(1), {in(0).shape[1], in(0).shape[2]}))
    return false;
  return type_is(out(0), GgmlType::F32) && shape_is(out(0), {in(0).shape[0], in(0).shape[2]});
}

bool NodeChecker::gate_up_swiglu() {
  if (!arity(3, 3, 1) || !check_activation(*this, in(0), in(2)) || !check_activation(*this, in(1), in(2)) ||
      !rank_is(in(0), 2) || !shape_is(in(1), in(0).shape) || !type_is(in(1), in(0).type))
    return false;
  const Shape& x = in(2).shape;
  if (x.empty() || x[0] != in(0).shape[0]) return fail("%" + in(2).name + " rows do not match %" + in(0).name);
  Shape o = x;
  o[0] = in(0).shape[1];
  const FormatTraits* tr = format_traits(out(0).type);
  if (!tr || !tr->from_float || o[0] % tr->block_elems != 0)
    return fail(std::string("cannot quantise the SwiGLU output to ") + type_name(out(0).type));
  return shape_is(out(0), o);
}

bool NodeChecker::matmul_add() {
  if (!arity(3, 3, 1) || !check_activation(*this, in(0), in(1)) || !rank_is(in(0), 2)) return false;
  const Shape& x = in(1).shape;
  if (x.empty() || x[0] != in(0).shape[0]) return fail("%" + in(1).name + " rows do not match %" + in(0).name);
  Shape o = x;
  o[0] = in(0).shape[1];
  return type_is(in(2), GgmlType::F32) && shape_is(in(2), o) && type_is(out(0), GgmlType::F32) &&
         shape_is(out(0), o);
}

bool NodeChecker::rms_norm_quantize() {
  if (n_.outputs.size() != 1 && !arity(2, 2, 2)) return false;
  if (!arity(2, 2, n_.outputs.size()) || !type_is(in(0), GgmlType::F32) || !type_is(in(1), GgmlType::F32) ||
      in(0).shape.empty() || !shape_is(in(1), {in(0).shape[0]}) || !has_attr("eps", 1))
    return false;
  if (n_.outputs.size() == 2 && (!type_is(out(1), GgmlType::F32) || !shape_is(out(1), in(0).shape))) return false;
  const FormatTraits* tr = format_traits(out(0).type);
  if (!tr || !tr->from_float || out(0).type == GgmlType::F32 || in(0).shape[0] % tr->block_elems != 0)
    return fail(std::string("cannot quantise the norm to ") + type_name(out(0).type));
  return shape_is(out(0), in(0).shape);
}

// The op and input slot a weight of this name may appear in.
bool weight_role_ok(const std::string& full, OpKind op, size_t slot) {
  std::string name = full;
  if (name.rfind("blk.", 0) == 0) {
    size_t dot = name.find('.', 4);
    if (dot != std::string::npos) name = name.substr(dot + 1);
  }
  auto ends = [&](const char* s) {
    std::string t = s;
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  if (name == "token_embd.weight")
    return (op == OpKind::Embed && slot == 0) || (op == OpKind::MatMul && slot == 0);
  if (ends("_norm.weight")) return (op == OpKind::RmsNorm || op == OpKind::RmsNormQuantize) && slot == 1;
  if (name == "exp_probs_b.bias") return op == OpKind::Router && slot == 1;
  if (ends("_exps.weight"))
    return ((op == OpKind::MatMulId || op == OpKind::MatMulIdSum) && slot == 0) || (op == OpKind::GateUpSwiGluId && slot < 2);
  if (op == OpKind::GateUpSwiGlu) return slot < 2;
  return (op == OpKind::MatMul || op == OpKind::MatMulAdd) && slot == 0;
}

std::string where(const Graph& g, size_t i) {
  const Node& n = g.nodes[i];
  std::string s = "node " + std::to_string(i) + " (" + op_name(n.op);
  if (!n.outputs.empty() && n.outputs[0] >= 0 && static_cast<size_t>(n.outputs[0]) < g.values.size())
    s += " -> %" + g.values[static_cast<size_t>(n.outputs[0])].name;
  return s + ")";
}

Status check_values(const Graph& g) {
  std::unordered_set<std::string> names;
  for (const auto& v : g.values) {
    if (v.name.empty()) return Error{"verifier: a value has no name"};
    if (!names.insert(v.name).second) return Error{"verifier: value %" + v.name + " defined twice"};
    if (!type_geometry(v.type)) return Error{"verifier: value %" + v.name + " has an unknown type"};
  }
  return Status::ok();
}

Status check_weight_uses(const Graph& g, const std::vector<int>& uses) {
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (v.kind != ValueKind::Weight) continue;
    const int limit = v.name == "token_embd.weight" ? 2 : 1;
    if (uses[i] == 0) return Error{"verifier: weight %" + v.name + " is never used"};
    if (uses[i] > limit)
      return Error{"verifier: weight %" + v.name + " is used " + std::to_string(uses[i]) + " times"};
  }
  return Status::ok();
}

}  // namespace

Status verify(const Graph& g) {
  ZENMOE_RETURN_IF_ERROR(check_values(g));
  const size_t nv = g.values.size();
  std::vector<char> defined(nv, 0);
  std::vector<int> uses(nv, 0);
  for (size_t i = 0; i < nv; ++i) defined[i] = g.values[i].kind != ValueKind::Temp;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      const int id = n.inputs[s];
      if (id < 0 || static_cast<size_t>(id) >= nv)
        return Error{"verifier: " + where(g, i) + ": input " + std::to_string(s) + " is not a value"};
      const Value& v = g.values[static_cast<size_t>(id)];
      if (!defined[static_cast<size_t>(id)])
        return Error{"verifier: " + where(g, i) + ": %" + v.name + " is used before it is defined"};
      if (v.kind == ValueKind::Weight) {
        if (!weight_role_ok(v.name, n.op, s))
          return Error{"verifier: " + where(g, i) + ": weight %" + v.name + " is not expected as input " +
                       std::to_string(s) + " of " + op_name(n.op)};
        ++uses[static_cast<size_t>(id)];
      }
    }
    for (int id : n.outputs) {
      if (id < 0 || static_cast<size_t>(id) >= nv)
        return Error{"verifier: " + where(g, i) + ": an output is not a value"};
      const Value& v = g.values[static_cast<size_t>(id)];
      if (v.kind != ValueKind::Temp || defined[static_cast<size_t>(id)])
        return Error{"verifier: " + where(g, i) + ": %" + v.name + " is produced twice or is not a temp"};
      defined[static_cast<size_t>(id)] = 1;
    }
    NodeChecker c(g, n);
    if (!c.check()) return Error{"verifier: " + where(g, i) + ": " + c.error};
  }
  for (int id : g.outputs)
    if (id < 0 || static_cast<size_t>(id) >= nv || !defined[static_cast<size_t>(id)])
      return Error{"verifier: a graph output is not defined"};
  if (g.outputs.empty()) return Error{"verifier: the graph has no outputs"};
  for (size_t i = 0; i < nv; ++i)
    if (!defined[i]) return Error{"verifier: temp %" + g.values[i].name + " is never produced"};
  return check_weight_uses(g, uses);
}

}  // namespace zenmoe::ir
