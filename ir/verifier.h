// The verifier: structural and type checks every graph must pass before it runs or is
// rewritten by a pass. One error names the node (index, op, output) and the problem.
#pragma once

#include "ir/graph.h"
#include "kernels/status.h"

namespace zenmoe::ir {

// Checks: unique value names; inputs, weights and states are never produced and every temp is
// produced by exactly one node before its first use; per-op arity, shapes, element types and
// attributes (see the op table in graph.h); every weight is used, only in the role its name
// says (norms by rms_norm, projections by matmul, experts by matmul_id, the selection bias by
// router) and once (token_embd: embedding plus, when the output head is tied, the head);
// graph outputs are defined.
Status verify(const Graph& g);

}  // namespace zenmoe::ir
