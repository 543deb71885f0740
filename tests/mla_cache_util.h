// Shared by the KV cache tests: one MLA attention node over a latent cache, random batches,
// a cache of a given element type, and a runner that stores a batch and runs every thread's
// share of it in turn.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ir/graph.h"
#include "kernels/formats.h"
#include "runtime/fast_attention.h"

namespace zenmoe::mla_cache_test {

using refexec::Tensor;

constexpr int64_t kR = 512, kRope = 64, kW = kR + kRope, kHeads = 12;
constexpr int64_t kCtx = kKvChunkRows + 40;  // the last batches see more than one chunk
// Prompt chunks, then decode-sized batches past one chunk of rows.
inline const std::vector<int64_t> kBatchSizes = {64, 64, 64, 64, 64, 64, 64, 64, 1, 3, 2, 20, 1, 4};

inline ir::Graph attention_graph(ir::Node* node, int64_t heads = kHeads) {
  ir::Graph g;
  auto val = [&](const char* name, std::vector<int64_t> shape) {
    return g.add_value({name, ir::ValueKind::Temp, GgmlType::F32, std::move(shape)});
  };
  const int q_lat = val("q_lat", {kR, heads, ir::kDimTokens}), q_pe = val("q_pe", {kRope, heads, ir::kDimTokens});
  const int c = val("c", {kR, ir::kDimTokens}), k_pe = val("k_pe", {kRope, ir::kDimTokens});
  const int cache = val("cache", {kW, ir::kDimContext}), pos = val("pos", {ir::kDimTokens});
  const int out = val("out", {kR, heads, ir::kDimTokens});
  g.add_node(ir::OpKind::MlaAttention, {q_lat, q_pe, c, k_pe, cache, pos}, {out},
             {{"scale", 1.0f / std::sqrt(static_cast<float>(kW))}});
  *node = g.nodes.back();
  return g;
}

// One batch's inputs (for `heads` query heads) as tensors over vectors the struct owns.
struct Batch {
  std::vector<float> q_lat, q_pe, c, k_pe;
  std::vector<int32_t> pos;
  Tensor tq_lat, tq_pe, tc, tk_pe, tpos;
  int64_t heads;

  Batch(int64_t p0, int64_t T, std::mt19937& rng, int64_t heads_ = kHeads) : heads(heads_) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      for (float& x : v) x = nd(rng);
    };
    fill(q_lat, kR * heads * T);
    fill(q_pe, kRope * heads * T);
    fill(c, kR * T);
    fill(k_pe, kRope * T);
    for (int64_t t = 0; t < T; ++t) pos.push_back(static_cast<int32_t>(p0 + t));
    wrap(tq_lat, q_lat.data(), {kR, heads, T});
    wrap(tq_pe, q_pe.data(), {kRope, heads, T});
    wrap(tc, c.data(), {kR, T});
    wrap(tk_pe, k_pe.data(), {kRope, T});
    tpos.type = GgmlType::I32;
    tpos.ne = {T};
    tpos.cdata = reinterpret_cast<const uint8_t*>(pos.data());
  }
  static void wrap(Tensor& t, float* p, std::vector<int64_t> ne) {
    t.ne = std::move(ne);
    t.data = reinterpret_cast<uint8_t*>(p);
    t.cdata = t.data;
  }
};

struct Cache {
  std::vector<uint8_t> bytes;
  Tensor t;
  explicit Cache(GgmlType type) {
    bytes.assign(static_cast<size_t>(row_bytes(type, kW) * kCtx), 0);
    t.type = type;
    t.ne = {kW, kCtx};
    t.data = bytes.data();
    t.cdata = t.data;
  }
};

// Stores the batch and runs every thread's share in turn; returns the output [R, H, T].
inline std::vector<float> attend(const MlaOp& op, Batch& b, Cache& cache, int nth) {
  const int64_t T = static_cast<int64_t>(b.pos.size());
  std::vector<float> y(static_cast<size_t>(kR * b.heads * T), std::nanf(""));
  Tensor ty;
  Batch::wrap(ty, y.data(), {kR, b.heads, T});
  Tensor* in[] = {&b.tq_lat, &b.tq_pe, &b.tc, &b.tk_pe, &cache.t, &b.tpos};
  op.store(in);
  std::vector<AttentionScratch> scratch(static_cast<size_t>(nth));
  for (int tid = 0; tid < nth; ++tid) op.run(tid, nth, in, ty, scratch[static_cast<size_t>(tid)]);
  return y;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return std::isnan(m) ? 1e30 : m;
}

}  // namespace zenmoe::mla_cache_test
