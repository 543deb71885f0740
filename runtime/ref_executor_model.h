// From an opened GGUF model to what the IR builder reads (metadata scalars, tensor table) and
// on to the verified forward-pass graph. Shared by the reference executor and `inspect --ir`.
#pragma once

#include "ir/graph.h"
#include "ir/model_info.h"
#include "kernels/status.h"
#include "runtime/gguf.h"

namespace zenmoe {

// Metadata scalars (arrays as their length) and the tensor table of `model`.
ir::ModelInfo model_info_from_gguf(const gguf::Model& model);

// model_info_from_gguf + ir::build_graph (which verifies).
Expected<ir::Graph> build_graph_from_gguf(const gguf::Model& model);

}  // namespace zenmoe
