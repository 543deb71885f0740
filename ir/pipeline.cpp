#include "ir/pipeline.h"

#include "ir/fusion.h"
#include "ir/memplan.h"
#include "ir/partition.h"
#include "ir/printer.h"
#include "ir/tiling.h"
#include "ir/verifier.h"

namespace zenmoe::ir {

namespace {

Status verify_pass(Graph& g, const PipelineOptions&) { return verify(g); }

}  // namespace

const std::vector<Pass>& pipeline_passes() {
  static const std::vector<Pass> passes = {
      {"verify", verify_pass},
      {"fusion", fuse},
      {"partition", partition},
      {"tiling", tile},
      {"memplan", plan_memory_pass},
  };
  return passes;
}

Status run_pipeline(Graph& g, const PipelineOptions& opt) {
  const auto& passes = pipeline_passes();
  if (!opt.dump_after.empty() && opt.dump_after != "all") {
    bool known = false;
    std::string names;
    for (const auto& p : passes) {
      known = known || opt.dump_after == p.name;
      names += std::string(names.empty() ? "" : ", ") + p.name;
    }
    if (!known) return Error{"unknown pass '" + opt.dump_after + "' (passes: " + names + ", all)"};
  }
  for (const auto& p : passes) {
    Status s = p.run(g, opt);
    if (!s) return Error{std::string(p.name) + ": " + s.message()};
    if (opt.dump && (opt.dump_after == "all" || opt.dump_after == p.name))
      opt.dump(p.name, print_graph(g));
  }
  return Status::ok();
}

}  // namespace zenmoe::ir
