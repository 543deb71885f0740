// `zenmoe bench bandwidth`: the read bandwidth every other figure is compared against.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/args.h"
#include "tools/bench.h"
#include "tools/roofline.h"

namespace zenmoe::tools {

int bench_bandwidth(int argc, char** argv, int first) {
  const std::vector<FlagSpec> specs = {
      {"threads", "t", true, "measure 1..N threads (default: every CPU this process may use)"},
      {"json", "", false, "print a JSON list, one object per thread count"},
      {"buffer-mib", "", true, "buffer size in MiB (default: 4x L3 and at least 1024)"},
      {"reps", "", true, "timed passes per thread count; the median is reported (default 7)"},
      {"isa", "", true, "cap the load instructions: avx512, avx2 or scalar"},
      {"clock", "", true, "wall (default) or cpu: process CPU time / threads"},
      {"help", "h", false, "print this help"},
  };
  auto args = Args::parse(argc, argv, first, specs);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("bench bandwidth [options]", specs).c_str());
    return 0;
  }
  if (!args->positionals().empty()) return fail("bench bandwidth takes no positional argument ('" + args->positionals()[0] + "')");
  const CacheSizes caches = read_cache_sizes();
  auto threads = args->get_int("threads", static_cast<int64_t>(allowed_cpus().size()), 1, 1024);
  auto mib = args->get_int("buffer-mib", dram_working_set_bytes(caches) >> 20, 1, int64_t{1} << 20);
  auto reps = args->get_int("reps", 7, 1, 1000);
  auto isa = choose_load_isa(args->get("isa"));
  auto clock = parse_measure_clock(args->get("clock", "wall"));
  for (const Status& s : {threads.status(), mib.status(), reps.status(), isa.status(), clock.status()})
    if (!s.is_ok()) return fail(s.message());
  set_measure_clock(*clock);
  auto probe = BandwidthProbe::make(*mib << 20, *isa);
  if (!probe) return fail(probe.error());

  nlohmann::json out = nlohmann::json::array();
  const bool json = args->has("json");
  if (!json)
    std::printf("read bandwidth, %s loads, %lld MiB buffer (L3 %lld MiB%s), the best of 1 and %d streams per "
                "thread, each without and with a prefetch %d bytes ahead\n%8s %10s %10s %10s %8s %9s\n",
                load_isa_name(*isa), static_cast<long long>(*mib),
                static_cast<long long>(caches.l3 >> 20), caches.from_sysfs ? "" : ", assumed", kProbeStreams,
                kProbePrefetch, "threads", "GB/s", "min", "max", "streams", "prefetch");
  for (int t = 1; t <= *threads; ++t) {
    ThreadTeam team(t);
    BandwidthResult r = probe->measure(team, static_cast<int>(*reps));
    if (json) {
      out.push_back({{"threads", t}, {"read_bw_gbps", r.median_gbps}, {"min_gbps", r.min_gbps},
                     {"max_gbps", r.max_gbps}, {"buffer_bytes", r.buffer_bytes}, {"reps", r.reps},
                     {"isa", load_isa_name(r.isa)}, {"streams", r.streams}, {"prefetch", r.prefetch}, {"l3_bytes", caches.l3},
                     {"clock", measure_clock_name()}});
    } else {
      std::printf("%8d %10.2f %10.2f %10.2f %8d %9d\n", t, r.median_gbps, r.min_gbps, r.max_gbps, r.streams,
                  r.prefetch);
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace zenmoe::tools
