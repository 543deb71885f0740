// Throughput of the scalar reference numerics (the baseline every fast kernel is measured
// against): dequantisation, activation quantisation and dot products over one Kimi-K2
// hidden-size row (7168), repeated over enough rows to leave L1.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/quant.h"

namespace zenmoe::ref {
namespace {

constexpr int64_t kCols = 7168;
constexpr int64_t kRows = 64;

std::vector<float> random_floats(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = d(rng);
  return v;
}

std::vector<uint8_t> quantised_rows(GgmlType t, const std::vector<float>& x, int64_t rows) {
  const int64_t rb = row_bytes(t, kCols);
  std::vector<uint8_t> q(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, x.data() + r * kCols, q.data() + r * rb, kCols);
  return q;
}

void BM_Dequantize(benchmark::State& state, GgmlType t) {
  const auto x = random_floats(kCols * kRows);
  const auto q = quantised_rows(t, x, kRows);
  const int64_t rb = row_bytes(t, kCols);
  std::vector<float> y(kCols);
  int64_t r = 0;
  for (auto _ : state) {
    dequantize_row(t, q.data() + (r++ % kRows) * rb, y.data(), kCols);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rb);
}

void BM_Quantize(benchmark::State& state, GgmlType t) {
  const auto x = random_floats(kCols * kRows);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, kCols)));
  int64_t r = 0;
  for (auto _ : state) {
    quantize_row(t, x.data() + (r++ % kRows) * kCols, q.data(), kCols);
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * kCols);
}

// Weight bytes per second of y[r] = W[r] · x for a weight format and its activation format.
void BM_VecDot(benchmark::State& state, GgmlType t) {
  const auto wf = random_floats(kCols * kRows);
  const auto w = quantised_rows(t, wf, kRows);
  const GgmlType at = format_traits(t)->vec_dot_type;
  const auto x = random_floats(kCols);
  std::vector<uint8_t> xq(static_cast<size_t>(row_bytes(at, kCols)));
  quantize_row(at, x.data(), xq.data(), kCols);
  const int64_t rb = row_bytes(t, kCols);
  int64_t r = 0;
  for (auto _ : state) {
    float s = vec_dot_row(t, w.data() + (r++ % kRows) * rb, xq.data(), kCols);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(state.iterations() * rb);
}

// Registered at start-up from one list so the names follow the format names.
const bool kRegistered = [] {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const std::string name = type_name(t);
    benchmark::RegisterBenchmark(("ref_dequantize/" + name).c_str(), BM_Dequantize, t);
    benchmark::RegisterBenchmark(("ref_vec_dot/" + name).c_str(), BM_VecDot, t);
  }
  for (GgmlType t : {GgmlType::Q8_K, GgmlType::Q8_0, GgmlType::Q4_K})
    benchmark::RegisterBenchmark(("ref_quantize/" + std::string(type_name(t))).c_str(), BM_Quantize, t);
  return true;
}();

}  // namespace
}  // namespace zenmoe::ref
