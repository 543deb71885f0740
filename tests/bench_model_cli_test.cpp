// `zenmoe bench model` on the tiny oracle model at tiny sizes: the JSON carries every required
// field with positive, mutually consistent values; the text table and --profile print; bad
// flags exit 1 with one error line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ir/graph.h"
#include "runtime/gguf.h"
#include "tests/cli_util.h"
#include "tools/model_stats.h"

namespace zenmoe::tools {
namespace {

using RunResult = testing_cli::CliResult;

RunResult run_cli(const std::string& args) {
  return testing_cli::run_zenmoe(args, testing_cli::process_scratch_dir("bench_model_cli_test"));
}

const std::string kModel = std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf";
// Small enough for the sanitizer build: a 2 MiB bandwidth buffer, 4 prompt tokens, 2 decodes.
const std::string kTiny = " -p 4 -n 2 --reps 1 --warmup 0 --bw-mib 2 --bw-reps 1";

TEST(BenchModelCli, JsonHasRequiredFields) {
  RunResult r = run_cli("bench model " + kModel + " -t 1,2 --json --profile" + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  auto model = gguf::Model::open(kModel);
  ASSERT_TRUE(model.has_value()) << model.error();
  auto stats = compute_stats(*model);
  ASSERT_TRUE(stats.has_value()) << stats.error();
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& o = j[i];
    for (const char* k : {"threads", "prompt_tokens", "prefill_tok_s", "gen_tokens", "decode_tok_s",
                          "bytes_per_token", "read_bw_gbps", "bw_fraction"}) {
      ASSERT_TRUE(o.contains(k)) << k;
      ASSERT_TRUE(o[k].is_number()) << k;
      EXPECT_GT(o[k].get<double>(), 0.0) << k;
    }
    EXPECT_EQ(o["threads"].get<int>(), static_cast<int>(i) + 1);
    EXPECT_EQ(o["prompt_tokens"].get<int>(), 4);
    EXPECT_EQ(o["gen_tokens"].get<int>(), 2);
    EXPECT_EQ(o["bytes_per_token"].get<uint64_t>(), stats->active_bytes);
    // The figures derive from each other as documented.
    const double eff = o["bytes_per_token"].get<double>() * o["decode_tok_s"].get<double>() / 1e9;
    EXPECT_NEAR(o["effective_gbps"].get<double>(), eff, 1e-9 * eff + 1e-12);
    // Each repetition's fraction is its decode traffic over its own probe; the figure is their
    // median (one repetition here).
    ASSERT_EQ(o["read_bw_gbps_per_rep"].size(), 1u);
    ASSERT_EQ(o["decode_s_per_rep"].size(), 1u);
    ASSERT_EQ(o["bw_fraction_per_rep"].size(), 1u);
    const double rep_eff = o["bytes_per_token"].get<double>() * 2 / o["decode_s_per_rep"][0].get<double>() / 1e9;
    EXPECT_NEAR(o["bw_fraction_per_rep"][0].get<double>(), rep_eff / o["read_bw_gbps_per_rep"][0].get<double>(),
                1e-9 * rep_eff);
    EXPECT_EQ(o["bw_fraction"].get<double>(), o["bw_fraction_per_rep"][0].get<double>());
    EXPECT_EQ(o["read_bw_gbps"].get<double>(), o["read_bw_gbps_per_rep"][0].get<double>());
    EXPECT_NEAR(o["bw_fraction"].get<double>(), eff / o["read_bw_gbps"].get<double>(), 1e-9);
    EXPECT_NEAR(o["prefill_tok_s"].get<double>() * o["prefill_s"].get<double>(), 4.0, 1e-6);
    EXPECT_NEAR(o["decode_tok_s"].get<double>() * o["decode_s"].get<double>(), 2.0, 1e-6);
    // Both engines time their ops; whatever they report ran inside the timed phase.
    const std::pair<const char*, const char*> phases[] = {{"profile_prefill_s", "prefill_s"},
                                                          {"profile_decode_s", "decode_s"}};
    for (const auto& [phase, phase_s] : phases) {
      ASSERT_TRUE(o.contains(phase)) << phase;
      ASSERT_TRUE(o[phase].is_object() && !o[phase].empty()) << o[phase].dump();
      double sum = 0;
      for (const auto& [op, s] : o[phase].items()) {
        EXPECT_GT(s.get<double>(), 0.0) << op;
        sum += s.get<double>();
      }
      EXPECT_LE(sum, o[phase_s].get<double>() * 1.01 + 1e-3);  // ops run inside the timed phase
    }
    // Thread 0's waits at the barriers happen inside the phases; one thread waits for nobody.
    ASSERT_TRUE(o.contains("profile_barrier_wait_s")) << o.dump();
    for (const auto& [phase, phase_s] : {std::pair{"prefill", "prefill_s"}, std::pair{"decode", "decode_s"}}) {
      const double waited = o["profile_barrier_wait_s"][phase].get<double>();
      EXPECT_GE(waited, 0.0) << phase;
      EXPECT_LE(waited, o[phase_s].get<double>()) << phase;
      if (o["threads"].get<int>() == 1) {
        EXPECT_EQ(waited, 0.0) << phase;
      }
    }
    // Weight bytes per op kind: the products' repacked matrices, k_used experts for routed
    // ops. Their sum is the GGUF's active bytes give or take the layouts (the embedding row
    // is not a product; below AVX-512 VNNI Q5_0 matrices are read as Q8_0, 1.5x).
    ASSERT_TRUE(o.contains("profile_decode_weight_bytes")) << o.dump();
    const nlohmann::json& bytes = o["profile_decode_weight_bytes"];
    ASSERT_TRUE(bytes.is_object() && bytes.contains("matmul") && bytes.contains("gate_up_swiglu_id")) << bytes.dump();
    double total = 0;
    for (const auto& [op, b] : bytes.items()) {
      EXPECT_GT(b.get<uint64_t>(), 0u) << op;
      total += b.get<double>();
      // Each op's rate is its bytes over its decode time.
      ASSERT_TRUE(o["profile_decode_gbps"].contains(op)) << op;
      const double want = b.get<double>() * 2 / o["profile_decode_s"][op].get<double>() / 1e9;
      EXPECT_NEAR(o["profile_decode_gbps"][op].get<double>(), want, 1e-9 * want) << op;
    }
    EXPECT_GT(total, 0.9 * static_cast<double>(stats->active_bytes));
    EXPECT_LT(total, 1.6 * static_cast<double>(stats->active_bytes));
  }
}

// --profile-nodes: the same figures keyed op:name, each name one node of the graph with every
// layer's copy summed; the weight bytes keyed the same way.
TEST(BenchModelCli, ProfileByNode) {
  RunResult r = run_cli("bench model " + kModel + " --json --profile-nodes" + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  const nlohmann::json& o = j[0];
  for (const char* phase : {"profile_prefill_s", "profile_decode_s"}) {
    ASSERT_TRUE(o.contains(phase) && !o[phase].empty()) << o.dump();
    for (const auto& [key, s] : o[phase].items()) {
      const size_t colon = key.find(':');
      ASSERT_NE(colon, std::string::npos) << key;
      ir::OpKind op;
      EXPECT_TRUE(ir::op_from_name(key.substr(0, colon), &op)) << key;
      EXPECT_EQ(key.find("blk."), std::string::npos) << key;
      EXPECT_GT(s.get<double>(), 0.0) << key;
    }
  }
  const nlohmann::json& bytes = o["profile_decode_weight_bytes"];
  ASSERT_TRUE(bytes.contains("matmul:q_lat") && bytes.contains("gate_up_swiglu_id:act_exps.q8_K")) << bytes.dump();
  for (const auto& [key, b] : bytes.items()) {
    EXPECT_TRUE(o["profile_decode_s"].contains(key)) << key;
    EXPECT_GT(b.get<uint64_t>(), 0u) << key;
  }
  RunResult text = run_cli("bench model " + kModel + " --profile-nodes" + kTiny);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("node (per run)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("matmul:q_lat"), std::string::npos) << text.out;
}

TEST(BenchModelCli, TextTable) {
  RunResult r = run_cli("bench model -m " + kModel + " --profile --ref" + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("MB of weights read per decoded token, reference engine"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode tok/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matmul"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MB/token"), std::string::npos) << r.out;  // the reference engine gives no bytes: "-"
  EXPECT_TRUE(r.err.empty()) << r.err;
  // The profile's header and rows line up, however long the op names: the best engine's fused
  // ops (gate_up_swiglu_id) are longer than the reference engine's.
  RunResult best = run_cli("bench model -m " + kModel + " --profile" + kTiny);
  ASSERT_EQ(best.status, 0) << best.err;
  EXPECT_NE(best.out.find("gate_up_swiglu_id"), std::string::npos) << best.out;
  for (const std::string& out : {r.out, best.out}) {
    const size_t at = out.find("        op (per run)");
    ASSERT_NE(at, std::string::npos) << out;
    std::istringstream rows(out.substr(at));
    std::string line, first;
    int n = 0;
    while (std::getline(rows, line)) {
      if (first.empty()) first = line;
      EXPECT_EQ(line.size(), first.size()) << "not aligned with the header: " << line;
      ++n;
    }
    EXPECT_GT(n, 3) << out;
  }
}

// --parallel: per thread count, one entry per sequence count with the batched decode rate
// (every sequence's tokens), a time per repetition and its ratio to one sequence's rate.
TEST(BenchModelCli, ParallelDecodeFigures) {
  RunResult r = run_cli("bench model " + kModel + " --json -np 2,3" + kTiny);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  const nlohmann::json& par = j[0]["parallel"];
  ASSERT_EQ(par.size(), 2u) << r.out;
  for (size_t i = 0; i < par.size(); ++i) {
    EXPECT_EQ(par[i]["sequences"].get<int>(), static_cast<int>(i) + 2);
    ASSERT_EQ(par[i]["decode_s_per_rep"].size(), 1u);
    const double secs = par[i]["decode_s_per_rep"][0].get<double>();
    ASSERT_GT(secs, 0.0);
    EXPECT_NEAR(par[i]["decode_tok_s"].get<double>(), (i + 2) * 2 / secs, 1e-6 * (i + 2) * 2 / secs);
    EXPECT_NEAR(par[i]["vs_one_sequence"].get<double>(),
                par[i]["decode_tok_s"].get<double>() / j[0]["decode_tok_s"].get<double>(), 1e-9);
  }
  RunResult text = run_cli("bench model " + kModel + " -np 2" + kTiny);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("2 sequences at once: decode "), std::string::npos) << text.out;

  // With --profile, a batched step's time by op kind: the ops' times add up to no more than
  // the step (the profile times the ops, the step also the sampling between them), and the
  // routed experts' ops are there.
  RunResult prof = run_cli("bench model " + kModel + " --json --profile -np 3" + kTiny);
  ASSERT_EQ(prof.status, 0) << prof.err;
  const nlohmann::json pj = nlohmann::json::parse(prof.out);
  const nlohmann::json& step = pj[0]["parallel"][0]["profile_step_s"];
  ASSERT_TRUE(step.is_object()) << prof.out;
  double sum = 0;
  for (const auto& [op, s] : step.items()) sum += s.get<double>();
  const double step_s = pj[0]["parallel"][0]["decode_s_per_rep"][0].get<double>() / 2;  // -n 2
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, step_s * 1.02) << prof.out;
  EXPECT_TRUE(step.contains("gate_up_swiglu_id")) << prof.out;
  RunResult ptext = run_cli("bench model " + kModel + " --profile -np 3" + kTiny);
  ASSERT_EQ(ptext.status, 0) << ptext.err;
  EXPECT_NE(ptext.out.find("a step: "), std::string::npos) << ptext.out;
}

TEST(BenchModelCli, BadFlagsExitOneWithOneLine) {
  const std::string cases[] = {
      "bench model",
      "bench model " + kModel + " -p 0",
      "bench model " + kModel + " -n x",
      "bench model " + kModel + " -t 0",
      "bench model " + kModel + " --bogus",
      "bench model " + kModel + " another.gguf",
      "bench model " + kModel + " -m " + kModel,
      "bench model /nonexistent/model.gguf" + kTiny,
      "bench model " + kModel + " --clock sundial",
      "bench model " + kModel + " -np 0",
      "bench model " + kModel + " -np 2 --ref",
      "bench model " + kModel + " --profile-nodes=yes",
      "bench model --profile-nodes",
      "bench nothing",
  };
  for (const std::string& c : cases) {
    RunResult r = run_cli(c);
    EXPECT_EQ(r.status, 1) << c;
    EXPECT_TRUE(r.out.empty()) << c << ": " << r.out;
    EXPECT_EQ(r.err.rfind("zenmoe: ", 0), 0u) << c << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c << ": " << r.err;
  }
}

}  // namespace
}  // namespace zenmoe::tools
