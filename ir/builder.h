// Graph construction entry point: picks the builder from general.architecture.
#pragma once

#include "ir/graph.h"
#include "ir/model_info.h"
#include "kernels/status.h"

namespace zenmoe::ir {

// Builds and verifies the forward-pass graph of a model. Unsupported architectures, missing
// or mis-shaped tensors and bad hyper-parameters are errors naming the file and the problem.
Expected<Graph> build_graph(const ModelInfo& info);

}  // namespace zenmoe::ir
