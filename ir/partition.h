// Partition pass: records on every matmul, matmul_add, matmul_id and gate_up_swiglu node the
// unit its output rows are split across threads in ("row_block": the kernel's row block, 256
// outputs for gate_up_swiglu whose epilogue quantises whole Q8_K blocks), and the thread count
// the plan is laid out for as the graph attribute "threads". Experts are not assigned to
// threads at compile time: the executor splits each expert's rows (matmul_id), or deals the
// picked experts' blocks of outputs out evenly (gate_up_swiglu_id), which balances any routing.
#pragma once

#include "ir/graph.h"
#include "ir/pipeline.h"
#include "kernels/status.h"

namespace zenmoe::ir {

Status partition(Graph& g, const PipelineOptions& opt);

// Whether the node multiplies by a weight with kernels (the nodes partition and tiling annotate).
bool is_weight_product(const Node& n);

}  // namespace zenmoe::ir
