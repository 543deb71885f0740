#include "ir/fusion.h"

#include <algorithm>

#include "ir/verifier.h"

namespace zenmoe::ir {

namespace {

// Who produces and who reads each value, by node index.
struct UseInfo {
  std::vector<int> producer;  // -1 for non-temps
  std::vector<int> uses;      // node inputs reading the value (+1 if a graph output)
  std::vector<int> last_use;  // last node reading it (nodes.size() for graph outputs)
};

UseInfo use_info(const Graph& g) {
  UseInfo u;
  u.producer.assign(g.values.size(), -1);
  u.uses.assign(g.values.size(), 0);
  u.last_use.assign(g.values.size(), -1);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (int id : g.nodes[k].inputs) {
      ++u.uses[static_cast<size_t>(id)];
      u.last_use[static_cast<size_t>(id)] = static_cast<int>(k);
    }
    for (int id : g.nodes[k].outputs) u.producer[static_cast<size_t>(id)] = static_cast<int>(k);
  }
  for (int id : g.outputs) {
    ++u.uses[static_cast<size_t>(id)];
    u.last_use[static_cast<size_t>(id)] = static_cast<int>(g.nodes.size());
  }
  return u;
}

const Value& val(const Graph& g, int id) { return g.values[static_cast<size_t>(id)]; }

// The node producing `id` when it is a plain 2-D matmul (or, with `routed`, a matmul_id over
// one activation row per token) read by nothing else, else -1.
int sole_matmul(const Graph& g, const UseInfo& u, int id, bool routed = false) {
  const int p = u.producer[static_cast<size_t>(id)];
  if (p < 0 || u.uses[static_cast<size_t>(id)] != 1) return -1;
  const Node& n = g.nodes[static_cast<size_t>(p)];
  if (routed) return n.op == OpKind::MatMulId && val(g, n.inputs[1]).shape.size() == 2 ? p : -1;
  if (n.op != OpKind::MatMul || val(g, n.inputs[0]).shape.size() != 2) return -1;
  return p;
}

// Rewrites quantize(swiglu(matmul(wg, x), matmul(wu, x))) at quantize node `q`.
bool fuse_gate_up(Graph& g, const UseInfo& u, int q, const PipelineOptions& opt, std::vector<char>& dead) {
  Node& qn = g.nodes[static_cast<size_t>(q)];
  const int act = qn.inputs[0];
  const int s = u.producer[static_cast<size_t>(act)];
  if (s < 0 || u.uses[static_cast<size_t>(act)] != 1 || g.nodes[static_cast<size_t>(s)].op != OpKind::SwiGlu)
    return false;
  const Node& sn = g.nodes[static_cast<size_t>(s)];
  const bool routed = u.producer[static_cast<size_t>(sn.inputs[0])] >= 0 &&
                      g.nodes[static_cast<size_t>(u.producer[static_cast<size_t>(sn.inputs[0])])].op == OpKind::MatMulId;
  const int gate = sole_matmul(g, u, sn.inputs[0], routed), up = sole_matmul(g, u, sn.inputs[1], routed);
  if (gate < 0 || up < 0) return false;
  const Node& gn = g.nodes[static_cast<size_t>(gate)];
  const Node& un = g.nodes[static_cast<size_t>(up)];
  const Value& wg = val(g, gn.inputs[0]);
  const Value& wu = val(g, un.inputs[0]);
  if (gn.inputs[1] != un.inputs[1] || wg.type != wu.type || wg.shape != wu.shape) return false;
  if (routed && gn.inputs[2] != un.inputs[2]) return false;  // the same experts for gate and up
  if (!opt.gate_up_kernel(wg.type, wg.shape[0], wg.shape[1], val(g, qn.outputs[0]).type)) return false;
  qn.op = routed ? OpKind::GateUpSwiGluId : OpKind::GateUpSwiGlu;
  qn.inputs = {gn.inputs[0], un.inputs[0], gn.inputs[1]};
  if (routed) qn.inputs.push_back(gn.inputs[2]);
  qn.attrs.clear();
  dead[static_cast<size_t>(gate)] = dead[static_cast<size_t>(up)] = dead[static_cast<size_t>(s)] = 1;
  return true;
}

// Rewrites add(acc, matmul(w, x)) (either order) at add node `a` when acc dies there.
bool fuse_residual(Graph& g, const UseInfo& u, int a, std::vector<char>& dead) {
  Node& an = g.nodes[static_cast<size_t>(a)];
  for (int j = 0; j < 2; ++j) {
    const int m = sole_matmul(g, u, an.inputs[static_cast<size_t>(j)]);
    const int acc = an.inputs[static_cast<size_t>(1 - j)];
    if (m < 0 || dead[static_cast<size_t>(m)] || val(g, acc).kind != ValueKind::Temp ||
        u.last_use[static_cast<size_t>(acc)] != a)
      continue;
    const Node& mn = g.nodes[static_cast<size_t>(m)];
    an.op = OpKind::MatMulAdd;
    an.inputs = {mn.inputs[0], mn.inputs[1], acc};
    dead[static_cast<size_t>(m)] = 1;
    return true;
  }
  return false;
}

// Rewrites weighted_sum(matmul_id(w, x, ids), weights) at weighted_sum node `s` when nothing
// else reads the per-slot products.
bool fuse_moe_sum(Graph& g, const UseInfo& u, int s, std::vector<char>& dead) {
  Node& sn = g.nodes[static_cast<size_t>(s)];
  const int y = sn.inputs[0];
  const int m = u.producer[static_cast<size_t>(y)];
  if (m < 0 || dead[static_cast<size_t>(m)] || u.uses[static_cast<size_t>(y)] != 1 ||
      g.nodes[static_cast<size_t>(m)].op != OpKind::MatMulId)
    return false;
  const Node& mn = g.nodes[static_cast<size_t>(m)];
  sn.op = OpKind::MatMulIdSum;
  sn.inputs = {mn.inputs[0], mn.inputs[1], mn.inputs[2], sn.inputs[1]};
  dead[static_cast<size_t>(m)] = 1;
  return true;
}

// Rewrites quantize(rms_norm(x, w)) at quantize node `q`: the norm keeps its f32 output only
// when something but the quantize reads it.
bool fuse_norm_quantize(Graph& g, const UseInfo& u, int q, const PipelineOptions& opt, std::vector<char>& dead) {
  Node& qn = g.nodes[static_cast<size_t>(q)];
  const int y = qn.inputs[0];
  const int r = u.producer[static_cast<size_t>(y)];
  if (r < 0 || dead[static_cast<size_t>(r)] || g.nodes[static_cast<size_t>(r)].op != OpKind::RmsNorm ||
      !opt.norm_quantize_kernel(val(g, qn.outputs[0]).type))
    return false;
  Node& rn = g.nodes[static_cast<size_t>(r)];
  qn.op = OpKind::RmsNormQuantize;
  qn.inputs = rn.inputs;
  qn.attrs = rn.attrs;
  if (u.uses[static_cast<size_t>(y)] > 1) {
    // Others read y: the fused node writes it too, where the norm did (before any reader).
    rn.op = OpKind::RmsNormQuantize;
    rn.outputs = {qn.outputs[0], y};
    dead[static_cast<size_t>(q)] = 1;
    return true;
  }
  dead[static_cast<size_t>(r)] = 1;
  return true;
}

// Drops dead nodes and the temps nothing produces any more, renumbering value ids.
void compact(Graph& g, const std::vector<char>& dead) {
  std::vector<Node> nodes;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!dead[k]) nodes.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(nodes);
  std::vector<char> keep(g.values.size(), 0);
  for (size_t i = 0; i < g.values.size(); ++i) keep[i] = g.values[i].kind != ValueKind::Temp;
  for (const Node& n : g.nodes)
    for (int id : n.outputs) keep[static_cast<size_t>(id)] = 1;
  std::vector<int> remap(g.values.size(), -1);
  std::vector<Value> values;
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<int>(values.size());
    values.push_back(std::move(g.values[i]));
  }
  g.values = std::move(values);
  for (Node& n : g.nodes) {
    for (int& id : n.inputs) id = remap[static_cast<size_t>(id)];
    for (int& id : n.outputs) id = remap[static_cast<size_t>(id)];
  }
  for (int& id : g.outputs) id = remap[static_cast<size_t>(id)];
}

// Moves each dense gate_up_swiglu that reads the same activations as an earlier
// gate_up_swiglu_id (a MoE layer's shared expert) to just before it, when all its inputs are
// defined there.
void hoist_shared_gate_up(Graph& g) {
  for (size_t r = 0; r < g.nodes.size(); ++r) {
    if (g.nodes[r].op != OpKind::GateUpSwiGluId) continue;
    const UseInfo u = use_info(g);
    const int x = g.nodes[r].inputs[2];
    for (size_t d = r + 1; d < g.nodes.size(); ++d) {
      const Node& n = g.nodes[d];
      if (n.op == OpKind::GateUpSwiGluId) break;
      if (n.op != OpKind::GateUpSwiGlu || n.inputs[2] != x) continue;
      const bool ready = std::all_of(n.inputs.begin(), n.inputs.end(),
                                     [&](int id) { return u.producer[static_cast<size_t>(id)] < static_cast<int>(r); });
      if (!ready) break;
      Node node = std::move(g.nodes[d]);
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(d));
      g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(r), std::move(node));
      ++r;  // the routed node is one further on now
      break;
    }
  }
}

}  // namespace

Status fuse(Graph& g, const PipelineOptions& opt) {
  std::vector<char> dead(g.nodes.size(), 0);
  bool changed = false;
  if (opt.gate_up_kernel) {
    const UseInfo u = use_info(g);
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (g.nodes[k].op == OpKind::Quantize) changed |= fuse_gate_up(g, u, static_cast<int>(k), opt, dead);
    // Gate/up rewrites turn quantize nodes into gate_up_swiglu: no later rewrite sees them.
  }
  if (opt.norm_quantize_kernel) {
    const UseInfo u = use_info(g);
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (g.nodes[k].op == OpKind::Quantize && !dead[k])
        changed |= fuse_norm_quantize(g, u, static_cast<int>(k), opt, dead);
  }
  if (opt.fuse_residual) {
    const UseInfo u = use_info(g);  // gate/up rewrites do not touch adds or their matmuls
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (g.nodes[k].op == OpKind::Add) changed |= fuse_residual(g, u, static_cast<int>(k), dead);
  }
  if (opt.fuse_moe_sum) {
    const UseInfo u = use_info(g);
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (g.nodes[k].op == OpKind::WeightedSum && !dead[k]) changed |= fuse_moe_sum(g, u, static_cast<int>(k), dead);
  }
  if (!changed) return Status::ok();
  compact(g, dead);
  if (opt.gate_up_kernel) hoist_shared_gate_up(g);
  Status s = verify(g);
  if (!s) return Error{"the fused graph does not verify: " + s.message()};
  return Status::ok();
}

}  // namespace zenmoe::ir
