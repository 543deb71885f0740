// The fast executor against the reference executor on a model with the bench preset's shapes
// (two layers: the leading dense one and one MoE layer of 16 experts, Q4_K_S mix), plus its
// building blocks: the thread pool, range splitting and the arena memory plan.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "codegen/isa.h"
#include "ir/memory_plan.h"
#include "runtime/compiled_model.h"
#include "runtime/fast_attention.h"
#include "runtime/fast_executor.h"
#include "runtime/fast_gate_up.h"
#include "runtime/gguf.h"
#include "runtime/huge_buffer.h"
#include "runtime/ref_executor.h"
#include "runtime/ref_executor_model.h"
#include "runtime/thread_pool.h"
#include "tests/cli_util.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;

TEST(ThreadPool, EveryThreadRunsEveryJobOnce) {
  for (int n : {1, 2, 3, 5}) {
    auto pool = ThreadPool::create({n, false, 50});
    ASSERT_TRUE(pool.has_value()) << pool.error();
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    for (int job = 0; job < 200; ++job) (*pool)->run([&](int tid) { hits[static_cast<size_t>(tid)]++; });
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 200) << n << " threads, thread " << i;
  }
}

TEST(ThreadPool, WakesSleepingWorkers) {
  auto pool = ThreadPool::create({2, true, 1});
  ASSERT_TRUE(pool.has_value());
  std::atomic<int> sum{0};
  for (int job = 0; job < 5; ++job) {
    usleep(2000);  // longer than the spin: the worker is asleep when the job arrives
    (*pool)->run([&](int tid) { sum += tid + 1; });
  }
  EXPECT_EQ(sum.load(), 15);
  EXPECT_FALSE((*pool)->placement().empty());
}

// With timing on, the caller's wait for a slower thread is added up; off, nothing is.
TEST(ThreadPool, TimesTheCallersWaitForSlowerThreads) {
  auto pool = ThreadPool::create({2, false, 50});
  ASSERT_TRUE(pool.has_value()) << pool.error();
  auto slow_worker = [](int tid) {
    if (tid == 1) usleep(20000);
  };
  (*pool)->run(slow_worker);
  EXPECT_EQ((*pool)->caller_wait_seconds(), 0.0);
  (*pool)->set_timing(true);
  for (int job = 0; job < 3; ++job) (*pool)->run(slow_worker);
  const double waited = (*pool)->caller_wait_seconds();
  EXPECT_GE(waited, 3 * 0.019);
  (*pool)->run([](int tid) {
    if (tid == 0) usleep(20000);  // the caller is the slow one: it waits for nobody
  });
  EXPECT_LT((*pool)->caller_wait_seconds() - waited, 0.015);
  (*pool)->set_timing(false);
  (*pool)->run(slow_worker);
  EXPECT_LT((*pool)->caller_wait_seconds() - waited, 0.015);
}

// A pinned pool binds its caller to core 0 while it lives and gives the old CPU set back after,
// so a second pool (or a bandwidth probe) made later in the same thread may use every core.
TEST(ThreadPool, GivesTheCallerItsCpusBack) {
  cpu_set_t before, during, after;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  {
    auto pool = ThreadPool::create({1, true, 1});
    ASSERT_TRUE(pool.has_value());
    ASSERT_EQ(sched_getaffinity(0, sizeof during, &during), 0);
    if ((*pool)->placement().rfind("pinned", 0) == 0) {
      EXPECT_EQ(CPU_COUNT(&during), 1);
    }
  }
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(ThreadPool, RejectsBadThreadCounts) {
  EXPECT_FALSE(ThreadPool::create({0, false, 1}).has_value());
  EXPECT_FALSE(ThreadPool::create({5000, false, 1}).has_value());
}

TEST(SplitRange, CoversEverythingOnceInUnits) {
  for (int64_t n : {0, 1, 7, 16, 100, 513})
    for (int parts : {1, 2, 3, 8})
      for (int64_t unit : {1, 8, 16}) {
        int64_t next = 0;
        for (int i = 0; i < parts; ++i) {
          const Range r = split_range(n, parts, i, unit);
          if (r.begin == r.end) continue;
          EXPECT_EQ(r.begin, next) << n << " " << parts << " " << unit;
          EXPECT_TRUE(r.begin % unit == 0) << n << " " << parts << " " << unit;
          next = r.end;
        }
        EXPECT_EQ(next, n) << n << " " << parts << " " << unit;
      }
}

// Threads claiming from a WorkQueue take every unit exactly once, each starting on its own
// share from its front (unless the others took all of it first); a thread with an empty share
// takes units from the others, and a slow one is left less than its share.
TEST(WorkQueue, EveryUnitClaimedOnceAndIdleThreadsTakeOver) {
  for (int nth : {1, 2, 3, 5}) {
    auto pool = ThreadPool::create({nth, false, 50});
    ASSERT_TRUE(pool.has_value()) << pool.error();
    for (int64_t n : {0, 1, 7, 64, 257})
      for (int64_t grain : {1, 3}) {
        std::vector<Range> shares(static_cast<size_t>(nth));
        for (int t = 0; t < nth; ++t) shares[static_cast<size_t>(t)] = split_range(n, nth, t);
        if (nth > 1) {  // thread 1 gets nothing of its own, thread 0 its units too
          shares[0].end = shares[1].end;
          shares[1].begin = shares[1].end;
        }
        WorkQueue q;
        q.reset(shares);
        std::vector<std::atomic<int>> claims(static_cast<size_t>(n));
        std::vector<int64_t> done(static_cast<size_t>(nth), 0);
        std::vector<int64_t> first(static_cast<size_t>(nth), -1);
        std::atomic<int64_t> others{0};  // units the threads other than 0 claimed
        (*pool)->run([&](int tid) {
          for (Range r; q.next(tid, grain, r);) {
            EXPECT_LT(r.begin, r.end);
            const Range own = shares[static_cast<size_t>(tid)];
            if (r.begin < own.begin || r.begin >= own.end) {  // taken from another share
              EXPECT_LE(r.end - r.begin, grain);
            }
            if (first[static_cast<size_t>(tid)] < 0) first[static_cast<size_t>(tid)] = r.begin;
            for (int64_t u = r.begin; u < r.end; ++u) claims[static_cast<size_t>(u)]++;
            done[static_cast<size_t>(tid)] += r.end - r.begin;
            if (tid != 0) others += r.end - r.begin;
            if (tid == 0 && nth > 1) {  // a slow thread: the others take its units
              usleep(200);
              // On a loaded machine the others may not be running yet: where the checks below
              // expect them to have taken some units, wait for that (up to 2 s), so the
              // outcome does not depend on the scheduler.
              for (int i = 0; i < 10000 && n >= 64 && others.load() == 0; ++i) usleep(200);
            }
          }
        });
        for (int64_t u = 0; u < n; ++u)
          EXPECT_EQ(claims[static_cast<size_t>(u)].load(), 1) << nth << " " << n << " " << u;
        for (int t = 0; t < nth; ++t) {
          const Range own = shares[static_cast<size_t>(t)];
          const int64_t f = first[static_cast<size_t>(t)];  // its front, unless others took it all first
          if (f >= own.begin && f < own.end) {
            EXPECT_EQ(f, own.begin) << nth << " " << n << " " << t;
          }
        }
        // (With more threads than cores some may not run at all before the others are done.)
        if (nth == 2 && n >= 64) {
          EXPECT_GT(done[1], 0) << n << " " << grain << ": the thread with no share took none";
        }
        if (nth > 1 && n >= 64) {
          EXPECT_LT(done[0], shares[0].end - shares[0].begin) << "the slow one did all its share";
        }
      }
  }
}

// A thread's own claims: half of what is left of its share, at least a grain, and never past
// run_end of their first unit.
TEST(WorkQueue, OwnClaimsHalveAndStopAtRunEnds) {
  WorkQueue q;
  q.reset({Range{0, 20}});
  std::vector<Range> got;
  for (Range r; q.next(0, 1, r);) got.push_back(r);
  const std::vector<std::pair<int64_t, int64_t>> halves = {{0, 10}, {10, 15}, {15, 17}, {17, 18}, {18, 19}, {19, 20}};
  ASSERT_EQ(got.size(), halves.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(std::pair(got[i].begin, got[i].end), halves[i]) << i;
  const std::function<int64_t(int64_t)> run_end = [](int64_t b) { return (b / 4 + 1) * 4; };
  q.reset({Range{2, 20}});
  got.clear();
  for (Range r; q.next(0, 1, r, &run_end);) got.push_back(r);
  const std::vector<std::pair<int64_t, int64_t>> runs = {{2, 4}, {4, 8}, {8, 12}, {12, 16}, {16, 18}, {18, 19}, {19, 20}};
  ASSERT_EQ(got.size(), runs.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(std::pair(got[i].begin, got[i].end), runs[i]) << i;
}

// The gate/up block lists' split: contiguous shares covering every block once, each within one
// block's cost of an even share of the total.
TEST(CostShare, CoversEveryBlockOnceInEvenShares) {
  std::mt19937 rng(3);
  for (int64_t n : {0, 1, 5, 16, 72, 300})
    for (int parts : {1, 2, 3, 16}) {
      std::vector<int64_t> cost(static_cast<size_t>(n));
      for (auto& c : cost) c = kBlockReadCost + static_cast<int64_t>(rng() % 40);
      const auto fn = [&](int64_t b) { return cost[static_cast<size_t>(b)]; };
      int64_t total = 0, biggest = 0;
      for (int64_t c : cost) {
        total += c;
        biggest = std::max(biggest, c);
      }
      std::vector<Range> shares;
      cost_shares(n, fn, parts, shares);
      ASSERT_EQ(shares.size(), static_cast<size_t>(parts));
      int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Range r = shares[static_cast<size_t>(i)];
        ASSERT_LE(r.begin, r.end);
        if (r.begin == r.end) continue;
        EXPECT_EQ(r.begin, next) << n << " " << parts;
        next = r.end;
        int64_t mine = 0;
        for (int64_t b = r.begin; b < r.end; ++b) mine += cost[static_cast<size_t>(b)];
        EXPECT_LE(std::llabs(mine * parts - total), biggest * parts) << n << " " << parts << " " << i;
      }
      EXPECT_EQ(next, n) << n << " " << parts;
      cost_shares(n, [](int64_t) { return int64_t{5}; }, parts, shares);
      for (int i = 0; i < parts; ++i) {  // uniform costs: counts as even as split_range's
        const Range r = shares[static_cast<size_t>(i)];
        EXPECT_LE(std::llabs((r.end - r.begin) * parts - n), parts) << n << " " << parts << " " << i;
      }
    }
}

TEST(MemoryPlan, LiveValuesNeverOverlap) {
  auto model = gguf::Model::open(std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf");
  ASSERT_TRUE(model.has_value()) << model.error();
  auto g = build_graph_from_gguf(*model);
  ASSERT_TRUE(g.has_value()) << g.error();
  auto plan = ir::plan_memory(*g, 8);
  ASSERT_TRUE(plan.has_value()) << plan.error();
  EXPECT_LT(plan->arena_bytes, plan->naive_bytes / 4);  // reuse across layers
  // Interval of each value: defined .. last used (outputs live to the end); reshape shares.
  const size_t nv = g->values.size();
  std::vector<int64_t> def(nv, -1), last(nv, -1);
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    for (int in : g->nodes[k].inputs) last[static_cast<size_t>(in)] = static_cast<int64_t>(k);
    for (int out : g->nodes[k].outputs) def[static_cast<size_t>(out)] = static_cast<int64_t>(k);
  }
  for (int out : g->outputs) last[static_cast<size_t>(out)] = static_cast<int64_t>(g->nodes.size());
  for (size_t a = 0; a < nv; ++a) {
    if (plan->offset[a] < 0) continue;
    EXPECT_EQ(plan->offset[a] % 64, 0);
    EXPECT_LE(plan->offset[a] + plan->bytes[a], plan->arena_bytes);
    for (size_t b = a + 1; b < nv; ++b) {
      if (plan->offset[b] < 0 || plan->offset[a] == plan->offset[b]) continue;  // reshape aliases
      const bool overlap_mem = plan->offset[a] < plan->offset[b] + plan->bytes[b] &&
                               plan->offset[b] < plan->offset[a] + plan->bytes[a];
      const bool overlap_time = def[a] <= std::max(last[b], def[b]) && def[b] <= std::max(last[a], def[a]);
      EXPECT_FALSE(overlap_mem && overlap_time) << g->values[a].name << " / " << g->values[b].name;
    }
  }
  EXPECT_FALSE(ir::plan_memory(*g, 0).has_value());
}

// KL(p || q) of the softmaxes of two logit rows, and whether their argmax agrees.
// clear / clear_top1: positions whose reference winner leads its runner-up by at least
// kClearGap logits, and how many of them keep their winner. On these small random models many
// positions are near-ties (leads of 0.01-0.16 logits), where rounding alone picks the winner.
struct Agreement {
  static constexpr float kClearGap = 0.25f;
  double kl_sum = 0;
  int top1 = 0, n = 0, clear = 0, clear_top1 = 0;
  void add(const float* ref, const float* ours, int v) {
    auto lsm = [v](const float* x) {
      std::vector<double> l(static_cast<size_t>(v));
      const double m = *std::max_element(x, x + v);
      double s = 0;
      for (int i = 0; i < v; ++i) s += std::exp(x[i] - m);
      for (int i = 0; i < v; ++i) l[static_cast<size_t>(i)] = x[i] - m - std::log(s);
      return l;
    };
    const auto lp = lsm(ref), lq = lsm(ours);
    double kl = 0;
    for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    kl_sum += kl;
    const auto best = std::max_element(ref, ref + v) - ref;
    const bool same = best == std::max_element(ours, ours + v) - ours;
    top1 += same;
    float runner_up = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < v; ++i)
      if (i != best) runner_up = std::max(runner_up, ref[i]);
    if (ref[best] - runner_up >= kClearGap) {
      ++clear;
      clear_top1 += same;
    }
    ++n;
  }
};

class FastVsReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("zenmoe_fast_exec_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "bench2.gguf").string();
    const auto r = testing_cli::run_zenmoe("mkmodel --preset bench --layers 2 --experts 16 -o '" + path_ + "'", dir_);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::unique_ptr<Executor> fast(const gguf::Model& m, int threads, int max_batch, int n_ctx = 256,
                                        KvCacheType kv = KvCacheType::F32, MlaForm mla = MlaForm::kAuto,
                                        int64_t mla_keep_bytes = FastExecutorOptions::kMlaKeepAuto,
                                        isa::Tuning tuning = isa::host_tuning(),
                                        int64_t attn_prefetch = ExecutorOptions::kAttnPrefetchAuto) {
    CompileOptions co;
    co.target = {isa::host_level(), tuning};
    auto cm = compile_in_memory(m, co);
    EXPECT_TRUE(cm.has_value()) << cm.error();
    if (!cm) return nullptr;
    FastExecutorOptions fo;
    fo.base.n_ctx = n_ctx;
    fo.base.n_threads = threads;
    fo.base.kv_type = kv;
    fo.base.mla_form = mla;
    fo.max_batch = max_batch;
    fo.mla_keep_bytes = mla_keep_bytes;
    fo.base.attn_prefetch_bytes = attn_prefetch;
    auto ex = make_fast_executor(std::make_shared<const CompiledModel>(std::move(*cm)), fo);
    EXPECT_TRUE(ex.has_value()) << ex.error();
    return ex ? std::unique_ptr<Executor>(std::move(*ex)) : nullptr;
  }

  // n random tokens (seeded) and the reference executor's logits at every position.
  static void reference_logits(const gguf::Model& m, int n, unsigned seed, std::vector<int32_t>& tokens,
                               std::vector<float>& logits, int& n_vocab) {
    ExecutorOptions ro;
    ro.n_ctx = 256;
    auto ref = make_reference_executor(m, ro);
    ASSERT_TRUE(ref.has_value()) << ref.error();
    n_vocab = (*ref)->n_vocab();
    std::mt19937 rng(seed);
    tokens.resize(static_cast<size_t>(n));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<unsigned>(n_vocab));
    logits.resize(static_cast<size_t>(n) * static_cast<size_t>(n_vocab));
    ASSERT_TRUE((*ref)->eval(tokens, logits.data(), true).is_ok());
  }

  static void expect_decode_independent_of_threads(const std::string& path, const char* what);

  static inline fs::path dir_;
  static inline std::string path_;
};

TEST_F(FastVsReference, BenchShapesAgreeOver64Positions) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int T = 64;
  int V = 0;
  std::vector<int32_t> tokens;
  std::vector<float> want;
  ASSERT_NO_FATAL_FAILURE(reference_logits(*model, T, 7, tokens, want, V));
  std::vector<float> prefill(want.size()), decode(want.size());

  auto one = fast(*model, 1, 24);  // 64 tokens: chunks of 24, 24, 16
  ASSERT_TRUE(one);
  ASSERT_TRUE(one->eval(tokens, prefill.data(), true).is_ok());
  auto two = fast(*model, 2, 8);
  ASSERT_TRUE(two);
  for (int t = 0; t < T; ++t)
    ASSERT_TRUE(two->eval({&tokens[static_cast<size_t>(t)], 1}, decode.data() + t * V, false).is_ok());
  Agreement p, d;
  for (int t = 0; t < T; ++t) {
    p.add(want.data() + t * V, prefill.data() + t * V, V);
    d.add(want.data() + t * V, decode.data() + t * V, V);
  }
  std::printf("[fast] bench-shaped prefill: top-1 %.4f mean KL %.3e | decode (2 threads): top-1 %.4f mean KL %.3e\n",
              p.top1 / double(p.n), p.kl_sum / p.n, d.top1 / double(d.n), d.kl_sum / d.n);
  EXPECT_GE(p.top1, 0.95 * T);
  EXPECT_LE(p.kl_sum / p.n, 5e-3);
  EXPECT_GE(d.top1, 0.95 * T);
  EXPECT_LE(d.kl_sum / d.n, 5e-3);

  // Same engine, same input: identical bits; reset forgets the sequence.
  one->reset();
  std::vector<float> again(want.size());
  ASSERT_TRUE(one->eval(tokens, again.data(), true).is_ok());
  EXPECT_EQ(0, std::memcmp(again.data(), prefill.data(), again.size() * sizeof(float)));
}

// Every output row is computed by one thread with the same kernel whatever the split (rows of
// each expert, blocks of the routed gate/up, whole heads), so decode logits are the same bits
// for 1, 2 and 3 threads while the context is too short to split attention by cache positions
// (below).
void FastVsReference::expect_decode_independent_of_threads(const std::string& path, const char* what) {
  auto model = gguf::Model::open(path);
  ASSERT_TRUE(model.has_value()) << model.error();
  const std::vector<int32_t> tokens = {5, 77, 300, 12, 901, 44, 3, 250};
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    auto ex = fast(*model, threads, 8);
    ASSERT_TRUE(ex);
    std::vector<float> logits(tokens.size() * static_cast<size_t>(ex->n_vocab()));
    for (size_t t = 0; t < tokens.size(); ++t)
      ASSERT_TRUE(ex->eval({&tokens[t], 1}, logits.data() + t * static_cast<size_t>(ex->n_vocab()), false).is_ok());
    runs.push_back(std::move(logits));
  }
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float))) << what;
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[2].data(), runs[0].size() * sizeof(float))) << what;
}

TEST_F(FastVsReference, DecodeLogitsDoNotDependOnThreadCount) {
  expect_decode_independent_of_threads(path_, "bench");
  // The MoE layer runs its shared and routed gate/up as one list of blocks (link_gate_up_pairs).
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  auto ex = fast(*model, 2, 8);
  ASSERT_TRUE(ex);
  const auto log = dynamic_cast<const FastExecutor&>(*ex).dispatch_log();
  EXPECT_NE(std::find(log.begin(), log.end(),
                      "gate_up_swiglu_id: runs with the shared expert's gate_up_swiglu as one block list in 1 of 1 layers"),
            log.end());
}

// Experts of one block of 256 outputs: at 2 and 3 threads the routed gate/up deals whole blocks
// of different experts to the threads (the case of Kimi-K2's 8 blocks on 16 cores).
TEST_F(FastVsReference, DecodeWithFewerExpertBlocksThanThreads) {
  const std::string path = (dir_ / "one_block.gguf").string();
  const auto r = testing_cli::run_zenmoe(
      "mkmodel --preset bench --layers 2 --experts 16 --expert-ffn 256 -o '" + path + "'", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_decode_independent_of_threads(path, "one block per expert");
}

// 40 heads take three vectors of lanes: one token's heads split across 2 (3) threads run the
// decode attention kernel laid out for two vectors (one), each head's lane computing as in the
// kernel for all 40.
TEST_F(FastVsReference, DecodeHeadSplitRunsKernelsForFewerLanes) {
  const std::string path = (dir_ / "heads40.gguf").string();
  const auto r = testing_cli::run_zenmoe("mkmodel --preset bench --layers 2 --heads 40 -o '" + path + "'", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  expect_decode_independent_of_threads(path, "40 heads");
  if (isa::host_level() < isa::IsaLevel::kAvx512) return;  // the decode kernels need AVX-512
  auto model = gguf::Model::open(path);
  ASSERT_TRUE(model.has_value()) << model.error();
  for (const auto& [threads, want] : {std::pair{1, "48"}, std::pair{2, "32, 48"}, std::pair{3, "16, 48"}}) {
    auto ex = fast(*model, threads, 8);
    ASSERT_TRUE(ex);
    const auto log = dynamic_cast<const FastExecutor&>(*ex).dispatch_log();
    EXPECT_NE(std::find(log.begin(), log.end(), "mla_attention: decode kernels for " + std::string(want) + " lanes"),
              log.end())
        << threads << " threads";
  }
}

// A prompt's routed and shared-expert gate/up run together as one list of blocks dealt out by
// cost, through the GEMM: the prompt's logits at 2 and 3 threads, run four times each, match
// 1 thread's (the attention's row split may sum in another order, hence a small bound).
TEST_F(FastVsReference, PrefillLogitsAgreeAcrossThreadCounts) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(48);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    auto ex = fast(*model, threads, 48);
    ASSERT_TRUE(ex);
    const auto V = static_cast<size_t>(ex->n_vocab());
    if (runs.empty())
      for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
    std::vector<float> logits(tokens.size() * V);
    for (int rep = 0; rep < 4; ++rep) {
      ex->reset();
      ASSERT_TRUE(ex->eval(tokens, logits.data(), true).is_ok());
      if (!runs.empty()) {
        double worst = 0;
        for (size_t i = 0; i < logits.size(); ++i)
          worst = std::max(worst, static_cast<double>(std::fabs(logits[i] - runs[0][i])));
        EXPECT_LT(worst, 1e-3) << threads << " threads, repetition " << rep;
      }
    }
    runs.push_back(std::move(logits));
  }
}

// Past kMlaSplitMinRows positions per thread, decode attention splits the cache positions across
// threads and merges per head: the same function, summed in another order (attention outputs
// move by ~4e-7, MlaSplit tests). An activation code rounding the other way then moves a logit
// of this small random model by up to a few tenths (measured 0.2, mean KL 3.4e-4; with a
// prompt too short to split, 1e-6), so the bounds are the oracle's.
TEST_F(FastVsReference, SplitDecodeAgreesWithOneThread) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int prompt = 3 * static_cast<int>(kMlaSplitMinRows), gen = 6;
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(static_cast<size_t>(prompt + gen));
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 3}) {
    auto ex = fast(*model, threads, 64, prompt + gen);
    ASSERT_TRUE(ex);
    const auto V = static_cast<size_t>(ex->n_vocab());
    if (runs.empty())
      for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
    std::vector<float> logits(static_cast<size_t>(gen) * V), last(V);
    ASSERT_TRUE(ex->eval({tokens.data(), static_cast<size_t>(prompt)}, last.data(), false).is_ok());
    for (int t = 0; t < gen; ++t)
      ASSERT_TRUE(ex->eval({&tokens[static_cast<size_t>(prompt + t)], 1}, logits.data() + t * V, false).is_ok());
    runs.push_back(std::move(logits));
  }
  const int V = static_cast<int>(runs[0].size()) / gen;
  Agreement a;
  double max_diff = 0;
  for (int t = 0; t < gen; ++t) a.add(runs[0].data() + t * V, runs[1].data() + t * V, V);
  for (size_t i = 0; i < runs[0].size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(runs[0][i] - runs[1][i])));
  std::printf("[fast] split decode (3 threads) against 1 thread: max |logit diff| %.3e, mean KL %.3e\n", max_diff,
              a.kl_sum / a.n);
  EXPECT_GE(a.top1, gen - 1);
  EXPECT_LE(a.kl_sum / a.n, 5e-3);
}

// Decode attention prefetching the weights after it (none, a KiB, an L2's worth, Zen 4's whole
// share) changes no bit of the logits, at 1 thread and at 2 (positions split across them), and
// the dispatch log says how much each thread asks for, also where the heads' products split
// rows instead of heads.
TEST_F(FastVsReference, AttentionPrefetchChangesNoBits) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int prompt = 2 * static_cast<int>(kMlaSplitMinRows) + 5, gen = 4;
  std::vector<int32_t> tokens(static_cast<size_t>(prompt + gen));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 1000);
  for (int threads : {1, 2}) {
    std::vector<std::vector<float>> runs;
    const std::pair<int64_t, isa::Tuning> cases[] = {{0, isa::host_tuning()},
                                                     {1024, isa::host_tuning()},
                                                     {ExecutorOptions::kAttnPrefetchAuto, isa::host_tuning()},
                                                     {ExecutorOptions::kAttnPrefetchAuto, isa::Tuning::kZen4}};
    for (auto [bytes, tuning] : cases) {
      auto ex = fast(*model, threads, 64, prompt + gen, KvCacheType::F16, MlaForm::kAbsorbed,
                     FastExecutorOptions::kMlaKeepAuto, tuning, bytes);
      ASSERT_TRUE(ex);
      const auto log = dynamic_cast<const FastExecutor&>(*ex).dispatch_log();
      const bool says = std::any_of(log.begin(), log.end(), [](const std::string& l) {
        return l.starts_with("mla_attention: decode prefetches up to ");
      });
      // Automatic: none when the attention runs on the AMX tile unit (an F16 cache on such a host).
      const bool automatic_none =
          bytes == ExecutorOptions::kAttnPrefetchAuto && isa::host_supports(isa::IsaLevel::kAmx);
      // The log names the kernel the decode attention runs.
      const std::string amx_line =
          "mla_attention: decode on the AMX tile unit (f16 cache rows, split into two bf16 parts)";
      EXPECT_EQ(std::find(log.begin(), log.end(), amx_line) != log.end(), isa::host_supports(isa::IsaLevel::kAmx));
      EXPECT_EQ(says, bytes != 0 && !automatic_none && isa::host_supports(isa::IsaLevel::kAvx512))
          << threads << " threads, " << bytes;
      // Zen 4's automatic stream is not cut to the L2.
      const bool whole = std::any_of(log.begin(), log.end(), [](const std::string& l) {
        return l.starts_with("mla_attention: decode prefetches up to ") &&
               l.ends_with("(Zen 4: all of them, through the L2 into the L3)");
      });
      EXPECT_EQ(whole, says && bytes == ExecutorOptions::kAttnPrefetchAuto && tuning == isa::Tuning::kZen4)
          << threads << " threads";
      const auto V = static_cast<size_t>(ex->n_vocab());
      std::vector<float> logits(static_cast<size_t>(gen) * V), last(V);
      ASSERT_TRUE(ex->eval({tokens.data(), static_cast<size_t>(prompt)}, last.data(), false).is_ok());
      for (int t = 0; t < gen; ++t)
        ASSERT_TRUE(ex->eval({&tokens[static_cast<size_t>(prompt + t)], 1}, logits.data() + t * V, false).is_ok());
      runs.push_back(std::move(logits));
    }
    for (size_t r = 1; r < runs.size(); ++r)
      EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[r].data(), runs[0].size() * sizeof(float)))
          << threads << " threads, run " << r;
  }
  // 16 heads on 9 threads: the attn_v_b products split rows of every head instead of whole
  // heads, and their ranges still reach the stream.
  if (isa::host_supports(isa::IsaLevel::kAvx512)) {
    auto ex = fast(*model, 9, 8);
    ASSERT_TRUE(ex);
    const auto log = dynamic_cast<const FastExecutor&>(*ex).dispatch_log();
    EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& l) {
      return l.starts_with("mla_attention: decode prefetches up to ");
    }));
  }
}

// MLA in the decompressed form (every batch) against the reference, on every cache type: a
// 64-token prompt in chunks of 24, 24 and 16, so later chunks also attend to earlier ones, then
// single tokens. The form reads the queries as the absorbing matmul would (quantised the same
// way) but never rounds the latent output to Q8_K, so it differs from the reference by about
// as much as the absorbed form does (printed side by side). Measured (absorbed | decompressed,
// top-1 and mean KL over 68 positions): f32 cache 1.000 8.7e-4 | 0.956 2.9e-3; f16 0.941 2.3e-3 |
// 0.956 1.4e-3; bf16 0.956 2.0e-3 | 0.971 2.2e-3; q8_0 0.971 2.9e-3 | 0.985 2.3e-3. Every miss
// was a near-tie (the reference's winner ahead by 0.01-0.16 logits; reordering two of the
// form's sums moved three of them), so the check is the mean KL bound of the reference tests and
// that each of the 48 positions with a clear winner keeps it.
TEST_F(FastVsReference, DecompressedMlaAgreesOnEveryCacheType) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int T = 64, gen = 4;
  int V = 0;
  std::vector<int32_t> tokens;
  std::vector<float> want;
  ASSERT_NO_FATAL_FAILURE(reference_logits(*model, T + gen, 5, tokens, want, V));
  const std::pair<KvCacheType, int> cases[] = {
      {KvCacheType::F32, 2}, {KvCacheType::F16, 1}, {KvCacheType::BF16, 2}, {KvCacheType::Q8_0, 1}};
  for (auto [kv, threads] : cases) {
    Agreement forms[2];
    for (MlaForm form : {MlaForm::kAbsorbed, MlaForm::kDecompressed}) {
      auto ex = fast(*model, threads, 24, 256, kv, form);
      ASSERT_TRUE(ex);
      if (form == MlaForm::kDecompressed) {
        const auto log = dynamic_cast<FastExecutor&>(*ex).dispatch_log();
        EXPECT_NE(std::find(log.begin(), log.end(), "mla_attention: decompressed, decompressed form in 2 of 2 layers"),
                  log.end());
      }
      std::vector<float> got(want.size());
      ASSERT_TRUE(ex->eval({tokens.data(), static_cast<size_t>(T)}, got.data(), true).is_ok());
      for (int t = T; t < T + gen; ++t)
        ASSERT_TRUE(ex->eval({&tokens[static_cast<size_t>(t)], 1}, got.data() + t * V, false).is_ok());
      Agreement& a = forms[form == MlaForm::kDecompressed ? 1 : 0];
      for (int t = 0; t < T + gen; ++t) a.add(want.data() + t * V, got.data() + t * V, V);
    }
    std::printf("[fast] %s cache, %d thread(s): absorbed top-1 %.4f (clear %d/%d) mean KL %.3e | decompressed top-1 "
                "%.4f (clear %d/%d) mean KL %.3e\n",
                kv_cache_type_name(kv), threads, forms[0].top1 / double(forms[0].n), forms[0].clear_top1,
                forms[0].clear, forms[0].kl_sum / forms[0].n, forms[1].top1 / double(forms[1].n), forms[1].clear_top1,
                forms[1].clear, forms[1].kl_sum / forms[1].n);
    EXPECT_GE(forms[1].clear, (T + gen) / 2) << kv_cache_type_name(kv);
    EXPECT_EQ(forms[1].clear_top1, forms[1].clear) << kv_cache_type_name(kv);
    EXPECT_LE(forms[1].kl_sum / forms[1].n, 5e-3) << kv_cache_type_name(kv);
  }
}

// Auto picks per chunk: a 320-token prompt decompressed, single tokens and a short prompt
// absorbed (the short prompt's logits are the forced absorbed form's bits).
TEST_F(FastVsReference, AutoMlaFormPicksByBatchLength) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int T = 320, gen = 2, n_ctx = T + gen, short_prompt = 16;
  std::mt19937 rng(9);
  std::vector<int32_t> tokens(T + gen);
  std::vector<std::vector<float>> longs, shorts;
  std::vector<int64_t> chunks;
  for (MlaForm form : {MlaForm::kAuto, MlaForm::kAbsorbed, MlaForm::kDecompressed}) {
    auto ex = fast(*model, 2, T, n_ctx, KvCacheType::F16, form);
    ASSERT_TRUE(ex);
    const auto V = static_cast<size_t>(ex->n_vocab());
    if (longs.empty())
      for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
    std::vector<float> long_logits(V), short_logits(V);
    ASSERT_TRUE(ex->eval({tokens.data(), static_cast<size_t>(T)}, long_logits.data(), false).is_ok());
    for (int t = 0; t < gen; ++t)
      ASSERT_TRUE(ex->eval({&tokens[static_cast<size_t>(T + t)], 1}, long_logits.data(), false).is_ok());
    ex->reset();
    ASSERT_TRUE(ex->eval({tokens.data(), static_cast<size_t>(short_prompt)}, short_logits.data(), false).is_ok());
    chunks.push_back(dynamic_cast<FastExecutor&>(*ex).decompressed_chunks());
    longs.push_back(std::move(long_logits));
    shorts.push_back(std::move(short_logits));
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{1, 0, 4}));  // auto: the long prompt only
  const size_t bytes = longs[0].size() * sizeof(float);
  EXPECT_NE(0, std::memcmp(longs[1].data(), longs[2].data(), bytes));  // the forms differ...
  EXPECT_EQ(0, std::memcmp(shorts[0].data(), shorts[1].data(), bytes));  // ...auto absorbed the short prompt
  EXPECT_NE(0, std::memcmp(shorts[0].data(), shorts[2].data(), bytes));
}

// With the decode kernels' bf16 pair form (a BF16 cache scheduled for Zen 5 on an AVX512_BF16
// host) the absorbed form is priced faster, so a 320-token prompt, which auto decompresses with
// an F16 cache (above), stays absorbed; without the pair form both caches decompress it.
TEST_F(FastVsReference, AutoMlaFormCountsTheBf16PairForm) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int T = 320;
  const bool pairs = isa::host_supports(isa::IsaLevel::kAvx512Bf16);
  std::vector<int32_t> tokens(T);
  for (int i = 0; i < T; ++i) tokens[static_cast<size_t>(i)] = (i * 7 + 3) % 200;
  for (KvCacheType kv : {KvCacheType::F16, KvCacheType::BF16}) {
    auto ex = fast(*model, 1, T, T, kv, MlaForm::kAuto, FastExecutorOptions::kMlaKeepAuto, isa::Tuning::kZen5);
    ASSERT_TRUE(ex);
    std::vector<float> logits(static_cast<size_t>(ex->n_vocab()));
    ASSERT_TRUE(ex->eval(tokens, logits.data(), false).is_ok());
    const bool absorbed = kv == KvCacheType::BF16 && pairs;
    EXPECT_EQ(dynamic_cast<FastExecutor&>(*ex).decompressed_chunks(), absorbed ? 0 : 1) << kv_cache_type_name(kv);
  }
}

// The decompressed form keeps the keys and values of earlier chunks: a prompt in chunks of 16,
// decode steps, a second prompt continuing the sequence (its chunks see kept rows and the
// decode steps' rows, decompressed then), and after reset() a different prompt over the same
// positions, against an executor that keeps nothing and decompresses every visible position in
// every chunk, on a 32-bit and a 16-bit cache. The products are the same; only the SGEMM's
// rounding may differ with the rows per call (about 1e-6 of the logits), which on this random
// model can tip a near-tie in a router, so the check is that every position with a clear
// winner keeps it and the mean KL stays small. A kept row that went stale (after reset(), or a
// decode step's row never decompressed) moves every later position: with store() not
// forgetting rewritten rows, top-1 fell to 0.69 and the mean KL rose to 0.63.
TEST_F(FastVsReference, DecompressedMlaKeepsEarlierChunks) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  for (KvCacheType kv : {KvCacheType::F32, KvCacheType::F16}) {
    std::vector<std::vector<float>> runs;
    int V = 0;
    for (int64_t keep : {FastExecutorOptions::kMlaKeepAuto, int64_t{0}}) {
      auto ex = fast(*model, 2, 16, 256, kv, MlaForm::kDecompressed, keep);
      ASSERT_TRUE(ex);
      V = ex->n_vocab();
      std::mt19937 rng(13);
      std::vector<int32_t> a(40), b(24), c(40);
      for (auto* v : {&a, &b, &c})
        for (auto& t : *v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
      std::vector<float> out;
      auto eval = [&](std::span<const int32_t> toks) {
        std::vector<float> rows(toks.size() * static_cast<size_t>(V));
        ASSERT_TRUE(ex->eval(toks, rows.data(), true).is_ok());
        out.insert(out.end(), rows.begin(), rows.end());
      };
      eval(a);
      for (size_t t = 0; t < 3; ++t) eval({&b[t], 1});
      eval({b.data() + 3, b.size() - 3});
      ex->reset();
      eval(c);
      runs.push_back(std::move(out));
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    Agreement agree;
    for (size_t i = 0; i < runs[0].size(); i += static_cast<size_t>(V)) agree.add(&runs[1][i], &runs[0][i], V);
    std::printf("[fast] %s cache: kept against recomputed top-1 %.4f (clear %d/%d) mean KL %.3e over %d positions\n",
                kv_cache_type_name(kv), agree.top1 / double(agree.n), agree.clear_top1, agree.clear,
                agree.kl_sum / agree.n, agree.n);
    EXPECT_EQ(agree.n, 104);
    EXPECT_EQ(agree.clear_top1, agree.clear) << kv_cache_type_name(kv);
    EXPECT_LE(agree.kl_sum / agree.n, 1e-3) << kv_cache_type_name(kv);  // measured 2-6e-5; stale rows: 0.63
  }
}

// Resident memory of this process in bytes (/proc/self/statm: pages).
int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// A context of 2M positions asks for a 4.8 GB F16 cache (two layers): it takes memory only for
// the positions written, so creating the executor and decoding a few tokens stays far below it.
TEST_F(FastVsReference, KvCacheTakesMemoryOnlyForWrittenPositions) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the address sanitizer's shadow memory and quarantine blur resident memory";
#endif
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  const int64_t before = resident_bytes();
  auto ex = fast(*model, 1, 4, 1 << 21, KvCacheType::F16);
  ASSERT_TRUE(ex);
  const int64_t cache_bytes = int64_t{2} * (1 << 21) * 576 * 2;  // layers x positions x F16 latent row
  std::vector<float> logits(static_cast<size_t>(ex->n_vocab()));
  const std::vector<int32_t> tokens = {1, 2, 3};
  ASSERT_TRUE(ex->eval(tokens, logits.data(), false).is_ok());
  ASSERT_TRUE(ex->eval({tokens.data(), 1}, logits.data(), false).is_ok());
  const int64_t grown = resident_bytes() - before;
  EXPECT_LT(grown, int64_t{1536} << 20) << "resident memory grew by " << (grown >> 20) << " MiB for a cache of "
                                        << (cache_bytes >> 20) << " MiB";
}

TEST_F(FastVsReference, RefusesKvCacheLargerThanMemory) {
  const uint64_t phys = physical_memory_bytes();
  ASSERT_GT(phys, 0u);
  const uint64_t per_position = uint64_t{2} * 576 * 2;  // layers x F16 latent row
  const uint64_t n_ctx = phys / per_position + 4096;
  if (n_ctx > static_cast<uint64_t>(std::numeric_limits<int>::max())) GTEST_SKIP() << "memory beyond an int context";
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  CompileOptions co;
  co.target = {isa::host_level(), isa::host_tuning()};
  auto cm = compile_in_memory(*model, co);
  ASSERT_TRUE(cm.has_value()) << cm.error();
  FastExecutorOptions fo;
  fo.base.n_ctx = static_cast<int>(n_ctx);
  fo.base.kv_type = KvCacheType::F16;
  auto ex = make_fast_executor(std::make_shared<const CompiledModel>(std::move(*cm)), fo);
  ASSERT_FALSE(ex.has_value());
  EXPECT_NE(ex.error().find("KV cache of " + std::to_string(n_ctx) + " positions"), std::string::npos) << ex.error();
  EXPECT_NE(ex.error().find("smaller context"), std::string::npos) << ex.error();
}

TEST(HugeBuffer, ImpossibleSizeIsAnErrorNamingTheBuffer) {
  auto buf = alloc_huge_buffer(uint64_t{1} << 62, "test buffer");
  ASSERT_FALSE(buf.has_value());
  EXPECT_NE(buf.error().find("test buffer: cannot allocate"), std::string::npos) << buf.error();
}

TEST_F(FastVsReference, RefusesBadTokensAndContextOverflow) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  auto ex = fast(*model, 2, 16);
  ASSERT_TRUE(ex);
  std::vector<float> logits(static_cast<size_t>(ex->n_vocab()));
  const int32_t bad = ex->n_vocab() + 5;
  Status s = ex->eval({&bad, 1}, logits.data(), false);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.message();
  std::vector<int32_t> many(300, 1);
  s = ex->eval(many, logits.data(), false);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("context limit"), std::string::npos) << s.message();
  EXPECT_EQ(ex->n_past(), 0);
  EXPECT_TRUE(ex->eval({many.data(), 3}, logits.data(), false).is_ok());
  EXPECT_EQ(ex->n_past(), 3);
}

}  // namespace
}  // namespace zenmoe
