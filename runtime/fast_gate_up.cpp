#include "runtime/fast_gate_up.h"

#include <algorithm>

#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "kernels/ref/quant.h"
#include "runtime/fast_glue.h"
#include "runtime/ref_executor_numerics.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

namespace {

// The kernel's epilogue quantises whole Q8_K blocks: work is split in units of 256 outputs.
constexpr int64_t kBlock = 256;

}  // namespace

Expected<std::unique_ptr<GateUpOp>> GateUpOp::create(const ir::Node& n, const ir::Graph& g, const CompiledModel& cm,
                                                     int64_t l2_bytes, std::vector<float>* scratch) {
  std::unique_ptr<GateUpOp> op(new GateUpOp());
  op->gu_ = scratch;
  const ir::Value& wg = g.values[static_cast<size_t>(n.inputs[0])];
  const std::string key = gate_up_pack_name(n, g);
  auto pit = cm.packed.find(key);
  if (pit == cm.packed.end() || pit->second.req.kind != PackKind::kGateUp)
    return Error{key + ": gate_up_swiglu needs the gate/up pair packed interleaved — recompile"};
  op->packed_ = &pit->second;
  op->F_ = wg.shape[1];
  op->routed_ = n.op == ir::OpKind::GateUpSwiGluId;
  if (op->routed_) {
    op->n_experts_ = wg.shape[2];
    op->k_used_ = g.values[static_cast<size_t>(n.inputs[3])].shape[0];
  }
  if (op->F_ % kBlock != 0) return Error{key + ": " + std::to_string(op->F_) + " outputs are not a multiple of 256"};
  KernelDesc d = default_gemv_desc(pit->second.req.packed, static_cast<int32_t>(wg.shape[0]), cm.target,
                                   KernelOp::kGateUpSwiglu);
  d.row_block = static_cast<uint16_t>(pit->second.req.row_block);
  isa::IsaLevel best = isa::IsaLevel::kScalar;
  for (isa::IsaLevel l : implemented_levels(d.weight))
    if (l <= cm.target.level && l >= isa::IsaLevel::kAvx512 && isa::host_supports(l)) best = std::max(best, l);
  d.isa = best;
  if (best == isa::IsaLevel::kScalar) d.prefetch = 0;
  auto k = global_registry().get(d);
  if (!k) return Error{key + ": " + k.error()};
  op->kernel_ = *k;
  op->kernel_name_ = canonical_name(d);
  for (isa::IsaLevel l : implemented_gemm_levels(d.weight)) {
    if (l > cm.target.level || !isa::host_supports(l) || l == isa::IsaLevel::kScalar) continue;
    KernelDesc gd = default_gemm_desc(d.weight, d.cols, {l, cm.target.tuning});
    if (gd.row_block != d.row_block) continue;
    if (auto gk = global_registry().get(gd)) {
      op->gemm_ = *gk;
      op->kernel_name_ += " + " + canonical_name(gd);
    }
  }
  if (op->gemm_ && cm.target.level != isa::IsaLevel::kScalar) {
    const GlueDesc e = glue_swiglu_desc(kBlock, false, GlueQuant::kQ8K, cm.target.level, glue_cpu_for(cm.target.tuning));
    auto fn = glue_kernel(e);
    if (!fn) return Error{key + ": " + fn.error()};
    op->epilogue_ = *fn;
    op->kernel_name_ += " + " + glue_name(e);
  }
  // A batch tile of outputs keeps its gate and up rows within half of L2 while every token
  // of the batch passes over them (as MatOp tiles plain matmuls); the tiling pass's annotation
  // when there is one. Work is split in blocks of 256 outputs whatever partition recorded.
  const int64_t bytes_per_out = 2 * pit->second.layout.group_stride / d.row_block;
  const int64_t fit = n.attr_int("tile_rows") > 0 ? n.attr_int("tile_rows")  // tiling pass
                      : std::max<int64_t>(1, l2_bytes / 2 / std::max<int64_t>(1, bytes_per_out));
  op->tile_rows_ = std::max(kBlock, fit / kBlock * kBlock);
  return op;
}

Status GateUpOp::prepare(const Tensor* ids, const Tensor& x, int64_t scratch_at) {
  int64_t rows = x.rows();
  if (routed_) {
    ZENMOE_RETURN_IF_ERROR(slots_.group(*ids, n_experts_, k_used_, false));
    rows = ids->numel();
    batched_ = gemm_ != nullptr && rows > k_used_;  // a batch: experts see several slots
    active_.clear();
    for (int64_t e = 0; e < n_experts_; ++e)
      if (slots_.expert_begin[static_cast<size_t>(e)] < slots_.expert_begin[static_cast<size_t>(e + 1)])
        active_.push_back(static_cast<int32_t>(e));
  }
  gu_at_ = scratch_at;
  scratch_floats_ = gemm_ && rows > 1 ? rows * 2 * F_ : 0;
  const auto n = static_cast<size_t>(gu_at_ + scratch_floats_);
  if (gu_->size() < n) gu_->resize(n);
  return Status::ok();
}

template <class OutRow>
void GateUpOp::gemm_tile(int64_t mat, int64_t t0, int64_t t1, GemmCall c, int64_t gu0, const Tensor& y,
                         OutRow out_row) const {
  float g[kBlock], u[kBlock];
  c.w = packed_->mat(mat);
  c.y = gu_->data() + gu_at_ + gu0 * 2 * F_;
  c.r0 = 2 * t0;
  c.r1 = 2 * t1;
  c.y_stride = 2 * F_;
  gemm_->gemm(c);
  for (int64_t t = 0; t < c.n; ++t)
    for (int64_t b = t0; b < t1; b += kBlock) {
      const float* gu = c.y + t * 2 * F_ + 2 * b;
      for (int64_t r = 0; r < kBlock; ++r) {
        g[r] = gu[2 * r];
        u[r] = gu[2 * r + 1];
      }
      uint8_t* q = y.data + out_row(t) * y.row_size() + (b / kBlock) * static_cast<int64_t>(sizeof(BlockQ8_K));
      if (epilogue_) {
        GlueCall e;
        e.x = g;
        e.x2 = u;
        e.q = q;
        e.n_rows = 1;
        epilogue_(&e);
        continue;
      }
      refexec::swiglu_ggml(g, u, g, kBlock);
      ref::quantize_row(GgmlType::Q8_K, g, q, kBlock);
    }
}

int64_t GateUpOp::blocks() const { return (routed_ ? static_cast<int64_t>(active_.size()) : 1) * (F_ / kBlock); }

Range GateUpOp::rows_of(int64_t a, const Tensor& x) const {
  if (!routed_) return {0, x.rows()};
  const auto e = static_cast<size_t>(active_[static_cast<size_t>(a)]);
  return {slots_.expert_begin[e], slots_.expert_begin[e + 1]};
}

int64_t GateUpOp::block_cost(int64_t b, const Tensor& x) const {
  const Range r = rows_of(b / (F_ / kBlock), x);
  return r.end - r.begin + kBlockReadCost;
}

// The routed list is the picked experts' blocks, expert after expert. Dealt out to the threads
// by cost, every thread has work even when an expert has fewer blocks than there are threads
// (Kimi-K2's 2048 outputs are 8 blocks, against 16 cores on the target machines), and each
// run of blocks a thread claims within one expert (or the dense matrix) is one run of rows
// (the executor's WorkQueue; run_end() bounds a claim): through the GEMM,
// tile by tile, for gemm_min_tokens rows or more (the GEMM writes gate/up products interleaved
// into the scratch, routed slots by index in slot order; then each block of 256 outputs is split
// into gate and up, passed through SwiGLU and quantised to Q8_K), else the fused kernel's call
// over all the rows, a tile at a time (passes of up to 4 tokens over the weights where the
// kernel has them, else one fused GEMV per row). Each block is computed whole by one thread
// with the same kernel, so the outputs do not depend on the thread count.
void GateUpOp::run_blocks(int64_t b0, int64_t b1, const Tensor& x, Tensor& y) const {
  const int64_t per = F_ / kBlock;
  for (int64_t u = b0; u < b1;) {
    const int64_t a = u / per, end = std::min((a + 1) * per, b1);
    const int64_t r1 = (end - a * per) * kBlock;
    const int64_t e = routed_ ? active_[static_cast<size_t>(a)] : 0;
    const Range rows = rows_of(a, x);
    const int64_t s0 = rows.begin, s1 = rows.end;
    // Tiles keep rows in L2 for the next token; a single token takes the run in one call.
    const int64_t tile = s1 - s0 > 1 ? tile_rows_ : r1;
    for (int64_t t0 = (u - a * per) * kBlock; t0 < r1; t0 += tile) {
      const int64_t t1 = std::min(r1, t0 + tile);
      if (gemm_ && (!routed_ || batched_) && s1 - s0 >= gemm_min_tokens(*kernel_)) {
        GemmCall c;
        c.x = x.cdata;
        c.x_stride = x.row_size();
        c.n = s1 - s0;
        if (!routed_) {
          gemm_tile(0, t0, t1, c, 0, y, [](int64_t t) { return t; });
          continue;
        }
        c.x_rows = slots_.x_rows.data() + s0;
        gemm_tile(e, t0, t1, c, s0, y, [&](int64_t t) { return slots_.slot_order[static_cast<size_t>(s0 + t)]; });
        continue;
      }
      GemmCall c;
      c.w = packed_->mat(e);
      c.x = x.cdata;
      c.x_stride = x.row_size();
      c.n = s1 - s0;
      c.r0 = t0;
      c.r1 = t1;
      c.q8_out = y.data;
      c.q8_stride = y.row_size();
      if (routed_) {
        c.x_rows = slots_.x_rows.data() + s0;
        c.y_rows = slots_.slot_order.data() + s0;
      }
      kernel_->gemm(c);
    }
    u = end;
  }
}

int64_t GateUpOp::run_end(int64_t b) const {
  const int64_t per = F_ / kBlock;
  return std::min(blocks(), (b / per + 1) * per);
}

void cost_shares(int64_t n, const std::function<int64_t(int64_t)>& cost, int nth, std::vector<Range>& out) {
  out.assign(static_cast<size_t>(nth), Range{n, n});
  int64_t total = 0;
  for (int64_t b = 0; b < n; ++b) total += cost(b);
  if (total <= 0) {
    for (int t = 0; t < nth; ++t) out[static_cast<size_t>(t)] = split_range(n, nth, t);
    return;
  }
  // Block b goes to the thread whose even share of the total cost holds its middle; owners
  // never decrease, so thread t starts at the first block owned by t or a later thread.
  int next = 0;  // the first thread whose start is not found yet
  int64_t cum = 0;
  for (int64_t b = 0; b < n && next < nth; ++b) {
    const int64_t c = cost(b);
    const auto owner = static_cast<int>((2 * cum + c) * nth / (2 * total));
    while (next <= owner && next < nth) out[static_cast<size_t>(next++)].begin = b;
    cum += c;
  }
  for (int t = 0; t + 1 < nth; ++t) out[static_cast<size_t>(t)].end = out[static_cast<size_t>(t) + 1].begin;
}

}  // namespace zenmoe
