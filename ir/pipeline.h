// The ordered list of passes run on a graph. A pass is one header declaring one function
// `Status name(Graph&)` plus one .cpp; adding a pass is one line in pipeline.cpp's table.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/status.h"

namespace zenmoe::ir {

using PassFn = Status (*)(Graph&);

struct Pass {
  const char* name;  // as given to --dump-after
  PassFn run;
};

// The passes in the order run_pipeline runs them.
const std::vector<Pass>& pipeline_passes();

struct PipelineOptions {
  std::string dump_after;  // pass name ("" none, "all" every pass)
  // Receives (pass name, printed graph) after each pass selected by dump_after.
  std::function<void(const std::string&, const std::string&)> dump;
};

// Runs every pass in order; stops at the first error, prefixed with the pass name. An unknown
// dump_after name is an error listing the known ones.
Status run_pipeline(Graph& g, const PipelineOptions& opt = {});

}  // namespace zenmoe::ir
