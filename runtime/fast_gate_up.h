// The fast executor's fused gate_up_swiglu node (ir/fusion.h): one pass over gate and up rows
// packed interleaved (kernels/pack.h pack_gate_up) by the kGateUpSwiglu kernel, which applies
// SwiGLU and quantises the result to Q8_K in its epilogue, so the two f32 products, the
// swiglu node and the quantize node of the unfused graph never touch memory. Batches run the
// GEMM kernel over the same interleaved rows (weights read once per tile, not per token) and
// apply SwiGLU and the Q8_K quantisation per block of 256 outputs with the generated SwiGLU
// glue kernel (Q8_K output; the reference numerics when the target is scalar), the numerics
// of the unfused swiglu and quantize nodes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/glue.h"
#include "codegen/kernel.h"
#include "ir/graph.h"
#include "kernels/status.h"
#include "runtime/compiled_model.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

class GateUpOp {
 public:
  // Node: gate_up_swiglu(w_gate, w_up, x) whose packed pair is in cm.packed
  // (gate_up_pack_name). `l2_bytes`: per-core L2 used for the batch tile. `scratch` holds the
  // batch path's gate/up products; one per executor, shared by its ops (they run one after
  // another), must outlive the op.
  static Expected<std::unique_ptr<GateUpOp>> create(const ir::Node& n, const ir::Graph& g, const CompiledModel& cm,
                                                    int64_t l2_bytes, std::vector<float>* scratch);
  // Serial part before the threads start: sizes the batch path's scratch for x's tokens.
  void prepare(const refexec::Tensor& x);
  // Thread `tid` of `nth` writes its blocks of 256 outputs for every token of x.
  void run(int tid, int nth, const refexec::Tensor& x, refexec::Tensor& y) const;
  const std::string& kernel_name() const { return kernel_name_; }

 private:
  int64_t F_ = 0, tile_rows_ = 256;
  const PackedMats* packed_ = nullptr;
  void run_gemm(int tid, int nth, const refexec::Tensor& x, refexec::Tensor& y) const;

  std::shared_ptr<const Kernel> kernel_;
  std::shared_ptr<const Kernel> gemm_;  // batches; null when Q4_K has no GEMM kernel here
  GlueFn epilogue_ = nullptr;           // batches: SwiGLU + Q8_K over 256 outputs (null: reference)
  std::string kernel_name_;
  std::vector<float>* gu_ = nullptr;    // batch path: [T][2F] gate/up products (rows disjoint per thread)
};

}  // namespace zenmoe
