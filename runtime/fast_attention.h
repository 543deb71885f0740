// Absorbed MLA attention for the fast executor. The cache row of a position is [c | k_pe]
// (kv_lora + rope dims); a query row is [q_lat | q_pe] per head. For a block of query rows
// (token, head) the scores are one matrix product Q·Cacheᵀ, the causal mask and softmax run
// per row, and the output is P·V with V the first kv_lora columns of the same cache rows —
// two SGEMMs per block, the rows split across the pool's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

struct AttentionScratch {
  std::vector<float> q, s;  // per thread: query block and score block
};

class MlaOp {
 public:
  // Decode-sized batches use generated glue kernels (scores and values over the cache rows);
  // larger ones the SGEMM pair. Without AVX-512 glue (scalar target) SGEMM serves both.
  // kv_f16: the cache holds F16 rows (store() converts; SGEMM batches widen the visible rows
  // once per call into a shared F32 copy).
  static Expected<std::unique_ptr<MlaOp>> create(const ir::Node& n, const ir::Graph& g, isa::Target target,
                                                 bool kv_f16);
  // Caller thread: writes this batch's cache rows.
  void store(std::span<refexec::Tensor* const> in) const;
  // Thread `tid` of `nth`: its share of the (token, head) rows.
  void run(int tid, int nth, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
           AttentionScratch& scratch) const;

 private:
  void run_glue(int64_t i0, int64_t i1, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
                AttentionScratch& sc) const;

  const float* f32_cache(const refexec::Tensor& cache) const;

  float scale_ = 1.0f;
  bool kv_f16_ = false;
  mutable std::vector<float> widened_;  // F16 cache rows as F32 for the SGEMM path
  // Causal softmax rows (generated; the reference softmax when the target has no glue).
  void softmax_rows(float* s, int64_t rows, int64_t stride, int64_t vis) const;

  GlueFn scores_ = nullptr, values_ = nullptr, softmax_ = nullptr;
};

// Batches of at most this many tokens take the glue path.
inline constexpr int64_t kMlaGlueMaxTokens = 4;

// The calling thread's dense-algebra library runs single-threaded (the pool owns the cores).
void single_threaded_blas();

}  // namespace zenmoe
