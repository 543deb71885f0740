// The fast executor's fused gate_up_swiglu node (ir/fusion.h): one pass over gate and up rows
// packed interleaved (kernels/pack.h pack_gate_up) by the kGateUpSwiglu kernel, which applies
// SwiGLU and quantises the result to Q8_K in its epilogue, so the two f32 products, the
// swiglu node and the quantize node of the unfused graph never touch memory. Batches run the
// GEMM kernel over the same interleaved rows (weights read once per tile, not per token) and
// apply SwiGLU and the Q8_K quantisation per block of 256 outputs with the generated SwiGLU
// glue kernel (Q8_K output; the reference numerics when the target is scalar), the numerics
// of the unfused swiglu and quantize nodes. gate_up_swiglu_id (routed experts) runs the same
// kernels over each expert's interleaved pair for the slots routed to it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/glue.h"
#include "codegen/kernel.h"
#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/compiled_model.h"
#include "runtime/fast_matmul.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

// A block's weight read, in rows of multiply-adds over it. Rough: one block of Kimi-K2's expert
// gate/up is 2 MB, 30-40 GB/s of one core's stream, against 3.7 M multiply-adds per token at the
// routed GEMM's ~240 G multiply-adds per second at 1 thread: about 4 tokens.
inline constexpr int64_t kBlockReadCost = 4;

// Every thread's share of n blocks of the given costs, in one pass: contiguous ranges in thread
// order, the total cost split evenly (a block goes to the thread whose share holds the middle
// of its cost); out[t] is thread t's.
void cost_shares(int64_t n, const std::function<int64_t(int64_t)>& cost, int nth, std::vector<Range>& out);

class GateUpOp {
 public:
  // Node: gate_up_swiglu(w_gate, w_up, x) or gate_up_swiglu_id(w_gate, w_up, x, ids) whose
  // packed pairs are in cm.packed
  // (gate_up_pack_name). `l2_bytes`: per-core L2 used for the batch tile. `scratch` holds the
  // batch path's gate/up products; one per executor, shared by its ops (they run one after
  // another), must outlive the op.
  static Expected<std::unique_ptr<GateUpOp>> create(const ir::Node& n, const ir::Graph& g, const CompiledModel& cm,
                                                    int64_t l2_bytes, std::vector<float>* scratch);
  // Serial part before the threads start: groups routed slots by expert (ids: null for the
  // dense op) and sizes the GEMM's scratch, which this op then uses from float `scratch_at` on
  // (another op running at the same time takes the floats before it: scratch_floats()).
  Status prepare(const refexec::Tensor* ids, const refexec::Tensor& x, int64_t scratch_at = 0);
  int64_t scratch_floats() const { return scratch_floats_; }
  // After prepare(), the op's work is a list of blocks of 256 outputs: the picked experts'
  // blocks (routed), the matrix's blocks (dense). block_cost(b): the rows block b is multiplied
  // by, plus kBlockReadCost for reading its weights. run_blocks runs blocks [b0, b1) of the list
  // for every token (or routed slot); the executor deals the list out by cost (cost_shares) and
  // lets the threads claim it (WorkQueue).
  int64_t blocks() const;
  // The end of the run of blocks b is in: its matrix's blocks in the list (one kernel call).
  int64_t run_end(int64_t b) const;
  int64_t block_cost(int64_t b, const refexec::Tensor& x) const;
  void run_blocks(int64_t b0, int64_t b1, const refexec::Tensor& x, refexec::Tensor& y) const;
  const std::string& kernel_name() const { return kernel_name_; }
  bool routed() const { return routed_; }
  // Weight bytes one token reads: the gate/up pair, or k_used experts' pairs.
  uint64_t token_bytes() const {
    return static_cast<uint64_t>(packed_->layout.total_bytes * (routed_ ? k_used_ : 1));
  }

 private:
  int64_t F_ = 0, tile_rows_ = 256;
  const PackedMats* packed_ = nullptr;
  // One GEMM call of matrix `mat` over rows [2 t0, 2 t1) for `n` tokens into gu rows from `gu0`,
  // then each token's SwiGLU + Q8_K epilogue into y row out_row(i).
  template <class OutRow>
  void gemm_tile(int64_t mat, int64_t t0, int64_t t1, GemmCall c, int64_t gu0, const refexec::Tensor& y,
                 OutRow out_row) const;
  // The rows matrix `a` of the block list multiplies: expert active_[a]'s slots (routed), every
  // token of x (dense).
  Range rows_of(int64_t a, const refexec::Tensor& x) const;

  // gate_up_swiglu_id: slots grouped by expert, rebuilt by prepare().
  bool routed_ = false, batched_ = false;
  int64_t n_experts_ = 1, k_used_ = 1;
  ExpertSlots slots_;
  std::vector<int32_t> active_;  // experts with slots, by id

  std::shared_ptr<const Kernel> kernel_;
  std::shared_ptr<const Kernel> gemm_;  // batches; null when Q4_K has no GEMM kernel here
  GlueFn epilogue_ = nullptr;           // batches: SwiGLU + Q8_K over 256 outputs (null: reference)
  std::string kernel_name_;
  int64_t gu_at_ = 0, scratch_floats_ = 0;  // this batch's part of *gu_ (prepare)
  std::vector<float>* gu_ = nullptr;    // batch path: [T][2F] gate/up products (rows disjoint per thread)
};

}  // namespace zenmoe
