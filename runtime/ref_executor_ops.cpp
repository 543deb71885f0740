#include "runtime/ref_executor_ops.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/ops.h"
#include "kernels/ref/quant.h"
#include "runtime/ref_executor_numerics.h"

namespace zenmoe::refexec {

namespace {

using ir::Node;
using ir::OpKind;

void embed(const Tensor& table, const Tensor& tokens, Tensor& y) {
  const int64_t D = table.ne[0], rb = table.row_size();
  for (int64_t t = 0; t < tokens.ne[0]; ++t)
    ref::dequantize_row(table.type, table.cdata + tokens.ci32()[t] * rb, y.f32() + t * D, D);
}

void rms_norm(const Node& n, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = x.ne[0];
  const float eps = n.attr_float("eps");
  for (int64_t r = 0; r < x.rows(); ++r) ref::rms_norm(x.cf32() + r * N, w.cf32(), y.f32() + r * N, N, eps);
}

// Activation conversion as ggml's x86 CPU backend does it: its Q8_0 activation quantiser is
// the AVX one (id = 127/amax, round half to even), not the reference weight quantiser.
void quantize(const Tensor& x, Tensor& y) {
  const int64_t K = x.ne[0], rb = y.row_size();
  for (int64_t r = 0; r < x.rows(); ++r) {
    if (y.type == GgmlType::Q8_0)
      ref::from_float_q8_0_x86(x.cf32() + r * K, y.data + r * rb, K);
    else
      ref::quantize_row(y.type, x.cf32() + r * K, y.data + r * rb, K);
  }
}

// Weight row · activation row. Formats whose x86 float summation order zenmoe reproduces use
// it (a rounding difference in a dot product can flip a code of the next activation
// quantisation, which random-weight test models amplify); the rest use the reference order.
float dot(GgmlType t, const uint8_t* w, const uint8_t* x, int64_t k) {
  if (t == GgmlType::Q4_K) return dot_q4_K_x86(w, x, k);
  if (t == GgmlType::F16) return dot_f16_fast(w, x, k);
  if (t == GgmlType::Q5_0 || t == GgmlType::Q4_0 || t == GgmlType::Q8_0) return dot_q8_0_family_x86(t, w, x, k);
  return ref::vec_dot_row(t, w, x, k);
}

// y[c][n] = W[n] · x[c] for every column c; 3-D weights pick matrix b = c % B.
void matmul(const Tensor& w, const Tensor& x, Tensor& y) {
  const int64_t K = w.ne[0], N = w.ne[1];
  const int64_t B = w.ne.size() == 3 ? w.ne[2] : 1;
  const int64_t wrb = w.row_size(), xrb = x.row_size();
  for (int64_t c = 0; c < x.rows(); ++c) {
    const uint8_t* wm = w.cdata + (c % B) * N * wrb;
    const uint8_t* xc = x.cdata + c * xrb;
    float* yc = y.f32() + c * N;
    for (int64_t r = 0; r < N; ++r) yc[r] = dot(w.type, wm + r * wrb, xc, K);
  }
}

// Fused ops (ir/graph.h) run as the sequences they stand for, so the reference numerics of a
// fused graph are bit for bit those of the unfused one. The reference engine accepts every
// graph the pipeline makes (rather than the pipeline running for the fast engine only) so a
// plan's lowered graph, or a fused graph in a test, can always be checked against it.
void gate_up_swiglu(const Tensor& wg, const Tensor& wu, const Tensor& x, Tensor& y) {
  const int64_t n = wg.ne[1] * x.rows();
  std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
  Tensor tg{GgmlType::F32, y.ne, reinterpret_cast<const uint8_t*>(g.data()), reinterpret_cast<uint8_t*>(g.data())};
  Tensor tu{GgmlType::F32, y.ne, reinterpret_cast<const uint8_t*>(u.data()), reinterpret_cast<uint8_t*>(u.data())};
  matmul(wg, x, tg);
  matmul(wu, x, tu);
  swiglu_ggml(g.data(), u.data(), g.data(), n);
  quantize(tg, y);
}

void matmul_add(const Tensor& w, const Tensor& x, const Tensor& acc, Tensor& y) {
  matmul(w, x, y);
  ref::add(acc.cf32(), y.cf32(), y.f32(), y.numel());
}

// out = {q[, y]}: y = rms_norm(x, w) (in a scratch row set when y is not an output), q = quantize(y).
void rms_norm_quantize(const Node& n, const Tensor& x, const Tensor& w, std::span<Tensor* const> out) {
  std::vector<float> scratch;
  Tensor y;
  if (out.size() > 1) {
    y = *out[1];
  } else {
    scratch.resize(static_cast<size_t>(x.numel()));
    y = Tensor{GgmlType::F32, x.ne, reinterpret_cast<const uint8_t*>(scratch.data()),
               reinterpret_cast<uint8_t*>(scratch.data())};
  }
  rms_norm(n, x, w, y);
  quantize(y, *out[0]);
}

// y[t][j][n] = W_{ids[t][j]}[n] · x[t] (or x[t][j] when x has a slot dimension).
Status matmul_id(const Tensor& w, const Tensor& x, const Tensor& ids, Tensor& y) {
  const int64_t K = w.ne[0], N = w.ne[1], E = w.ne[2];
  const int64_t k = ids.ne[0], T = ids.ne[1];
  const int64_t wrb = w.row_size(), xrb = x.row_size();
  const bool per_slot = x.ne.size() == 3;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids.ci32()[t * k + j];
      if (e < 0 || e >= E) return Error{"expert id " + std::to_string(e) + " out of range"};
      const uint8_t* wm = w.cdata + e * N * wrb;
      const uint8_t* xc = x.cdata + (per_slot ? t * k + j : t) * xrb;
      float* yc = y.f32() + (t * k + j) * N;
      for (int64_t r = 0; r < N; ++r) yc[r] = dot(w.type, wm + r * wrb, xc, K);
    }
  }
  return Status::ok();
}

void slice(const Node& n, const Tensor& x, Tensor& y) {
  const int64_t off = n.attr_int("offset"), len = y.ne[0], a = x.ne[0];
  for (int64_t r = 0; r < y.rows(); ++r)
    std::memcpy(y.f32() + r * len, x.cf32() + r * a + off, static_cast<size_t>(len) * sizeof(float));
}

void rope(const Node& n, const Tensor& x, const Tensor& pos, Tensor& y) {
  const ref::RopeParams p = rope_params(n);
  const int64_t T = x.ne.back(), per_t = x.rows() / T, stride = x.ne[0];
  std::memcpy(y.data, x.cdata, static_cast<size_t>(x.numel()) * sizeof(float));
  for (int64_t t = 0; t < T; ++t)
    ref::rope_norm(p, pos.ci32()[t], y.f32() + t * per_t * stride, static_cast<int>(per_t), stride);
}

// softmax(scale * q·K[s]) over s <= p, then out = sum_s P[s] * V[s] (F32 products as ggml
// does with an F32 cache). K rows are `kstride` floats apart, V rows `vstride`.
void attend(const float* q, const float* K, int64_t kdim, int64_t kstride, const float* V,
            int64_t vdim, int64_t vstride, int64_t n_vis, float scale, float* scores, float* out) {
  for (int64_t s = 0; s < n_vis; ++s) scores[s] = ref::vec_dot_f32(q, K + s * kstride, kdim);
  softmax_ggml(scores, scores, n_vis, scale);
  std::fill(out, out + vdim, 0.0f);
  for (int64_t s = 0; s < n_vis; ++s) {
    const float ps = scores[s];
    const float* v = V + s * vstride;
    for (int64_t d = 0; d < vdim; ++d) out[d] += ps * v[d];
  }
}

// Absorbed MLA: cache rows [c | k_pe] (width R + r); queries [q_lat | q_pe] per head.
void mla_attention(const Node& n, std::span<Tensor* const> in, Tensor& y) {
  const Tensor &q_lat = *in[0], &q_pe = *in[1], &c = *in[2], &k_pe = *in[3], &pos = *in[5];
  Tensor& cache = *in[4];
  const int64_t R = q_lat.ne[0], H = q_lat.ne[1], T = q_lat.ne[2], r = q_pe.ne[0], W = R + r;
  const float scale = n.attr_float("scale");
  for (int64_t t = 0; t < T; ++t) {
    float* row = cache.f32() + static_cast<int64_t>(pos.ci32()[t]) * W;
    std::memcpy(row, c.cf32() + t * R, static_cast<size_t>(R) * sizeof(float));
    std::memcpy(row + R, k_pe.cf32() + t * r, static_cast<size_t>(r) * sizeof(float));
  }
  std::vector<float> q(static_cast<size_t>(W)), scores;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[t]) + 1;
    scores.resize(static_cast<size_t>(n_vis));
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(q.data(), q_lat.cf32() + (t * H + h) * R, static_cast<size_t>(R) * sizeof(float));
      std::memcpy(q.data() + R, q_pe.cf32() + (t * H + h) * r, static_cast<size_t>(r) * sizeof(float));
      attend(q.data(), cache.cf32(), W, W, cache.cf32(), R, W, n_vis, scale, scores.data(),
             y.f32() + (t * H + h) * R);
    }
  }
}

// Legacy MHA: per-head caches K [k_nope | k_pe] (width n + r) and V (width dv).
void mha_attention(const Node& n, std::span<Tensor* const> in, Tensor& y) {
  const Tensor &q_nope = *in[0], &q_pe = *in[1], &k_nope = *in[2], &k_pe = *in[3], &v = *in[4],
               &pos = *in[7];
  Tensor &kc = *in[5], &vc = *in[6];
  const int64_t dn = q_nope.ne[0], H = q_nope.ne[1], T = q_nope.ne[2], r = q_pe.ne[0];
  const int64_t dv = v.ne[0], W = dn + r;
  const float scale = n.attr_float("scale");
  const size_t fs = sizeof(float);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos.ci32()[t];
    for (int64_t h = 0; h < H; ++h) {
      float* krow = kc.f32() + (p * H + h) * W;
      std::memcpy(krow, k_nope.cf32() + (t * H + h) * dn, static_cast<size_t>(dn) * fs);
      std::memcpy(krow + dn, k_pe.cf32() + t * r, static_cast<size_t>(r) * fs);
      std::memcpy(vc.f32() + (p * H + h) * dv, v.cf32() + (t * H + h) * dv, static_cast<size_t>(dv) * fs);
    }
  }
  std::vector<float> q(static_cast<size_t>(W)), scores;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_vis = static_cast<int64_t>(pos.ci32()[t]) + 1;
    scores.resize(static_cast<size_t>(n_vis));
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(q.data(), q_nope.cf32() + (t * H + h) * dn, static_cast<size_t>(dn) * fs);
      std::memcpy(q.data() + dn, q_pe.cf32() + (t * H + h) * r, static_cast<size_t>(r) * fs);
      attend(q.data(), kc.cf32() + h * W, W, H * W, vc.cf32() + h * dv, dv, H * dv, n_vis, scale,
             scores.data(), y.f32() + (t * H + h) * dv);
    }
  }
}

Status router(const Node& n, std::span<Tensor* const> in, std::span<Tensor* const> out) {
  const Tensor& logits = *in[0];
  const float* bias = in.size() > 1 ? in[1]->cf32() : nullptr;
  ref::RouterConfig cfg;
  cfg.n_expert = static_cast<int>(logits.ne[0]);
  cfg.n_expert_used = static_cast<int>(n.attr_int("n_used"));
  cfg.n_groups = static_cast<int>(n.attr_int("n_groups"));
  cfg.n_group_used = static_cast<int>(n.attr_int("n_group_used"));
  cfg.gating_func = n.attr_str("gating") == "sigmoid" ? 2 : 1;
  cfg.norm_weights = n.attr_int("norm") != 0;
  cfg.weights_scale = n.attr_float("scale");
  const int64_t E = logits.ne[0], k = cfg.n_expert_used;
  for (int64_t t = 0; t < logits.ne[1]; ++t)
    ZENMOE_RETURN_IF_ERROR(ref::route(cfg, logits.cf32() + t * E, bias, out[0]->i32() + t * k,
                                      out[1]->f32() + t * k));
  return Status::ok();
}

// out[t] = sum_j w[t][j] * y[t][j], each product rounded to f32 then added in slot order
// (ggml multiplies the expert outputs by their weights, then adds the views one by one).
void weighted_sum(const Tensor& y, const Tensor& w, Tensor& out) {
  const int64_t D = y.ne[0], k = y.ne[1], T = y.ne[2];
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.f32() + t * D;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = w.cf32()[t * k + j];
      const float* yj = y.cf32() + (t * k + j) * D;
      for (int64_t d = 0; d < D; ++d) {
        const float prod = wj * yj[d];
        o[d] = j == 0 ? prod : o[d] + prod;
      }
    }
  }
}

// The unfused sequence: both per-slot products, SwiGLU, then the quantisation.
Status gate_up_swiglu_id(const Tensor& wg, const Tensor& wu, const Tensor& x, const Tensor& ids, Tensor& y) {
  const int64_t n = wg.ne[1] * ids.numel();
  std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
  Tensor tg{GgmlType::F32, y.ne, reinterpret_cast<const uint8_t*>(g.data()), reinterpret_cast<uint8_t*>(g.data())};
  Tensor tu{GgmlType::F32, y.ne, reinterpret_cast<const uint8_t*>(u.data()), reinterpret_cast<uint8_t*>(u.data())};
  ZENMOE_RETURN_IF_ERROR(matmul_id(wg, x, ids, tg));
  ZENMOE_RETURN_IF_ERROR(matmul_id(wu, x, ids, tu));
  swiglu_ggml(g.data(), u.data(), g.data(), n);
  quantize(tg, y);
  return Status::ok();
}

// The unfused sequence: the per-slot products in a scratch tensor, then their weighted sum.
Status matmul_id_sum(const Tensor& w, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor& y) {
  std::vector<float> buf(static_cast<size_t>(w.ne[1] * ids.numel()));
  Tensor slots;
  slots.type = GgmlType::F32;
  slots.ne = {w.ne[1], ids.ne[0], ids.ne[1]};
  slots.data = reinterpret_cast<uint8_t*>(buf.data());
  slots.cdata = slots.data;
  ZENMOE_RETURN_IF_ERROR(matmul_id(w, x, ids, slots));
  weighted_sum(slots, weights, y);
  return Status::ok();
}

}  // namespace

ref::RopeParams rope_params(const ir::Node& n) {
  ref::RopeParams p;
  p.n_dims = static_cast<int>(n.attr_int("n_dims"));
  p.freq_base = n.attr_float("freq_base");
  p.freq_scale = n.attr_float("freq_scale");
  p.n_ctx_orig = static_cast<int>(n.attr_int("n_ctx_orig"));
  p.ext_factor = n.attr_float("ext_factor");
  p.attn_factor = n.attr_float("attn_factor");
  p.beta_fast = n.attr_float("beta_fast");
  p.beta_slow = n.attr_float("beta_slow");
  return p;
}

Status run_node(const Node& n, std::span<Tensor* const> in, std::span<Tensor* const> out) {
  Tensor& y = *out[0];
  switch (n.op) {
    case OpKind::Embed: embed(*in[0], *in[1], y); break;
    case OpKind::RmsNorm: rms_norm(n, *in[0], *in[1], y); break;
    case OpKind::Quantize: quantize(*in[0], y); break;
    case OpKind::MatMul: matmul(*in[0], *in[1], y); break;
    case OpKind::MatMulId: return matmul_id(*in[0], *in[1], *in[2], y);
    case OpKind::Reshape:
      std::memcpy(y.data, in[0]->cdata, static_cast<size_t>(row_bytes(y.type, y.numel())));
      break;
    case OpKind::Slice: slice(n, *in[0], y); break;
    case OpKind::Rope: rope(n, *in[0], *in[1], y); break;
    case OpKind::MlaAttention: mla_attention(n, in, y); break;
    case OpKind::MhaAttention: mha_attention(n, in, y); break;
    case OpKind::Router: return router(n, in, out);
    case OpKind::SwiGlu: swiglu_ggml(in[0]->cf32(), in[1]->cf32(), y.f32(), y.numel()); break;
    case OpKind::WeightedSum: weighted_sum(*in[0], *in[1], y); break;
    case OpKind::Add: ref::add(in[0]->cf32(), in[1]->cf32(), y.f32(), y.numel()); break;
    case OpKind::GateUpSwiGlu: gate_up_swiglu(*in[0], *in[1], *in[2], y); break;
    case OpKind::MatMulAdd: matmul_add(*in[0], *in[1], *in[2], y); break;
    case OpKind::RmsNormQuantize: rms_norm_quantize(n, *in[0], *in[1], out); break;
    case OpKind::MatMulIdSum: return matmul_id_sum(*in[0], *in[1], *in[2], *in[3], y);
    case OpKind::GateUpSwiGluId: return gate_up_swiglu_id(*in[0], *in[1], *in[2], *in[3], y);
  }
  return Status::ok();
}

}  // namespace zenmoe::refexec
