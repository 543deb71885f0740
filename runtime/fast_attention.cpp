#include "runtime/fast_attention.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>

#include "kernels/ref/ops.h"
#include "runtime/ref_executor_numerics.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

using refexec::Tensor;

namespace {

constexpr int64_t kBlockRows = 64;  // query rows per SGEMM pair

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

MlaOp::MlaOp(const ir::Node& n) : scale_(n.attr_float("scale")) {}

void MlaOp::store(std::span<Tensor* const> in) const {
  const Tensor &c = *in[2], &k_pe = *in[3], &pos = *in[5];
  Tensor& cache = *in[4];
  const int64_t R = c.ne[0], r = k_pe.ne[0], W = R + r, T = pos.ne[0];
  for (int64_t t = 0; t < T; ++t) {
    float* row = cache.f32() + static_cast<int64_t>(pos.ci32()[t]) * W;
    std::memcpy(row, c.cf32() + t * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(row + R, k_pe.cf32() + t * r, static_cast<size_t>(r) * sizeof(float));
  }
}

void MlaOp::run(int tid, int nth, std::span<Tensor* const> in, Tensor& y, AttentionScratch& sc) const {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &pos = *in[5], &cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], T = q_lat.ne[2], r = q_pe.ne[0], W = R + r;
  const Range rows = split_range(T * H, nth, tid);
  if (rows.begin >= rows.end) return;
  single_threaded_blas();
  for (int64_t i0 = rows.begin; i0 < rows.end; i0 += kBlockRows) {
    const int64_t i1 = std::min(rows.end, i0 + kBlockRows), m = i1 - i0;
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[(i1 - 1) / H]) + 1;  // positions ascend
    sc.q.resize(static_cast<size_t>(m * W));
    sc.s.resize(static_cast<size_t>(m * n_vis));
    for (int64_t i = i0; i < i1; ++i) {
      float* q = sc.q.data() + (i - i0) * W;
      std::memcpy(q, q_lat.cf32() + i * R, static_cast<size_t>(R) * sizeof(float));
      std::memcpy(q + R, q_pe.cf32() + i * r, static_cast<size_t>(r) * sizeof(float));
    }
    dnnl_sgemm('N', 'T', m, n_vis, W, 1.0f, sc.q.data(), W, cache.cf32(), W, 0.0f, sc.s.data(), n_vis);
    for (int64_t i = i0; i < i1; ++i) {
      float* s = sc.s.data() + (i - i0) * n_vis;
      const int64_t vis = static_cast<int64_t>(pos.ci32()[i / H]) + 1;
      refexec::softmax_ggml(s, s, vis, scale_);
      std::fill(s + vis, s + n_vis, 0.0f);
    }
    dnnl_sgemm('N', 'N', m, R, n_vis, 1.0f, sc.s.data(), n_vis, cache.cf32(), W, 0.0f, y.f32() + i0 * R, R);
  }
}

}  // namespace zenmoe
