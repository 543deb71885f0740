// The reference executor's per-op interpreters (internal to runtime/ref_executor*.cpp).
// Each op follows ggml's CPU backend: the activation of a matmul arrives already converted to
// the weight's vec_dot format by a quantize node, products with the F32 KV cache are F32·F32,
// and the non-matmul numerics come from kernels/ref/ops.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"
#include "kernels/formats.h"
#include "kernels/ref/ops.h"
#include "kernels/status.h"
#include "runtime/executor.h"

namespace zenmoe::refexec {

// A value at run time: symbolic dims resolved, bytes in storage order.
struct Tensor {
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;
  const uint8_t* cdata = nullptr;  // always set
  uint8_t* data = nullptr;         // null for read-only values (weights)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
  int64_t rows() const { return ne.empty() || ne[0] == 0 ? 0 : numel() / ne[0]; }
  int64_t row_size() const { return row_bytes(type, ne.empty() ? 1 : ne[0]); }
  const float* cf32() const { return reinterpret_cast<const float*>(cdata); }
  float* f32() const { return reinterpret_cast<float*>(data); }
  const int32_t* ci32() const { return reinterpret_cast<const int32_t*>(cdata); }
  int32_t* i32() const { return reinterpret_cast<int32_t*>(data); }
};

// The RoPE parameters of a rope node's attributes.
ref::RopeParams rope_params(const ir::Node& n);

// The KV caches among `tensors` (one per value of g: its states, position last).
std::vector<KvCacheRows> kv_cache_rows(const ir::Graph& g, std::span<Tensor> tensors);

// Runs one node. `in` and `out` follow the node's inputs and outputs; outputs (and states
// written by attention) are sized by the caller.
Status run_node(const ir::Node& node, std::span<Tensor* const> in, std::span<Tensor* const> out);

}  // namespace zenmoe::refexec
