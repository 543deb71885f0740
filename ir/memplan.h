// Memory-plan pass: runs ir::plan_memory at PipelineOptions::max_tokens and records the arena
// layout in the graph, so a plan file carries it and the executor does not recompute it:
//   graph attrs  max_tokens, arena_bytes, arena.<input name> (offset of each graph input)
//   node attrs   arena (offset of output 0), arena1 (of output 1, the router's weights)
// With max_tokens 0 the pass changes nothing.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "ir/pipeline.h"
#include "kernels/status.h"

namespace zenmoe::ir {

Status plan_memory_pass(Graph& g, const PipelineOptions& opt);

// The recorded plan when `g` has one made for at least `max_tokens` tokens (a smaller batch
// uses a prefix of every slot), else nullopt. Errors: an arena value with no offset, or a slot
// not inside the recorded arena (a damaged plan file), so no offset can point outside it.
Expected<std::optional<MemoryPlan>> recorded_memory_plan(const Graph& g, int64_t max_tokens);

}  // namespace zenmoe::ir
