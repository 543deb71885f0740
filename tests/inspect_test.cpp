// zenmoe inspect: the JSON report on the oracle files, MoE accounting, the float32 dump
// checked against the oracle dequantisation hashes, and bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/gguf.h"
#include "tests/cli_util.h"
#include "tools/inspect.h"
#include "tools/model_stats.h"

namespace zenmoe::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string oracle(const char* name) { return std::string(ZENMOE_ORACLE_DIR) + "/" + name; }

fs::path temp_dir() { return testing_cli::process_scratch_dir("inspect_test"); }

using testing_cli::CliResult;

CliResult run_cli(const std::string& args) {
  return testing_cli::run_zenmoe(args, testing_cli::process_scratch_dir("inspect_test"));
}

json inspect_oracle_json(const char* name) {
  CliResult r = run_cli("inspect --json " + oracle(name));
  EXPECT_EQ(r.status, 0) << r.err;
  return json::parse(r.out);
}

TEST(InspectJson, OracleQ4KSTypes) {
  const json j = inspect_oracle_json("tiny-q4ks.gguf");
  const json& by_type = j["totals"]["by_type"];
  EXPECT_EQ(by_type["q4_K"]["count"], 42);
  EXPECT_EQ(by_type["q5_0"]["count"], 4);
  EXPECT_EQ(by_type["q6_K"]["count"], 1);
  EXPECT_EQ(by_type["f32"]["count"], 23);
  EXPECT_EQ(by_type.size(), 4u);
  EXPECT_EQ(j["totals"]["tensors"], 70);
  EXPECT_EQ(j["tensors"].size(), 70u);
  EXPECT_EQ(j["split"]["count"], 1);
  EXPECT_EQ(j["metadata"]["general.architecture"]["value"], "deepseek2");
  EXPECT_EQ(j["metadata"]["deepseek2.expert_count"]["type"], "u32");
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["length"], 512);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["truncated"], true);
  // The k_b tensors are the Q5_0 ones.
  for (const auto& t : j["tensors"])
    if (t["type"] == "q5_0") {
      EXPECT_NE(t["name"].get<std::string>().find("attn_k_b"), std::string::npos);
    }
}

TEST(InspectJson, OracleF16Types) {
  const json j = inspect_oracle_json("tiny-f16.gguf");
  EXPECT_EQ(j["totals"]["by_type"]["f16"]["count"], 47);
  EXPECT_EQ(j["totals"]["by_type"]["f32"]["count"], 23);
}

TEST(InspectJson, MoeAccountingOfTheOracle) {
  const json j = inspect_oracle_json("tiny-q4ks.gguf");
  const json& m = j["moe"];
  EXPECT_TRUE(m["is_moe"].get<bool>());
  EXPECT_EQ(m["expert_count"], 32);
  EXPECT_EQ(m["expert_used_count"], 8);
  // By hand from the tensor table: experts 3 layers x 3 x 1,179,648 bytes, 8 of 32 read;
  // everything else but the embedding in full; one q4_K embedding row of 256 = 144 bytes.
  uint64_t expect = 0, total_params = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    const uint64_t bytes = t["bytes"];
    uint64_t params = 1;
    for (const auto& d : t["shape"]) params *= d.get<uint64_t>();
    total_params += params;
    if (name.find("_exps") != std::string::npos) expect += bytes / 4;
    else if (name == "token_embd.weight") expect += 144;
    else expect += bytes;
  }
  EXPECT_EQ(m["bytes_per_token"], expect);
  EXPECT_EQ(m["total_params"], total_params);
  EXPECT_EQ(m["by_role"]["routed_experts"]["active_bytes"], 9 * 1179648 / 4);
  EXPECT_LT(m["active_params_per_token"].get<uint64_t>(), total_params);
}

TEST(InspectText, HumanReportHasEverySection) {
  CliResult r = run_cli("inspect " + oracle("tiny-q4ks.gguf"));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"GGUF v3", "single file", "metadata (49 keys)", "tensors (70)",
                        "blk.0.attn_k_b.weight", "{128, 512, 8}", "q5_0", "totals",
                        "32 experts, 8 used per token", "weight bytes read per decoded token"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

std::string oracle_hash(const char* json_file, const std::string& tensor) {
  std::ifstream f(oracle(json_file));
  const json j = json::parse(f);
  for (const auto& t : j["tensors"])
    if (t["name"] == tensor) return t["fnv1a64_f32"];
  return "";
}

uint64_t fnv1a_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  uint64_t h = kOracleFnvBasis;
  char c;
  while (f.get(c)) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

TEST(InspectDequant, WritesFloat32MatchingTheOracleHashes) {
  const std::pair<const char*, const char*> cases[] = {
      {"tiny-q4ks", "token_embd.weight"}, {"tiny-q4ks", "blk.2.attn_k_b.weight"},
      {"tiny-q4ks", "output.weight"}, {"tiny-q4ks", "blk.1.exp_probs_b.bias"},
      {"tiny-f16", "blk.3.ffn_down_exps.weight"}};
  for (const auto& [model, tensor] : cases) {
    const fs::path out = temp_dir() / (std::string(tensor) + ".f32");
    CliResult r = run_cli("inspect " + oracle((std::string(model) + ".gguf").c_str()) + " --tensor " + tensor +
                    " --dequant " + out.string() + " --json");
    ASSERT_EQ(r.status, 0) << r.err;
    auto m = gguf::Model::open(oracle((std::string(model) + ".gguf").c_str()));
    ASSERT_TRUE(m);
    EXPECT_EQ(fs::file_size(out), static_cast<uintmax_t>(m->find_tensor(tensor)->n_elements()) * 4);
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016" PRIx64, fnv1a_file(out));
    const std::string want = oracle_hash((std::string(model) + ".dequant.json").c_str(), tensor);
    EXPECT_EQ(hash, want) << model << " " << tensor;
    EXPECT_EQ(json::parse(r.out)["fnv1a64_f32"], want);
  }
}

TEST(InspectCli, BadInputIsOneLineAndExitOne) {
  const fs::path dir = temp_dir();
  const fs::path truncated = dir / "truncated.gguf";
  {
    std::ifstream in(oracle("tiny-q4ks.gguf"), std::ios::binary);
    std::vector<char> head(5000);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary).write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  const fs::path text = dir / "text.gguf";
  std::ofstream(text) << "this is not a model\n";
  const std::string q4 = oracle("tiny-q4ks.gguf");
  const std::string cases[] = {
      "inspect " + (dir / "missing.gguf").string(), "inspect " + truncated.string(), "inspect " + text.string(),
      "inspect", "inspect --bogus " + q4, "inspect " + q4 + " " + q4, "inspect " + q4 + " --dequant x.f32",
      "inspect " + q4 + " --tensor no.such.tensor", "inspect " + q4 + " --tensor"};
  for (const std::string& args : cases) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("zenmoe: ", 0), 0u) << r.err;
  }
  // The reader's message names the file.
  CliResult r = run_cli("inspect " + truncated.string());
  EXPECT_NE(r.err.find("truncated.gguf"), std::string::npos) << r.err;
}

TEST(ModelStats, TiedOutputReadsTheWholeEmbedding) {
  std::vector<TensorDesc> ts(2);
  ts[0].name = "token_embd.weight";
  ts[0].type = GgmlType::F16;
  ts[0].ne[0] = 64;
  ts[0].ne[1] = 100;
  ts[0].nbytes = 64 * 100 * 2;
  ts[1].name = "blk.0.ffn_up_exps.weight";
  ts[1].type = GgmlType::F16;
  ts[1].ne[0] = 64;
  ts[1].ne[1] = 32;
  ts[1].ne[2] = 4;
  ts[1].nbytes = 64 * 32 * 4 * 2;
  auto st = compute_stats(ts, 4, 1);
  ASSERT_TRUE(st) << st.error();
  EXPECT_TRUE(st->tied_output);
  EXPECT_EQ(st->active_bytes, 64u * 2 + 64 * 100 * 2 + 64 * 32 * 2);
  EXPECT_EQ(st->active_params, 64u + 6400 + 2048);
  EXPECT_FALSE(compute_stats(ts, 8, 1));  // expert slices disagree with expert_count
  EXPECT_FALSE(compute_stats(ts, 4, 5));
}

}  // namespace
}  // namespace zenmoe::tools
