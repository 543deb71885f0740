// Text form of the IR, for golden tests, `zenmoe inspect --ir` and `--dump-after`:
//
//   graph deepseek2 {
//     input %tokens : i32[T]
//     weight %token_embd.weight : q4_K[256,512]
//     state %blk.0.kv_cache : f32[576,C]
//     %inp_embd : f32[256,T] = embed(%token_embd.weight, %tokens)
//     %ids : i32[8,T], %w : f32[8,T] = router(%logits, %bias) {gating=sigmoid, n_used=8, ...}
//     output %logits
//   }
//
// Inputs, weights and states are declared first (in value order), then one line per node in
// execution order. Floats print with 9 significant digits (exact for f32) and always carry a
// '.' or an exponent, so the parser tells them from integers.
#pragma once

#include <string>

#include "ir/graph.h"

namespace zenmoe::ir {

std::string print_graph(const Graph& g);

}  // namespace zenmoe::ir
