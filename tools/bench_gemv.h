// GEMV benchmark cases shared by `zenmoe bench kernels` and bench/gemv_bench.cpp: the
// shapes (Kimi-K2 and the `bench` preset), the cache regimes, the runner interface every
// kernel family implements (generated kernels, compiler-vectorised loops, oneDNN), and the
// measurement of one case against the read bandwidth measured in the same run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"
#include "tools/roofline.h"

namespace zenmoe::tools {

// y[rows] = W[rows × cols] · x[cols]; "cols → rows" in model terms (in_features → out).
struct GemvShape {
  std::string name;  // e.g. "kimi_gate_up"
  int64_t cols = 0;  // K, the reduction length
  int64_t rows = 0;  // N, output features
};
const std::vector<GemvShape>& standard_shapes();
// A name from standard_shapes() or "KxN" (cols x rows, e.g. "7168x2048").
Expected<GemvShape> parse_shape(const std::string& s);

enum class Regime { kDram, kL2, kL3 };
const char* regime_name(Regime r);
Expected<Regime> parse_regime(const std::string& s);

// One kernel over one matrix size, with `copies` distinct weight copies so the DRAM regime
// can rotate through more bytes than the caches hold. Everything that compiles, packs or
// allocates happens in prepare(); run() only computes.
class GemvRunner {
 public:
  virtual ~GemvRunner() = default;
  virtual std::string kernel() const = 0;  // canonical name (the same in logs and dumps)
  virtual std::string format() const = 0;  // weight format, e.g. "q4_K", "f32", "s8"
  virtual std::string impl() const { return ""; }  // extra detail (oneDNN's implementation)
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  // Bytes of one copy of the weights as the kernel streams them (packed layout).
  virtual int64_t matrix_bytes() const = 0;
  // Rows are split across threads in multiples of this.
  virtual int64_t row_block() const { return 1; }
  // True when the implementation parallelises itself (oneDNN): run() is then called once,
  // by one thread, with all rows, after set_threads().
  virtual bool self_threaded() const { return false; }
  virtual void set_threads(int threads) { (void)threads; }
  virtual Status prepare(int copies) = 0;
  // Rows [r0, r1) of copy `copy`. Safe to call concurrently on disjoint row ranges.
  virtual void run(int copy, int64_t r0, int64_t r1) = 0;
};

// Kernel families measured by `zenmoe bench kernels`. kJitFused: the fused expert
// gate + up + SwiGLU + Q8_K kernel (Q4_K) over the same rows, read as interleaved gate/up
// pairs (rows / 2 outputs), so it streams the same bytes as the plain GEMV.
enum class Family { kJit, kCxxLoop, kOneDnn, kJitFused };

// A request for one runner: family + weight format (GGUF formats for jit / cxx, or the
// oneDNN data types "f32", "bf16", "s8").
struct RunnerRequest {
  Family family = Family::kCxxLoop;
  std::string format;
  std::string isa_cap;  // "" = the best the host has
};

// Builds the runner, or an Error saying why this family cannot run this format here.
Expected<std::unique_ptr<GemvRunner>> make_runner(const RunnerRequest& req, int64_t rows,
                                                   int64_t cols);

// Sizing of one case: which rows are measured and how many weight copies rotate.
struct CasePlan {
  int64_t rows = 0;     // rows actually computed per call (all of them in the DRAM regime)
  int copies = 1;       // distinct weight copies cycled through
  int64_t working_set = 0;  // rows × row bytes × copies
};
// DRAM: all rows, copies until the total reaches dram_bytes. L2: rows fitting half of one
// L2 per thread. L3: rows fitting half of min(L3, 32 MiB) (a guest's L3 figure may be a
// whole socket shared with others; 32 MiB is one Zen CCD's).
CasePlan plan_case(Regime regime, int64_t rows, int64_t bytes_per_row, int64_t row_block,
                   int threads, const CacheSizes& caches, int64_t dram_bytes);

// Row boundaries of `threads` contiguous slices (threads + 1 values), each a multiple of
// row_block except where the last one ends at `rows`.
std::vector<int64_t> split_rows(int64_t rows, int64_t row_block, int threads);

struct CaseResult {
  std::string kernel, format, impl, shape;
  int64_t rows = 0, cols = 0;   // the shape
  int64_t measured_rows = 0;    // rows computed per call (fewer in cache regimes)
  Regime regime = Regime::kDram;
  int threads = 1;
  int copies = 1;
  int64_t bytes_per_call = 0;
  double seconds = 0;           // median per call
  double weight_gbps = 0;
  double read_bw_gbps = 0;
  double fraction_of_read_bw = 0;
  double gflops = 0;
  int reps = 0;
  int round = 0;                // bench kernels --rounds: which pass over the list
};

struct MeasureOptions {
  double min_time = 0.5;  // seconds per measurement (all repetitions)
  int reps = 5;
};

// Runs the runner (already prepared with plan.copies copies, built for plan.rows rows) on
// the team, rows split across members, cycling through the copies. read_bw_gbps is the
// bandwidth the caller measured just before.
CaseResult measure_case(GemvRunner& runner, ThreadTeam& team, Regime regime, int copies,
                        double read_bw_gbps, const MeasureOptions& opt);

}  // namespace zenmoe::tools
