// Tiling pass: records on every node partition annotates the rows of a tile ("tile_rows", a
// multiple of its row_block) whose weights fill half of the per-core L2 measured at compile
// time (PipelineOptions::l2_bytes), so during a batch a tile stays in L2 while every token's
// activations pass over it; the other half holds activations and outputs. The budgets used are
// recorded as graph attributes l1_bytes / l2_bytes / l3_bytes. Runs after partition; with an
// unknown L2 or no kernel geometry it changes nothing.
#pragma once

#include "ir/graph.h"
#include "ir/pipeline.h"
#include "kernels/status.h"

namespace zenmoe::ir {

Status tile(Graph& g, const PipelineOptions& opt);

}  // namespace zenmoe::ir
