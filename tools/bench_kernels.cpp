// `zenmoe bench kernels`: every GEMV kernel and baseline over model shapes in the DRAM and
// cache-resident regimes, each figure next to the read bandwidth measured just before it.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codegen/registry.h"
#include "tools/args.h"
#include "tools/bench.h"
#include "tools/bench_gemv.h"
#include "tools/roofline.h"

namespace zenmoe::tools {
namespace {

constexpr const char* kAllFormats = "q4_K,q5_K,q6_K,q8_0,q4_0,q5_0,bf16,f16,f32";
constexpr const char* kOneDnnTypes[] = {"f32", "bf16", "f16", "s8"};

struct KernelsConfig {
  std::vector<std::string> formats;
  std::vector<GemvShape> shapes;
  std::vector<int> threads;
  std::vector<Regime> regimes;
  std::set<Family> families;
  MeasureOptions opt;
  int rounds = 1;
  int64_t dram_bytes = 0;
  int64_t max_matrix_bytes = 0;
  std::string isa, dump_dir;
  bool json = false;
};

const std::vector<FlagSpec>& kernels_flags() {
  static const std::vector<FlagSpec> specs = {
      {"json", "", false, "print a JSON list, one object per measurement"},
      {"formats", "", true, std::string("weight formats (default ") + kAllFormats + ")"},
      {"shapes", "", true, "shape names or COLSxROWS, comma separated (default: Kimi-K2 and bench preset)"},
      {"threads", "t", true, "thread counts, rows split across threads (default 1,2)"},
      {"regimes", "", true, "dram, l2, l3 (default all)"},
      {"kernels", "", true, "families: jit, fused (gate+up+SwiGLU, q4_K), cxx, onednn (default all)"},
      {"min-time", "", true, "seconds per measurement over all repetitions (default 0.5)"},
      {"reps", "", true, "repetitions; the median is reported (default 5)"},
      {"rounds", "", true, "measure the whole list N times in turn; ratios are medians of same-round pairs (default 1)"},
      {"dram-mib", "", true, "bytes streamed in the DRAM regime and by the bandwidth probe (default: 4x L3, >= 1024)"},
      {"max-matrix-mib", "", true, "skip matrices larger than this (default 3072)"},
      {"dump", "", true, "write each generated kernel to DIR as a raw binary"},
      {"isa", "", true, "cap the ISA level (e.g. avx2, avx512)"},
      {"clock", "", true, "wall (default) or cpu: process CPU time / threads, for an oversubscribed machine"},
      {"help", "h", false, "print this help"},
  };
  return specs;
}

Status parse_lists(const Args& a, KernelsConfig& c) {
  for (const auto& f : split_list(a.get("formats", kAllFormats))) {
    GgmlType t;
    const std::vector<std::string> known = split_list(kAllFormats);
    if (!type_from_name(f.c_str(), &t) || std::find(known.begin(), known.end(), type_name(t)) == known.end())
      return Error{"--formats: unsupported format '" + f + "' (expected some of " + kAllFormats + ")"};
    c.formats.push_back(type_name(t));
  }
  std::string shapes_default;
  for (const auto& s : standard_shapes()) shapes_default += (shapes_default.empty() ? "" : ",") + s.name;
  for (const auto& s : split_list(a.get("shapes", shapes_default))) {
    auto sh = parse_shape(s);
    if (!sh) return Error{"--shapes: " + sh.error()};
    c.shapes.push_back(*sh);
  }
  for (const auto& r : split_list(a.get("regimes", "dram,l2,l3"))) {
    auto rg = parse_regime(r);
    if (!rg) return Error{"--regimes: " + rg.error()};
    c.regimes.push_back(*rg);
  }
  for (const auto& k : split_list(a.get("kernels", "jit,fused,cxx,onednn"))) {
    if (k == "jit") c.families.insert(Family::kJit);
    else if (k == "fused") c.families.insert(Family::kJitFused);
    else if (k == "cxx") c.families.insert(Family::kCxxLoop);
    else if (k == "onednn") c.families.insert(Family::kOneDnn);
    else return Error{"--kernels: unknown family '" + k + "' (expected jit, fused, cxx or onednn)"};
  }
  auto th = parse_thread_list("threads", a.get("threads", "1,2"));
  if (!th) return th.status();
  c.threads = *th;
  if (c.formats.empty() || c.shapes.empty() || c.regimes.empty() || c.families.empty())
    return Error{"nothing to measure: --formats, --shapes, --regimes and --kernels must not be empty"};
  return Status::ok();
}

Expected<KernelsConfig> parse_config(const Args& a) {
  KernelsConfig c;
  ZENMOE_RETURN_IF_ERROR(parse_lists(a, c));
  const CacheSizes caches = read_cache_sizes();
  auto min_time = a.get_double("min-time", 0.5, 1e-4, 3600);
  auto reps = a.get_int("reps", 5, 1, 1000);
  auto rounds = a.get_int("rounds", 1, 1, 100);
  auto dram = a.get_int("dram-mib", dram_working_set_bytes(caches) >> 20, 1, int64_t{1} << 20);
  auto maxm = a.get_int("max-matrix-mib", 3072, 1, int64_t{1} << 20);
  for (const Status& s : {min_time.status(), reps.status(), rounds.status(), dram.status(), maxm.status()})
    ZENMOE_RETURN_IF_ERROR(s);
  c.opt.min_time = *min_time;
  c.opt.reps = static_cast<int>(*reps);
  c.rounds = static_cast<int>(*rounds);
  c.dram_bytes = *dram << 20;
  c.max_matrix_bytes = *maxm << 20;
  c.isa = a.get("isa");
  auto isa = choose_load_isa(c.isa);
  if (!isa) return Error{"--isa: " + isa.error()};
  c.dump_dir = a.get("dump");
  if (a.has("dump")) {
    struct stat st;
    if (c.dump_dir.empty() || (stat(c.dump_dir.c_str(), &st) != 0 && mkdir(c.dump_dir.c_str(), 0755) != 0))
      return Error{"--dump: cannot create directory '" + c.dump_dir + "'"};
  }
  auto clock = parse_measure_clock(a.get("clock", "wall"));
  if (!clock) return Error{"--clock: " + clock.error()};
  set_measure_clock(*clock);
  c.json = a.has("json");
  return c;
}

// oneDNN baselines of a weight format in its own precision, best match first: the float
// formats against the same type (f16 falls back to bf16, the same bytes per weight, where
// oneDNN has no f16 matmul for the CPU), the quantised formats against u8 x s8.
std::vector<std::string> onednn_types_for(const std::string& format) {
  if (format == "f32") return {"f32"};
  if (format == "bf16") return {"bf16"};
  if (format == "f16") return {"f16", "bf16"};
  return {"s8"};
}

// Every runner request of the configuration, in table order: generated kernels first, then
// the fused gate+up kernel (q4_K only), the C++ loops, the oneDNN baselines of the formats.
std::vector<RunnerRequest> requests(const KernelsConfig& c) {
  std::vector<RunnerRequest> out;
  for (Family fam : {Family::kJit, Family::kJitFused, Family::kCxxLoop}) {
    if (!c.families.count(fam)) continue;
    for (const auto& f : c.formats)
      if (fam != Family::kJitFused || f == "q4_K") out.push_back({fam, f, c.isa});
  }
  if (!c.families.count(Family::kOneDnn)) return out;
  std::vector<std::string> types;
  for (const auto& f : c.formats)
    for (const auto& t : onednn_types_for(f))
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  for (const char* t : kOneDnnTypes)  // table order f32, bf16, f16, s8
    if (std::find(types.begin(), types.end(), t) != types.end()) out.push_back({Family::kOneDnn, t, c.isa});
  return out;
}

// Row bytes before the runner exists (its packed layout may differ a little).
int64_t approx_row_bytes(const RunnerRequest& r, int64_t cols) {
  if (r.family == Family::kOneDnn) return cols * (r.format == "f32" ? 4 : r.format == "s8" ? 1 : 2);
  GgmlType t;
  type_from_name(r.format.c_str(), &t);
  return row_bytes(t, cols);
}

nlohmann::json to_json(const CaseResult& r, int64_t working_set) {
  return {{"kernel", r.kernel}, {"format", r.format}, {"shape", r.shape}, {"rows", r.rows},
          {"cols", r.cols}, {"measured_rows", r.measured_rows}, {"regime", regime_name(r.regime)},
          {"threads", r.threads}, {"copies", r.copies}, {"working_set_bytes", working_set},
          {"bytes_per_call", r.bytes_per_call}, {"seconds_per_call", r.seconds},
          {"weight_gbps", r.weight_gbps}, {"read_bw_gbps", r.read_bw_gbps},
          {"fraction_of_read_bw", r.fraction_of_read_bw}, {"gflops", r.gflops}, {"reps", r.reps},
          {"impl", r.impl}, {"clock", measure_clock_name()}, {"round", r.round}};
}

void print_header() {
  std::printf("%-44s %-6s %-22s %6s %6s %-5s %3s %7s %10s %8s %8s %6s %8s  %s\n", "kernel", "format",
              "shape", "K", "N", "reg", "thr", "rows", "us/call", "GB/s", "bw GB/s", "%bw", "GFLOP/s",
              "impl");
  std::fflush(stdout);
}

void print_row(const CaseResult& r, FILE* out) {
  std::fprintf(out, "%-44s %-6s %-22s %6lld %6lld %-5s %3d %7lld %10.1f %8.2f %8.2f %5.1f%% %8.2f  %s\n",
              r.kernel.c_str(), r.format.c_str(), r.shape.c_str(), static_cast<long long>(r.cols),
              static_cast<long long>(r.rows), regime_name(r.regime), r.threads,
              static_cast<long long>(r.measured_rows), r.seconds * 1e6, r.weight_gbps, r.read_bw_gbps,
              100 * r.fraction_of_read_bw, r.gflops, r.impl.c_str());
  std::fflush(out);
}

// Measures one request over one shape in one regime for every thread count. Runners are
// rebuilt only when the plan (rows, copies) changes.
class CaseRunner {
 public:
  CaseRunner(const KernelsConfig& cfg, BandwidthProbe& probe, nlohmann::json& out)
      : cfg_(cfg), probe_(probe), out_(out), caches_(read_cache_sizes()) {}

  // Rounds measure the same list again; a measurement is compared only with the baselines of
  // its own round, so slow drifts of the host (bandwidth, clock) cancel in the ratios.
  void set_round(int round) { round_ = round; }

  void run(const GemvShape& shape, const RunnerRequest& req, Regime regime) {
    const int64_t bpr = approx_row_bytes(req, shape.cols);
    std::unique_ptr<GemvRunner> runner;
    CasePlan built;
    for (int t : cfg_.threads) {
      CasePlan plan = plan_case(regime, shape.rows, bpr, 16, t, caches_, cfg_.dram_bytes);
      if (plan.rows * bpr > cfg_.max_matrix_bytes) {
        note(req, shape, "skipped: matrix larger than --max-matrix-mib");
        return;
      }
      if (!runner || plan.rows != built.rows || plan.copies != built.copies) {
        runner.reset();
        auto r = make_runner(req, plan.rows, shape.cols);
        if (!r) return note(req, shape, r.error());
        Status st = (*r)->prepare(plan.copies);
        if (!st) return note(req, shape, st.message());
        runner = std::move(*r);
        built = plan;
      }
      // A cache regime whose cache cannot hold even the kernel's smallest call (the fused
      // kernel's 512-row block: 2 MB at K = 7168) would be measured from the next level down
      // and compared with a plain GEMV that does fit.
      const int64_t held = regime == Regime::kL2 ? caches_.l2 * t : regime == Regime::kL3 ? caches_.l3 : 0;
      if (held > 0 && runner->rows() * bpr > held) {
        note(req, shape, std::string("skipped in the ") + regime_name(regime) + " regime at " + std::to_string(t) +
                             " thread(s): " + std::to_string(runner->rows()) + " rows do not fit in it");
        continue;
      }
      // Rows split across threads in whole row blocks: with fewer blocks than threads some
      // would idle and the figure would not be a t-thread one (the fused kernel's blocks are
      // 512 rows; in a model each thread runs whole experts instead).
      const int64_t blocks = (runner->rows() + runner->row_block() - 1) / runner->row_block();
      if (blocks < t) {
        note(req, shape, "skipped at " + std::to_string(t) + " threads: " + std::to_string(blocks) + " block(s) of " +
                             std::to_string(runner->row_block()) + " rows cannot be split across them");
        continue;
      }
      measure(*runner, req, shape, regime, t, plan);
    }
  }

 private:
  void measure(GemvRunner& runner, const RunnerRequest& req, const GemvShape& shape, Regime regime,
               int t, const CasePlan& plan) {
    ThreadTeam team(t);
    // The DRAM figures are compared with a bandwidth measured right before them; cache
    // regimes reuse the latest figure for the same thread count.
    if (regime == Regime::kDram || !bw_.count(t)) bw_[t] = probe_.measure(team, cfg_.opt.reps).median_gbps;
    CaseResult r = measure_case(runner, team, regime, plan.copies, bw_[t], cfg_.opt);
    r.round = round_;
    r.shape = shape.name;
    r.rows = shape.rows;
    r.measured_rows = runner.rows();  // plan.rows, or whole Q8_K blocks for the fused kernel
    done_.push_back({req, r, cfg_.json ? out_.size() : 0});
    if (cfg_.json) {
      nlohmann::json j = to_json(r, runner.matrix_bytes() * plan.copies);
      // GGUF bytes of the same rows: packed layouts may stream a little more than the file holds.
      j["format_bytes_per_call"] = approx_row_bytes(req, shape.cols) * plan.rows;
      out_.push_back(std::move(j));
      if (isatty(STDERR_FILENO)) print_row(r, stderr);  // progress for a person watching
    } else {
      print_row(r, stdout);
    }
  }

  // Each generated kernel and C++ loop against its format's oneDNN baseline (and each
  // generated kernel against the C++ loop) at the same shape, regime, thread count and round:
  // ratios of GFLOP/s, so cache regimes that measure different row counts still compare.
  // JSON: fields added to the measurement's object (its own round's pair). Table: one more
  // section, one line per measurement, medians over the rounds (ratios: median of the
  // same-round ratios).
 public:
  void compare_with_baselines() {
    std::vector<std::string> order;
    std::map<std::string, Versus> rows;
    for (const auto& m : done_) {
      if (m.req.family == Family::kOneDnn) continue;
      const Measured* base = nullptr;
      for (const auto& t : onednn_types_for(m.req.format))
        if (!base) base = find(Family::kOneDnn, t, m.r);
      const Measured* cxx = m.req.family == Family::kJit ? find(Family::kCxxLoop, m.req.format, m.r) : nullptr;
      // The fused kernel against the plain GEMV over the same bytes: weight GB/s ratio.
      const Measured* plain = m.req.family == Family::kJitFused ? find(Family::kJit, m.req.format, m.r) : nullptr;
      if (!base && !cxx && !plain) continue;
      const std::string key = m.r.kernel + "|" + m.r.shape + "|" + regime_name(m.r.regime) + "|" +
                              std::to_string(m.r.threads);
      Versus& v = rows[key];
      if (v.rounds.empty()) order.push_back(key);
      v.rounds.push_back(&m);
      if (plain) {
        v.plain = plain;
        v.x_plain.push_back(m.r.weight_gbps / plain->r.weight_gbps);
        if (cfg_.json) out_[m.json_index]["fused_vs_plain_gbps"] = v.x_plain.back();
        continue;
      }
      if (base) {
        v.base = base;
        v.x_dnn.push_back(m.r.gflops / base->r.gflops);
      }
      if (cxx) v.x_cxx.push_back(m.r.gflops / cxx->r.gflops);
      if (!cfg_.json) continue;
      nlohmann::json& j = out_[m.json_index];
      if (base) {
        j["onednn_baseline"] = base->r.kernel;
        j["onednn_gflops"] = base->r.gflops;
        j["speedup_vs_onednn"] = v.x_dnn.back();
      }
      if (cxx) {
        j["cxx_loop_gflops"] = cxx->r.gflops;
        j["speedup_vs_cxx_loop"] = v.x_cxx.back();
      }
    }
    if (cfg_.json) return;
    bool header = false;
    std::vector<std::string> fused_lines;
    for (const auto& key : order) {
      const Versus& v = rows[key];
      const CaseResult& r = v.rounds.front()->r;
      std::vector<double> gbps, frac;
      for (const Measured* m : v.rounds) {
        gbps.push_back(m->r.weight_gbps);
        frac.push_back(m->r.fraction_of_read_bw);
      }
      if (v.plain) {
        fused_lines.push_back(r.kernel + " " + r.shape + " " + regime_name(r.regime) + " " +
                              std::to_string(r.threads) + "t: " + ratio(median(v.x_plain)) + " of " +
                              v.plain->r.kernel);
        continue;
      }
      if (!header) {
        std::printf("\nversus baselines (GFLOP/s ratio at the same shape, regime and threads%s)\n",
                    cfg_.rounds > 1 ? "; medians over the rounds" : "");
        std::printf("%-44s %-6s %-22s %-5s %3s %8s %6s %9s %-16s %9s\n", "kernel", "format", "shape", "reg",
                    "thr", "GB/s", "%bw", "x oneDNN", "oneDNN", "x C++");
        header = true;
      }
      std::printf("%-44s %-6s %-22s %-5s %3d %8.2f %5.1f%% %9s %-16s %9s\n", r.kernel.c_str(), r.format.c_str(),
                  r.shape.c_str(), regime_name(r.regime), r.threads, median(gbps), 100 * median(frac),
                  v.base ? ratio(median(v.x_dnn)).c_str() : "-", v.base ? v.base->r.kernel.c_str() : "-",
                  v.x_cxx.empty() ? "-" : ratio(median(v.x_cxx)).c_str());
    }
    if (!fused_lines.empty()) std::printf("\nfused gate+up+SwiGLU+Q8_K vs plain GEMV over the same bytes (GB/s ratio)\n");
    for (const auto& l : fused_lines) std::printf("%s\n", l.c_str());
  }

 private:
  static std::string ratio(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2fx", x);
    return b;
  }

  // One stderr line per (kernel family, format, reason): a format a family cannot run is
  // not an error of the whole benchmark.
  void note(const RunnerRequest& req, const GemvShape& shape, const std::string& why) {
    std::string key = std::to_string(static_cast<int>(req.family)) + req.format + why;
    if (!noted_.insert(key).second) return;
    std::fprintf(stderr, "zenmoe: bench kernels: %s (%s, e.g. shape %s)\n", why.c_str(),
                 req.format.c_str(), shape.name.c_str());
  }

  struct Measured {
    RunnerRequest req;
    CaseResult r;
    size_t json_index;
  };
  struct Versus {  // one table line: a measurement over the rounds and its same-round ratios
    std::vector<const Measured*> rounds;
    const Measured *base = nullptr, *plain = nullptr;
    std::vector<double> x_dnn, x_cxx, x_plain;
  };
  const Measured* find(Family fam, const std::string& format, const CaseResult& like) const {
    for (const auto& m : done_)
      if (m.req.family == fam && m.req.format == format && m.r.shape == like.shape &&
          m.r.regime == like.regime && m.r.threads == like.threads && m.r.round == like.round)
        return &m;
    return nullptr;
  }

  const KernelsConfig& cfg_;
  BandwidthProbe& probe_;
  std::vector<Measured> done_;
  nlohmann::json& out_;
  CacheSizes caches_;
  std::map<int, double> bw_;
  std::set<std::string> noted_;
  int round_ = 0;
};

}  // namespace

int bench_kernels(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kernels_flags());
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("bench kernels [options]", kernels_flags()).c_str());
    return 0;
  }
  if (!args->positionals().empty())
    return fail("bench kernels takes no positional argument ('" + args->positionals()[0] + "')");
  auto cfg = parse_config(*args);
  if (!cfg) return fail(cfg.error());
  auto isa = choose_load_isa(cfg->isa);
  auto probe = BandwidthProbe::make(cfg->dram_bytes, *isa);
  if (!probe) return fail(probe.error());
  nlohmann::json out = nlohmann::json::array();
  if (!cfg->json) print_header();
  CaseRunner cases(*cfg, *probe, out);
  for (int round = 0; round < cfg->rounds; ++round) {
    cases.set_round(round);
    for (const auto& shape : cfg->shapes)
      for (const auto& req : requests(*cfg))
        for (Regime regime : cfg->regimes) cases.run(shape, req, regime);
  }
  cases.compare_with_baselines();
  if (cfg->json) std::printf("%s\n", out.dump(2).c_str());
  if (!cfg->dump_dir.empty()) {
    auto n = global_registry().dump(cfg->dump_dir);
    if (!n) return fail("--dump: " + n.error());
    std::fprintf(stderr, "zenmoe: wrote %d generated kernel(s) to %s\n", *n, cfg->dump_dir.c_str());
  }
  return 0;
}

}  // namespace zenmoe::tools
