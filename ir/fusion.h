// Fusion pass: rewrites op sequences into the fused ops the executors run as one kernel.
//   1. matmul(w_gate, x), matmul(w_up, x) -> swiglu -> quantize  becomes
//      gate_up_swiglu(w_gate, w_up, x) when PipelineOptions::gate_up_kernel accepts the shape
//      (dense FFN and shared experts; the result is the down projection's activation); the
//      same with matmul_id(w_gate, x, ids), matmul_id(w_up, x, ids) becomes
//      gate_up_swiglu_id(w_gate, w_up, x, ids) (routed experts).
//   2. add(acc, matmul(w, x)) with a 2-D weight becomes matmul_add(w, x, acc) when
//      PipelineOptions::fuse_residual is set and acc is dead after the add, so the product
//      accumulates into acc's bytes (the memory plan gives both one arena slot).
//   3. quantize(rms_norm(x, w)) becomes rms_norm_quantize(x, w) when
//      PipelineOptions::norm_quantize_kernel accepts the format (keeping the f32 norm output
//      when anything else reads it, e.g. the router of a MoE layer).
//   4. weighted_sum(matmul_id(w, x, ids), weights) becomes matmul_id_sum(w, x, ids, weights)
//      when PipelineOptions::fuse_moe_sum is set: each slot's product accumulates into its
//      token's row times its router weight, with no per-slot intermediate.
//   5. with gate_up_kernel, a MoE layer's shared-expert gate_up_swiglu (the same activations
//      as the layer's gate_up_swiglu_id) moves to just before the routed one, so that the
//      executor runs both as one list of blocks across the threads (runtime/fast_executor)
//      and the memory plan sees the order they run in.
// Intermediate values the rewrites make unused are removed; the result is verified.
#pragma once

#include "ir/graph.h"
#include "ir/pipeline.h"
#include "kernels/status.h"

namespace zenmoe::ir {

Status fuse(Graph& g, const PipelineOptions& opt);

}  // namespace zenmoe::ir
