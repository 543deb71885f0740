// `zenmoe bench model MODEL`: whole-model prefill and decode speed per thread count, the weight
// bytes one decoded token reads, and that traffic as a fraction of the read bandwidth measured
// in the same run, right before the model runs with the same thread count. Every figure is the
// median over repetitions. With --parallel, also the decode rate of several sequences at once
// (Executor::eval_seqs, as batch and serve --parallel run them). Written against the Executor
// interface through tools/engine.h, so it measures whichever engine the front ends would use.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/gguf.h"
#include "tools/args.h"
#include "tools/bench.h"
#include "tools/engine.h"
#include "tools/model_stats.h"
#include "tools/roofline.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_engine_flags({
    {"model", "m", true, "model file (or give it as the first argument)"},
    {"threads", "t", true, "thread counts to measure, e.g. 1,2 (default 1)"},
    {"prompt", "p", true, "prompt tokens for the prefill figure (default 512)"},
    {"n-gen", "n", true, "tokens decoded one at a time for the decode figure (default 128)"},
    {"reps", "r", true, "repetitions per thread count, each after its own bandwidth probe; medians are reported (default 3)"},
    {"warmup", "", true, "untimed runs before the repetitions (default 1)"},
    {"json", "", false, "print a JSON list, one object per thread count"},
    {"parallel", "np", true,
     "also decode that many sequences at once, each step one batch over all of them, e.g. 4,16 (fast engine)"},
    {"profile", "", false, "time per op kind (as the engine reports it)"},
    {"profile-nodes", "", false, "with the profile by node instead: op:name, every layer's copy summed"},
    {"ref", "", false, "measure the scalar reference executor"},
    {"cache-type-k", "ctk", true, "KV cache type: f16 (default), f32, bf16 or q8_0"},
    {"cache-type-v", "ctv", true, "KV cache type for values (MLA: must match --cache-type-k)"},
    {"bw-mib", "", true, "read-bandwidth buffer in MiB (default: 4x L3 and at least 1024)"},
    {"bw-reps", "", true, "timed passes of the read-bandwidth probe (default 5)"},
    {"isa", "", true, "cap the bandwidth probe's loads: avx512, avx2 or scalar"},
    {"clock", "", true, "wall (default) or cpu: process CPU time / threads"},
    {"help", "h", false, "print this help"},
});

struct Options {
  std::string model;
  std::vector<int> threads;
  std::vector<int> parallel;  // --parallel: sequence counts of the batched decode figures
  int prompt = 512, gen = 128, reps = 3, warmup = 1, bw_reps = 5;
  int64_t bw_bytes = 0;
  LoadIsa isa = LoadIsa::kScalar;
  bool json = false, profile = false, profile_nodes = false;
  Engine engine = Engine::Best;
  KvCacheType kv_type = KvCacheType::F16;
  EngineFlags engine_flags;
};

Expected<Options> parse_options(const Args& a) {
  Options o;
  const auto& pos = a.positionals();
  if (pos.size() > 1) return Error{"bench model takes one model file, got '" + pos[1] + "' as well"};
  if (!pos.empty() && a.has("model")) return Error{"give the model once (-m or as the argument), not both"};
  o.model = pos.empty() ? a.get("model") : pos[0];
  if (o.model.empty()) return Error{"bench model needs a model file (zenmoe bench model MODEL.gguf)"};
  auto threads = parse_thread_list("threads", a.get("threads", "1"));
  auto prompt = a.get_int("prompt", 512, 1, 1 << 20);
  auto gen = a.get_int("n-gen", 128, 1, 1 << 20);
  auto reps = a.get_int("reps", 3, 1, 1000);
  auto warmup = a.get_int("warmup", 1, 0, 100);
  auto bw_reps = a.get_int("bw-reps", 5, 1, 1000);
  auto mib = a.get_int("bw-mib", dram_working_set_bytes(read_cache_sizes()) >> 20, 1, int64_t{1} << 20);
  auto isa = choose_load_isa(a.get("isa"));
  auto clock = parse_measure_clock(a.get("clock", "wall"));
  for (const Status& s : {threads.status(), prompt.status(), gen.status(), reps.status(), warmup.status(),
                          bw_reps.status(), mib.status(), isa.status(), clock.status()})
    if (!s) return Error{s.message()};
  set_measure_clock(*clock);
  o.threads = *threads;
  if (a.has("parallel")) {
    auto np = parse_thread_list("parallel", a.get("parallel"), "sequence counts");
    if (!np) return Error{np.error()};
    o.parallel = *np;
  }
  o.prompt = static_cast<int>(*prompt);
  o.gen = static_cast<int>(*gen);
  o.reps = static_cast<int>(*reps);
  o.warmup = static_cast<int>(*warmup);
  o.bw_reps = static_cast<int>(*bw_reps);
  o.bw_bytes = *mib << 20;
  o.isa = *isa;
  o.json = a.has("json");
  o.profile_nodes = a.has("profile-nodes");
  o.profile = a.has("profile") || o.profile_nodes;
  o.engine = a.has("ref") ? Engine::Reference : Engine::Best;
  if (!o.parallel.empty() && o.engine == Engine::Reference)
    return Error{"--parallel needs the fast engine (the reference engine runs one sequence)"};
  auto kv = kv_cache_type(a.get("cache-type-k"), a.get("cache-type-v"));
  if (!kv) return Error{kv.error()};
  o.kv_type = *kv;
  if (o.engine == Engine::Reference) o.kv_type = KvCacheType::F32;  // the reference keeps F32
  auto ef = parse_engine_flags(a);
  if (!ef) return Error{ef.error()};
  o.engine_flags = *ef;
  return o;
}

int32_t argmax(const float* row, size_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }
int32_t argmax(const std::vector<float>& v) { return argmax(v.data(), v.size()); }

// A deterministic prompt spread over the vocabulary (token 0 avoided: often a special token).
std::vector<int32_t> synthetic_prompt(int n, int n_vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  const int64_t span = std::max(1, n_vocab - 1);
  for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(1 + (int64_t{i} * 7919 + 13) % span);
  return p;
}

using OpTimes = std::map<std::string, double>;  // seconds by profile key (op kind or node)

OpTimes snapshot(const Executor& ex) {
  OpTimes t;
  for (const auto& [op, s] : ex.profile()) t[op] += s;
  return t;
}

// Adds what the engine accumulated since `before` to `into`.
void add_since(const OpTimes& before, const OpTimes& now, OpTimes* into) {
  for (const auto& [op, s] : now) {
    auto it = before.find(op);
    const double d = s - (it == before.end() ? 0.0 : it->second);
    if (d > 0) (*into)[op] += d;
  }
}

struct RunTimes {
  double prefill_s = 0, decode_s = 0;
  double wait_s[2] = {0, 0};  // the caller's barrier waits: prefill, decode
};

// One prefill of the prompt, then `gen` single-token decodes fed with the greedy choice. The
// engine's per-op times of each phase are added to `prof` when given.
Expected<RunTimes> run_once(Executor& ex, const std::vector<int32_t>& prompt, int gen, int threads,
                            OpTimes (*prof)[2] = nullptr) {
  std::vector<float> logits(static_cast<size_t>(ex.n_vocab()));
  ex.reset();
  RunTimes r;
  const OpTimes start = prof ? snapshot(ex) : OpTimes{};
  const double wait0 = ex.barrier_wait_seconds();
  double t0 = measure_seconds(threads);
  ZENMOE_RETURN_IF_ERROR(ex.eval(prompt, logits.data(), false));
  r.prefill_s = measure_seconds(threads) - t0;
  const double wait1 = ex.barrier_wait_seconds();
  r.wait_s[0] = wait1 - wait0;
  const OpTimes after_prefill = prof ? snapshot(ex) : OpTimes{};
  if (prof) add_since(start, after_prefill, &(*prof)[0]);
  int32_t next = argmax(logits);
  t0 = measure_seconds(threads);
  for (int i = 0; i < gen; ++i) {
    ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(&next, 1), logits.data(), false));
    next = argmax(logits);
  }
  r.decode_s = measure_seconds(threads) - t0;
  r.wait_s[1] = ex.barrier_wait_seconds() - wait1;
  if (prof) add_since(after_prefill, snapshot(ex), &(*prof)[1]);
  return r;
}

// Decode of several sequences at once: `sequences` tokens a step.
struct ParallelFigures {
  int sequences = 0;
  double decode_tok_s = 0;           // all sequences' tokens, median over repetitions
  std::vector<double> decode_s_rep;  // seconds of the gen steps, per repetition
  OpTimes step;                      // --profile: seconds per step by profile key
};

struct Figures {
  int threads = 0;
  std::vector<ParallelFigures> parallel;
  double prefill_tok_s = 0, decode_tok_s = 0, read_bw_gbps = 0, effective_gbps = 0, bw_fraction = 0;
  double prefill_s = 0, decode_s = 0;  // medians, seconds per run
  std::vector<double> read_bw_rep, decode_s_rep, fraction_rep;  // per repetition
  OpTimes profile[2];  // seconds per run by profile key: prefill, decode
  double wait_s[2] = {0, 0};  // seconds per run thread 0 waited at barriers: prefill, decode
  std::map<std::string, uint64_t> op_bytes;  // weight bytes per decoded token by profile key
};

// An op kind's decode read rate: its weight bytes per token over its time per token (GB/s);
// negative when the engine gives no bytes for it or it took no time.
double op_decode_gbps(const Options& o, const Figures& f, const std::string& op) {
  auto b = f.op_bytes.find(op);
  auto t = f.profile[1].find(op);
  if (b == f.op_bytes.end() || t == f.profile[1].end() || t->second <= 0 || o.gen <= 0) return -1;
  return static_cast<double>(b->second) * o.gen / t->second / 1e9;
}

// Every repetition runs right after its own bandwidth probe, and its decode traffic is taken
// as a fraction of that probe: on a host whose bandwidth drifts over a run, each fraction
// compares figures measured seconds apart. The figures are the medians over repetitions.
Expected<Figures> measure(const Options& o, const OpenedModel& model, BandwidthProbe& probe, int threads,
                          uint64_t bytes_per_token) {
  Figures f;
  f.threads = threads;
  // The engine's pool pins this thread to one core; the probe's team spreads over these.
  const std::vector<int> cpus = allowed_cpus();
  ExecutorOptions eo;
  eo.n_ctx = o.prompt + o.gen + 1;
  eo.n_threads = threads;
  o.engine_flags.apply(eo);
  eo.profile = o.profile;
  eo.profile_by = o.profile_nodes ? ProfileBy::kNode : ProfileBy::kOpKind;
  eo.kv_type = o.kv_type;
  auto ex = make_engine(model, eo, o.engine);
  if (!ex) return Error{ex.error()};
  const std::vector<int32_t> prompt = synthetic_prompt(o.prompt, (*ex)->n_vocab());
  for (int w = 0; w < o.warmup; ++w) {
    auto r = run_once(**ex, prompt, o.gen, threads);
    if (!r) return Error{r.error()};
  }
  std::vector<double> pre, dec, pre_s;
  for (int rep = 0; rep < o.reps; ++rep) {
    {
      ThreadTeam team(threads, cpus);  // gives the caller its binding back before the model runs
      f.read_bw_rep.push_back(probe.measure(team, o.bw_reps).median_gbps);
    }
    auto r = run_once(**ex, prompt, o.gen, threads, &f.profile);
    if (!r) return Error{r.error()};
    pre_s.push_back(r->prefill_s);
    for (int p = 0; p < 2; ++p) f.wait_s[p] += r->wait_s[p] / o.reps;
    f.decode_s_rep.push_back(r->decode_s);
    pre.push_back(r->prefill_s > 0 ? o.prompt / r->prefill_s : 0);
    dec.push_back(r->decode_s > 0 ? o.gen / r->decode_s : 0);
    const double eff = static_cast<double>(bytes_per_token) * dec.back() / 1e9;
    f.fraction_rep.push_back(f.read_bw_rep.back() > 0 ? eff / f.read_bw_rep.back() : 0);
  }
  f.prefill_tok_s = median(pre);
  f.decode_tok_s = median(dec);
  f.prefill_s = median(pre_s);
  f.decode_s = median(f.decode_s_rep);
  f.read_bw_gbps = median(f.read_bw_rep);
  f.effective_gbps = static_cast<double>(bytes_per_token) * f.decode_tok_s / 1e9;
  f.bw_fraction = median(f.fraction_rep);
  for (OpTimes& phase : f.profile)
    for (auto& [op, s] : phase) s /= o.reps;
  if (o.profile) f.op_bytes = (*ex)->decode_weight_bytes();
  return f;
}

// Each of n sequences holds a prompt of its own (o.prompt tokens), then every repetition decodes
// o.gen steps of one token per sequence in one eval_seqs batch, greedy, and rewinds them.
Expected<ParallelFigures> measure_parallel(const Options& o, const OpenedModel& model, int threads, int n) {
  ParallelFigures pf;
  pf.sequences = n;
  ExecutorOptions eo;
  eo.n_ctx = o.prompt + o.gen + 1;
  eo.n_threads = threads;
  o.engine_flags.apply(eo);
  eo.kv_type = o.kv_type;
  eo.n_seq = n;
  eo.profile = o.profile;
  eo.profile_by = o.profile_nodes ? ProfileBy::kNode : ProfileBy::kOpKind;
  auto ex = make_engine(model, eo, o.engine);
  if (!ex) return Error{ex.error()};
  Executor& e = **ex;
  const auto nv = static_cast<size_t>(e.n_vocab());
  std::vector<float> logits(nv * static_cast<size_t>(n));
  std::vector<int32_t> first(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<int> seqs(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> prompt = synthetic_prompt(o.prompt + s, e.n_vocab());
    prompt.erase(prompt.begin(), prompt.begin() + s);  // another prompt per sequence
    ZENMOE_RETURN_IF_ERROR(e.select_seq(s));
    ZENMOE_RETURN_IF_ERROR(e.eval(prompt, logits.data(), false));
    first[static_cast<size_t>(s)] = argmax(logits.data(), nv);
    seqs[static_cast<size_t>(s)] = s;
  }
  std::vector<double> rates;
  for (int rep = -o.warmup; rep < o.reps; ++rep) {
    next = first;
    const OpTimes before = snapshot(e);
    const double t0 = measure_seconds(threads);
    for (int i = 0; i < o.gen; ++i) {
      ZENMOE_RETURN_IF_ERROR(e.eval_seqs(next, seqs, logits.data()));
      for (size_t s = 0; s < next.size(); ++s) next[s] = argmax(logits.data() + s * nv, nv);
    }
    const double secs = measure_seconds(threads) - t0;
    if (rep >= 0) add_since(before, snapshot(e), &pf.step);
    for (int s = 0; s < n; ++s) {
      ZENMOE_RETURN_IF_ERROR(e.select_seq(s));
      ZENMOE_RETURN_IF_ERROR(e.rewind(o.prompt));
    }
    if (rep < 0) continue;  // warm-up
    pf.decode_s_rep.push_back(secs);
    rates.push_back(secs > 0 ? static_cast<double>(n) * o.gen / secs : 0);
  }
  pf.decode_tok_s = median(rates);
  for (auto& [op, sec] : pf.step) sec /= static_cast<double>(o.reps) * o.gen;
  return pf;
}

nlohmann::json to_json(const Options& o, const Figures& f, uint64_t bytes_per_token) {
  nlohmann::json j = {{"model", o.model},
                      {"engine", engine_name(o.engine)},
                      {"threads", f.threads},
                      {"prompt_tokens", o.prompt},
                      {"prefill_tok_s", f.prefill_tok_s},
                      {"prefill_s", f.prefill_s},
                      {"gen_tokens", o.gen},
                      {"decode_tok_s", f.decode_tok_s},
                      {"decode_s", f.decode_s},
                      {"bytes_per_token", bytes_per_token},
                      {"effective_gbps", f.effective_gbps},
                      {"read_bw_gbps", f.read_bw_gbps},
                      {"bw_fraction", f.bw_fraction},
                      {"read_bw_gbps_per_rep", f.read_bw_rep},
                      {"decode_s_per_rep", f.decode_s_rep},
                      {"bw_fraction_per_rep", f.fraction_rep},
                      {"reps", o.reps},
                      {"kv_cache", kv_cache_type_name(o.kv_type)},
                      {"clock", measure_clock_name()}};
  if (!f.parallel.empty()) {
    nlohmann::json par = nlohmann::json::array();
    for (const ParallelFigures& p : f.parallel)
      par.push_back({{"sequences", p.sequences},
                     {"decode_tok_s", p.decode_tok_s},
                     {"decode_s_per_rep", p.decode_s_rep},
                     {"vs_one_sequence", f.decode_tok_s > 0 ? p.decode_tok_s / f.decode_tok_s : 0.0}});
    if (o.profile)
      for (size_t i = 0; i < f.parallel.size(); ++i) par[i]["profile_step_s"] = f.parallel[i].step;
    j["parallel"] = par;
  }
  if (o.profile) {
    j["profile_prefill_s"] = f.profile[0];
    j["profile_decode_s"] = f.profile[1];
    j["profile_decode_weight_bytes"] = f.op_bytes;
    j["profile_barrier_wait_s"] = {{"prefill", f.wait_s[0]}, {"decode", f.wait_s[1]}};
    nlohmann::json gbps = nlohmann::json::object();
    for (const auto& [op, bytes] : f.op_bytes)
      if (const double g = op_decode_gbps(o, f, op); g >= 0) gbps[op] = g;
    j["profile_decode_gbps"] = gbps;
  }
  return j;
}

// --profile with --parallel: a batched step's time by profile key, largest first, with the
// keys over 1 % of the step.
void print_step_profile(const OpTimes& step) {
  double total = 0;
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [op, s] : step) {
    total += s;
    order.emplace_back(s, op);
  }
  std::sort(order.rbegin(), order.rend());
  std::string line;
  for (const auto& [s, op] : order) {
    if (total <= 0 || s < 0.01 * total) break;
    char part[160];
    std::snprintf(part, sizeof part, "%s%s %.2f ms (%.0f%%)", line.empty() ? "" : ", ", op.c_str(), 1e3 * s,
                  100.0 * s / total);
    line += part;
  }
  if (!line.empty()) std::printf("          a step: %s\n", line.c_str());
}

void print_text(const Options& o, const Figures& f) {
  std::printf("%7d %7d %13.2f %7d %12.2f %10.2f %9.2f %8.1f%%\n", f.threads, o.prompt, f.prefill_tok_s, o.gen,
              f.decode_tok_s, f.read_bw_gbps, f.effective_gbps, 100.0 * f.bw_fraction);
  for (const ParallelFigures& p : f.parallel) {
    std::printf("        %d sequences at once: decode %.2f tok/s (%.2f a sequence), %.2fx one sequence\n", p.sequences,
                p.decode_tok_s, p.decode_tok_s / p.sequences,
                f.decode_tok_s > 0 ? p.decode_tok_s / f.decode_tok_s : 0.0);
    print_step_profile(p.step);
  }
  if (!o.profile) return;
  if (f.profile[0].empty() && f.profile[1].empty()) {
    std::printf("        profile: the %s engine does not report per-op times\n", engine_name(o.engine));
    return;
  }
  // Op kinds by total time, largest first; each phase's share of that phase.
  std::vector<std::pair<double, std::string>> order;
  double phase_total[2] = {0, 0};
  for (int p = 0; p < 2; ++p)
    for (const auto& [op, s] : f.profile[p]) phase_total[p] += s;
  OpTimes both = f.profile[0];
  for (const auto& [op, s] : f.profile[1]) both[op] += s;
  for (const auto& [op, s] : both) order.emplace_back(s, op);
  std::sort(order.rbegin(), order.rend());
  const std::string head = o.profile_nodes ? "node (per run)" : "op (per run)";
  size_t width = head.size();
  for (const auto& entry : order) width = std::max(width, entry.second.size());
  const int w = static_cast<int>(width);
  std::printf("        %-*s %12s %7s %12s %7s %9s %8s\n", w, head.c_str(), "prefill ms", "", "decode ms", "",
              "MB/token", "GB/s");
  for (const auto& [total, op] : order) {
    double ms[2], pct[2];
    for (int p = 0; p < 2; ++p) {
      auto it = f.profile[p].find(op);
      const double s = it == f.profile[p].end() ? 0.0 : it->second;
      ms[p] = 1e3 * s;
      pct[p] = phase_total[p] > 0 ? 100.0 * s / phase_total[p] : 0.0;
    }
    std::printf("        %-*s %12.3f %6.1f%% %12.3f %6.1f%%", w, op.c_str(), ms[0], pct[0], ms[1], pct[1]);
    auto b = f.op_bytes.find(op);
    const double gbps = op_decode_gbps(o, f, op);
    if (b != f.op_bytes.end() && gbps >= 0)
      std::printf(" %9.2f %8.2f\n", static_cast<double>(b->second) / 1e6, gbps);
    else
      std::printf(" %9s %8s\n", "-", "-");
  }
  // Not an op: part of the ops' times above, where thread 0 had finished its share and waited
  // for the others (uneven shares, late starts).
  if (f.threads > 1)
    std::printf("        %-*s %12.3f %6.1f%% %12.3f %6.1f%%   (thread 0 idle at barriers, within the ops above)\n",
                w, "barrier wait", 1e3 * f.wait_s[0], phase_total[0] > 0 ? 100.0 * f.wait_s[0] / phase_total[0] : 0.0,
                1e3 * f.wait_s[1], phase_total[1] > 0 ? 100.0 * f.wait_s[1] / phase_total[1] : 0.0);
}

}  // namespace

int bench_model(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("bench model MODEL [options]", kFlags).c_str());
    return 0;
  }
  auto o = parse_options(*args);
  if (!o) return fail(o.error());
  auto model = open_model(o->model, o->engine_flags.load);
  if (!model) return fail(model.error());
  auto stats = compute_stats(model->gguf);
  if (!stats) return fail(o->model + ": " + stats.error());
  const uint64_t bytes_per_token = stats->active_bytes;
  auto probe = BandwidthProbe::make(o->bw_bytes, o->isa);
  if (!probe) return fail(probe.error());
  if (!o->json)
    std::printf("%s: %.2f MB of weights read per decoded token, %s engine, %s KV cache, %s clock, median of %d\n"
                "%7s %7s %13s %7s %12s %10s %9s %9s\n",
                o->model.c_str(), bytes_per_token / 1e6, engine_name(o->engine), kv_cache_type_name(o->kv_type),
                measure_clock_name(), o->reps,
                "threads", "prompt", "prefill tok/s", "gen", "decode tok/s", "read GB/s", "eff GB/s", "of read");
  nlohmann::json out = nlohmann::json::array();
  for (int t : o->threads) {
    auto f = measure(*o, *model, *probe, t, bytes_per_token);
    if (!f) return fail(f.error());
    for (int n : o->parallel) {
      auto p = measure_parallel(*o, *model, t, n);
      if (!p) return fail(p.error());
      f->parallel.push_back(std::move(*p));
    }
    if (o->json)
      out.push_back(to_json(*o, *f, bytes_per_token));
    else
      print_text(*o, *f);
  }
  if (o->json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace zenmoe::tools
