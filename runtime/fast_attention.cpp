#include "runtime/fast_attention.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>

#include "kernels/ref/fp16.h"
#include "kernels/ref/ops.h"
#include "runtime/ref_executor_numerics.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

namespace {

constexpr int64_t kBlockRows = 64;  // query rows per SGEMM pair

// Query rows [i0, i1) as [q_lat | q_pe] rows, contiguous in q.
void gather_queries(const Tensor& q_lat, const Tensor& q_pe, int64_t i0, int64_t i1, float* q) {
  const int64_t R = q_lat.ne[0], r = q_pe.ne[0];
  for (int64_t i = i0; i < i1; ++i, q += R + r) {
    std::memcpy(q, q_lat.cf32() + i * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(q + R, q_pe.cf32() + i * r, static_cast<size_t>(r) * sizeof(float));
  }
}

}  // namespace

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
                                               bool kv_f16) {
  std::unique_ptr<MlaOp> op(new MlaOp());
  op->scale_ = n.attr_float("scale");
  op->kv_f16_ = kv_f16;
  if (target.level < isa::IsaLevel::kAvx512) return op;
  const auto R = static_cast<int32_t>(g.values[static_cast<size_t>(n.inputs[0])].shape[0]);
  const auto r = static_cast<int32_t>(g.values[static_cast<size_t>(n.inputs[1])].shape[0]);
  const GlueCpu cpu = target.tuning == isa::Tuning::kZen5   ? GlueCpu::kZnver5
                      : target.tuning == isa::Tuning::kZen4 ? GlueCpu::kZnver4
                                                             : GlueCpu::kHost;
  const uint8_t kv = kv_f16 ? 1 : 0;
  auto s = glue_kernel(glue_attn_scores_desc(R + r, kv, target.level, cpu));
  if (!s) return Error{s.error()};
  auto v = glue_kernel(glue_attn_values_desc(R, kv, target.level, cpu));
  if (!v) return Error{v.error()};
  auto sm = glue_kernel(glue_softmax_desc(op->scale_, target.level, cpu));
  if (!sm) return Error{sm.error()};
  op->scores_ = *s;
  op->values_ = *v;
  op->softmax_ = *sm;
  return op;
}

// Rows [i0, i1) of a decode-sized batch: scores, causal softmax and values per row, all over
// the cache rows the row's token sees.
void MlaOp::run_glue(int64_t i0, int64_t i1, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], r = q_pe.ne[0], W = R + r;
  for (int64_t i = i0; i < i1;) {
    // The rows of one token share their visible length: one call per token's heads.
    const int64_t t = i / H, end = std::min(i1, (t + 1) * H), m = end - i;
    const int64_t vis = static_cast<int64_t>(pos.ci32()[t]) + 1;
    sc.q.resize(static_cast<size_t>(m * W));
    sc.s.resize(static_cast<size_t>(m * vis));
    gather_queries(q_lat, q_pe, i, end, sc.q.data());
    GlueCall c;
    c.x = sc.q.data();
    c.x2 = reinterpret_cast<const float*>(cache.cdata);  // F32 or F16 rows (the kernel's kv type)
    c.y = sc.s.data();
    c.n_rows = m;
    c.stride = W;
    c.n = vis;
    scores_(&c);
    softmax_rows(sc.s.data(), m, vis, vis);
    c.x = sc.s.data();
    c.y = y.f32() + i * R;
    values_(&c);
    i = end;
  }
}

void MlaOp::store(std::span<Tensor* const> in) const {
  const Tensor &c = *in[2], &k_pe = *in[3], &pos = *in[5];
  Tensor& cache = *in[4];
  const int64_t R = c.ne[0], r = k_pe.ne[0], W = R + r, T = pos.ne[0];
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos.ci32()[t];
    if (kv_f16_) {
      auto* row = reinterpret_cast<f16_t*>(cache.data) + p * W;
      for (int64_t i = 0; i < R; ++i) row[i] = ref::fp32_to_fp16(c.cf32()[t * R + i]);
      for (int64_t i = 0; i < r; ++i) row[R + i] = ref::fp32_to_fp16(k_pe.cf32()[t * r + i]);
      continue;
    }
    float* row = cache.f32() + p * W;
    std::memcpy(row, c.cf32() + t * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(row + R, k_pe.cf32() + t * r, static_cast<size_t>(r) * sizeof(float));
  }
  if (kv_f16_ && (scores_ == nullptr || T > kMlaGlueMaxTokens)) {  // the SGEMM path reads F32 rows
    const int64_t rows = static_cast<int64_t>(pos.ci32()[T - 1]) + 1;
    widened_.resize(static_cast<size_t>(rows * W));
    ref::fp16_to_fp32_row(reinterpret_cast<const f16_t*>(cache.cdata), widened_.data(), rows * W);
  }
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

const float* MlaOp::f32_cache(const Tensor& cache) const { return kv_f16_ ? widened_.data() : cache.cf32(); }

void MlaOp::run(int tid, int nth, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], T = q_lat.ne[2], r = q_pe.ne[0], W = R + r;
  const Range rows = split_range(T * H, nth, tid);
  if (rows.begin >= rows.end) return;
  if (scores_ != nullptr && T <= kMlaGlueMaxTokens) {
    run_glue(rows.begin, rows.end, in, y, sc);
    return;
  }
  single_threaded_blas();
  for (int64_t i0 = rows.begin; i0 < rows.end; i0 += kBlockRows) {
    const int64_t i1 = std::min(rows.end, i0 + kBlockRows), m = i1 - i0;
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[(i1 - 1) / H]) + 1;  // positions ascend
    sc.q.resize(static_cast<size_t>(m * W));
    sc.s.resize(static_cast<size_t>(m * n_vis));
    gather_queries(q_lat, q_pe, i0, i1, sc.q.data());
    dnnl_sgemm('N', 'T', m, n_vis, W, 1.0f, sc.q.data(), W, f32_cache(cache), W, 0.0f, sc.s.data(), n_vis);
    for (int64_t i = i0; i < i1;) {  // the rows of one token share their visible length
      const int64_t end = std::min(i1, (i / H + 1) * H);
      softmax_rows(sc.s.data() + (i - i0) * n_vis, end - i, n_vis, static_cast<int64_t>(pos.ci32()[i / H]) + 1);
      i = end;
    }
    dnnl_sgemm('N', 'N', m, R, n_vis, 1.0f, sc.s.data(), n_vis, f32_cache(cache), W, 0.0f, y.f32() + i0 * R, R);
  }
}

}  // namespace zenmoe
