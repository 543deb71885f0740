// Memory plan: places every per-eval value (inputs and temporaries) of a graph in one
// activation arena, reusing the bytes of values that are dead by the time a new one is made.
// Sizes are taken at a batch of `max_tokens` tokens; a smaller batch uses a prefix of each slot
// (the token dimension is the outermost). Reshapes share their input's bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "kernels/status.h"

namespace zenmoe::ir {

struct MemoryPlan {
  int64_t max_tokens = 0;
  std::vector<int64_t> offset;  // per value id: byte offset in the arena, -1 when not in it
  std::vector<int64_t> bytes;   // per value id: bytes reserved (0 when not in the arena)
  int64_t arena_bytes = 0;      // total, a multiple of 64
  int64_t naive_bytes = 0;      // what one buffer per value would take (for reports)
};

// Errors: max_tokens < 1, a value with a symbolic context dimension outside the KV state.
Expected<MemoryPlan> plan_memory(const Graph& g, int64_t max_tokens);

// Whether a value lives in the arena (inputs and temporaries), and the bytes its slot takes at
// a batch of max_tokens tokens (64-byte multiple).
bool in_arena(const Value& v);
int64_t arena_slot_bytes(const Value& v, int64_t max_tokens);

}  // namespace zenmoe::ir
