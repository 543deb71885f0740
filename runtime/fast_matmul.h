// The fast executor's matrix products: matmul and matmul_id nodes run on the generated GEMV
// kernels over repacked weights (runtime/compiled_model.h), or on the reference dot product
// for formats without a kernel. Work is split by output rows across the pool's threads in
// units of the kernel's row block, and for batches the rows are tiled so a tile of weights
// stays in L2 while every activation row of the batch passes over it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/compiled_model.h"
#include "runtime/ref_executor_ops.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

// Matrices multiplied by fewer tokens than this (an expert's routed slots, or the rows of a
// short prompt) run the GEMV kernel's call over several tokens, a tile of rows at a time: the
// Q4_K and Q6_K kernels from AVX-512 VNNI up read each weight once for up to 4 tokens, others
// run one GEMV per token, every token after the first reading the tile from L2. Over a few tokens the
// GEMM kernel is bound by its weight stream, which the GEMV streams faster: a 16-token prompt
// prefilled no faster than it decoded token by token, and runs 1.6-2.3x faster this way. From
// 8 tokens on the GEMM's reuse of each weight tile wins (8, 12 and 16 measured alike).
inline constexpr int64_t kGemmMinTokens = 8;
// The same where the GEMV kernel reads the weights once for several tokens (passes of up to
// 4): with the weights in cache the Q4_K passes beat the GEMM at 8 tokens and lose to it at 16
// (zenmoe_bench gemm_q4k against gemv_loop_q4k, 2048x512, 512x2048 and 2048x4608: 0.90-0.96x
// the GEMM's time at 8, 1.08-1.11x at 16; Q6_K, 2048x1024: 1.04x at 8 and 16), and from memory
// their first pass is bound by the weight stream as the GEMM's tiles are not.
inline constexpr int64_t kGemmMinTokensAfterPasses = 12;
inline int64_t gemm_min_tokens(const Kernel& gemv) {
  return gemv.several_tokens() ? kGemmMinTokensAfterPasses : kGemmMinTokens;
}
// The shortest run of a matrix a GEMV kernel streams side by side with others (KernelDesc::streams).
inline constexpr int64_t kMinStreamBytes = 64 * 1024;

struct TileBudget {
  int64_t l2_bytes = 1 << 20;  // per core, from the machine's topology
};

// The slots (t * k + j) of a routed op grouped by expert: slot_order lists them expert by
// expert, expert_begin[e] is where expert e's start, x_rows[i] is the activation row of
// slot_order[i] (the slot itself when every slot has its own row, else its token).
struct ExpertSlots {
  std::vector<int32_t> slot_order;
  std::vector<int64_t> expert_begin;  // n_experts + 1 offsets into slot_order
  std::vector<int32_t> x_rows;
  Status group(const refexec::Tensor& ids, int64_t n_experts, int64_t k_used, bool per_slot_x);
};

class MatOp {
 public:
  // Node: matmul(w, x), matmul_add(w, x, acc) (y must hold acc), matmul_id(w, x, ids) or
  // matmul_id_sum(w, x, ids, weights).
  static Expected<std::unique_ptr<MatOp>> create(const ir::Node& n, const ir::Graph& g, const CompiledModel& cm,
                                                 const TileBudget& tiles);
  // Serial part before the threads start: matmul_id groups its slots by expert and lists each
  // slot's activation row in that order; matmul_id_sum also lists each slot's router weight
  // and token row.
  Status prepare(const refexec::Tensor* ids, const refexec::Tensor* weights, const refexec::Tensor& x);
  // Thread `tid` of `nth` computes its share of y.
  void run(int tid, int nth, const refexec::Tensor& x, refexec::Tensor& y) const;
  // "gemv_q4k_q8k_f32_8r__avx512vnni_zen4" or "reference q5_K" (dispatch log, profiles).
  const std::string& kernel_name() const { return kernel_name_; }
  // Weight bytes one token's product reads: every matrix, or k_used experts of a routed op.
  uint64_t token_bytes() const;
  // Appends the packed bytes thread `tid` of `nth` reads for one token's product, as (start,
  // size) ranges: its heads' matrices, or its rows of every matrix. False (nothing appended)
  // for routed ops, whose rows depend on the routing, and unpacked weights.
  bool decode_share(int tid, int nth, std::vector<std::pair<const uint8_t*, int64_t>>& out) const;

 private:
  void rows(int64_t mat, int64_t r0, int64_t r1, const uint8_t* x, float* y, float alpha = 1.0f) const;
  // run_dense with one column per matrix (decode of a 3-D weight): whole matrices per thread.
  bool heads_per_thread(int64_t per_mat, int nth) const { return per_mat == 1 && n_mats_ >= 2 * nth; }
  // matmul_id_sum: zeroes this thread's rows of every token before the slots accumulate.
  void zero_rows(int tid, int nth, refexec::Tensor& y) const;
  // Rows per call for `tokens` tokens over a thread's rows rr: tiles of tile_rows_ keep rows in
  // L2 while the tokens pass; a single token reads its rows once, in one call (shorter calls
  // streamed slower from DRAM).
  int64_t tile_for(int64_t tokens, Range rr) const {
    return tokens > 1 ? tile_rows_ : std::max<int64_t>(1, rr.end - rr.begin);
  }
  void run_dense(int tid, int nth, const refexec::Tensor& x, refexec::Tensor& y) const;
  void run_experts(int tid, int nth, const refexec::Tensor& x, refexec::Tensor& y) const;
  // Slots [s0, s1) of expert e over rows rr on unpacked weights, one slot and tile at a time.
  void expert_reference(int64_t e, int64_t s0, int64_t s1, Range rr, const refexec::Tensor& x,
                        refexec::Tensor& y) const;
  const Kernel& kernel_for(int64_t tokens) const;
  void gemm(const Kernel& k, int64_t mat, int64_t r0, int64_t r1, GemmCall c) const;

  bool by_expert_ = false;
  bool accumulate_ = false;  // matmul_add: y += W x (the executor put the accumulator in y)
  bool sum_ = false;         // matmul_id_sum: y[token] += weight * W_e x for each of its slots
  std::vector<float> ones_;  // GEMM-accumulate factors (1 per token)
  int64_t K_ = 0, N_ = 0, n_mats_ = 1, row_block_ = 1, tile_rows_ = 1;
  const PackedMats* packed_ = nullptr;
  std::shared_ptr<const Kernel> kernel_;
  std::shared_ptr<const Kernel> gemm_;  // batches of 2+ rows; null when the format has none
  // Reference path.
  GgmlType raw_type_ = GgmlType::F32;
  const uint8_t* raw_ = nullptr;
  int64_t raw_row_ = 0;
  std::string kernel_name_;
  // matmul_id: slots grouped by expert, rebuilt by prepare(); the kernels read and write the
  // slots' rows in place through their row indices.
  ExpertSlots slots_;
  int64_t k_used_ = 1;
  bool per_slot_x_ = false;
  // matmul_id_sum, per slot in slot_order_: its router weight and its token's output row.
  std::vector<float> slot_weight_;
  std::vector<int32_t> token_rows_;
};

}  // namespace zenmoe
