#include "ir/partition.h"

namespace zenmoe::ir {

bool is_weight_product(const Node& n) {
  return n.op == OpKind::MatMul || n.op == OpKind::MatMulAdd || n.op == OpKind::MatMulId || n.op == OpKind::MatMulIdSum ||
         n.op == OpKind::GateUpSwiGlu || n.op == OpKind::GateUpSwiGluId;
}

Status partition(Graph& g, const PipelineOptions& opt) {
  if (!opt.kernel_rows) return Status::ok();
  if (opt.threads > 0) set_int_attr(g.attrs, "threads", opt.threads);
  for (Node& n : g.nodes) {
    if (!is_weight_product(n)) continue;
    const Value& w = g.values[static_cast<size_t>(n.inputs[0])];
    const KernelRows k = opt.kernel_rows(w.type, w.shape[0]);
    if (k.row_block < 1) return Error{"partition: no row block for %" + w.name};
    set_int_attr(n.attrs, "row_block", n.op == OpKind::GateUpSwiGlu || n.op == OpKind::GateUpSwiGluId ? 256 : k.row_block);
  }
  return Status::ok();
}

}  // namespace zenmoe::ir
