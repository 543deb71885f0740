// `zenmoe bench compute`: how many of each instruction form the kernels are built from a core
// issues per second (FMA with register or broadcast memory operands, F16 widening, VNNI and
// BF16 dot products), 1..N threads: the compute side of the roofline. A kernel's GFLOP/s in a
// cache-resident regime reads against these, as its DRAM figures read against `bench
// bandwidth`.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "codegen/isa.h"
#include "codegen/x64/throughput_loop.h"
#include "tools/args.h"
#include "tools/bench.h"
#include "tools/roofline.h"

namespace zenmoe::tools {

namespace {

// Iterations per call: ~2.4 M instructions, about a millisecond at two per cycle.
constexpr int64_t kIterations = 100000;
// Each thread's memory operands: a page of its own.
constexpr size_t kSlice = 4096;
static_assert(kSlice >= x64::kThroughputBufferBytes);

}  // namespace

int bench_compute(int argc, char** argv, int first) {
  const std::vector<FlagSpec> specs = {
      {"threads", "t", true, "measure 1..N threads (default: every CPU this process may use)"},
      {"json", "", false, "print a JSON list, one object per instruction form and thread count"},
      {"min-time", "", true, "seconds per measurement over all repetitions (default 0.3)"},
      {"reps", "", true, "repetitions; the median is reported (default 5)"},
      {"isa", "", true, "cap the instruction forms probed (e.g. avx2, avx512)"},
      {"clock", "", true, "wall (default) or cpu: process CPU time / threads"},
      {"help", "h", false, "print this help"},
  };
  auto args = Args::parse(argc, argv, first, specs);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("bench compute [options]", specs).c_str());
    return 0;
  }
  if (!args->positionals().empty()) return fail("bench compute takes no positional argument ('" + args->positionals()[0] + "')");
  auto threads = args->get_int("threads", static_cast<int64_t>(allowed_cpus().size()), 1, 1024);
  auto min_time = args->get_double("min-time", 0.3, 1e-4, 3600);
  auto reps = args->get_int("reps", 5, 1, 1000);
  auto target = isa::resolve_target(args->get("isa"));
  auto clock = parse_measure_clock(args->get("clock", "wall"));
  for (const Status& s : {threads.status(), min_time.status(), reps.status(), target.status(), clock.status()})
    if (!s.is_ok()) return fail(s.message());
  set_measure_clock(*clock);
  const std::vector<x64::ThroughputInfo> ops = x64::throughput_ops(target->level);
  if (ops.empty()) return fail(std::string("no instruction form to probe at the ") + isa::level_name(target->level) + " level");

  // Memory operands: one L1-resident buffer per thread (zeros: no denormal, no NaN).
  auto buf = AlignedBuffer::make(static_cast<size_t>(*threads) * kSlice);
  if (!buf) return fail(buf.error());
  const bool json = args->has("json");
  nlohmann::json out = nlohmann::json::array();
  if (!json)
    std::printf("instruction issue rates, %d instructions per loop iteration into 12 destinations, median of %d\n"
                "%-26s %8s %12s %12s %12s  %s\n",
                x64::kThroughputInstrs, static_cast<int>(*reps), "instruction", "threads", "G instr/s", "per core",
                "G ops/s", "ops");
  for (const x64::ThroughputInfo& info : ops) {
    auto loop = x64::ThroughputLoop::make(info.op, target->level);
    if (!loop) return fail(loop.error());
    for (int t = 1; t <= *threads; ++t) {
      ThreadTeam team(t);
      auto job = [&](int tid) { (*loop)->run(kIterations, buf->data() + static_cast<size_t>(tid) * kSlice); };
      const TimingResult tr = time_calls([&] { team.run(job); }, *min_time, static_cast<int>(*reps), 1, t);
      const double instrs = static_cast<double>(t) * static_cast<double>(kIterations * x64::kThroughputInstrs);
      const double ginstr = instrs / tr.median_s / 1e9;
      const double gops = ginstr * info.ops_per_instr;
      if (json) {
        out.push_back({{"instruction", info.name}, {"threads", t}, {"ginstr_per_s", ginstr},
                       {"ginstr_per_s_per_core", ginstr / t}, {"gops_per_s", gops}, {"op", info.unit},
                       {"ops_per_instr", info.ops_per_instr}, {"level", isa::level_name(info.level)},
                       {"reps", tr.reps}, {"clock", measure_clock_name()}});
      } else {
        std::printf("%-26s %8d %12.2f %12.2f %12.1f  %s (%d per instruction)\n", info.name, t, ginstr, ginstr / t,
                    gops, info.unit, info.ops_per_instr);
      }
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace zenmoe::tools
