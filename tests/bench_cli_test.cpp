// `zenmoe bench kernels` / `bench bandwidth` / `bench compute` at tiny sizes (valid JSON with the required
// fields, bad flags exit 1), the benchmark planning helpers, and the numerics of the
// compiler-vectorised baseline loops on the spec's worked examples.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "codegen/x64/throughput_loop.h"
#include "tests/cli_util.h"
#include "tools/bench_cxx_loop.h"
#include "tools/bench_gemv.h"
#include "tools/roofline.h"

namespace zenmoe::tools {
namespace {

using RunResult = testing_cli::CliResult;

RunResult run_cli(const std::string& args) {
  return testing_cli::run_zenmoe(args, testing_cli::process_scratch_dir("bench_cli_test"));
}

// Small enough for the sanitizer build: 2 MiB DRAM set, milliseconds per measurement.
constexpr const char* kTiny = "--shapes 512x48 --threads 1,2 --min-time 0.002 --reps 2 --dram-mib 2";

TEST(BenchCli, KernelsJsonHasRequiredFields) {
  RunResult r = run_cli(std::string("bench kernels --json --formats q4_K,q8_0,f32 --regimes dram,l2,l3 "
                                    "--kernels jit,cxx,onednn ") + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  // 3 cxx loops + oneDNN f32 and s8 (bf16 may be unsupported), 3 regimes, 2 thread counts.
  ASSERT_GE(j.size(), 5u * 3 * 2);
  std::set<std::string> kernels, regimes;
  for (const auto& o : j) {
    for (const char* k : {"kernel", "format", "rows", "cols", "regime", "threads", "weight_gbps",
                          "read_bw_gbps", "fraction_of_read_bw", "gflops"})
      ASSERT_TRUE(o.contains(k)) << k << " missing in " << o.dump();
    kernels.insert(o["kernel"].get<std::string>());
    regimes.insert(o["regime"].get<std::string>());
    EXPECT_EQ(o["rows"], 48);
    EXPECT_EQ(o["cols"], 512);
    EXPECT_GT(o["weight_gbps"].get<double>(), 0);
    EXPECT_GT(o["read_bw_gbps"].get<double>(), 0);
    EXPECT_NEAR(o["fraction_of_read_bw"].get<double>(),
                o["weight_gbps"].get<double>() / o["read_bw_gbps"].get<double>(), 1e-9);
    EXPECT_NEAR(o["gflops"].get<double>(),
                2.0 * o["measured_rows"].get<double>() * 512 / o["seconds_per_call"].get<double>() / 1e9,
                1e-6 * o["gflops"].get<double>());
    int t = o["threads"];
    EXPECT_TRUE(t == 1 || t == 2);
  }
  for (const char* k : {"cxx_loop_q4k", "cxx_loop_q8_0", "cxx_loop_f32", "onednn_f32_m1", "onednn_s8_m1"})
    EXPECT_TRUE(kernels.count(k)) << k;
  EXPECT_EQ(regimes, (std::set<std::string>{"dram", "l2", "l3"}));
  // The generated Q4_K kernel appears under its canonical name when the registry has one.
  if (!implemented_levels(GgmlType::Q4_K).empty()) {
    auto target = isa::resolve_target("");
    ASSERT_TRUE(target);
    const KernelDesc d = default_gemv_desc(GgmlType::Q4_K, 512, *target);
    EXPECT_TRUE(kernels.count(canonical_name(d))) << canonical_name(d);
  }
}

// Every generated format is measured, next to its C++ loop and its oneDNN baseline in its
// own precision (f32, bf16, f16 or bf16, s8), with the ratios added to its object.
TEST(BenchCli, EveryFormatAgainstItsBaselines) {
  RunResult r = run_cli("bench kernels --json --formats q4_K,q5_K,q6_K,q8_0,q4_0,q5_0,bf16,f16,f32 --regimes l2 "
                        "--threads 1 --kernels jit,cxx,onednn --shapes 512x48 --min-time 0.002 --reps 2 --dram-mib 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  std::map<std::string, nlohmann::json> by_kernel;
  for (const auto& o : j) by_kernel[o["kernel"].get<std::string>()] = o;
  EXPECT_TRUE(by_kernel.count("onednn_s8_m1")) << r.err;
  EXPECT_TRUE(by_kernel.count("onednn_f32_m1")) << r.err;
  EXPECT_FALSE(by_kernel.count("onednn_f16_m1") == 0 && by_kernel.count("onednn_bf16_m1") == 0) << r.err;
  for (GgmlType f : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q5_0, GgmlType::BF16, GgmlType::F16, GgmlType::F32}) {
    SCOPED_TRACE(type_name(f));
    const std::vector<isa::IsaLevel> levels = implemented_levels(f);
    if (std::find(levels.begin(), levels.end(), target->level) == levels.end()) continue;
    const std::string name = canonical_name(default_gemv_desc(f, 512, *target));
    ASSERT_TRUE(by_kernel.count(name)) << name << "\n" << r.err;
    const nlohmann::json& o = by_kernel[name];
    EXPECT_EQ(o["format"], type_name(f));
    ASSERT_TRUE(o.contains("speedup_vs_cxx_loop")) << o.dump();
    EXPECT_GT(o["speedup_vs_cxx_loop"].get<double>(), 0);
    if (!o.contains("onednn_baseline")) continue;  // bf16 may be missing from oneDNN here
    const std::string base = o["onednn_baseline"];
    const bool quantised = f != GgmlType::F32 && f != GgmlType::F16 && f != GgmlType::BF16;
    const std::string want = quantised ? "onednn_s8_m1" : f == GgmlType::F32 ? "onednn_f32_m1"
                             : f == GgmlType::BF16 ? "onednn_bf16_m1" : base;  // f16: f16 or bf16
    EXPECT_EQ(base, want);
    ASSERT_TRUE(by_kernel.count(base));
    EXPECT_NEAR(o["speedup_vs_onednn"].get<double>(),
                o["gflops"].get<double>() / by_kernel[base]["gflops"].get<double>(), 1e-9);
  }
}

// --rounds measures the list again; each measurement carries its round and is compared with
// the baseline of its own round.
TEST(BenchCli, RoundsPairBaselinesWithinARound) {
  RunResult r = run_cli("bench kernels --json --formats q8_0 --regimes l2 --threads 1 --kernels jit,onednn "
                        "--shapes 512x48 --min-time 0.002 --reps 2 --dram-mib 2 --rounds 3");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  std::map<int, std::map<std::string, nlohmann::json>> by_round;
  for (const auto& o : j) by_round[o["round"].get<int>()][o["kernel"].get<std::string>()] = o;
  ASSERT_EQ(by_round.size(), 3u);
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  const std::string name = canonical_name(default_gemv_desc(GgmlType::Q8_0, 512, *target));
  for (auto& [round, kernels] : by_round) {
    SCOPED_TRACE(round);
    ASSERT_TRUE(kernels.count(name)) << r.err;
    ASSERT_TRUE(kernels.count("onednn_s8_m1")) << r.err;
    const nlohmann::json& o = kernels[name];
    ASSERT_TRUE(o.contains("speedup_vs_onednn")) << o.dump();
    EXPECT_NEAR(o["speedup_vs_onednn"].get<double>(),
                o["gflops"].get<double>() / kernels["onednn_s8_m1"]["gflops"].get<double>(), 1e-9);
  }
  // The table: one line per kernel in the versus section, however many rounds.
  RunResult t = run_cli("bench kernels --formats q8_0 --regimes l2 --threads 1 --kernels jit,onednn "
                        "--shapes 512x48 --min-time 0.002 --reps 2 --dram-mib 2 --rounds 2");
  ASSERT_EQ(t.status, 0) << t.err;
  const size_t versus = t.out.find("versus baselines");
  ASSERT_NE(versus, std::string::npos) << t.out;
  const std::string tail = t.out.substr(versus);
  size_t lines = 0;
  for (size_t p = tail.find(name); p != std::string::npos; p = tail.find(name, p + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << tail;
}

// The fused gate+up kernel streams the same rows as the plain Q4_K GEMV (as gate/up pairs)
// and is reported next to it.
TEST(BenchCli, FusedGateUpAgainstPlainGemv) {
  RunResult r = run_cli("bench kernels --json --formats q4_K,q8_0 --kernels jit,fused --regimes dram,l3 --threads 1,2 "
                        "--shapes 256x1024 --min-time 0.002 --reps 2 --dram-mib 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  const std::string fused = canonical_name(default_gemv_desc(GgmlType::Q4_K, 256, *target, KernelOp::kGateUpSwiglu));
  const std::string plain = canonical_name(default_gemv_desc(GgmlType::Q4_K, 256, *target));
  int n = 0;
  for (const auto& o : j) {
    if (o["kernel"] != fused) continue;
    ++n;
    EXPECT_EQ(o["format"], "q4_K");
    EXPECT_EQ(o["measured_rows"], 1024);
    ASSERT_TRUE(o.contains("fused_vs_plain_gbps")) << o.dump();
    for (const auto& p : j) {
      if (p["kernel"] != plain || p["regime"] != o["regime"] || p["threads"] != o["threads"]) continue;
      EXPECT_NEAR(o["fused_vs_plain_gbps"].get<double>(),
                  o["weight_gbps"].get<double>() / p["weight_gbps"].get<double>(), 1e-9);
    }
  }
  // Fused exists on AVX-512 and at the scalar level only; 2 regimes x 2 thread counts.
  const bool has = target->level == isa::IsaLevel::kScalar || target->level >= isa::IsaLevel::kAvx512;
  EXPECT_EQ(n, has ? 4 : 0) << r.err;
}

// A matrix of one fused block (512 packed rows) cannot be split across two threads: it is
// measured at one thread only, with a note saying why.
TEST(BenchCli, FusedBlockNotSplitAcrossThreads) {
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  if (target->level != isa::IsaLevel::kScalar && target->level < isa::IsaLevel::kAvx512)
    GTEST_SKIP() << "no fused kernel at this level";
  RunResult r = run_cli("bench kernels --json --formats q4_K --kernels jit,fused --regimes l3 --threads 1,2 "
                        "--shapes 256x512 --min-time 0.002 --reps 2");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const std::string fused = canonical_name(default_gemv_desc(GgmlType::Q4_K, 256, *target, KernelOp::kGateUpSwiglu));
  std::vector<int> fused_threads, plain_threads;
  for (const auto& o : j) (o["kernel"] == fused ? fused_threads : plain_threads).push_back(o["threads"].get<int>());
  EXPECT_EQ(fused_threads, std::vector<int>{1});
  EXPECT_EQ(plain_threads, (std::vector<int>{1, 2}));
  EXPECT_NE(r.err.find("skipped at 2 threads: 1 block(s) of 512 rows cannot be split across them"), std::string::npos)
      << r.err;
}

TEST(BenchCli, DumpWritesGeneratedKernels) {
  const std::string dir = ::testing::TempDir() + "bench_dump";
  RunResult r = run_cli("bench kernels --formats q4_K --kernels jit --regimes l2 --threads 1 --shapes 512x48 "
                        "--min-time 0.001 --reps 1 --dram-mib 2 --dump " + dir);
  ASSERT_EQ(r.status, 0) << r.err;
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  const std::string file = dir + "/" + instance_name(default_gemv_desc(GgmlType::Q4_K, 512, *target)) + ".bin";
  std::ifstream f(file, std::ios::binary | std::ios::ate);
  // The scalar reference has no machine code to write; every generated level has.
  ASSERT_EQ(f.good(), target->level != isa::IsaLevel::kScalar) << file;
  if (f.good()) {
    EXPECT_GT(static_cast<int64_t>(f.tellg()), 16);
  }
}

TEST(BenchCli, KernelsTableListsEveryKernel) {
  RunResult r = run_cli(std::string("bench kernels --formats q6_K --regimes l2 --kernels cxx ") + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("%bw"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cxx_loop_q6k"), std::string::npos) << r.out;
}

TEST(BenchCli, BandwidthJson) {
  RunResult r = run_cli("bench bandwidth --json --threads 2 --buffer-mib 8 --reps 2 --clock cpu");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(j[t]["clock"], "cpu");
    EXPECT_EQ(j[t]["threads"], t + 1);
    EXPECT_GT(j[t]["read_bw_gbps"].get<double>(), 0);
    EXPECT_LE(j[t]["min_gbps"].get<double>(), j[t]["read_bw_gbps"].get<double>());
    EXPECT_GE(j[t]["max_gbps"].get<double>(), j[t]["read_bw_gbps"].get<double>());
    EXPECT_GE(j[t]["buffer_bytes"].get<int64_t>(), (8 << 20) - (1 << 20));
  }
}

TEST(BenchCli, BadFlagsExitOneWithOneLine) {
  for (const char* args : {"bench kernels --threads 0", "bench kernels --formats q9_K",
                           "bench kernels --formats q8_K", "bench kernels --regimes ram",
                           "bench kernels --shapes 7168y2048", "bench kernels --kernels mkl",
                           "bench kernels --min-time x", "bench kernels --isa sse9",
                           "bench kernels extra", "bench nonsense", "bench bandwidth --bogus",
                           "bench bandwidth --threads -1", "bench bandwidth --buffer-mib 0",
                           "bench kernels --clock sun", "bench bandwidth --clock sun",
                           "bench kernels --rounds 0", "bench kernels --rounds two", "bench compute --threads 0",
                           "bench compute --min-time 0", "bench compute --isa sse9", "bench compute extra",
                           "bench compute --isa scalar"}) {
    RunResult r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_TRUE(r.out.empty()) << args;
    EXPECT_EQ(r.err.rfind("zenmoe: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  RunResult bare = run_cli("bench");
  EXPECT_EQ(bare.status, 1);
  EXPECT_NE(bare.err.find("kernels"), std::string::npos);
}

// Every instruction form the host's level has, and only those, at each thread count, with a
// plausible rate (between 10 M and 100 G instructions per second per core) and its ops.
TEST(BenchCli, ComputeJsonListsTheHostsForms) {
  auto target = isa::resolve_target("");
  ASSERT_TRUE(target);
  if (target->level < isa::IsaLevel::kAvx2) GTEST_SKIP() << "no vector instruction form at this level";
  for (const char* cap : {"", "avx2"}) {
    const isa::IsaLevel level = *cap ? std::min(target->level, isa::IsaLevel::kAvx2) : target->level;
    RunResult r = run_cli(std::string("bench compute --json --threads 2 --min-time 0.005 --reps 2") +
                          (*cap ? std::string(" --isa ") + cap : ""));
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    std::vector<std::string> want;
    for (const auto& info : x64::throughput_ops(level)) want.insert(want.end(), 2, info.name);
    std::vector<std::string> got;
    for (const auto& o : j) {
      got.push_back(o["instruction"].get<std::string>());
      EXPECT_EQ(o["threads"].get<int>(), got.size() % 2 == 1 ? 1 : 2) << o.dump();
      const double per_core = o["ginstr_per_s_per_core"].get<double>();
      EXPECT_GT(per_core, 0.01) << o.dump();
      EXPECT_LT(per_core, 100.0) << o.dump();
      EXPECT_NEAR(o["ginstr_per_s"].get<double>(), per_core * o["threads"].get<int>(), 1e-9 * per_core);
      EXPECT_NEAR(o["gops_per_s"].get<double>(), o["ginstr_per_s"].get<double>() * o["ops_per_instr"].get<int>(),
                  1e-9 * o["gops_per_s"].get<double>());
    }
    EXPECT_EQ(got, want) << cap;
  }
}

// A form above the level given is refused, never generated.
TEST(ThroughputLoop, RefusesFormsAboveTheLevel) {
  auto zmm = x64::ThroughputLoop::make(x64::ThroughputOp::kFmaZmm, isa::IsaLevel::kAvx2);
  ASSERT_FALSE(zmm);
  EXPECT_NE(zmm.error().find("avx512"), std::string::npos) << zmm.error();
  EXPECT_FALSE(x64::ThroughputLoop::make(x64::ThroughputOp::kBf16DotZmm, isa::IsaLevel::kAvx512Vnni));
  EXPECT_FALSE(x64::ThroughputLoop::make(x64::ThroughputOp::kFmaYmm, isa::IsaLevel::kScalar));
  EXPECT_TRUE(x64::throughput_ops(isa::IsaLevel::kScalar).empty());
  EXPECT_EQ(x64::throughput_ops(isa::IsaLevel::kAvx512Bf16).size(), 7u);
}

TEST(BenchPlan, DramRotatesPastTheTarget) {
  CacheSizes c{48 << 10, 2 << 20, 32 << 20, true};
  CasePlan p = plan_case(Regime::kDram, 2048, 4032, 16, 1, c, int64_t{1} << 30);
  EXPECT_EQ(p.rows, 2048);
  EXPECT_GE(p.working_set, int64_t{1} << 30);
  EXPECT_LT(p.working_set - 2048 * 4032, int64_t{1} << 30);
  EXPECT_EQ(plan_case(Regime::kDram, 163840, 4032, 16, 2, c, int64_t{1} << 30).copies, 2);
}

TEST(BenchPlan, CacheRegimesFitTheirBudget) {
  CacheSizes c{48 << 10, 2 << 20, int64_t{260} << 20, true};
  CasePlan l2 = plan_case(Regime::kL2, 18432, 4032, 16, 1, c, 0);
  EXPECT_LE(l2.working_set, 1 << 20);
  EXPECT_EQ(l2.rows % 16, 0);
  EXPECT_EQ(plan_case(Regime::kL2, 18432, 4032, 16, 2, c, 0).rows, 2 * l2.rows);
  CasePlan l3 = plan_case(Regime::kL3, 18432, 4032, 16, 1, c, 0);
  EXPECT_LE(l3.working_set, 16 << 20);  // a guest's 260 MiB "L3" is capped at 32 MiB
  EXPECT_EQ(plan_case(Regime::kL2, 32, 4032, 16, 1, c, 0).rows, 32);  // small matrices: all rows
  EXPECT_EQ(plan_case(Regime::kL2, 100, 1 << 22, 16, 1, c, 0).rows, 16);  // at least one block
}

TEST(BenchPlan, ShapesParse) {
  auto s = parse_shape("kimi_expert_gate_up");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cols, 7168);
  EXPECT_EQ(s->rows, 2048);
  auto k = parse_shape("2048x7168");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->cols, 2048);
  EXPECT_EQ(k->rows, 7168);
  EXPECT_FALSE(parse_shape("x7168"));
  EXPECT_FALSE(parse_shape("12x"));
  EXPECT_FALSE(parse_shape("0x5"));
}

std::vector<uint8_t> hex(const char* s) {
  std::vector<uint8_t> v;
  for (std::istringstream in(s); in >> std::ws && !in.eof();) {
    unsigned b;
    in >> std::hex >> b;
    v.push_back(static_cast<uint8_t>(b));
  }
  return v;
}

std::vector<LoadIsa> host_isas() {
  std::vector<LoadIsa> v = {LoadIsa::kScalar};
  HostIsa h = host_isa();
  if (h.avx2) v.push_back(LoadIsa::kAvx2);
  if (h.avx512) v.push_back(LoadIsa::kAvx512);
  return v;
}

// Dequantises one block through the baseline loop (one-hot activations) and checks the
// spec's sum and the listed values.
void check_block(GgmlType t, const std::vector<uint8_t>& block, double sum,
                 const std::vector<std::pair<int, float>>& values) {
  const TypeGeometry* g = type_geometry(t);
  const int64_t n = static_cast<int64_t>(block.size()) / g->block_bytes * g->block_elems;
  ASSERT_EQ(row_bytes(t, n), static_cast<int64_t>(block.size()));
  for (LoadIsa isa : host_isas()) {
    auto fn = cxx_loop_rows_fn(t, isa);
    ASSERT_TRUE(fn) << fn.error();
    std::vector<float> ones(static_cast<size_t>(n), 1.0f), y(1);
    (*fn)(block.data(), static_cast<int64_t>(block.size()), ones.data(), y.data(), n, 0, 1);
    EXPECT_NEAR(y[0], sum, 1e-6 * std::fabs(sum) + 1e-6) << type_name(t) << " " << load_isa_name(isa);
    for (auto [i, v] : values) {
      std::vector<float> e(static_cast<size_t>(n), 0.0f);
      e[static_cast<size_t>(i)] = 1.0f;
      (*fn)(block.data(), static_cast<int64_t>(block.size()), e.data(), y.data(), n, 0, 1);
      EXPECT_EQ(y[0], v) << type_name(t) << " weight " << i << " " << load_isa_name(isa);
    }
  }
}

TEST(CxxLoopBaseline, MatchesSpecExamples) {
  check_block(GgmlType::Q4_0, hex("00 38 80 91 a2 b3 c4 d5 e6 f7 08 19 2a 3b 4c 5d 6e 7f"), -8,
              {{0, -4}, {15, 3.5f}, {16, 0}, {31, -0.5f}});
  std::vector<uint8_t> q8 = {0x00, 0x34};
  for (int j = 0; j < 32; ++j) q8.push_back(static_cast<uint8_t>(j - 16));
  check_block(GgmlType::Q8_0, q8, -4, {{0, -4}, {31, 3.75f}});
  std::vector<uint8_t> q4k = hex("00 3c 00 38 81 82 83 c4 40 41 42 83 01 12 23 8f");
  for (int i = 0; i < 128; ++i) q4k.push_back(static_cast<uint8_t>(i));
  check_block(GgmlType::Q4_K, q4k, 34080,
              {{0, 0}, {31, 15}, {32, -0.5f}, {64, -1}, {128, -8}, {224, 358}, {255, 421}});
  std::vector<uint8_t> q5k = hex("00 3c 00 38 81 82 83 c4 40 41 42 83 01 12 23 8f");
  for (int i = 0; i < 32; ++i) q5k.push_back(static_cast<uint8_t>(7 * i + 3));
  for (int i = 0; i < 128; ++i) q5k.push_back(static_cast<uint8_t>(255 - i));
  check_block(GgmlType::Q5_K, q5k, 86304, {{0, 31}, {1, 14}, {32, 61.5f}, {128, 487}, {143, -8}});
  std::vector<uint8_t> q6k;
  for (int i = 0; i < 128; ++i) q6k.push_back(static_cast<uint8_t>(i));
  for (int i = 0; i < 64; ++i) q6k.push_back(static_cast<uint8_t>(37 * i));
  for (int i = 0; i < 16; ++i) q6k.push_back(static_cast<uint8_t>(i % 2 ? -(i + 1) : i + 1));
  q6k.push_back(0x00);
  q6k.push_back(0x30);
  check_block(GgmlType::Q6_K, q6k, -204, {{0, -4}, {15, 3.875f}, {16, 8}, {31, -7.75f}});
  check_block(GgmlType::F16, hex("00 3c 00 c0 ff 7b 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"),
              1.0 - 2.0 + 65504 + 5.96046448e-08, {{0, 1}, {1, -2}, {2, 65504}, {3, 0x1p-24f}});
}

}  // namespace
}  // namespace zenmoe::tools
