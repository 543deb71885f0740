#include "runtime/fast_attention.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/ref/fp16.h"
#include "kernels/ref/ops.h"
#include "runtime/attn_amx.h"
#include "runtime/kv_bf16.h"
#include "runtime/kv_f16.h"
#include "runtime/kv_q8.h"
#include "runtime/ref_executor_numerics.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

namespace {

constexpr int64_t kBlockRows = 64;  // query rows per SGEMM pair
// Q8_0 cache: query rows per SGEMM pair. Every block widens all the rows it sees, so larger
// blocks widen less often (scores scratch: 256 x positions floats per thread).
constexpr int64_t kQ8BlockRows = 256;

// Query rows [i0, i1) as [q_lat | q_pe] rows, contiguous in q.
void gather_queries(const Tensor& q_lat, const Tensor& q_pe, int64_t i0, int64_t i1, float* q) {
  const int64_t R = q_lat.ne[0], r = q_pe.ne[0];
  for (int64_t i = i0; i < i1; ++i, q += R + r) {
    std::memcpy(q, q_lat.cf32() + i * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(q + R, q_pe.cf32() + i * r, static_cast<size_t>(r) * sizeof(float));
  }
}

}  // namespace

void side_ranges_within(const std::vector<int64_t>& ranges, int64_t budget, std::vector<int64_t>& out) {
  out.clear();
  for (size_t r = 0; r + 1 < ranges.size() && budget > 0; r += 2) {
    out.push_back(ranges[r]);
    out.push_back(std::min(ranges[r + 1], budget));
    budget -= ranges[r + 1];
  }
}

void single_threaded_blas() {
  // oneDNN threads its GEMM with OpenMP; each pool thread calls it on its own rows, so its
  // OpenMP team size is set to 1 for this thread. Looked up at run time: the OpenMP runtime is
  // oneDNN's own dependency, not ours.
  thread_local bool done = false;
  if (done) return;
  done = true;
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) fn(1);
}

Expected<std::unique_ptr<MlaOp>> MlaOp::create(const ir::Node& n, const ir::Graph& g, isa::Target target,
                                               KvCacheType kv, int threads) {
  std::unique_ptr<MlaOp> op(new MlaOp());
  op->scale_ = n.attr_float("scale");
  op->kv_ = kv;
  op->avx512_ = target.level >= isa::IsaLevel::kAvx512;
  const auto R = static_cast<int32_t>(g.values[static_cast<size_t>(n.inputs[0])].shape[0]);
  const auto r = static_cast<int32_t>(g.values[static_cast<size_t>(n.inputs[1])].shape[0]);
  op->R_ = R;
  op->W_ = R + r;
  op->amx_ = target.level >= isa::IsaLevel::kAmx && isa::host_supports(isa::IsaLevel::kAmx) &&
             (kv == KvCacheType::F16 || kv == KvCacheType::BF16) && amx_attend_fits(R + r, R);
  op->H_ = g.values[static_cast<size_t>(n.inputs[0])].shape[1];
  if (kv == KvCacheType::Q8_0 && (R + r) % kQK != 0)
    return Error{"a q8_0 KV cache needs a latent row width that is a multiple of 32, got " +
                 std::to_string(R + r)};
  if (target.level < isa::IsaLevel::kAvx512) return op;
  const GlueCpu cpu = target.tuning == isa::Tuning::kZen5   ? GlueCpu::kZnver5
                      : target.tuning == isa::Tuning::kZen4 ? GlueCpu::kZnver4
                                                             : GlueCpu::kHost;
  auto sm = glue_kernel(glue_softmax_desc(op->scale_, target.level, cpu));
  if (!sm) return Error{sm.error()};
  op->softmax_ = *sm;
  const uint8_t kv_code = kv == KvCacheType::F32 ? 0 : kv == KvCacheType::F16 ? 1 : kv == KvCacheType::BF16 ? 2 : 3;
  const int64_t share = (op->H_ + std::max(threads, 1) - 1) / std::max(threads, 1);
  const int64_t share_lanes = (share + 15) / 16 * 16;
  std::vector<int64_t> layouts = {op->H_};
  if (share_lanes < op->H_) layouts.insert(layouts.begin(), share_lanes);  // fewer vectors than all heads
  for (int64_t heads : layouts) {
    const GlueDesc ad =
        glue_attn_decode_desc(static_cast<int32_t>(heads), R + r, R, kv_code, op->scale_, target.level, cpu);
    auto at = glue_kernel(ad);
    if (!at) return Error{at.error()};
    op->bf16_pairs_ = glue_attn_bf16_dot(ad);
    op->q8_scores_ = glue_attn_q8_dot(ad);
    op->attn_.push_back({*at, glue_attn_layout(ad)});
  }
  return op;
}

// Rows [i0, i1) of a decode-sized batch, one token's heads at a time, each over the cache rows
// its token sees.
void MlaOp::run_decode(int64_t i0, int64_t i1, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc,
                       const int64_t* row0) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  for (int64_t i = i0; i < i1;) {
    const int64_t t = i / H_, end = std::min(i1, (t + 1) * H_), m = end - i;
    sc.q.resize(static_cast<size_t>(m * W_));
    gather_queries(q_lat, q_pe, i, end, sc.q.data());
    decode_rows(m, row0 != nullptr ? row0[t] : 0, static_cast<int64_t>(pos.ci32()[t]) + 1, cache, y.f32() + i * R_, sc);
    i = end;
  }
}

// Every cache type: the generated heads-in-lanes kernel (GlueOp::kAttnDecode: one pass over the
// rows, each tile widened to F32 once for all heads, online softmax; BF16 rows on AVX512_BF16
// targets multiplied in bf16 pairs instead).
void MlaOp::decode_rows(int64_t m, int64_t j0, int64_t n, const Tensor& cache, float* y, AttentionScratch& sc,
                        float* smax, float* inv) const {
  if (amx_) {
    const auto work = static_cast<size_t>(amx_attend_scratch_floats(m, W_, R_));
    if (sc.flash.size() < work) sc.flash.resize(work);
    const AmxAttnCall c{.q = sc.q.data(),
                        .m = m,
                        .rows = cache.cdata + j0 * cache.row_size(),
                        .stride = cache.row_size(),
                        .n = n,
                        .W = W_,
                        .R = R_,
                        .scale = scale_,
                        .f16 = kv_ == KvCacheType::F16,
                        .y = y,
                        .smax = smax,
                        .inv = inv,
                        .side = sc.side,
                        .side_ranges = sc.side_ranges};
    sc.side = nullptr;
    sc.side_ranges = 0;
    amx_attend(c, sc.flash.data());
    return;
  }
  const AttnKernel* kern = &attn_.back();
  for (const AttnKernel& a : attn_)
    if (a.layout.lanes >= m) {
      kern = &a;
      break;
    }
  const GlueAttnLayout& layout = kern->layout;
  const auto work = static_cast<size_t>(layout.floats);
  if (sc.flash.size() < work) sc.flash.resize(work);
  const GlueCall c{.x = sc.q.data(),
                   .x2 = reinterpret_cast<const float*>(cache.cdata + j0 * cache.row_size()),
                   .w = reinterpret_cast<const float*>(sc.side),
                   .y = y,
                   .q = sc.flash.data(),
                   .n_rows = m,
                   .stride = cache.row_size(),
                   .n = n,
                   .n_visible = sc.side_ranges};
  sc.side = nullptr;
  sc.side_ranges = 0;
  kern->fn(&c);
  const float* stats = sc.flash.data() + layout.stats;
  if (smax != nullptr) std::copy(stats, stats + m, smax);
  if (inv != nullptr) std::copy(stats + 2 * layout.lanes, stats + 2 * layout.lanes + m, inv);
}

bool MlaOp::prepare_split(int64_t T, int nth, const Tensor& pos, int64_t min_rows) const {
  if (T != 1 || nth < 2 || sgemm_batch(T) || !(scale_ > 0.0f)) return false;
  const int64_t rows = static_cast<int64_t>(pos.ci32()[0]) + 1, vectors = (H_ + 15) / 16;
  if (min_rows <= 0) min_rows = H_ % (16 * nth) == 0 ? kMlaSplitMinRowsWhole : kMlaSplitMinRows;
  const int64_t shares = std::min<int64_t>(nth / vectors, rows / min_rows);  // per vector
  if (rows >= min_rows * nth) {  // every thread all heads over its positions
    split_heads_ = H_;
    split_shares_ = nth;
  } else if (shares >= 2) {  // every thread one vector of heads over its positions
    split_heads_ = 16;
    split_shares_ = shares;
  } else {
    return false;
  }
  part_y_.resize(static_cast<size_t>(split_shares_ * H_ * R_));
  part_max_.resize(static_cast<size_t>(split_shares_ * H_));
  part_inv_.resize(static_cast<size_t>(split_shares_ * H_));
  return true;
}

void MlaOp::run_part(int tid, std::span<Tensor* const> in, AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t p = tid % split_shares_, h0 = tid / split_shares_ * split_heads_;
  if (h0 >= H_) return;  // more threads than groups times shares
  const int64_t m = std::min(H_, h0 + split_heads_) - h0, at = p * H_ + h0;
  const Range share = split_range(static_cast<int64_t>(pos.ci32()[0]) + 1, static_cast<int>(split_shares_), static_cast<int>(p));
  float* inv = part_inv_.data() + at;
  if (share.begin >= share.end) {
    std::fill(inv, inv + m, 0.0f);
    return;
  }
  sc.q.resize(static_cast<size_t>(m * W_));
  gather_queries(q_lat, q_pe, h0, h0 + m, sc.q.data());
  decode_rows(m, share.begin, share.end - share.begin, cache, part_y_.data() + at * R_, sc, part_max_.data() + at, inv);
}

// Share j of head h holds its values normalised by its own softmax sum l_j = 1 / inv_j after
// subtracting its own maximum m_j; over all shares the head's softmax weighs share j by
// l_j * exp(m_j - M) / sum_k l_k * exp(m_k - M), M the largest m_j.
void MlaOp::merge(int tid, int nth, Tensor& y) const {
  const Range heads = split_range(H_, nth, tid);
  const int64_t shares = split_shares_;
  for (int64_t h = heads.begin; h < heads.end; ++h) {
    float M = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < shares; ++j)
      if (part_inv_[static_cast<size_t>(j * H_ + h)] > 0.0f) M = std::max(M, part_max_[static_cast<size_t>(j * H_ + h)]);
    auto weight = [&](int64_t j) {
      const float inv = part_inv_[static_cast<size_t>(j * H_ + h)];
      return inv > 0.0f ? std::exp(part_max_[static_cast<size_t>(j * H_ + h)] - M) / inv : 0.0f;
    };
    float total = 0.0f;
    for (int64_t j = 0; j < shares; ++j) total += weight(j);
    float* out = y.f32() + h * R_;
    std::fill(out, out + R_, 0.0f);
    for (int64_t j = 0; j < shares; ++j) {
      const float w = weight(j) / total;
      if (w == 0.0f) continue;
      const float* part = part_y_.data() + (j * H_ + h) * R_;
      for (int64_t i = 0; i < R_; ++i) out[i] += w * part[i];
    }
  }
}

void MlaOp::store(std::span<Tensor* const> in, const int64_t* row0) const {
  const Tensor &c = *in[2], &k_pe = *in[3], &pos = *in[5];
  Tensor& cache = *in[4];
  const int64_t R = c.ne[0], r = k_pe.ne[0], W = R + r, T = pos.ne[0];
  for (int64_t t = 0; t < T; ++t) kept_ = std::min<int64_t>(kept_, pos.ci32()[t]);  // rewritten: no longer kept
  if (row0 != nullptr) kept_ = 0;  // kept keys and values belong to one sequence
  std::vector<float> row;  // Q8_0: one [c | k_pe] row before quantisation
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos.ci32()[t] + (row0 != nullptr ? row0[t] : 0);
    if (kv_ == KvCacheType::Q8_0) {
      row.resize(static_cast<size_t>(W));
      std::memcpy(row.data(), c.cf32() + t * R, static_cast<size_t>(R) * sizeof(float));
      std::memcpy(row.data() + R, k_pe.cf32() + t * r, static_cast<size_t>(r) * sizeof(float));
      kv_q8_0_store_row(row.data(), cache.data + p * cache.row_size(), W);
      continue;
    }
    if (kv_ == KvCacheType::F16) {
      auto* h = reinterpret_cast<f16_t*>(cache.data) + p * W;
      kv_f16_round_row(c.cf32() + t * R, h, R, avx512_);
      kv_f16_round_row(k_pe.cf32() + t * r, h + R, r, avx512_);
      continue;
    }
    if (kv_ == KvCacheType::BF16) {
      auto* h = reinterpret_cast<bf16_t*>(cache.data) + p * W;
      kv_bf16_round_row(c.cf32() + t * R, h, R, avx512_);
      kv_bf16_round_row(k_pe.cf32() + t * r, h + R, r, avx512_);
      continue;
    }
    float* f = cache.f32() + p * W;
    std::memcpy(f, c.cf32() + t * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(f + R, k_pe.cf32() + t * r, static_cast<size_t>(r) * sizeof(float));
  }
  // Without the F16 / BF16 kernels every batch runs the SGEMM pair, which reads F32 rows: an F32
  // copy of the stored rows is kept up to date, each row widened once when it is stored.
  if (sgemm_batch(T) && row0 == nullptr)
    for (int64_t t = 0; t < T; ++t) widen_copy(cache, pos.ci32()[t], pos.ci32()[t] + 1);
}

void MlaOp::widen_copy(const Tensor& cache, int64_t p0, int64_t p1) const {
  if (kv_ != KvCacheType::F16 && kv_ != KvCacheType::BF16) return;
  const int64_t W = W_;
  if (widened_.size() < static_cast<size_t>(p1 * W)) widened_.resize(static_cast<size_t>(p1 * W));
  for (int64_t p = p0; p < p1; ++p) {
    float* dst = widened_.data() + p * W;
    if (kv_ == KvCacheType::F16)
      kv_f16_widen_row(reinterpret_cast<const f16_t*>(cache.cdata) + p * W, dst, W, avx512_);
    else
      ref::bf16_to_fp32_row(reinterpret_cast<const bf16_t*>(cache.cdata) + p * W, dst, W);
  }
}

void MlaOp::rows_replaced(const Tensor& cache, int64_t from, int64_t to) const {
  kept_ = std::min(kept_, from);
  if (sgemm_batch(1)) widen_copy(cache, from, to);
}

void MlaOp::softmax_rows(float* s, int64_t rows, int64_t stride, int64_t vis) const {
  if (softmax_ == nullptr) {
    for (int64_t k = 0; k < rows; ++k) {
      refexec::softmax_ggml(s + k * stride, s + k * stride, vis, scale_);
      std::fill(s + k * stride + vis, s + (k + 1) * stride, 0.0f);
    }
    return;
  }
  // In place; entries past vis become exact zeros.
  GlueCall c{.x = s, .y = s, .n_rows = rows, .stride = stride, .n = stride, .n_visible = vis};
  softmax_(&c);
}

void MlaOp::causal_softmax(float* s, int64_t i0, int64_t i1, int64_t n_vis, int64_t H, const Tensor& pos) const {
  for (int64_t i = i0; i < i1;) {  // the rows of one token share their visible length
    const int64_t end = std::min(i1, (i / H + 1) * H);
    softmax_rows(s + (i - i0) * n_vis, end - i, n_vis, static_cast<int64_t>(pos.ci32()[i / H]) + 1);
    i = end;
  }
}

const float* MlaOp::f32_cache(const Tensor& cache) const {
  return kv_ == KvCacheType::F16 || kv_ == KvCacheType::BF16 ? widened_.data() : cache.cf32();
}

bool MlaOp::sgemm_batch(int64_t T) const {
  // BF16 and F16 rows: the decode kernels, token by token over the rows each token sees (the
  // causal half only), keep up with or beat the SGEMM pair, which would first widen every
  // visible row to F32 again for each prompt chunk.
  if (kv_ == KvCacheType::BF16 || kv_ == KvCacheType::F16) return !avx512_;
  if (T > kMlaGlueMaxTokens) return true;
  return !avx512_;
}

// Rows (token t, head h) = t * H + h split so that every thread gets the same causal work:
// row i costs the positions its token sees, pos[t] + 1 (later tokens of a prompt see more).
static Range causal_rows(const Tensor& pos, int64_t T, int64_t H, int nth, int tid) {
  double total = 0;
  for (int64_t t = 0; t < T; ++t) total += (static_cast<double>(pos.ci32()[t]) + 1) * static_cast<double>(H);
  auto boundary = [&](int k) -> int64_t {
    if (k <= 0) return 0;
    if (k >= nth) return T * H;
    const double target = total * k / nth;
    double cum = 0;
    for (int64_t t = 0; t < T; ++t) {
      const double w = static_cast<double>(pos.ci32()[t]) + 1;
      if (cum + w * static_cast<double>(H) >= target)
        return t * H + std::min<int64_t>(H, static_cast<int64_t>(std::ceil((target - cum) / w)));
      cum += w * static_cast<double>(H);
    }
    return T * H;
  };
  return {boundary(tid), boundary(tid + 1)};
}

void MlaOp::run(int tid, int nth, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc,
                const int64_t* row0) const {
  const int64_t H = in[0]->ne[1], T = in[0]->ne[2];
  if (row0 != nullptr) {  // each token over its own sequence's rows, shares by the rows they see
    const Range rows = causal_rows(*in[5], T, H, nth, tid);
    if (rows.begin < rows.end) run_decode(rows.begin, rows.end, in, y, sc, row0);
    return;
  }
  // Decode-sized batches split rows evenly; prompt batches by causal work.
  const Range rows = T <= kMlaGlueMaxTokens ? split_range(T * H, nth, tid) : causal_rows(*in[5], T, H, nth, tid);
  if (rows.begin >= rows.end) return;
  if (!sgemm_batch(T)) run_decode(rows.begin, rows.end, in, y, sc, nullptr);
  else if (kv_ == KvCacheType::Q8_0) run_sgemm_q8(rows.begin, rows.end, in, y, sc);
  else run_sgemm(rows.begin, rows.end, in, y, sc);
}

void MlaOp::run_sgemm(int64_t begin, int64_t end, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], r = q_pe.ne[0], W = R + r;
  single_threaded_blas();
  for (int64_t i0 = begin; i0 < end; i0 += kBlockRows) {
    const int64_t i1 = std::min(end, i0 + kBlockRows), m = i1 - i0;
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[(i1 - 1) / H]) + 1;  // positions ascend
    sc.q.resize(static_cast<size_t>(m * W));
    sc.s.resize(static_cast<size_t>(m * n_vis));
    gather_queries(q_lat, q_pe, i0, i1, sc.q.data());
    dnnl_sgemm('N', 'T', m, n_vis, W, 1.0f, sc.q.data(), W, f32_cache(cache), W, 0.0f, sc.s.data(), n_vis);
    causal_softmax(sc.s.data(), i0, i1, n_vis, H, pos);
    dnnl_sgemm('N', 'N', m, R, n_vis, 1.0f, sc.s.data(), n_vis, f32_cache(cache), W, 0.0f, y.f32() + i0 * R, R);
  }
}

const float* MlaOp::widen_chunk(const Tensor& cache, int64_t j0, int64_t n, int64_t W, AttentionScratch& sc) const {
  sc.kv.resize(static_cast<size_t>(n * W));
  kv_q8_0_widen_rows(cache.cdata + j0 * cache.row_size(), cache.row_size(), n, W, sc.kv.data(), avx512_);
  return sc.kv.data();
}

// The SGEMM pair over a Q8_0 cache: scores chunk by chunk into the full score rows, then P·V
// accumulated over the chunks, walked backwards so the first reuses the last widened chunk.
void MlaOp::run_sgemm_q8(int64_t begin, int64_t end, std::span<Tensor* const> in, Tensor& y,
                         AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], r = q_pe.ne[0], W = R + r;
  single_threaded_blas();
  for (int64_t i0 = begin; i0 < end; i0 += kQ8BlockRows) {
    const int64_t i1 = std::min(end, i0 + kQ8BlockRows), m = i1 - i0;
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[(i1 - 1) / H]) + 1;  // positions ascend
    sc.q.resize(static_cast<size_t>(m * W));
    sc.s.resize(static_cast<size_t>(m * n_vis));
    gather_queries(q_lat, q_pe, i0, i1, sc.q.data());
    const int64_t last = (n_vis - 1) / kKvChunkRows * kKvChunkRows;
    for (int64_t j0 = 0; j0 < n_vis; j0 += kKvChunkRows) {
      const int64_t n = std::min(kKvChunkRows, n_vis - j0);
      const float* kv = widen_chunk(cache, j0, n, W, sc);
      dnnl_sgemm('N', 'T', m, n, W, 1.0f, sc.q.data(), W, kv, W, 0.0f, sc.s.data() + j0, n_vis);
    }
    causal_softmax(sc.s.data(), i0, i1, n_vis, H, pos);
    for (int64_t j0 = last; j0 >= 0; j0 -= kKvChunkRows) {
      const int64_t n = std::min(kKvChunkRows, n_vis - j0);
      const float* kv = j0 == last ? sc.kv.data() : widen_chunk(cache, j0, n, W, sc);
      dnnl_sgemm('N', 'N', m, R, n, 1.0f, sc.s.data() + j0, n_vis, kv, W, j0 == last ? 0.0f : 1.0f,
                 y.f32() + i0 * R, R);
    }
  }
}

}  // namespace zenmoe
