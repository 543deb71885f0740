// GEMV kernels and baselines at Kimi-K2 and `bench` preset shapes, DRAM and cache-resident
// regimes, 1 and 2 threads; counters are weight GB/s, the fraction of the read bandwidth
// measured in this process (at most 30 s before the case), and GFLOP/s. Kernels are
// generated and weights packed before the timed loop.
//
// Case names: <kernel>/<shape>/<regime>/threads:<n>, e.g.
//   cxx_loop_q4k/kimi_expert_gate_up/dram/threads:1
// Filter with --benchmark_filter, e.g. --benchmark_filter='q4k.*kimi.*dram'.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "tools/bench_gemv.h"
#include "tools/roofline.h"

namespace zenmoe::tools {
namespace {

struct BenchCase {
  RunnerRequest req;
  std::string kernel;  // name the case is registered under
  GemvShape shape;
  Regime regime;
  int threads;
};

// One probe buffer for the whole process; a figure is re-measured when older than 30 s so
// every case is compared with the bandwidth of its own moment on a noisy machine.
double read_bandwidth(ThreadTeam& team) {
  static std::unique_ptr<BandwidthProbe> probe;
  static std::map<int, std::pair<double, double>> cache;  // threads -> (time, GB/s)
  if (!probe) {
    auto isa = choose_load_isa("");
    auto p = BandwidthProbe::make(dram_working_set_bytes(read_cache_sizes()), *isa);
    if (!p) return 0;
    probe = std::make_unique<BandwidthProbe>(std::move(*p));
  }
  auto it = cache.find(team.size());
  if (it != cache.end() && now_seconds() - it->second.first < 30) return it->second.second;
  double bw = probe->measure(team, 5).median_gbps;
  cache[team.size()] = {now_seconds(), bw};
  return bw;
}

void BM_ReadBandwidth(benchmark::State& state) {
  ThreadTeam team(static_cast<int>(state.range(0)));
  auto isa = choose_load_isa("");
  auto probe = BandwidthProbe::make(dram_working_set_bytes(read_cache_sizes()), *isa);
  if (!probe) return state.SkipWithError(probe.error().c_str());
  BandwidthResult last;
  for (auto _ : state) last = probe->measure(team, 1);
  state.counters["read_GBps"] = last.median_gbps;
  state.SetLabel(load_isa_name(*isa));
}

void BM_Gemv(benchmark::State& state, const BenchCase& c) {
  const CacheSizes caches = read_cache_sizes();
  auto probe_runner = make_runner(c.req, 16, c.shape.cols);
  if (!probe_runner) return state.SkipWithError(probe_runner.error().c_str());
  const int64_t bpr = (*probe_runner)->matrix_bytes() / (*probe_runner)->rows();
  probe_runner->reset();
  CasePlan plan = plan_case(c.regime, c.shape.rows, bpr, 16, c.threads, caches,
                            dram_working_set_bytes(caches));
  auto made = make_runner(c.req, plan.rows, c.shape.cols);
  if (!made) return state.SkipWithError(made.error().c_str());
  GemvRunner& runner = **made;
  if (Status st = runner.prepare(plan.copies); !st) return state.SkipWithError(st.message().c_str());
  ThreadTeam team(c.threads);
  const double bw = read_bandwidth(team);
  const int64_t rows = runner.rows();
  const std::vector<int64_t> bounds = split_rows(rows, runner.row_block(), c.threads);
  int copy = 0;
  auto job = [&](int tid) { runner.run(copy, bounds[tid], bounds[tid + 1]); };
  if (runner.self_threaded()) {
    runner.set_threads(c.threads);
    team.unpin_caller();
  }
  for (int i = 0; i < std::min(plan.copies, 4); ++i) runner.self_threaded() ? runner.run(i, 0, rows) : team.run(job);
  for (auto _ : state) {
    if (runner.self_threaded()) runner.run(copy, 0, rows);
    else team.run(job);
    copy = copy + 1 == plan.copies ? 0 : copy + 1;
  }
  const double calls = static_cast<double>(state.iterations());
  const double gb = static_cast<double>(runner.matrix_bytes()) * calls / 1e9;
  state.counters["weight_GBps"] = benchmark::Counter(gb, benchmark::Counter::kIsRate);
  state.counters["frac_read_bw"] = benchmark::Counter(bw > 0 ? gb / bw : 0, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] = benchmark::Counter(2e-9 * static_cast<double>(rows) *
                                                    static_cast<double>(c.shape.cols) * calls,
                                                benchmark::Counter::kIsRate);
  state.counters["read_bw_GBps"] = bw;
  state.counters["rows"] = static_cast<double>(rows);
  state.SetLabel(runner.impl());
}

std::vector<BenchCase> all_cases() {
  std::vector<RunnerRequest> reqs;
  for (const char* f : {"q4_K", "q5_K", "q6_K", "q8_0", "q4_0", "bf16", "f16", "f32"}) {
    reqs.push_back({Family::kJit, f, ""});
    reqs.push_back({Family::kCxxLoop, f, ""});
  }
  reqs.push_back({Family::kJitFused, "q4_K", ""});  // same bytes as the q4_K GEMV, as gate/up pairs
  for (const char* t : {"f32", "bf16", "f16", "s8"}) reqs.push_back({Family::kOneDnn, t, ""});
  std::vector<BenchCase> out;
  for (const auto& req : reqs) {
    // The registered name is the runner's own canonical name (a 16-row instance only asks
    // for it; no weights are made).
    auto r = make_runner(req, 16, 2048);
    if (!r) continue;
    std::string kernel = (*r)->kernel();
    for (const auto& shape : standard_shapes())
      for (Regime regime : {Regime::kDram, Regime::kL2, Regime::kL3})
        for (int t : {1, 2}) out.push_back({req, kernel, shape, regime, t});
  }
  return out;
}

struct Registrar {
  Registrar() {
    benchmark::RegisterBenchmark("read_bandwidth", BM_ReadBandwidth)
        ->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const auto& c : all_cases()) {
      std::string name = c.kernel + "/" + c.shape.name + "/" + regime_name(c.regime) +
                         "/threads:" + std::to_string(c.threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemv, c)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
    }
  }
} registrar;

}  // namespace
}  // namespace zenmoe::tools
