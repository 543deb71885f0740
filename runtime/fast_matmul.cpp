#include "runtime/fast_matmul.h"

#include <algorithm>
#include <cstring>

#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "kernels/ref/quant.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

Expected<std::unique_ptr<MatOp>> MatOp::create(const ir::Node& n, const ir::Graph& g, const CompiledModel& cm,
                                               const TileBudget& tiles) {
  std::unique_ptr<MatOp> op(new MatOp());
  const ir::Value& w = g.values[static_cast<size_t>(n.inputs[0])];
  op->by_expert_ = n.op == ir::OpKind::MatMulId || n.op == ir::OpKind::MatMulIdSum;
  op->accumulate_ = n.op == ir::OpKind::MatMulAdd;  // y already holds the accumulator
  op->sum_ = n.op == ir::OpKind::MatMulIdSum;
  const bool acc_kernel = op->accumulate_ || op->sum_;
  op->K_ = w.shape[0];
  op->N_ = w.shape[1];
  op->n_mats_ = w.shape.size() == 3 ? w.shape[2] : 1;
  if (op->by_expert_) {
    const ir::Value& x = g.values[static_cast<size_t>(n.inputs[1])];
    op->per_slot_x_ = x.shape.size() == 3;
    op->k_used_ = g.values[static_cast<size_t>(n.inputs[2])].shape[0];
  }
  auto pit = cm.packed.find(w.name);
  int64_t row_bytes_streamed = 0;
  if (pit != cm.packed.end()) {
    op->packed_ = &pit->second;
    KernelDesc d = default_gemv_desc(pit->second.req.packed, static_cast<int32_t>(op->K_), cm.target,
                                     acc_kernel ? KernelOp::kGemvAccumulate : KernelOp::kGemv);
    // The packed layout fixed the row block and the level whose kernel exists for the format.
    d.row_block = static_cast<uint16_t>(pit->second.req.row_block);
    isa::IsaLevel best = isa::IsaLevel::kScalar;
    for (isa::IsaLevel l : implemented_levels(d.weight))
      if (l <= cm.target.level && isa::host_supports(l)) best = std::max(best, l);
    d.isa = best;
    d.gfni = cm.target.gfni && gfni_kernel(d.weight, best, d.op);
    if (best == isa::IsaLevel::kScalar) d.prefetch = 0;
    // A matrix too small to give each stream 64 KiB is walked as one stream: the per-head
    // matrices of the absorbed attention (attn_k_b, attn_v_b; 37-45 KB per head in the bench
    // preset and in Kimi-K2), which decode reads one call per head, each stream starting cold.
    // On a Zen 4 host (bench model --profile-nodes, bench preset, three runs each way in turn):
    // matmul:q_lat (Q5_0, 4 streams before) 14.0-19.0 -> 19.7-21.0 GB/s and matmul:o_heads (Q4_K,
    // 2 streams before) 19.6-20.8 -> 25.0-25.5 at 1 thread; 21.4-24.1 -> 25.7-27.2 and
    // 30.5-34.6 -> 39.4-39.5 at 2 threads.
    if (d.streams > 1 && pit->second.layout.total_bytes < kMinStreamBytes * d.streams) d.streams = 1;
    auto k = global_registry().get(d);
    if (!k) return Error{w.name + ": " + k.error()};
    op->kernel_ = *k;
    op->kernel_name_ = canonical_name(d);
    // The GEMM kernel over the same packed bytes, when one exists for this format and level.
    for (isa::IsaLevel l : implemented_gemm_levels(d.weight)) {
      if (l > cm.target.level || !isa::host_supports(l) || l == isa::IsaLevel::kScalar) continue;
      KernelDesc gd = default_gemm_desc(d.weight, d.cols, {l, cm.target.tuning, cm.target.gfni},
                                        acc_kernel ? KernelOp::kGemmAccumulate : KernelOp::kGemm);
      if (gd.row_block != d.row_block) continue;
      auto gk = global_registry().get(gd);
      if (gk) {
        op->gemm_ = *gk;
        op->kernel_name_ += " + " + canonical_name(gd);
      }
    }
    op->row_block_ = d.row_block;
    row_bytes_streamed = pit->second.layout.group_stride / d.row_block;
  } else {
    auto rit = cm.raw.find(w.name);
    if (rit == cm.raw.end()) return Error{"no data for weight '" + w.name + "'"};
    op->raw_type_ = w.type;
    op->raw_ = static_cast<const uint8_t*>(rit->second.data);
    op->raw_row_ = row_bytes(w.type, op->K_);
    op->kernel_name_ = std::string("reference ") + type_name(w.type);
    op->row_block_ = 1;
    row_bytes_streamed = op->raw_row_;
  }
  // Split unit and tile from the partition and tiling passes when they fit this kernel; else a
  // tile of rows fills half of L2 so its weights stay there while a batch's rows pass.
  if (const int64_t u = n.attr_int("row_block"); u > 0 && u % op->row_block_ == 0) op->row_block_ = u;
  const int64_t fit = n.attr_int("tile_rows") > 0 ? n.attr_int("tile_rows")
                      : std::max<int64_t>(1, tiles.l2_bytes / 2 / std::max<int64_t>(1, row_bytes_streamed));
  op->tile_rows_ = std::max(op->row_block_, fit / op->row_block_ * op->row_block_);
  return op;
}

uint64_t MatOp::token_bytes() const {
  const int64_t per_mat = packed_ ? packed_->layout.total_bytes : raw_row_ * N_;
  return static_cast<uint64_t>(per_mat * (by_expert_ ? k_used_ : n_mats_));
}

bool MatOp::decode_share(int tid, int nth, std::vector<std::pair<const uint8_t*, int64_t>>& out) const {
  if (by_expert_ || packed_ == nullptr) return false;
  const auto stride = static_cast<int64_t>(packed_->req.mat_stride);
  if (heads_per_thread(1, nth)) {
    const Range hr = split_range(n_mats_, nth, tid, 1);
    if (hr.begin < hr.end)
      out.emplace_back(packed_->mat(hr.begin), (hr.end - hr.begin - 1) * stride + packed_->layout.total_bytes);
    return true;
  }
  const Range rr = split_range(N_, nth, tid, row_block_);
  if (rr.begin >= rr.end) return true;
  const int64_t rb = packed_->layout.row_block, gs = packed_->layout.group_stride;
  const int64_t g0 = rr.begin / rb, g1 = (rr.end + rb - 1) / rb;
  for (int64_t m = 0; m < n_mats_; ++m) out.emplace_back(packed_->mat(m) + g0 * gs, (g1 - g0) * gs);
  return true;
}

Status ExpertSlots::group(const Tensor& ids, int64_t n_experts, int64_t k_used, bool per_slot_x) {
  const int64_t slots = ids.numel();
  expert_begin.assign(static_cast<size_t>(n_experts + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = ids.ci32()[s];
    if (e < 0 || e >= n_experts) return Error{"expert id " + std::to_string(e) + " out of range"};
    ++expert_begin[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) expert_begin[static_cast<size_t>(e + 1)] += expert_begin[static_cast<size_t>(e)];
  slot_order.assign(static_cast<size_t>(slots), 0);
  x_rows.resize(static_cast<size_t>(slots));
  std::vector<int64_t> fill(expert_begin.begin(), expert_begin.end() - 1);
  for (int64_t s = 0; s < slots; ++s) {
    const auto i = static_cast<size_t>(fill[static_cast<size_t>(ids.ci32()[s])]++);
    slot_order[i] = static_cast<int32_t>(s);
    x_rows[i] = static_cast<int32_t>(per_slot_x ? s : s / k_used);
  }
  return Status::ok();
}

Status MatOp::prepare(const Tensor* ids, const Tensor* weights, const Tensor& x) {
  if (accumulate_ && ones_.size() < static_cast<size_t>(x.rows())) ones_.assign(static_cast<size_t>(x.rows()), 1.0f);
  if (!by_expert_) return Status::ok();
  ZENMOE_RETURN_IF_ERROR(slots_.group(*ids, n_mats_, k_used_, per_slot_x_));
  const int64_t slots = ids->numel();
  if (sum_) {
    slot_weight_.resize(static_cast<size_t>(slots));
    token_rows_.resize(static_cast<size_t>(slots));
    for (int64_t i = 0; i < slots; ++i) {
      const int32_t slot = slots_.slot_order[static_cast<size_t>(i)];
      slot_weight_[static_cast<size_t>(i)] = weights->cf32()[slot];
      token_rows_[static_cast<size_t>(i)] = slot / static_cast<int32_t>(k_used_);
    }
  }
  return Status::ok();
}

// Rows [r0, r1) of matrix `mat` for the tokens of `c` (x, y, n, strides, row indices set),
// through `k`: the GEMM, or the GEMV kernel's call over several tokens.
void MatOp::gemm(const Kernel& k, int64_t mat, int64_t r0, int64_t r1, GemmCall c) const {
  c.w = packed_->mat(mat);
  c.r0 = r0;
  c.r1 = r1;
  if (accumulate_) c.alpha = ones_.data();  // sized by prepare()
  k.gemm(c);
}

// The kernel for `tokens` tokens over packed weights: the GEMM from gemm_min_tokens on, else
// the GEMV kernel, whose call over several tokens reads each weight once for all of them
// where the format has that form (the Q4_K and Q6_K kernels from AVX-512 VNNI up) and runs
// one GEMV per token otherwise.
const Kernel& MatOp::kernel_for(int64_t tokens) const {
  return gemm_ && tokens >= gemm_min_tokens(*kernel_) ? *gemm_ : *kernel_;
}

// Each expert's slots, a tile of the thread's rows at a time, reading their activation rows
// and writing their output rows in place (slots_).
void MatOp::run_experts(int tid, int nth, const Tensor& x, Tensor& y) const {
  const Range rr = split_range(N_, nth, tid, row_block_);
  if (rr.begin >= rr.end) return;
  for (int64_t e = 0; e < n_mats_; ++e) {
    const int64_t s0 = slots_.expert_begin[static_cast<size_t>(e)], s1 = slots_.expert_begin[static_cast<size_t>(e + 1)];
    if (s0 == s1) continue;
    if (!kernel_) {
      expert_reference(e, s0, s1, rr, x, y);
      continue;
    }
    GemmCall c;
    c.x = x.cdata;
    c.x_stride = x.row_size();
    c.x_rows = slots_.x_rows.data() + s0;
    c.y = y.f32();
    c.y_stride = N_;
    c.y_rows = (sum_ ? token_rows_ : slots_.slot_order).data() + s0;
    if (sum_) c.alpha = slot_weight_.data() + s0;
    c.n = s1 - s0;
    const Kernel& k = kernel_for(c.n);
    const int64_t tile = tile_for(c.n, rr);
    for (int64_t t0 = rr.begin; t0 < rr.end; t0 += tile) gemm(k, e, t0, std::min(rr.end, t0 + tile), c);
  }
}

void MatOp::rows(int64_t mat, int64_t r0, int64_t r1, const uint8_t* x, float* y, float alpha) const {
  if (kernel_) {
    GemvCall c;
    c.w = packed_->mat(mat);
    c.x = x;
    c.y = y;
    c.r0 = r0;
    c.r1 = r1;
    c.alpha = alpha;
    (*kernel_)(c);
    return;
  }
  const uint8_t* w = raw_ + static_cast<uint64_t>(mat) * static_cast<uint64_t>(N_ * raw_row_);
  for (int64_t r = r0; r < r1; ++r) {
    const float dot = ref::vec_dot_row(raw_type_, w + r * raw_row_, x, K_);
    y[r] = accumulate_ || sum_ ? y[r] + alpha * dot : dot;
  }
}

void MatOp::zero_rows(int tid, int nth, Tensor& y) const {
  const Range rr = split_range(N_, nth, tid, row_block_);
  if (rr.begin >= rr.end) return;
  for (int64_t t = 0; t < y.rows(); ++t)
    std::fill(y.f32() + t * N_ + rr.begin, y.f32() + t * N_ + rr.end, 0.0f);
}

// Column c of x multiplies matrix c % n_mats (one matrix, or one per head of a 3-D weight).
void MatOp::run_dense(int tid, int nth, const Tensor& x, Tensor& y) const {
  const int64_t cols = x.rows(), xrb = x.row_size();
  const int64_t per_mat = cols / n_mats_;
  if (heads_per_thread(per_mat, nth)) {
    // One column per head (decode): whole heads per thread, one kernel call each, instead of
    // every thread taking a slice of every head.
    const Range hr = split_range(n_mats_, nth, tid, 1);
    for (int64_t m = hr.begin; m < hr.end; ++m) rows(m, 0, N_, x.cdata + m * xrb, y.f32() + m * N_);
    return;
  }
  const Range rr = split_range(N_, nth, tid, row_block_);
  const int64_t tile = tile_for(per_mat, rr);
  for (int64_t m = 0; m < n_mats_; ++m)
    for (int64_t t0 = rr.begin; t0 < rr.end; t0 += tile) {
      const int64_t t1 = std::min(rr.end, t0 + tile);
      if (kernel_ && per_mat > 1) {
        GemmCall c;
        c.x = x.cdata + m * xrb;
        c.x_stride = n_mats_ * xrb;
        c.y = y.f32() + m * N_;
        c.y_stride = n_mats_ * N_;
        c.n = per_mat;
        gemm(kernel_for(per_mat), m, t0, t1, c);
        continue;
      }
      for (int64_t c = m; c < cols; c += n_mats_) rows(m, t0, t1, x.cdata + c * xrb, y.f32() + c * N_);
    }
}

// Unpacked weights (the reference dot product): one slot at a time, a tile of rows for all
// of the expert's slots before the next.
void MatOp::expert_reference(int64_t e, int64_t s0, int64_t s1, Range rr, const Tensor& x, Tensor& y) const {
  const int64_t xrb = x.row_size();
  const int64_t tile = tile_for(s1 - s0, rr);
  for (int64_t t0 = rr.begin; t0 < rr.end; t0 += tile) {
    const int64_t t1 = std::min(rr.end, t0 + tile);
    for (int64_t i = s0; i < s1; ++i) {
      const int64_t slot = slots_.slot_order[static_cast<size_t>(i)];
      const int64_t xr = slots_.x_rows[static_cast<size_t>(i)];
      if (sum_)
        rows(e, t0, t1, x.cdata + xr * xrb, y.f32() + slot / k_used_ * N_, slot_weight_[static_cast<size_t>(i)]);
      else
        rows(e, t0, t1, x.cdata + xr * xrb, y.f32() + slot * N_);
    }
  }
}

void MatOp::run(int tid, int nth, const Tensor& x, Tensor& y) const {
  if (sum_) zero_rows(tid, nth, y);
  if (by_expert_)
    run_experts(tid, nth, x, y);
  else
    run_dense(tid, nth, x, y);
}

}  // namespace zenmoe
