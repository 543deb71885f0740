// zenmoe mkmodel: built-in vocabulary, tensor plan and Q4_K_S mix (checked against the
// llama.cpp-made oracle files), metadata key set, written files, determinism, CLI errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "kernels/ref/quant.h"
#include "runtime/gguf.h"
#include "tests/cli_util.h"
#include "tools/builtin_vocab.h"
#include "tools/inspect.h"
#include "tools/mkmodel.h"
#include "tools/mkmodel_fill.h"

namespace zenmoe::tools {
namespace {

namespace fs = std::filesystem;

std::string oracle(const char* name) { return std::string(ZENMOE_ORACLE_DIR) + "/" + name; }

fs::path temp_dir() { return testing_cli::process_scratch_dir("mkmodel_test"); }

struct CliResult {
  int status;
  std::string out;  // stdout and stderr
};

CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(ZENMOE_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

uint64_t fnv1a_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  uint64_t h = 0xCBF29CE484222325ull;
  char c;
  while (f.get(c)) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

// A reduced model (two layers, four experts) that still has every tensor kind.
ModelConfig mini_config() {
  ModelConfig c = *preset_config("tiny");
  c.preset = "mini";
  c.n_layer = 2;
  c.n_expert = 4;
  c.n_expert_used = 2;
  return c;
}

MkModelOptions options(const ModelConfig& cfg, QuantMode q, uint64_t seed, int threads) {
  MkModelOptions o;
  o.cfg = cfg;
  o.quant = q;
  o.seed = seed;
  o.threads = threads;
  o.tokenizer = *tokenizer_metadata(cfg.n_vocab, "", "");
  return o;
}

// ---- built-in vocabulary --------------------------------------------------------------

TEST(BuiltinVocab, ByteAlphabetFollowsGpt2) {
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(0x20), "\xC4\xA0");  // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode(0x0A), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0x00), "\xC4\x80");  // U+0100
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // U+0143
  EXPECT_EQ(byte_to_unicode(0xE9), "\xC3\xA9");  // kept as U+00E9
}

TEST(BuiltinVocab, SizedExactlyWithSpecialsAtTheEnd) {
  for (int64_t n : {261, 512, 1024, 5000}) {
    auto v = make_builtin_vocab(n);
    ASSERT_TRUE(v) << v.error();
    ASSERT_EQ(static_cast<int64_t>(v->tokens.size()), n);
    ASSERT_EQ(v->token_types.size(), v->tokens.size());
    for (int b = 0; b < 256; ++b) ASSERT_EQ(v->tokens[b], byte_to_unicode(static_cast<uint8_t>(b)));
    EXPECT_EQ(v->bos, n - 5);
    EXPECT_EQ(v->eos, n - 4);
    EXPECT_EQ(v->pad, n - 3);
    EXPECT_EQ(v->tokens[v->bos], "<｜begin▁of▁sentence｜>");
    EXPECT_EQ(v->tokens[v->eos], "<｜end▁of▁sentence｜>");
    EXPECT_EQ(v->tokens[n - 2], "<｜User｜>");
    EXPECT_EQ(v->tokens[n - 1], "<｜Assistant｜>");
    EXPECT_EQ(v->token_types[v->bos], kTokenControl);
    EXPECT_EQ(v->token_types[n - 1], kTokenUserDefined);
    EXPECT_EQ(v->pre, "deepseek-v3");
  }
  EXPECT_FALSE(make_builtin_vocab(260));
}

TEST(BuiltinVocab, MergesBuildRealWordsAndEveryMergeIsAToken) {
  auto v = make_builtin_vocab(1024);
  ASSERT_TRUE(v);
  std::set<std::string> toks(v->tokens.begin(), v->tokens.end());
  EXPECT_EQ(toks.size(), v->tokens.size()) << "token texts must be unique";
  EXPECT_EQ(v->merges.size(), 1024u - 256 - 5);
  for (const auto& m : v->merges) {
    const size_t sp = m.find(' ', 1);
    ASSERT_NE(sp, std::string::npos) << m;
    EXPECT_TRUE(toks.count(m.substr(0, sp) + m.substr(sp + 1))) << m;
  }
  for (const char* w : {"Ġthe", "Ġand", "Ġmodel", "Ġreturn"})
    EXPECT_TRUE(toks.count(w)) << w;
  auto again = make_builtin_vocab(1024);
  EXPECT_EQ(again->tokens, v->tokens);
  EXPECT_EQ(again->merges, v->merges);
  const std::string& t = v->chat_template;
  for (const char* marker : {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"})
    EXPECT_NE(t.find(marker), std::string::npos) << marker;
}

// ---- plan vs the llama.cpp-made oracle files ---------------------------------------------

void expect_plan_matches(const char* oracle_file, QuantMode mode) {
  auto model = gguf::Model::open(oracle(oracle_file));
  ASSERT_TRUE(model) << model.error();
  const auto plan = plan_tensors(*preset_config("tiny"), mode);
  ASSERT_EQ(plan.size(), model->tensors().size());
  for (const auto& t : plan) {
    const gguf::TensorInfo* o = model->find_tensor(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    EXPECT_EQ(type_name(t.type), std::string(type_name(o->type))) << t.name;
    ASSERT_EQ(static_cast<int>(t.dims.size()), o->n_dims) << t.name;
    for (size_t k = 0; k < t.dims.size(); ++k) EXPECT_EQ(t.dims[k], o->ne[k]) << t.name;
    EXPECT_EQ(t.nbytes(), o->nbytes) << t.name;
  }
}

TEST(MkModelPlan, TinyF16MatchesOracleTensorForTensor) {
  expect_plan_matches("tiny-f16.gguf", QuantMode::F16);
  // Same order as llama.cpp's converter.
  auto model = gguf::Model::open(oracle("tiny-f16.gguf"));
  const auto plan = plan_tensors(*preset_config("tiny"), QuantMode::F16);
  for (size_t k = 0; k < plan.size(); ++k) EXPECT_EQ(plan[k].name, model->tensors()[k].name);
}

TEST(MkModelPlan, TinyQ4KSMatchesLlamaQuantizeTypes) {
  expect_plan_matches("tiny-q4ks.gguf", QuantMode::Q4_K_S);
  std::map<std::string, int> count;
  for (const auto& t : plan_tensors(*preset_config("tiny"), QuantMode::Q4_K_S)) ++count[type_name(t.type)];
  EXPECT_EQ(count["q4_K"], 42);
  EXPECT_EQ(count["q5_0"], 4);
  EXPECT_EQ(count["q6_K"], 1);
  EXPECT_EQ(count["f32"], 23);
}

TEST(MkModelPlan, Q4KSRules) {
  auto ty = [](const char* name, std::vector<int64_t> dims, int64_t n_layer, int64_t n_expert = 384) {
    return choose_tensor_type(QuantMode::Q4_K_S, name, dims, n_layer, n_expert);
  };
  EXPECT_EQ(ty("output.weight", {7168, 163840}, 61), GgmlType::Q6_K);
  EXPECT_EQ(ty("token_embd.weight", {7168, 163840}, 61), GgmlType::Q4_K);
  EXPECT_EQ(ty("blk.6.ffn_down_exps.weight", {2048, 7168, 384}, 61), GgmlType::Q5_K);
  EXPECT_EQ(ty("blk.7.ffn_down_exps.weight", {2048, 7168, 384}, 61), GgmlType::Q4_K);
  EXPECT_EQ(ty("blk.0.ffn_down.weight", {18432, 7168}, 61), GgmlType::Q5_K);
  EXPECT_EQ(ty("blk.3.ffn_down_shexp.weight", {2048, 7168}, 61), GgmlType::Q5_K);
  EXPECT_EQ(ty("blk.3.ffn_gate_exps.weight", {7168, 2048, 384}, 61), GgmlType::Q4_K);
  EXPECT_EQ(ty("blk.3.attn_k_b.weight", {128, 512, 64}, 61), GgmlType::Q5_0);
  EXPECT_EQ(ty("blk.3.attn_output.weight", {8192, 7168}, 61), GgmlType::Q4_K);
  EXPECT_EQ(ty("blk.3.attn_output.weight", {8192, 7168}, 61, 8), GgmlType::Q5_K);
  EXPECT_EQ(ty("blk.3.ffn_gate_inp.weight", {7168, 384}, 61), GgmlType::F32);
  EXPECT_EQ(ty("blk.3.exp_probs_b.bias", {384}, 61), GgmlType::F32);
  EXPECT_EQ(ty("blk.3.attn_kv_a_norm.weight", {512}, 61), GgmlType::F32);
  EXPECT_EQ(ty("blk.0.ffn_down.weight", {384, 256}, 16), GgmlType::Q5_1);   // Q5_K fallback
  EXPECT_EQ(ty("output.weight", {384, 1024}, 16), GgmlType::Q8_0);          // Q6_K fallback
  EXPECT_EQ(ty("output.weight", {48, 1024}, 16), GgmlType::F16);            // nothing fits
  EXPECT_EQ(choose_tensor_type(QuantMode::Q8_0, "blk.0.attn_k_b.weight", {128, 512, 8}, 4, 32), GgmlType::Q8_0);
  EXPECT_EQ(choose_tensor_type(QuantMode::Q4_K, "blk.0.attn_k_b.weight", {128, 512, 8}, 4, 32), GgmlType::Q5_0);
  EXPECT_EQ(choose_tensor_type(QuantMode::BF16, "output.weight", {256, 512}, 4, 32), GgmlType::BF16);
  EXPECT_EQ(choose_tensor_type(QuantMode::F16, "blk.1.ffn_gate_inp.weight", {256, 32}, 4, 32), GgmlType::F32);
}

TEST(MkModelPlan, UnquantisableFallbackIsAClearError) {
  ModelConfig c = mini_config();
  c.n_dense_lead = 1;
  c.n_layer = 16;      // blocks 0 and 1 get Q5_K ffn_down ...
  c.n_ff = 384;        // ... whose 384-long rows fall back to Q5_1
  auto lay = layout_model(c, QuantMode::Q4_K_S);
  if (ref::check_row(GgmlType::Q5_1, 384, true)) {
    EXPECT_TRUE(lay);
  } else {
    ASSERT_FALSE(lay);
    EXPECT_NE(lay.error().find("blk.0.ffn_down.weight"), std::string::npos) << lay.error();
  }
}

TEST(MkModelPlan, BenchPresetReadsAbout279MBPerToken) {
  auto lay = layout_model(*preset_config("bench"), QuantMode::Q4_K_S);
  ASSERT_TRUE(lay) << lay.error();
  // Hand count: attention 12 x 6,566,912; dense layer 17,104,896; 11 MoE layers x
  // (router 524,544 + 9 experts x 1,769,472); output 1,720,320 + norm 8,192; one
  // embedding row 1,152.
  EXPECT_EQ(lay->stats.active_bytes, 278585216u);
  EXPECT_GT(lay->stats.total_bytes, 1'250'000'000u);
  EXPECT_LT(lay->stats.total_bytes, 1'400'000'000u);
  EXPECT_EQ(lay->stats.n_expert, 64);
}

TEST(MkModelPlan, ConfigValidation) {
  ModelConfig c = mini_config();
  c.n_expert_used = 9;
  EXPECT_FALSE(layout_model(c, QuantMode::F16));
  c = mini_config();
  c.n_dense_lead = 3;
  EXPECT_FALSE(layout_model(c, QuantMode::F16));
  c = mini_config();
  c.n_expert_groups = 3;
  EXPECT_FALSE(layout_model(c, QuantMode::F16));
  EXPECT_FALSE(preset_config("huge"));
}

// ---- metadata --------------------------------------------------------------------------

TEST(MkModelMetadata, HasEveryOracleKeyWithTheSameType) {
  auto model = gguf::Model::open(oracle("tiny-f16.gguf"));
  ASSERT_TRUE(model) << model.error();
  const gguf::Metadata mine = model_metadata(options(*preset_config("tiny"), QuantMode::F16, 1, 1));
  for (const auto& [key, v] : model->metadata().entries()) {
    const gguf::Value* m = mine.find(key);
    ASSERT_NE(m, nullptr) << key;
    EXPECT_EQ(m->type, v.type) << key;
    if (v.type == gguf::ValueType::ARRAY) {
      EXPECT_EQ(m->array_type, v.array_type) << key;
    }
    // The tiny preset has the oracle model's hyperparameters.
    if (key.rfind("deepseek2.", 0) == 0) {
      EXPECT_TRUE(*m == v) << key;
    }
  }
  EXPECT_EQ(mine.get_uint_or("general.file_type", 0), 1u);
}

// ---- written files ----------------------------------------------------------------------

TEST(MkModelWrite, TinyF16ReopensWithSaneWeights) {
  const fs::path out = temp_dir() / "tiny-f16.gguf";
  const MkModelOptions opt = options(*preset_config("tiny"), QuantMode::F16, 7, 2);
  auto lay = write_model(opt, out.string());
  ASSERT_TRUE(lay) << lay.error();
  auto model = gguf::Model::open(out.string());
  ASSERT_TRUE(model) << model.error();
  auto oracle_model = gguf::Model::open(oracle("tiny-f16.gguf"));
  ASSERT_EQ(model->tensors().size(), oracle_model->tensors().size());
  for (size_t k = 0; k < lay->tensors.size(); ++k) {
    const TensorPlan& p = lay->tensors[k];
    const gguf::TensorInfo& t = model->tensors()[k];
    const gguf::TensorInfo& o = oracle_model->tensors()[k];
    ASSERT_EQ(t.name, o.name);
    EXPECT_EQ(t.type, o.type) << t.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], o.ne[d]) << t.name;
    auto st = tensor_value_stats(t);
    ASSERT_TRUE(st) << st.error();
    EXPECT_EQ(st->non_finite, 0u) << t.name;
    const double mean = st->sum / st->count;
    const double sd = std::sqrt(st->sumsq / st->count - mean * mean);
    const double n = static_cast<double>(st->count);
    EXPECT_NEAR(mean, p.mean, 5 * p.stddev / std::sqrt(n) + 1e-3) << t.name;
    EXPECT_NEAR(sd, p.stddev, (n >= 1000 ? 0.1 : 0.3) * p.stddev) << t.name;
    // The generator is bounded by 2*sqrt(3) standard deviations (plus f16 rounding).
    EXPECT_LE(st->max, p.mean + 3.47 * p.stddev + 2e-3) << t.name;
    EXPECT_GE(st->min, p.mean - 3.47 * p.stddev - 2e-3) << t.name;
  }
  EXPECT_EQ(model->metadata().get_string_or("zenmoe.mkmodel.preset", ""), "tiny");
  EXPECT_EQ(model->metadata().get_uint_or("zenmoe.mkmodel.seed", 0), 7u);
  // The output head has the larger gain, the embedding unit variance.
  EXPECT_FLOAT_EQ(lay->tensors.back().stddev, kOutputGain / 16.0f);
}

TEST(MkModelWrite, SameSeedSameBytesAnyThreadCount) {
  const fs::path dir = temp_dir();
  const ModelConfig c = mini_config();
  ASSERT_TRUE(write_model(options(c, QuantMode::Q4_K_S, 3, 1), (dir / "a.gguf").string()));
  ASSERT_TRUE(write_model(options(c, QuantMode::Q4_K_S, 3, 2), (dir / "b.gguf").string()));
  ASSERT_TRUE(write_model(options(c, QuantMode::F16, 3, 2), (dir / "c.gguf").string()));
  ASSERT_TRUE(write_model(options(c, QuantMode::F16, 4, 2), (dir / "d.gguf").string()));
  EXPECT_EQ(fnv1a_file(dir / "a.gguf"), fnv1a_file(dir / "b.gguf"));
  EXPECT_NE(fnv1a_file(dir / "c.gguf"), fnv1a_file(dir / "d.gguf"));
  auto m = gguf::Model::open((dir / "a.gguf").string());
  ASSERT_TRUE(m) << m.error();
  for (const auto& t : m->tensors()) {
    auto st = tensor_value_stats(t);
    ASSERT_TRUE(st) << st.error();
    EXPECT_EQ(st->non_finite, 0u) << t.name;
  }
  EXPECT_EQ(m->find_tensor("blk.1.attn_k_b.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(m->find_tensor("output.weight")->type, GgmlType::Q6_K);
}

TEST(MkModelWrite, GeneratorIsCounterBased) {
  const uint64_t k = tensor_stream_key(1, "blk.0.attn_q_a.weight");
  EXPECT_NE(k, tensor_stream_key(2, "blk.0.attn_q_a.weight"));
  EXPECT_NE(k, tensor_stream_key(1, "blk.1.attn_q_a.weight"));
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double v = synthetic_normal(k, i);
    s += v;
    s2 += v * v;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  EXPECT_EQ(synthetic_normal(k, 12345), synthetic_normal(k, 12345));
}

// ---- command line -------------------------------------------------------------------------

TEST(MkModelCli, WritesAModel) {
  const fs::path out = temp_dir() / "cli.gguf";
  CliResult r = run_cli("mkmodel --preset tiny --layers 2 --experts 8 --experts-used 2 --quant q8_0 --seed 5 -o " +
                  out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("read per decoded token"), std::string::npos) << r.out;
  auto m = gguf::Model::open(out.string());
  ASSERT_TRUE(m) << m.error();
  EXPECT_EQ(m->metadata().get_uint_or("deepseek2.block_count", 0), 2u);
  EXPECT_EQ(m->metadata().get_uint_or("deepseek2.expert_count", 0), 8u);
  EXPECT_EQ(m->find_tensor("blk.1.ffn_up_exps.weight")->type, GgmlType::Q8_0);
}

TEST(MkModelCli, DryRunReportsTheFullKimiK2) {
  // Spec §1.10 sanity count: Kimi-K2 (1 dense + 60 MoE layers) has 1096 tensors.
  CliResult r = run_cli("mkmodel --preset kimi-k2 --dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1096 tensors"), std::string::npos) << r.out;
  r = run_cli("mkmodel --preset bench --dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("278.59 MB read per decoded token"), std::string::npos) << r.out;
}

TEST(MkModelCli, EmbedsAHuggingFaceTokenizer) {
  const fs::path dir = temp_dir() / "hf";
  fs::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(static_cast<uint8_t>(b))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  const nlohmann::json tok = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ġ t", "h e"}}}},
      {"added_tokens", {{{"id", 258}, {"content", "<s>"}, {"special", true}},
                        {{"id", 259}, {"content", "</s>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true},
                        {"chat_template", "{{ messages }}"}}.dump();
  const fs::path out = dir / "hf.gguf";
  CliResult r = run_cli("mkmodel --preset tiny --layers 1 --quant f16 --tokenizer " +
                        (dir / "tokenizer.json").string() + " -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  auto m = gguf::Model::open(out.string());
  ASSERT_TRUE(m) << m.error();
  const gguf::Metadata& md = m->metadata();
  EXPECT_EQ(md.find("tokenizer.ggml.tokens")->array_size(), 260u);
  EXPECT_EQ(md.find("tokenizer.ggml.merges")->array_size(), 2u);
  EXPECT_EQ(md.get_string_or("tokenizer.ggml.pre", ""), "gpt2");
  EXPECT_EQ(md.get_string_or("tokenizer.chat_template", ""), "{{ messages }}");
  EXPECT_EQ(md.get_uint_or("tokenizer.ggml.bos_token_id", 0), 258u);
  EXPECT_EQ(md.get_uint_or("deepseek2.vocab_size", 0), 260u);
  EXPECT_EQ(m->find_tensor("token_embd.weight")->ne[1], 260);
  EXPECT_EQ(m->find_tensor("output.weight")->ne[1], 260);
}

TEST(MkModelCli, BadInputIsOneLineAndExitOne) {
  const std::string out = (temp_dir() / "bad.gguf").string();
  const std::vector<std::string> cases = {"mkmodel --preset huge -o " + out, "mkmodel --preset tiny", "mkmodel --preset tiny --quant q3 -o " + out,
        "mkmodel --preset tiny --experts 4 --experts-used 8 -o " + out, "mkmodel --bogus -o " + out,
        "mkmodel --preset tiny --layers x -o " + out, "mkmodel --preset tiny -o /nonexistent-dir/x.gguf",
      "mkmodel --preset tiny --tokenizer /nonexistent/tokenizer.json -o " + out,
      "mkmodel --preset tiny --tokenizer-config /nonexistent/tokenizer_config.json -o " + out};
  for (const std::string& args : cases) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("zenmoe: ", 0), 0u) << r.out;
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace zenmoe::tools
