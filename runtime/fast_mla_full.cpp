// MLA attention in the decompressed form, for long batches.
//
// The absorbed form (fast_attention.cpp) pays, per query row (token, head) and visible
// position, a dot product over the whole cache row (R + r) and a value update over R, plus two
// per-head matmuls that move the queries into the latent space and the outputs back out. The
// decompressed form instead rebuilds every visible position's keys K = C·k_b[h] (dn wide) and
// values V = C·v_b[h]ᵀ (dv wide) per head once per batch, then runs plain attention: per
// (row, position) only dn + r + dv multiply-adds. For a prompt of T tokens from an empty cache
// that is about half the work once T is a few hundred (DeepSeek-V3 and Kimi-K2 shapes:
// R = 512, r = 64, dn = dv = 128), and every product is a large SGEMM.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"
#include "runtime/fast_attention.h"
#include "runtime/kv_f16.h"
#include "runtime/kv_q8.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

namespace {

constexpr int64_t kRowsPerBlock = 64;  // query rows (tokens of one head) per score block

// Effective multiply-add rates of each form's parts at one thread on a Zen 4 host, GMAC/s; only
// their ratios matter. Absorbed: the decode kernels over the cache rows (zenmoe_bench
// BM_MlaDecode, 512 positions) and the int8 absorbing matmuls (an estimate). Decompressed: whole
// passes in this executor, about 0.73x what oneDNN's SGEMM alone reaches at these shapes
// (R = 512, 512 positions: 86-98 for keys and values, 58 for 64-row score blocks, 97 for the
// values); the rest goes to gathering queries, softmax and copies. With them the forms break
// even between 192 and 320 prompt tokens from an empty cache, where the bench preset measured
// it (prefill 0.94-0.96x at 128 and 192 tokens, 1.07x at 320, 1.09x at 512 when decompressed).
// The absorbed rate was measured with the decode kernels that preceded the heads-in-lanes ones
// (GlueOp::kAttnDecode); at 16 heads those reach 1.0-1.4x it (BM_MlaDecode, an Intel host), and
// there the decompressed form still won from 320 tokens on (bench model, --mla absorbed against
// decompressed).
constexpr double kAbsorbedRate = 66, kAbsorbMatmulRate = 150;
// The decode kernels' bf16 pair form (MlaOp::decode_bf16_pairs, a BF16 cache on Zen 4 / Zen 5)
// runs 1.7-1.8x the widening form (BM_MlaDecode, a Zen 5 host); there the bench preset's prefill
// broke even between the forms at ~500-600 prompt tokens with a BF16 cache (1 thread, --mla
// absorbed against decompressed: 349 against 328 tok/s at 320 tokens, 328 / 331 / 325 against
// 315 / 316 / 338 at 512, 292 / 305 / 304 against 309 / 316 / 317 at 768). This factor on the
// absorbed attention's rate puts the estimate's break-even there (~550 tokens).
constexpr double kPairFormSpeedup = 1.5;
constexpr double kDecompressRate = 66, kScoresRate = 44, kValuesRate = 70;
// Kept keys and values (dn + r + dv floats per head and position: for the bench preset's 16
// heads about 18x the position's F16 cache row) were last written a batch ago and come from
// memory, once per head and batch: GB/s of one core reading them (a conservative figure; the
// read-bandwidth probe measured 13-18 on the Intel host). This term is what keeps single tokens
// after a long kept prompt in the absorbed form, which reads the much smaller cache rows.
constexpr double kKeptReadRate = 10;

}  // namespace

Status MlaOp::enable_decompressed(const Tensor* q_nope, const Tensor* k_b, const Tensor* v_b) {
  if (k_b->ne.size() != 3 || v_b->ne.size() != 3 || q_nope->ne.size() != 3)
    return Error{"decompressed MLA: k_b, v_b and q_nope must be 3-D"};
  const int64_t dn = k_b->ne[0], dv = v_b->ne[1];
  if (k_b->ne[1] != R_ || k_b->ne[2] != H_ || v_b->ne[0] != R_ || v_b->ne[2] != H_ || q_nope->ne[0] != dn ||
      q_nope->ne[1] != H_)
    return Error{"decompressed MLA: k_b, v_b or q_nope do not match the attention's " + std::to_string(H_) +
                 " heads of latent width " + std::to_string(R_)};
  if (row_bytes(k_b->type, dn) < 0 || row_bytes(v_b->type, R_) < 0 || row_bytes(q_nope->type, dn) < 0 ||
      !ref::check_row(q_nope->type, dn, false) || !ref::check_row(k_b->type, dn, false) ||
      !ref::check_row(v_b->type, R_, false))
    return Error{"decompressed MLA: k_b, v_b or q_nope rows have no reference dequantisation"};
  q_nope_ = q_nope;
  k_b_ = k_b;
  v_b_ = v_b;
  dn_ = dn;
  dv_ = dv;
  kb_.assign(static_cast<size_t>(H_), {});
  vb_.assign(static_cast<size_t>(H_), {});
  return Status::ok();
}

bool MlaOp::keeps(int64_t positions) const {
  return positions * H_ * (dn_ + W_ - R_ + dv_) * static_cast<int64_t>(sizeof(float)) <= keep_bytes_;
}

bool MlaOp::decompressed_pays(int64_t T, int64_t n_past) const {
  if (!has_decompressed() || T < 1) return false;
  const double t = static_cast<double>(T), past = static_cast<double>(n_past), H = static_cast<double>(H_);
  const double R = static_cast<double>(R_), W = static_cast<double>(W_), r = W - R;
  const double dn = static_cast<double>(dn_), dv = static_cast<double>(dv_);
  const double vis = t * past + t * (t + 1) / 2;  // positions seen, summed over the tokens
  const double vis_blocked = vis + t * kRowsPerBlock / 2;  // a block's rows all see its last row's
  const double attend_rate = kAbsorbedRate * (bf16_pairs_ ? kPairFormSpeedup : 1.0);
  const double absorbed = vis * H * (W + R) / attend_rate + t * H * R * (dn + dv) / kAbsorbMatmulRate;
  // Positions whose keys and values are kept from earlier batches are not decompressed again.
  const double row_bytes = H * (dn + r + dv) * static_cast<double>(sizeof(float));  // kept per position
  const double kept = keeps(n_past + T) ? static_cast<double>(std::min(kept_, n_past)) : 0.0;
  const double decompressed = (past + t - kept) * H * R * (dn + dv) / kDecompressRate +
                              kept * row_bytes / kKeptReadRate +
                              vis_blocked * H * (dn + r) / kScoresRate + vis_blocked * H * dv / kValuesRate;
  return decompressed < absorbed;
}

void MlaOp::prepare_decompressed(int64_t T, const Tensor& pos) {
  full_T_ = T;
  full_vis_ = static_cast<int64_t>(pos.ci32()[T - 1]) + 1;  // positions ascend
  const int64_t dk = dn_ + W_ - R_;
  keeping_ = keeps(full_vis_);
  if (keeping_) {
    full_from_ = std::min(kept_, full_vis_);
    kept_ = full_vis_;  // run_decompressed fills the rest
    keep_k_.resize(static_cast<size_t>(H_));
    keep_v_.resize(static_cast<size_t>(H_));
    for (int64_t h = 0; h < H_; ++h) {
      auto& k = keep_k_[static_cast<size_t>(h)];
      auto& v = keep_v_[static_cast<size_t>(h)];
      if (k.size() < static_cast<size_t>(full_vis_ * dk)) {  // vectors grow geometrically: few copies
        k.resize(static_cast<size_t>(full_vis_ * dk));
        v.resize(static_cast<size_t>(full_vis_ * dv_));
      }
    }
  } else {
    full_from_ = 0;
    kept_ = 0;
    keep_k_.clear();
    keep_v_.clear();
  }
  const auto rows = static_cast<size_t>(full_vis_ * W_);
  if (kv_ != KvCacheType::F32 && rows_.size() < rows) rows_.resize(rows);
  const auto outs = static_cast<size_t>(T * H_ * dv_);
  if (out_.size() < outs) out_.resize(outs);
}

const float* MlaOp::full_rows(const Tensor& cache) const {
  return kv_ == KvCacheType::F32 ? cache.cf32() : rows_.data();
}

void MlaOp::widen_decompressed(int tid, int nth, std::span<Tensor* const> in) const {
  if (kv_ == KvCacheType::F32) return;
  const Tensor& cache = *in[4];
  Range rg = split_range(full_vis_ - full_from_, nth, tid);  // only the rows decompressed
  if (rg.begin >= rg.end) return;
  rg.begin += full_from_;
  rg.end += full_from_;
  float* dst = rows_.data() + rg.begin * W_;
  const int64_t n = rg.end - rg.begin;
  if (kv_ == KvCacheType::Q8_0) {
    kv_q8_0_widen_rows(cache.cdata + rg.begin * cache.row_size(), cache.row_size(), n, W_, dst, avx512_);
  } else if (kv_ == KvCacheType::F16) {
    kv_f16_widen_row(reinterpret_cast<const f16_t*>(cache.cdata) + rg.begin * W_, dst, n * W_, avx512_);
  } else {
    ref::bf16_to_fp32_row(reinterpret_cast<const bf16_t*>(cache.cdata) + rg.begin * W_, dst, n * W_);
  }
}

void MlaOp::dequantize_head(int64_t h) const {
  auto& kb = kb_[static_cast<size_t>(h)];
  auto& vb = vb_[static_cast<size_t>(h)];
  if (!kb.empty()) return;
  kb.resize(static_cast<size_t>(R_ * dn_));
  vb.resize(static_cast<size_t>(dv_ * R_));
  const int64_t krow = k_b_->row_size(), vrow = v_b_->row_size();
  for (int64_t j = 0; j < R_; ++j)
    ref::dequantize_row(k_b_->type, k_b_->cdata + (h * R_ + j) * krow, kb.data() + j * dn_, dn_);
  for (int64_t i = 0; i < dv_; ++i)
    ref::dequantize_row(v_b_->type, v_b_->cdata + (h * dv_ + i) * vrow, vb.data() + i * R_, R_);
}

void MlaOp::run_decompressed(int tid, WorkQueue& heads, std::span<Tensor* const> in, AttentionScratch& sc) const {
  const Tensor &q_pe = *in[1], &cache = *in[4], &pos = *in[5];
  const std::function<int64_t(int64_t)> one_head = [](int64_t h) { return h + 1; };
  Range claim;
  if (!heads.next(tid, 1, claim, &one_head)) return;
  single_threaded_blas();
  const int64_t P = full_vis_, T = full_T_, r = W_ - R_, dk = dn_ + r, from = full_from_;
  const float* rows = full_rows(cache);
  if (!keeping_) {
    sc.k.resize(static_cast<size_t>(P * dk));
    sc.v.resize(static_cast<size_t>(P * dv_));
  }
  sc.q.resize(static_cast<size_t>(kRowsPerBlock * dk));
  sc.s.resize(static_cast<size_t>(kRowsPerBlock * P));
  do {
    const int64_t h = claim.begin;
    dequantize_head(h);
    float* keys = keeping_ ? keep_k_[static_cast<size_t>(h)].data() : sc.k.data();
    float* values = keeping_ ? keep_v_[static_cast<size_t>(h)].data() : sc.v.data();
    // Keys [C·k_b[h] | k_pe] and values C·v_b[h]ᵀ of the visible positions not kept.
    if (P > from) {
      const float* c = rows + from * W_;
      dnnl_sgemm('N', 'N', P - from, dn_, R_, 1.0f, c, W_, kb_[static_cast<size_t>(h)].data(), dn_, 0.0f,
                 keys + from * dk, dk);
      for (int64_t p = from; p < P; ++p)
        std::memcpy(keys + p * dk + dn_, rows + p * W_ + R_, static_cast<size_t>(r) * sizeof(float));
      dnnl_sgemm('N', 'T', P - from, dv_, R_, 1.0f, c, W_, vb_[static_cast<size_t>(h)].data(), R_, 0.0f,
                 values + from * dv_, dv_);
    }
    for (int64_t t0 = 0; t0 < T; t0 += kRowsPerBlock) {
      const int64_t t1 = std::min(T, t0 + kRowsPerBlock), m = t1 - t0;
      const int64_t n_vis = static_cast<int64_t>(pos.ci32()[t1 - 1]) + 1;
      for (int64_t t = t0; t < t1; ++t) {
        float* q = sc.q.data() + (t - t0) * dk;
        // The queries as the absorbing matmul would have read them (quantised: the same rounding).
        if (q_nope_->type == GgmlType::F32)
          std::memcpy(q, q_nope_->cf32() + (t * H_ + h) * dn_, static_cast<size_t>(dn_) * sizeof(float));
        else
          ref::dequantize_row(q_nope_->type, q_nope_->cdata + (t * H_ + h) * q_nope_->row_size(), q, dn_);
        std::memcpy(q + dn_, q_pe.cf32() + (t * H_ + h) * r, static_cast<size_t>(r) * sizeof(float));
      }
      dnnl_sgemm('N', 'T', m, n_vis, dk, 1.0f, sc.q.data(), dk, keys, dk, 0.0f, sc.s.data(), n_vis);
      for (int64_t t = t0; t < t1; ++t)
        softmax_rows(sc.s.data() + (t - t0) * n_vis, 1, n_vis, static_cast<int64_t>(pos.ci32()[t]) + 1);
      dnnl_sgemm('N', 'N', m, dv_, n_vis, 1.0f, sc.s.data(), n_vis, values, dv_, 0.0f,
                 out_.data() + (t0 * H_ + h) * dv_, H_ * dv_);
    }
  } while (heads.next(tid, 1, claim, &one_head));
}

void MlaOp::copy_decompressed(Tensor& o_heads) const {
  std::memcpy(o_heads.data, out_.data(), static_cast<size_t>(full_T_ * H_ * dv_) * sizeof(float));
}

}  // namespace zenmoe
