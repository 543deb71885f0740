// The reference executor: interprets the IR graph op by op with the scalar kernels of
// kernels/ref. It defines what every faster engine must compute (activation formats as
// ggml's CPU backend converts them, F32 KV cache) and is the engine behind `--ref`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/executor.h"
#include "runtime/gguf.h"

namespace zenmoe {

// Bytes of one weight, in the file's storage order.
struct WeightBytes {
  const void* data = nullptr;
  uint64_t nbytes = 0;
};
using WeightTable = std::unordered_map<std::string, WeightBytes>;

// Builds and verifies the graph of `model` and an executor over its mapped tensors.
// `model` must outlive the executor. Errors: unsupported architecture, missing or mis-shaped
// tensors, n_ctx < 1.
Expected<std::unique_ptr<Executor>> make_reference_executor(const gguf::Model& model,
                                                            const ExecutorOptions& opts);

// Same from a graph (verified here) and weight bytes (each checked against its value's size);
// the bytes must outlive the executor. Used by tests with in-memory models.
Expected<std::unique_ptr<Executor>> make_reference_executor(ir::Graph graph,
                                                            const WeightTable& weights,
                                                            const ExecutorOptions& opts);

}  // namespace zenmoe
