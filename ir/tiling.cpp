#include "ir/tiling.h"

#include <algorithm>

#include "ir/partition.h"

namespace zenmoe::ir {

Status tile(Graph& g, const PipelineOptions& opt) {
  if (!opt.kernel_rows || opt.l2_bytes <= 0) return Status::ok();
  set_int_attr(g.attrs, "l1_bytes", opt.l1_bytes);
  set_int_attr(g.attrs, "l2_bytes", opt.l2_bytes);
  set_int_attr(g.attrs, "l3_bytes", opt.l3_bytes);
  for (Node& n : g.nodes) {
    if (!is_weight_product(n)) continue;
    const Value& w = g.values[static_cast<size_t>(n.inputs[0])];
    const KernelRows k = opt.kernel_rows(w.type, w.shape[0]);
    const int64_t unit = n.attr_int("row_block", 0);
    if (unit < 1) return Error{"tiling: %" + w.name + " has no row_block (partition runs first)"};
    // gate_up_swiglu streams a gate and an up row per output row.
    const int64_t per_row = (n.op == OpKind::GateUpSwiGlu || n.op == OpKind::GateUpSwiGluId ? 2 : 1) * std::max<int64_t>(1, k.row_bytes);
    const int64_t fit = std::max<int64_t>(1, opt.l2_bytes / 2 / per_row);
    set_int_attr(n.attrs, "tile_rows", std::max(unit, fit / unit * unit));
  }
  return Status::ok();
}

}  // namespace zenmoe::ir
