// Prefill GEMM kernels (KernelOp::kGemm) at the `bench` preset's expert shapes and a wider
// projection, n tokens per call, weights packed once (L2/L3-resident: the same matrix every
// iteration). Counters: GOPS = 2 * rows * K * n / time, and frac_vnni_peak = GOPS over the
// vpdpbusd peak measured in this binary (vnni_peak: 16 independent accumulators, one core;
// 128 int ops per 512-bit vpdpbusd). Rates are per CPU second of the benchmark thread (the
// machine is shared; wall time includes waiting for a core). Case names: <kernel>/<K>x<rows>/n:<tokens>, where
// <kernel> is the canonical name; `gemv_loop` cases run the GemmCall through the GEMV kernel
// (one GEMV per token, or passes of a few tokens where the kernel has them).
//   zenmoe_bench --benchmark_filter='gemm|vnni_peak'
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <time.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/registry.h"
#include "kernels/pack.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

// 16 independent vpdpbusd chains (enough to cover the latency on any core), in registers:
// written in assembly so no compiler spills them.
#define ZENMOE_DP(n) "vpdpbusd %%zmm0, %%zmm1, %%zmm" #n "\n\t"
__attribute__((target("avx512f,avx512vnni"), noinline)) void vnni_loop(int64_t iters) {
  __asm__ volatile(
      "mov $0x01020304, %%eax\n\tvpbroadcastd %%eax, %%zmm0\n\t"
      "mov $0x05060708, %%eax\n\tvpbroadcastd %%eax, %%zmm1\n\t"
      "1:\n\t" ZENMOE_DP(2) ZENMOE_DP(3) ZENMOE_DP(4) ZENMOE_DP(5) ZENMOE_DP(6) ZENMOE_DP(7) ZENMOE_DP(8)
      ZENMOE_DP(9) ZENMOE_DP(10) ZENMOE_DP(11) ZENMOE_DP(12) ZENMOE_DP(13) ZENMOE_DP(14) ZENMOE_DP(15)
      ZENMOE_DP(16) ZENMOE_DP(17)
      "dec %0\n\tjnz 1b\n\tvzeroupper"
      : "+r"(iters)
      :
      : "eax", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17");
}
#undef ZENMOE_DP

// Thread CPU time: the machine is shared, so rates are per second of this thread on a core.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Int8 ops per second of one core's vpdpbusd (2 ops per byte product), best of a few runs.
double vnni_peak_gops() {
  static double peak = 0;
  if (peak > 0 || !isa::host_supports(isa::IsaLevel::kAvx512Vnni)) return peak;
  constexpr int64_t kIters = 20'000'000;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = thread_seconds();
    vnni_loop(kIters);
    const double s = thread_seconds() - t0;
    const double gops = double(kIters) * 16 * 128 / s / 1e9;
    if (gops > peak) peak = gops;
  }
  return peak;
}

void BM_VnniPeak(benchmark::State& state) {
  if (!isa::host_supports(isa::IsaLevel::kAvx512Vnni)) return state.SkipWithError("host lacks AVX512_VNNI");
  constexpr int64_t kIters = 1'000'000;
  for (auto _ : state) vnni_loop(kIters);
  state.counters["GOPS"] = benchmark::Counter(double(kIters) * 16 * 128 * 1e-9 * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

struct Shape {
  int64_t cols, rows;
};

// `dram`: the weights read from memory, as a model's layers read theirs (copies cycled through,
// together far larger than the L3), else resident in the caches.
void BM_Gemm(benchmark::State& state, GgmlType f, Shape s, int64_t n, bool gemv_loop, bool dram) {
  const isa::Target target{isa::IsaLevel::kAvx512Vnni, isa::host_tuning()};
  if (!isa::host_supports(isa::IsaLevel::kAvx512Vnni)) return state.SkipWithError("host lacks AVX512_VNNI");
  const KernelDesc d = gemv_loop ? default_gemv_desc(f, static_cast<int32_t>(s.cols), target)
                                 : default_gemm_desc(f, static_cast<int32_t>(s.cols), target);
  auto k = global_registry().get(d);
  if (!k) return state.SkipWithError(k.error().c_str());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(s.rows * s.cols)), xf(static_cast<size_t>(n * s.cols));
  for (auto& v : wf) v = u(rng) * 0.05f;
  for (auto& v : xf) v = u(rng);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes(f, s.cols) * s.rows));
  ref::quantize_row(f, wf.data(), w.data(), s.rows * s.cols);
  auto p = pack_weights(f, d.row_block, w.data(), w.size(), s.rows, s.cols);
  if (!p) return state.SkipWithError(p.error().c_str());
  const GgmlType act = format_traits(f)->vec_dot_type;
  const int64_t xs = row_bytes(act, s.cols);
  std::vector<uint8_t> x(static_cast<size_t>(xs * n));
  ref::quantize_row(act, xf.data(), x.data(), n * s.cols);
  std::vector<float> y(static_cast<size_t>(n * s.rows));
  GemmCall c;
  c.w = p->data.get();
  c.x = x.data();
  c.y = y.data();
  c.r1 = s.rows;
  c.n = n;
  c.x_stride = xs;
  c.y_stride = s.rows;
  (*k)->gemm(c);
  // dram: copies of the packed weights side by side (64-byte aligned each), 256 MB together.
  const auto stride = static_cast<size_t>((p->layout.total_bytes + 63) / 64 * 64);
  const size_t copies = dram ? (size_t{256} << 20) / stride + 1 : 0;
  std::unique_ptr<uint8_t[], AlignedFree> far(dram ? static_cast<uint8_t*>(std::aligned_alloc(64, copies * stride))
                                                   : nullptr);
  if (dram && !far) return state.SkipWithError("cannot allocate the copies of the weights");
  for (size_t i = 0; i < copies; ++i)
    std::memcpy(far.get() + i * stride, p->data.get(), static_cast<size_t>(p->layout.total_bytes));
  size_t next = 0;
  for (auto _ : state) {
    if (dram) {
      c.w = far.get() + next * stride;
      next = next + 1 == copies ? 0 : next + 1;
    }
    (*k)->gemm(c);
    benchmark::ClobberMemory();
  }
  const double ops = 2.0 * double(s.rows) * double(s.cols) * double(n) * double(state.iterations());
  state.counters["GOPS"] = benchmark::Counter(ops * 1e-9, benchmark::Counter::kIsRate);
  const double peak = vnni_peak_gops();
  state.counters["frac_vnni_peak"] = benchmark::Counter(peak > 0 ? ops * 1e-9 / peak : 0, benchmark::Counter::kIsRate);
  state.counters["vnni_peak_GOPS"] = peak;
  state.SetLabel((*k)->name());
}

struct Registrar {
  Registrar() {
    benchmark::RegisterBenchmark("vnni_peak", BM_VnniPeak)->Unit(benchmark::kMillisecond);
    for (Shape s : {Shape{2048, 512}, Shape{512, 2048}, Shape{2048, 4608}})
      for (int64_t n : {2, 4, 8, 16, 32, 128, 512})
        for (bool loop : {false, true}) {
          const std::string name = std::string(loop ? "gemv_loop" : "gemm") + "_q4k/" + std::to_string(s.cols) +
                                   "x" + std::to_string(s.rows) + "/n:" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, GgmlType::Q4_K, s, n, loop, false)
              ->Unit(benchmark::kMicrosecond);
        }
    // Expert-shaped Q4_K weights from memory, one token (the GEMV) and a few (its passes).
    for (Shape s : {Shape{2048, 512}, Shape{512, 2048}})
      for (int64_t n : {1, 2, 4, 8}) {
        const std::string name = "gemv_loop_q4k_dram/" + std::to_string(s.cols) + "x" + std::to_string(s.rows) +
                                 "/n:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, GgmlType::Q4_K, s, n, true, true)
            ->Unit(benchmark::kMicrosecond);
      }
    // Q6_K (the output matrix of Q4_K_S files) a few tokens at a time: the GEMM against the
    // GEMV kernel's GemmCall (passes of up to 4 tokens over the weights on AVX-512 VNNI).
    for (int64_t n : {2, 4, 8, 16})
      for (bool loop : {false, true}) {
        const std::string name =
            std::string(loop ? "gemv_loop" : "gemm") + "_q6k/2048x1024/n:" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, GgmlType::Q6_K, Shape{2048, 1024}, n, loop, false)
            ->Unit(benchmark::kMicrosecond);
      }
    // Q5_K, Q6_K and Q8_0 (also the transcoded Q5_0 weights) at the expert shapes, and the
    // bench preset's dense down projection (Q5_K in its Q4_K_S file).
    for (GgmlType f : {GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0})
      for (Shape s : {Shape{2048, 512}, Shape{512, 2048}, Shape{4608, 2048}})
        for (int64_t n : {32, 128}) {
          const std::string name = std::string("gemm_") + format_short_name(f) + "/" + std::to_string(s.cols) + "x" +
                                   std::to_string(s.rows) + "/n:" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, f, s, n, false, false)->Unit(benchmark::kMicrosecond);
        }
  }
} registrar;

}  // namespace
}  // namespace zenmoe
