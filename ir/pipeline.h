// The ordered list of passes run on a graph. A pass is one header declaring one function
// `Status name(Graph&, const PipelineOptions&)` plus one .cpp; adding a pass is one line in
// pipeline.cpp's table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe::ir {

// What the passes may know about the target. ir/ depends on no runtime or codegen code, so the
// caller (runtime/compiled_model.h: pipeline_options) folds the kernel registry's answers and
// the machine's cache sizes in here; with the defaults every pass but verify changes nothing.
// How the kernel that will run a weight format at K inputs walks its rows.
struct KernelRows {
  int64_t row_block = 1;  // rows computed together (work is split in multiples of it)
  int64_t row_bytes = 0;  // weight bytes streamed per row (packed layout)
};

struct PipelineOptions {
  std::string dump_after;  // pass name ("" none, "all" every pass)
  // Receives (pass name, printed graph) after each pass selected by dump_after.
  std::function<void(const std::string&, const std::string&)> dump;
  // fusion: whether a fused gate+up+SwiGLU kernel runs weights of this format with K inputs
  // and F outputs per token, writing `out` activations. Null: no gate/up fusion.
  std::function<bool(GgmlType weight, int64_t K, int64_t F, GgmlType out)> gate_up_kernel;
  // fusion: whether rms_norm followed by a quantize to `out` runs as one kernel. Null: no
  // norm/quantize fusion.
  std::function<bool(GgmlType out)> norm_quantize_kernel;
  // fusion: fold residual adds into matmul accumulate epilogues (matmul_add).
  bool fuse_residual = false;
  // fusion: fold the routed experts' weighted sum into their down projection (matmul_id_sum).
  bool fuse_moe_sum = false;
  // partition, tiling: the kernel row geometry of a weight (null: both passes do nothing).
  std::function<KernelRows(GgmlType weight, int64_t K)> kernel_rows;
  // partition: threads the plan is laid out for (0: not recorded).
  int threads = 0;
  // tiling: per-core data cache sizes in bytes measured on the compiling machine (0: unknown;
  // an unknown L2 leaves tiling to the executor).
  int64_t l1_bytes = 0, l2_bytes = 0, l3_bytes = 0;
  // memplan: tokens per forward chunk the arena is laid out for (0: no recorded plan).
  int64_t max_tokens = 0;
};

using PassFn = Status (*)(Graph&, const PipelineOptions&);

struct Pass {
  const char* name;  // as given to --dump-after
  PassFn run;
};

// The passes in the order run_pipeline runs them.
const std::vector<Pass>& pipeline_passes();

// Runs every pass in order; stops at the first error, prefixed with the pass name. An unknown
// dump_after name is an error listing the known ones.
Status run_pipeline(Graph& g, const PipelineOptions& opt = {});

}  // namespace zenmoe::ir
