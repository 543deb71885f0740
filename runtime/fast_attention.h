// Absorbed MLA attention for the fast executor. The cache row of a position is [c | k_pe]
// (kv_lora + rope dims); a query row is [q_lat | q_pe] per head. For a block of query rows
// (token, head) the scores are one matrix product Q·Cacheᵀ, the causal mask and softmax run
// per row, and the output is P·V with V the first kv_lora columns of the same cache rows —
// two SGEMMs per block, the rows split across the pool's threads.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

struct AttentionScratch {
  std::vector<float> q, s;  // per thread: query block and score block
};

class MlaOp {
 public:
  explicit MlaOp(const ir::Node& n);
  // Caller thread: writes this batch's cache rows.
  void store(std::span<refexec::Tensor* const> in) const;
  // Thread `tid` of `nth`: its share of the (token, head) rows.
  void run(int tid, int nth, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
           AttentionScratch& scratch) const;

 private:
  float scale_ = 1.0f;
};

// The calling thread's dense-algebra library runs single-threaded (the pool owns the cores).
void single_threaded_blas();

}  // namespace zenmoe
