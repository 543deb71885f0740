// LLVM ORC glue kernels (codegen/glue.h) against the scalar reference C++ (kernels/ref) on
// Kimi-K2 shapes: rms_norm + Q8_K quantisation of a 7168 hidden row, the 384 -> 8 router,
// SwiGLU + Q8_K of a 2048 expert row, a 4096-long attention softmax, MLA decode attention. Rows rotate over 64
// inputs (L2-resident). Compilation is measured on its own, outside every kernel loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "kernels/formats.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

constexpr int64_t kRows = 64;

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

GlueFn get_or_skip(benchmark::State& state, const GlueDesc& d) {
  Expected<GlueFn> fn = glue_kernel(d);
  if (!fn) state.SkipWithError(fn.error().c_str());
  return fn ? *fn : nullptr;
}

ref::RouterConfig kimi_router() { return ref::RouterConfig{384, 8, 1, 1, 2, true, 2.827f}; }

void BM_RmsNormQ8K_Glue(benchmark::State& state) {
  const int64_t n = 7168;
  const auto x = random_floats(n * kRows, 1), w = random_floats(n, 2);
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_K, n));
  const GlueDesc d = glue_rms_norm_desc(int32_t(n), 1e-6f, true, false, GlueQuant::kQ8K, isa::host_level());
  GlueFn fn = get_or_skip(state, d);
  if (!fn) return;
  state.SetLabel(glue_name(d));
  GlueCall c;
  c.w = w.data();
  c.q = q.data();
  c.n_rows = 1;
  int64_t r = 0;
  for (auto _ : state) {
    c.x = x.data() + (r++ % kRows) * n;
    fn(&c);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_RmsNormQ8K_Ref(benchmark::State& state) {
  const int64_t n = 7168;
  const auto x = random_floats(n * kRows, 1), w = random_floats(n, 2);
  std::vector<float> y(n);
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_K, n));
  int64_t r = 0;
  for (auto _ : state) {
    ref::rms_norm(x.data() + (r++ % kRows) * n, w.data(), y.data(), n, 1e-6f);
    ref::quantize_row(GgmlType::Q8_K, y.data(), q.data(), n);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Router_Glue(benchmark::State& state) {
  const ref::RouterConfig cfg = kimi_router();
  const auto logits = random_floats(cfg.n_expert * kRows, 3), bias = random_floats(cfg.n_expert, 4);
  std::vector<int32_t> ids(cfg.n_expert_used);
  std::vector<float> w(cfg.n_expert_used);
  const GlueDesc d = glue_router_desc(cfg, true, isa::host_level());
  GlueFn fn = get_or_skip(state, d);
  if (!fn) return;
  state.SetLabel(glue_name(d));
  GlueCall c;
  c.x2 = bias.data();
  c.y = w.data();
  c.ids = ids.data();
  c.n_rows = 1;
  int64_t r = 0;
  for (auto _ : state) {
    c.x = logits.data() + (r++ % kRows) * cfg.n_expert;
    fn(&c);
    benchmark::DoNotOptimize(ids.data());
  }
}

void BM_Router_Ref(benchmark::State& state) {
  const ref::RouterConfig cfg = kimi_router();
  const auto logits = random_floats(cfg.n_expert * kRows, 3), bias = random_floats(cfg.n_expert, 4);
  std::vector<int32_t> ids(cfg.n_expert_used);
  std::vector<float> w(cfg.n_expert_used);
  int64_t r = 0;
  for (auto _ : state) {
    Status s = ref::route(cfg, logits.data() + (r++ % kRows) * cfg.n_expert, bias.data(), ids.data(), w.data());
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(ids.data());
  }
}

void BM_SwigluQ8K_Glue(benchmark::State& state) {
  const int64_t n = 2048;
  const auto g = random_floats(n * kRows, 5), u = random_floats(n * kRows, 6);
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_K, n));
  const GlueDesc d = glue_swiglu_desc(int32_t(n), false, GlueQuant::kQ8K, isa::host_level());
  GlueFn fn = get_or_skip(state, d);
  if (!fn) return;
  state.SetLabel(glue_name(d));
  GlueCall c;
  c.q = q.data();
  c.n_rows = 1;
  int64_t r = 0;
  for (auto _ : state) {
    const int64_t off = (r++ % kRows) * n;
    c.x = g.data() + off;
    c.x2 = u.data() + off;
    fn(&c);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_SwigluQ8K_Ref(benchmark::State& state) {
  const int64_t n = 2048;
  const auto g = random_floats(n * kRows, 5), u = random_floats(n * kRows, 6);
  std::vector<float> y(n);
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_K, n));
  int64_t r = 0;
  for (auto _ : state) {
    const int64_t off = (r++ % kRows) * n;
    ref::swiglu(g.data() + off, u.data() + off, y.data(), n);
    ref::quantize_row(GgmlType::Q8_K, y.data(), q.data(), n);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Softmax4096_Glue(benchmark::State& state) {
  const int64_t n = 4096;
  const auto x = random_floats(n, 7);
  std::vector<float> y(n);
  const GlueDesc d = glue_softmax_desc(0.0721f, isa::host_level());
  GlueFn fn = get_or_skip(state, d);
  if (!fn) return;
  state.SetLabel(glue_name(d));
  GlueCall c;
  c.x = x.data();
  c.y = y.data();
  c.n_rows = 1;
  c.n = n;
  c.n_visible = n;
  for (auto _ : state) {
    fn(&c);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Softmax4096_Ref(benchmark::State& state) {
  const int64_t n = 4096;
  const auto x = random_floats(n, 7);
  std::vector<float> y(n);
  for (auto _ : state) {
    ref::softmax(x.data(), y.data(), n, 0.0721f, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// IR build + O3 + code generation + JIT link of one kernel, no disk cache: an RMS norm with
// its quantiser, and Kimi-K2's decode attention (64 heads, F16 cache; the largest glue kernel,
// AVX-512 hosts only; its run time is BM_MlaDecode in attention_bench.cpp).
void compile(benchmark::State& state, const GlueDesc& d) {
  for (auto _ : state) {
    GlueSession s("");
    Expected<GlueFn> fn = s.get(d);
    if (!fn) {
      state.SkipWithError(fn.error().c_str());
      return;
    }
    benchmark::DoNotOptimize(*fn);
  }
}

void BM_Compile_RmsNormQ8K(benchmark::State& state) {
  compile(state, glue_rms_norm_desc(7168, 1e-6f, true, false, GlueQuant::kQ8K, isa::host_level()));
}

void BM_Compile_AttnDecode(benchmark::State& state) {
  if (isa::host_level() < isa::IsaLevel::kAvx512) return state.SkipWithError("host lacks AVX-512");
  compile(state, glue_attn_decode_desc(64, 576, 512, 1, 0.0722f, isa::host_level()));
}

BENCHMARK(BM_RmsNormQ8K_Glue);
BENCHMARK(BM_RmsNormQ8K_Ref);
BENCHMARK(BM_Router_Glue);
BENCHMARK(BM_Router_Ref);
BENCHMARK(BM_SwigluQ8K_Glue);
BENCHMARK(BM_SwigluQ8K_Ref);
BENCHMARK(BM_Softmax4096_Glue);
BENCHMARK(BM_Softmax4096_Ref);
BENCHMARK(BM_Compile_RmsNormQ8K)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_Compile_AttnDecode)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace zenmoe
