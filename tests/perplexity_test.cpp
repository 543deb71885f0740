// `zenmoe perplexity`: the log-probability records and KL sums against direct double-precision
// computations, the base file's checks, and the command end to end on the oracle model: its
// perplexity against the logits `zenmoe logits` gives, a base file made from llama.cpp's own
// logits compared within the oracle bounds, a round trip through a saved file, and one error
// line (and no file left) for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "runtime/logprob_file.h"
#include "tests/cli_util.h"
#include "tools/perplexity.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;
using testing_cli::expect_one_line_error;
using testing_cli::read_f32;
using testing_cli::run_zenmoe;

// log softmax in double.
std::vector<double> log_softmax(const std::vector<float>& l) {
  const double mx = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (float v : l) s += std::exp(v - mx);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - mx - std::log(s);
  return out;
}

std::vector<float> random_logits(int n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, spread);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& v : l) v = d(rng);
  return l;
}

float scale_of(const std::vector<uint16_t>& rec) {
  float s;
  std::memcpy(&s, rec.data(), 4);
  return s;
}

TEST(PerplexityRecords, DecodeToTheLogSoftmaxWithinHalfAStepAboveTheFloor) {
  for (int n_vocab : {1, 2, 7, 1001, 4096}) {
    for (float spread : {0.5f, 6.f}) {
      const auto logits = random_logits(n_vocab, spread, static_cast<uint32_t>(n_vocab * 7 + spread));
      std::vector<uint16_t> rec(tools::ppl::record_u16(n_vocab), 0xffff);
      const int tok = n_vocab / 2;
      const double nll = tools::ppl::encode_log_probs(logits.data(), n_vocab, tok, rec.data());
      const auto want = log_softmax(logits);
      EXPECT_NEAR(nll, -want[static_cast<size_t>(tok)], 1e-4);
      EXPECT_NEAR(tools::ppl::nll(logits.data(), n_vocab, tok), -want[static_cast<size_t>(tok)], 1e-4);
      const float scale = scale_of(rec);
      float min_lp;
      std::memcpy(&min_lp, rec.data() + 2, 4);
      const double top = *std::max_element(want.begin(), want.end());
      for (int i = 0; i < n_vocab; ++i) {
        const double got = scale * rec[4 + static_cast<size_t>(i)] + min_lp;
        const double w = want[static_cast<size_t>(i)];
        if (w >= top - 16) {
          EXPECT_NEAR(got, w, scale / 2 + 1e-5) << n_vocab << " " << i;
        } else {
          EXPECT_EQ(rec[4 + static_cast<size_t>(i)], 0) << n_vocab << " " << i;  // clamped to the floor
        }
      }
      if (n_vocab % 2) {
        EXPECT_EQ(rec.back(), 0);  // the padding word
      }
      if (n_vocab == 1) {
        EXPECT_EQ(scale, 0.f);
      }
    }
  }
}

TEST(PerplexityRecords, KlDivergenceAndSumsMatchADirectComputation) {
  const int n_vocab = 3001;
  tools::ppl::KldSums sums;
  double want_kld_sum = 0, want_nll_sum = 0;
  size_t want_same_top = 0;
  for (uint32_t pos = 0; pos < 12; ++pos) {
    const auto base = random_logits(n_vocab, 3.f, 100 + pos);
    auto q = base;
    std::mt19937 rng(pos);
    std::normal_distribution<float> noise(0.f, pos < 6 ? 0.05f : 1.5f);
    for (float& v : q) v += noise(rng);
    std::vector<uint16_t> rec(tools::ppl::record_u16(n_vocab));
    const int tok = static_cast<int>(pos * 97 % n_vocab);
    tools::ppl::encode_log_probs(base.data(), n_vocab, tok, rec.data());
    float kld = -1, p_diff = -1;
    tools::ppl::kld_accumulate(q.data(), n_vocab, rec.data(), tok, &sums, &kld, &p_diff);
    const auto lb = log_softmax(base), lq = log_softmax(q);
    double want = 0;
    for (size_t i = 0; i < lb.size(); ++i)
      if (lb[i] > -16) want += std::exp(lb[i]) * (lb[i] - lq[i]);
    // The base's log-probabilities are stored to within half a step (16 / 65535 / 2 at most).
    EXPECT_NEAR(kld, want, 2e-4 + 1e-3 * want) << pos;
    EXPECT_NEAR(p_diff, std::exp(lq[static_cast<size_t>(tok)]) - std::exp(lb[static_cast<size_t>(tok)]), 1e-4);
    want_kld_sum += want;
    want_nll_sum -= lq[static_cast<size_t>(tok)];
    want_same_top += std::max_element(lb.begin(), lb.end()) - lb.begin() == std::max_element(lq.begin(), lq.end()) -
                                                                                    lq.begin();
  }
  EXPECT_EQ(sums.count, 12u);
  EXPECT_EQ(sums.same_top, want_same_top);
  EXPECT_LT(sums.same_top, 12u);  // the noisier half moves some maxima
  EXPECT_NEAR(sums.kld, want_kld_sum, 3e-3 + 1e-3 * want_kld_sum);
  EXPECT_NEAR(sums.nll, want_nll_sum, 1e-3);
  const std::string report = tools::ppl::kld_report(sums, {0.5f, 0.1f, 0.2f}, {0.f, -0.1f, 0.3f});
  EXPECT_NE(report.find("Median  KLD:   0.200000"), std::string::npos) << report;
  EXPECT_NE(report.find("Maximum KLD:   0.500000"), std::string::npos) << report;
  EXPECT_NE(report.find("Minimum Δp: -10.000%"), std::string::npos) << report;
}

TEST(PerplexityRecords, MeanAndErrorAsReported) {
  // Values 1..20: mean 10.5, population variance 33.25, error sqrt(33.25 / 19).
  double s = 0, s2 = 0;
  for (int i = 1; i <= 20; ++i) {
    s += i;
    s2 += i * i;
  }
  const auto m = tools::ppl::mean_and_error(s, s2, 20);
  EXPECT_DOUBLE_EQ(m.mean, 10.5);
  EXPECT_NEAR(m.err, std::sqrt(33.25 / 19), 1e-12);
  EXPECT_EQ(tools::ppl::mean_and_error(s, s2, 10).err, 0.0);  // too few values for an error
  EXPECT_EQ(tools::ppl::mean_and_error(0, 0, 0).mean, 0.0);
}

// Writes a base file: header, tokens, then `records` (already n_chunk * scored records).
void write_base(const fs::path& p, uint32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const std::vector<int32_t>& toks,
                const std::vector<uint16_t>& records) {
  std::ofstream f(p, std::ios::binary);
  f.write("_logits_", 8);
  f.write(reinterpret_cast<const char*>(&n_ctx), 4);
  f.write(reinterpret_cast<const char*>(&n_vocab), 4);
  f.write(reinterpret_cast<const char*>(&n_chunk), 4);
  f.write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(4 * toks.size()));
  f.write(reinterpret_cast<const char*>(records.data()), static_cast<std::streamsize>(2 * records.size()));
}

TEST(PerplexityBaseFile, HeaderChecksNameWhatIsWrong) {
  const fs::path dir = testing_cli::process_scratch_dir("ppl_header");
  const fs::path p = dir / "b.kld";
  const uint32_t n_ctx = 8;
  const int32_t n_vocab = 5;
  const size_t rec_words = tools::ppl::record_u16(n_vocab) * static_cast<size_t>(tools::ppl::scored_positions(8));
  std::vector<int32_t> toks = {0, 1, 2, 3, 4, 0, 1, 2};
  write_base(p, n_ctx, n_vocab, 1, toks, std::vector<uint16_t>(rec_words, 1));
  auto ok = logprob::read_header(p.string());
  ASSERT_TRUE(ok) << ok.error();
  EXPECT_EQ(ok->tokens, toks);
  EXPECT_EQ(ok->records_offset, 20u + 32u);
  EXPECT_EQ(ok->chunk_bytes, 2 * rec_words);

  const auto expect_error = [&](const std::string& needle) {
    auto r = logprob::read_header(p.string());
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
    EXPECT_EQ(r.error().rfind("log-probability file " + p.string() + ": ", 0), 0u) << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
  };
  write_base(p, n_ctx, n_vocab, 1, toks, std::vector<uint16_t>(rec_words - 1, 1));
  expect_error("truncated");
  write_base(p, n_ctx, n_vocab, 1, toks, std::vector<uint16_t>(rec_words + 1, 1));
  expect_error("truncated or damaged");
  write_base(p, n_ctx, n_vocab, 2, toks, std::vector<uint16_t>(rec_words, 1));
  expect_error("truncated");
  write_base(p, n_ctx, n_vocab, 0x7fffffff, toks, std::vector<uint16_t>(rec_words, 1));
  expect_error("truncated");
  toks[3] = 5;
  write_base(p, n_ctx, n_vocab, 1, toks, std::vector<uint16_t>(rec_words, 1));
  expect_error("token 3 (5) is outside its vocabulary of 5");
  write_base(p, 3, n_vocab, 1, {0, 1, 2}, {});
  expect_error("context size 3");
  std::ofstream(p, std::ios::binary) << "_logits";
  expect_error("not such a file");
  EXPECT_FALSE(logprob::read_header((dir / "absent").string()));
}

// Replays every input kept in tests/fuzz/regressions-logprob/ (fuzzer findings and hand-made
// hostile files): each is refused with one line naming the file, or accepted with sizes that
// account for every byte (valid-*.kld).
TEST(PerplexityBaseFile, EveryKeptInputIsHandledCleanly) {
  const fs::path dir = fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions-logprob";
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string path = e.path().string();
    auto r = logprob::read_header(path);
    if (e.path().filename().string().rfind("valid-", 0) == 0) {
      ASSERT_TRUE(r) << r.error();
      EXPECT_EQ(r->records_offset + static_cast<uint64_t>(r->n_chunk) * r->chunk_bytes, fs::file_size(e.path()));
    } else {
      ASSERT_FALSE(r) << path;
      EXPECT_EQ(r.error().rfind("log-probability file " + path + ": ", 0), 0u) << r.error();
      EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
    }
    ++n;
  }
  EXPECT_GE(n, 10u);
}

// ---- the command on the oracle model ----

const std::string kModel = std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf";

class PerplexityCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_cli::process_scratch_dir(std::string("ppl_") +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::ifstream in(std::string(ZENMOE_SOURCE_DIR) + "/README.md", std::ios::binary);
    std::string text(4000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    std::ofstream(dir_ / "text.txt", std::ios::binary) << text;
  }
  testing_cli::CliResult zenmoe(const std::string& args) { return run_zenmoe(args, dir_); }
  std::string path(const std::string& name) const {
    std::string quoted = "'";
    quoted += (dir_ / name).string();
    return quoted += "'";
  }
  fs::path dir_;
};

double number_after(const std::string& out, const std::string& label) {
  const size_t at = out.find(label);
  if (at == std::string::npos) return NAN;
  return std::strtod(out.c_str() + at + label.size(), nullptr);
}

TEST_F(PerplexityCli, PerplexityIsThatOfTheLogitsOfEachChunk) {
  const int n_ctx = 64, chunks = 3;
  const auto r = zenmoe("perplexity -m '" + kModel + "' -f " + path("text.txt") + " -c 64 --chunks 3 -t 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const double ppl = number_after(r.out, "Final estimate: PPL = ");
  EXPECT_NE(r.out.find("[3]"), std::string::npos) << r.out;
  // The same chunks through `zenmoe logits`: BOS, then the text's tokens.
  const auto ids = zenmoe("tokenize -m '" + kModel + "' \"$(cat " + path("text.txt") + ")\"");
  ASSERT_EQ(ids.status, 0) << ids.err;
  std::vector<int32_t> toks = {504};  // the oracle vocabulary's BOS
  for (int32_t t : nlohmann::json::parse(ids.out)) toks.push_back(t);
  ASSERT_GE(toks.size(), size_t{n_ctx} * chunks);
  double nll = 0;
  int count = 0;
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(toks.begin() + c * n_ctx, toks.begin() + (c + 1) * n_ctx);
    chunk[0] = 504;
    std::string list;
    for (int32_t t : chunk) list += std::to_string(t) + " ";
    const auto lr = zenmoe("logits -m '" + kModel + "' --tokens '" + list + "' --mode prefill -o " + path("l.f32"));
    ASSERT_EQ(lr.status, 0) << lr.err;
    const auto logits = read_f32(dir_ / "l.f32");
    const int n_vocab = static_cast<int>(logits.size() / n_ctx);
    for (int i = n_ctx / 2; i < n_ctx - 1; ++i) {
      const float* row = logits.data() + static_cast<size_t>(i) * n_vocab;
      nll += tools::ppl::nll(row, n_vocab, chunk[static_cast<size_t>(i) + 1]);
      ++count;
    }
  }
  EXPECT_NEAR(ppl, std::exp(nll / count), 1e-3 * ppl) << r.out;
}

// A base file made from llama.cpp's own logits of an oracle sequence (one chunk of its length):
// the KL divergence of zenmoe's distributions from llama.cpp's within the oracle bounds, and
// the base perplexity that of llama.cpp's logits as the file stores them (a next token more
// than 16 below the largest logit counts at that floor, as llama.cpp reads such files too).
TEST_F(PerplexityCli, KlDivergenceFromLlamaCppLogitsIsWithinTheOracleBounds) {
  const std::string dir = std::string(ZENMOE_ORACLE_DIR) + "/logits/tiny-q4ks/";
  std::ifstream mf(dir + "manifest.json");
  const auto manifest = nlohmann::json::parse(mf);
  const auto& seq = manifest["sequences"][1];
  const std::vector<int32_t> toks = seq["tokens"].get<std::vector<int32_t>>();
  const int n_vocab = manifest["n_vocab"].get<int>();
  const int n_ctx = static_cast<int>(toks.size());
  const auto logits = read_f32(dir + seq["files"]["prefill"].get<std::string>());
  ASSERT_EQ(logits.size(), toks.size() * static_cast<size_t>(n_vocab));
  const int scored = tools::ppl::scored_positions(n_ctx);
  const size_t rec = tools::ppl::record_u16(n_vocab);
  std::vector<uint16_t> records(static_cast<size_t>(scored) * rec);
  double nll = 0;
  for (int r = 0; r < scored; ++r) {
    const int pos = n_ctx / 2 + r;
    uint16_t* record = records.data() + r * rec;
    tools::ppl::encode_log_probs(logits.data() + static_cast<size_t>(pos) * n_vocab, n_vocab,
                                 toks[static_cast<size_t>(pos) + 1], record);
    float scale, min_lp;
    std::memcpy(&scale, record, 4);
    std::memcpy(&min_lp, record + 2, 4);
    nll -= scale * record[4 + toks[static_cast<size_t>(pos) + 1]] + min_lp;
  }
  write_base(dir_ / "llama.kld", static_cast<uint32_t>(n_ctx), n_vocab, 1, toks, records);
  const auto r = zenmoe("perplexity -m '" + kModel + "' -t 2 -ctk f32 --kl-divergence --kl-divergence-base " +
                        path("llama.kld"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NEAR(number_after(r.out, "Mean PPL(base)                : "), std::exp(nll / scored),
              2e-4 * std::exp(nll / scored))
      << r.out;
  EXPECT_LE(number_after(r.out, "Mean    KLD: "), 5e-3) << r.out;
  EXPECT_GE(number_after(r.out, "Same top p: "), 95.0) << r.out;
}

TEST_F(PerplexityCli, SavedLogProbabilitiesReadBackAsTheirOwnBase) {
  const auto w = zenmoe("perplexity -m '" + kModel + "' -f " + path("text.txt") +
                        " -c 48 --chunks 2 -t 1 --kl-divergence-base " + path("own.kld"));
  ASSERT_EQ(w.status, 0) << w.err;
  const size_t rec = tools::ppl::record_u16(512);
  EXPECT_EQ(fs::file_size(dir_ / "own.kld"), 20 + 4 * 2 * 48 + 2 * size_t(tools::ppl::scored_positions(48)) * rec * 2);
  const double ppl = number_after(w.out, "Final estimate: PPL = ");
  const auto r = zenmoe("perplexity -m '" + kModel + "' -t 1 --kl-divergence --kl-divergence-base " + path("own.kld"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NEAR(number_after(r.out, "Mean PPL(Q)                   : "), ppl, 1e-4 * ppl) << r.out;
  EXPECT_NEAR(number_after(r.out, "Mean PPL(base)                : "), ppl, 1e-3 * ppl) << r.out;
  EXPECT_LT(number_after(r.out, "Mean    KLD: "), 2e-4) << r.out;
  EXPECT_EQ(number_after(r.out, "Same top p: "), 100.0) << r.out;
  for (const char* line : {"\n   2    ", "\nMinimum KLD:", "\nMinimum Δp:", "\nRMS Δp    :"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST_F(PerplexityCli, BadInputGetsOneErrorLineAndLeavesNoFile) {
  const std::string m = "perplexity -m '" + kModel + "' ";
  const std::string text = " -f " + path("text.txt");
  struct Case {
    std::string args, needle;
  };
  std::ofstream(dir_ / "short.txt") << "Hello there";
  std::ofstream(dir_ / "junk.kld") << "not a base file at all";
  const std::vector<Case> cases = {
      {"perplexity" + text, "missing -m"},
      {m, "missing -f"},
      {m + "-f " + path("absent.txt"), "cannot open text file"},
      {m + "-f " + path("short.txt") + " --kl-divergence-base " + path("out.kld"), "needs at least"},
      {m + text + " -c 3", "--ctx-size"},
      {m + text + " -c 100000", "needs at least"},
      {m + text + " --chunks 0", "--chunks"},
      {m + "--kl-divergence", "needs --kl-divergence-base"},
      {m + text + " --kl-divergence --kl-divergence-base " + path("junk.kld"), "drop -f"},
      {m + "--kl-divergence --kl-divergence-base " + path("junk.kld"), "not such a file"},
      {m + "--kl-divergence --kl-divergence-base " + path("absent.kld"), "absent.kld"},
      {m + text + " -c 32 --kl-divergence-base " + path("no/such/dir/out.kld"), "out.kld"},
      {m + text + " extra", "unexpected argument"},
  };
  for (const auto& c : cases) expect_one_line_error(zenmoe(c.args), c.args, c.needle);
  EXPECT_FALSE(fs::exists(dir_ / "out.kld"));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".out.kld"), std::string::npos) << e.path();

  // A base file for another vocabulary: refused once the model is known.
  const size_t words = tools::ppl::record_u16(7) * static_cast<size_t>(tools::ppl::scored_positions(8));
  write_base(dir_ / "v7.kld", 8, 7, 1, {0, 1, 2, 3, 4, 5, 6, 0}, std::vector<uint16_t>(words));
  const std::string args = m + "--kl-divergence --kl-divergence-base " + path("v7.kld");
  expect_one_line_error(zenmoe(args), args, "vocabulary of 7 tokens, the model has 512");
}

}  // namespace
}  // namespace zenmoe
