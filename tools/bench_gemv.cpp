#include "tools/bench_gemv.h"

#include <algorithm>
#include <cstdlib>

namespace zenmoe::tools {

// Defined beside their runners.
Expected<std::unique_ptr<GemvRunner>> make_cxx_loop_runner(const std::string& format,
                                                            const std::string& isa_cap,
                                                            int64_t rows, int64_t cols);
Expected<std::unique_ptr<GemvRunner>> make_onednn_runner(const std::string& format, int64_t rows,
                                                          int64_t cols);
Expected<std::unique_ptr<GemvRunner>> make_jit_runner(const std::string& format,
                                                       const std::string& isa_cap, int64_t rows,
                                                       int64_t cols);
Expected<std::unique_ptr<GemvRunner>> make_jit_fused_runner(const std::string& format,
                                                             const std::string& isa_cap, int64_t rows,
                                                             int64_t cols);

const std::vector<GemvShape>& standard_shapes() {
  // Kimi-K2 (hidden 7168, expert ffn 2048, dense ffn 18432, vocab 163840) and the `bench`
  // preset (hidden 2048, expert ffn 512, dense ffn 4608, vocab 1024).
  static const std::vector<GemvShape> kShapes = {
      {"kimi_expert_gate_up", 7168, 2048}, {"kimi_expert_down", 2048, 7168},
      {"kimi_dense_gate_up", 7168, 18432}, {"kimi_output", 7168, 163840},
      {"bench_expert_gate_up", 2048, 512}, {"bench_expert_down", 512, 2048},
      {"bench_dense_gate_up", 2048, 4608}, {"bench_dense_down", 4608, 2048},
      {"bench_output", 2048, 1024},
  };
  return kShapes;
}

Expected<GemvShape> parse_shape(const std::string& s) {
  for (const auto& sh : standard_shapes())
    if (sh.name == s) return sh;
  size_t x = s.find('x');
  if (x != std::string::npos && x > 0 && x + 1 < s.size()) {
    char* e1 = nullptr;
    char* e2 = nullptr;
    long long k = std::strtoll(s.c_str(), &e1, 10);
    long long n = std::strtoll(s.c_str() + x + 1, &e2, 10);
    if (e1 == s.c_str() + x && *e2 == '\0' && k > 0 && n > 0 && k <= (1 << 20) && n <= (1 << 22))
      return GemvShape{s, k, n};
  }
  std::string names;
  for (const auto& sh : standard_shapes()) names += (names.empty() ? "" : ", ") + sh.name;
  return Error{"unknown shape '" + s + "' (expected COLSxROWS such as 7168x2048, or one of " + names + ")"};
}

const char* regime_name(Regime r) {
  switch (r) {
    case Regime::kDram: return "dram";
    case Regime::kL2: return "l2";
    case Regime::kL3: return "l3";
  }
  return "?";
}

Expected<Regime> parse_regime(const std::string& s) {
  if (s == "dram") return Regime::kDram;
  if (s == "l2") return Regime::kL2;
  if (s == "l3") return Regime::kL3;
  return Error{"unknown regime '" + s + "' (expected dram, l2 or l3)"};
}

Expected<std::unique_ptr<GemvRunner>> make_runner(const RunnerRequest& req, int64_t rows,
                                                   int64_t cols) {
  switch (req.family) {
    case Family::kCxxLoop: return make_cxx_loop_runner(req.format, req.isa_cap, rows, cols);
    case Family::kOneDnn: return make_onednn_runner(req.format, rows, cols);
    case Family::kJit: return make_jit_runner(req.format, req.isa_cap, rows, cols);
    case Family::kJitFused: return make_jit_fused_runner(req.format, req.isa_cap, rows, cols);
  }
  return Error{"unknown kernel family"};
}

CasePlan plan_case(Regime regime, int64_t rows, int64_t bytes_per_row, int64_t row_block,
                   int threads, const CacheSizes& caches, int64_t dram_bytes) {
  CasePlan p;
  bytes_per_row = std::max<int64_t>(1, bytes_per_row);
  row_block = std::max<int64_t>(1, row_block);
  const int64_t matrix = rows * bytes_per_row;
  if (regime == Regime::kDram) {
    p.rows = rows;
    p.copies = static_cast<int>(std::max<int64_t>(1, (dram_bytes + matrix - 1) / matrix));
  } else {
    int64_t budget = regime == Regime::kL2
                         ? caches.l2 / 2 * threads
                         : std::min<int64_t>(caches.l3, int64_t{32} << 20) / 2;
    int64_t fit = budget / bytes_per_row / row_block * row_block;
    p.rows = std::clamp<int64_t>(fit, std::min(rows, row_block), rows);
    p.copies = 1;
  }
  p.working_set = p.rows * bytes_per_row * p.copies;
  return p;
}

std::vector<int64_t> split_rows(int64_t rows, int64_t row_block, int threads) {
  row_block = std::max<int64_t>(1, row_block);
  threads = std::max(1, threads);
  const int64_t blocks = (rows + row_block - 1) / row_block;
  std::vector<int64_t> bounds(static_cast<size_t>(threads) + 1);
  for (int i = 0; i <= threads; ++i)
    bounds[static_cast<size_t>(i)] = std::min(rows, blocks * i / threads * row_block);
  return bounds;
}

CaseResult measure_case(GemvRunner& runner, ThreadTeam& team, Regime regime, int copies,
                        double read_bw_gbps, const MeasureOptions& opt) {
  const int t = team.size();
  const int64_t rows = runner.rows();
  const std::vector<int64_t> bounds = split_rows(rows, runner.row_block(), t);
  int copy = 0;
  auto job = [&](int tid) {
    runner.run(copy, bounds[static_cast<size_t>(tid)], bounds[static_cast<size_t>(tid) + 1]);
  };
  std::function<void()> call;
  if (runner.self_threaded()) {
    runner.set_threads(t);
    call = [&] {
      runner.run(copy, 0, rows);
      copy = copy + 1 == copies ? 0 : copy + 1;
    };
  } else {
    call = [&] {
      team.run(job);
      copy = copy + 1 == copies ? 0 : copy + 1;
    };
  }
  // Cache regimes: warm the caches with a few calls inside time_calls' calibration batch.
  int64_t min_calls = regime == Regime::kDram ? copies : 4;
  if (runner.self_threaded()) team.unpin_caller();  // its pool must not inherit one CPU
  TimingResult tr = time_calls(call, opt.min_time, opt.reps, min_calls, t);
  if (runner.self_threaded()) team.pin_caller();
  CaseResult r;
  r.kernel = runner.kernel();
  r.format = runner.format();
  r.impl = runner.impl();
  r.rows = rows;
  r.cols = runner.cols();
  r.measured_rows = rows;
  r.regime = regime;
  r.threads = t;
  r.copies = copies;
  r.bytes_per_call = runner.matrix_bytes();
  r.seconds = tr.median_s;
  r.weight_gbps = static_cast<double>(r.bytes_per_call) / tr.median_s / 1e9;
  r.read_bw_gbps = read_bw_gbps;
  r.fraction_of_read_bw = read_bw_gbps > 0 ? r.weight_gbps / read_bw_gbps : 0;
  r.gflops = 2.0 * static_cast<double>(rows) * static_cast<double>(r.cols) / tr.median_s / 1e9;
  r.reps = tr.reps;
  return r;
}

}  // namespace zenmoe::tools
