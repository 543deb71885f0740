// End-to-end tests of `zenmoe run` and `zenmoe logits` on the oracle tiny model: output shape,
// repeatability, the summary line, and one clear error line for every kind of bad input.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/gguf.h"
#include "runtime/thread_pool.h"
#include "tests/cli_util.h"
#include "tests/model_util.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zenmoe_run_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `zenmoe <args>` (args already shell-quoted where needed), `input` on its standard input.
  Result zenmoe(const std::string& args, const std::string& input = "") {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr", in = dir_ / "stdin";
    std::ofstream(in, std::ios::binary) << input;
    const std::string cmd = std::string("'") + ZENMOE_BINARY + "' " + args + " >'" + out.string() + "' 2>'" +
                            err.string() + "' <'" + in.string() + "'";
    const int raw = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Bad input: exit status 1 and exactly one "zenmoe: ..." line on stderr.
  void expect_one_line_error(const std::string& args, const std::string& needle) {
    Result r = zenmoe(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.err.rfind("zenmoe: ", 0), 0u) << args << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << " -> " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << " -> " << r.err;
  }

  fs::path dir_;
};

const std::regex kSummary(
    R"(prompt (\d+) tokens, prefill ([0-9.]+|n/a) tok/s \| generated (\d+) tokens, decode ([0-9.]+|n/a) tok/s.*\n)");

TEST_F(RunCli, GeneratesTextAndOneSummaryLine) {
  Result r = zenmoe("run -m '" + kModel + "' -p 'Hello world' -n 6 --seed 3 --ignore-eos");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.err, m, kSummary)) << r.err;
  EXPECT_GT(std::stoi(m[1]), 1);  // BOS + the text
  EXPECT_EQ(std::stoi(m[3]), 6);
  EXPECT_NE(m[2], "n/a");
  EXPECT_NE(m[4], "n/a");
  // The same seed gives the same text; greedy decoding is repeatable too.
  Result again = zenmoe("run -m '" + kModel + "' -p 'Hello world' -n 6 --seed 3 --ignore-eos");
  EXPECT_EQ(again.out, r.out);
}

// Without -t, run uses one thread per core this process may use; -t sets the count. Thread i
// runs on the i-th of those cores: confined to one CPU, run names one core, the first core for
// the first CPU and the last for the last (checked exactly when this test may use every CPU).
TEST_F(RunCli, UsesOneThreadPerCoreUnlessTold) {
  const int n = default_thread_count();
  ASSERT_GE(n, 1);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_LE(n, static_cast<int>(cpus));
  cpu_set_t mine;
  const bool every_cpu = sched_getaffinity(0, sizeof mine, &mine) == 0 && CPU_COUNT(&mine) == static_cast<int>(cpus);
  const std::regex placement("threads pinned to cores ([0-9]+)\\.\\.([0-9]+)\n");
  // The cores run names, or {-1, -1} when it could not pin its threads.
  auto named = [&](const std::string& err) -> std::pair<int, int> {
    std::smatch m;
    if (err.find("threads not pinned") != std::string::npos) return {-1, -1};
    EXPECT_TRUE(std::regex_search(err, m, placement)) << err;
    return m.empty() ? std::pair<int, int>{-1, -1} : std::pair<int, int>{std::stoi(m[1].str()), std::stoi(m[2].str())};
  };
  const std::string base = "run -m '" + kModel + "' -p 'Hello' -n 2 --temp 0 -v";
  for (const int t : {0, 1}) {
    Result r = zenmoe(base + (t > 0 ? " -t " + std::to_string(t) : ""));
    ASSERT_EQ(r.status, 0) << r.err;
    const auto [first, last] = named(r.err);
    if (first < 0) continue;
    EXPECT_EQ(last - first + 1, t > 0 ? t : n) << r.err;
    if (every_cpu) {
      EXPECT_EQ(first, 0) << r.err;
    }
  }
  if (std::system("command -v taskset >/dev/null 2>&1") != 0) return;
  for (const unsigned cpu : {0u, cpus - 1}) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = "taskset -c " + std::to_string(cpu) + " '" + ZENMOE_BINARY + "' " + base + " >'" +
                            out.string() + "' 2>'" + err.string() + "' </dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(err);
    const auto [first, last] = named(slurp(err));
    if (first < 0) continue;
    EXPECT_EQ(first, last) << "cpu " << cpu;
    if (every_cpu) {
      EXPECT_EQ(first, cpu == 0 ? 0 : n - 1) << "cpu " << cpu;
    }
  }
}

// --profile: after the summary line a header, then one row per op kind, largest first, in
// aligned columns, the shares adding up to the whole run.
TEST_F(RunCli, ProfilePrintsOneAlignedRowPerOpKind) {
  Result r = zenmoe("run -m '" + kModel + "' -p 'Hello world' -n 4 --temp 0 --ignore-eos --profile");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.err);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_TRUE(std::regex_match(line + "\n", kSummary)) << line;
  ASSERT_TRUE(std::getline(lines, line));
  const std::regex head(R"(  op \(prefill \+ decode\) +ms +share)");
  EXPECT_TRUE(std::regex_match(line, head)) << line;
  const size_t end = line.size();
  const std::regex row(R"(  ([a-z_0-9]+) +([0-9]+\.[0-9]{3}) +([0-9]+\.[0-9])%)");
  std::vector<std::string> ops;
  double share = 0, prev_ms = 1e300;
  while (std::getline(lines, line)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, row)) << line;
    EXPECT_EQ(line.size(), end) << "columns not aligned: " << line;
    const double ms = std::stod(m[2]);
    EXPECT_LE(ms, prev_ms) << "rows not sorted: " << line;
    prev_ms = ms;
    share += std::stod(m[3]);
    ops.push_back(m[1]);
  }
  EXPECT_NEAR(share, 100.0, 0.1 * static_cast<double>(ops.size()));
  for (const char* op : {"matmul", "mla_attention", "rms_norm_quantize"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  EXPECT_EQ(std::set<std::string>(ops.begin(), ops.end()).size(), ops.size()) << "an op kind listed twice";
}

TEST_F(RunCli, PromptFromFileAndGreedyRepeatable) {
  std::ofstream(dir_ / "prompt.txt") << "The quick brown fox";
  const std::string args = "run -m '" + kModel + "' -f '" + (dir_ / "prompt.txt").string() +
                           "' -n 4 --temp 0 --ignore-eos -c 64";
  Result a = zenmoe(args), b = zenmoe(args);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_TRUE(std::regex_match(a.err, kSummary)) << a.err;
}

TEST_F(RunCli, StopsAtTheContextLimit) {
  Result r = zenmoe("run -m '" + kModel + "' -p 'ab' -n 50 --temp 0 --ignore-eos -c 6");
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.err, m, kSummary)) << r.err;
  EXPECT_EQ(std::stoi(m[1]) + std::stoi(m[3]), 7);  // the last token is sampled, not evaluated
  EXPECT_NE(r.err.find("context full"), std::string::npos);
}

TEST_F(RunCli, BadRunInputsGiveOneErrorLine) {
  const std::string m = " -m '" + kModel + "'";
  expect_one_line_error("run" + m + " -p hi --bogus", "unknown flag '--bogus'");
  expect_one_line_error("run -m /nonexistent/model.gguf -p hi", "/nonexistent/model.gguf");
  expect_one_line_error("run -p hi", "missing -m");
  expect_one_line_error("run" + m, "missing prompt");
  expect_one_line_error("run" + m + " -p ''", "prompt is empty");
  expect_one_line_error("run" + m + " -p x -f /dev/null", "not both");
  expect_one_line_error("run" + m + " -f /nonexistent/prompt.txt", "/nonexistent/prompt.txt");
  expect_one_line_error("run" + m + " -p 'a long prompt that has more tokens than four' -c 4",
                        "more than the context size 4");
  expect_one_line_error("run" + m + " -p hi --temp hot", "--temp expects a number");
  expect_one_line_error("run" + m + " -p hi --top-p 1.5", "--top-p must be in");
  expect_one_line_error("run" + m + " -p hi -n -7", "--n-predict must be in");
  expect_one_line_error("run" + m + " -p hi --chat", "no chat template");
  expect_one_line_error("run" + m + " -p hi --system-prompt x", "--system-prompt needs --chat");
}

// A context whose KV cache cannot fit in memory is refused before anything runs: the tiny
// model's 4 layers of 576-value F16 rows at the largest -c take 77 GB.
TEST_F(RunCli, ContextLargerThanMemoryGivesOneErrorLine) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double cache_bytes = 4.0 * 576 * 2 * 16777216;
  if (pages <= 0 || page <= 0 || double(pages) * double(page) >= cache_bytes) GTEST_SKIP() << "the cache would fit";
  const std::string m = " -m '" + kModel + "'";
  const std::string o = " -o '" + (dir_ / "x.f32").string() + "'";
  expect_one_line_error("run" + m + " -p hi -n 2 -c 16777216", "a KV cache of 16777216 positions needs more than");
  expect_one_line_error("logits" + m + " --tokens '1 2' --mode decode -c 16777216" + o, "use a smaller context (-c)");
  EXPECT_FALSE(fs::exists(dir_ / "x.f32"));
}

std::string model_with_template(const fs::path& dir, const std::string& name, const std::string& tmpl) {
  return testing_cli::model_with_template(kModel, dir, name, tmpl);
}

TEST_F(RunCli, ChatFormatsForKnownTemplatesAndRejectsUnknown) {
  const std::string ds = model_with_template(dir_, "ds.gguf", "{{'<｜User｜>'}}{{'<｜Assistant｜>'}}{{'<｜end▁of▁sentence｜>'}}");
  const std::string kimi = model_with_template(dir_, "kimi.gguf", "<|im_assistant|>assistant<|im_middle|>");
  const std::string other = model_with_template(dir_, "other.gguf", "<|im_start|>{{ role }}\n");
  ASSERT_FALSE(ds.empty());
  ASSERT_FALSE(kimi.empty());
  ASSERT_FALSE(other.empty());
  for (const std::string& path : {ds, kimi}) {
    Result plain = zenmoe("run -m '" + path + "' -p hi -n 1 --temp 0 --ignore-eos");
    Result chat = zenmoe("run -m '" + path + "' -p hi -n 1 --temp 0 --ignore-eos --chat -sys 'be brief'");
    ASSERT_EQ(chat.status, 0) << chat.err;
    std::smatch a, b;
    ASSERT_TRUE(std::regex_match(plain.err, a, kSummary)) << plain.err;
    ASSERT_TRUE(std::regex_match(chat.err, b, kSummary)) << chat.err;
    EXPECT_GT(std::stoi(b[1]), std::stoi(a[1]) + 5);  // the chat markup adds tokens
  }
  expect_one_line_error("run -m '" + other + "' -p hi --chat", "unknown chat template");
}

// --conversation: one turn per line of standard input (after -p, if given) until /exit; the
// first turn is what --chat -p answers; the second evaluates only what it adds (the cache keeps
// the first turn's prompt and reply), so its prompt tokens fall short of re-reading the first.
TEST_F(RunCli, ConversationTakesTurnsAndReusesTheCache) {
  const std::string ds = model_with_template(dir_, "ds.gguf", "{{'<｜User｜>'}}{{'<｜Assistant｜>'}}{{'<｜end▁of▁sentence｜>'}}");
  ASSERT_FALSE(ds.empty());
  const std::string m = "run -m '" + ds + "' -n 4 --temp 0 --ignore-eos";
  const std::regex summary("conversation of (\\d+) turns: prompt (\\d+) tokens, .*\n");
  Result chat = zenmoe(m + " --chat -p 'hello there'");
  ASSERT_EQ(chat.status, 0) << chat.err;
  Result one = zenmoe(m + " -cnv", "hello there\n");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(one.out, chat.out + "\n");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_match(one.err, a, summary)) << one.err;
  EXPECT_EQ(a[1], "1");
  Result two = zenmoe(m + " -cnv -p 'hello there'", "\nsecond question\n/exit\nnot read\n");
  ASSERT_EQ(two.status, 0) << two.err;
  ASSERT_TRUE(std::regex_match(two.err, b, summary)) << two.err;
  EXPECT_EQ(b[1], "2");
  ASSERT_EQ(std::count(two.out.begin(), two.out.end(), '\n'), 2) << two.out;
  EXPECT_EQ(two.out.substr(0, one.out.size()), one.out);
  // The second turn evaluates the first reply's last token (-n stopped it before the model saw
  // it) and the markup and text the second message adds, nothing of the first turn again.
  Result added = zenmoe("tokenize -m '" + ds + "' '<｜end▁of▁sentence｜><｜User｜>second question<｜Assistant｜>'");
  ASSERT_EQ(added.status, 0) << added.err;
  const auto n_added = std::count(added.out.begin(), added.out.end(), ',') + 1;
  EXPECT_EQ(std::stoi(b[2]) - std::stoi(a[2]), 1 + n_added) << added.out;
  expect_one_line_error("run -m '" + kModel + "' -cnv", "--conversation: the model has no chat template");
  // A turn past the context: the replies so far on stdout, one error line, status 1.
  Result full = zenmoe(m + " -cnv -c " + std::to_string(std::stoi(a[2]) + 10) + " -p 'hello there'", "second question\n");
  EXPECT_EQ(full.status, 1);
  EXPECT_EQ(full.out, one.out + "\n");
  EXPECT_EQ(std::count(full.err.begin(), full.err.end(), '\n'), 1) << full.err;
  EXPECT_NE(full.err.find("more than the context size"), std::string::npos) << full.err;
}

// --prompt-cache: the first run writes the prompt's positions to the file, the next restores all
// but the prompt's last token and prints what it printed without the file (greedy, reference
// engine: its numerics do not depend on how the tokens are batched); -ro never writes,
// --prompt-cache-all writes the generated tokens too; bad files and flags are one error line.
TEST_F(RunCli, PromptCacheRestoresThePromptAndKeepsTheOutput) {
  const std::string cache = (dir_ / "prompt.cache").string();
  const std::string run = "run -m '" + kModel + "' -n 8 --temp 0 --ignore-eos --ref ";
  const std::string p = "-p 'Once upon a time there was a small model'";
  const std::string with = " --prompt-cache '" + cache + "'";
  const std::regex summary(R"(prompt (\d+) tokens(?: \((\d+) from the prompt cache\))?, prefill .*\n)");
  Result plain = zenmoe(run + p);
  ASSERT_EQ(plain.status, 0) << plain.err;
  Result first = zenmoe(run + p + with);
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_EQ(first.out, plain.out);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(first.err, m, summary)) << first.err;
  EXPECT_FALSE(m[2].matched);
  const int n_prompt = std::stoi(m[1]);
  ASSERT_TRUE(fs::exists(cache));
  const std::string saved = slurp(cache);

  Result second = zenmoe(run + p + with);
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(second.out, plain.out);
  ASSERT_TRUE(std::regex_match(second.err, m, summary)) << second.err;
  EXPECT_EQ(std::stoi(m[1]), n_prompt);
  EXPECT_EQ(std::stoi(m[2]), n_prompt - 1);
  EXPECT_EQ(slurp(cache), saved);  // it held exactly this prompt: not written again

  // A longer prompt restores the whole saved one; -ro leaves the file, without it the file
  // takes the longer prompt.
  const std::string longer = "-p 'Once upon a time there was a small model that wrote stories'";
  Result ro = zenmoe(run + longer + with + " --prompt-cache-ro");
  ASSERT_EQ(ro.status, 0) << ro.err;
  ASSERT_TRUE(std::regex_match(ro.err, m, summary)) << ro.err;
  EXPECT_EQ(std::stoi(m[2]), n_prompt);
  EXPECT_EQ(slurp(cache), saved);
  Result grow = zenmoe(run + longer + with);
  ASSERT_EQ(grow.status, 0) << grow.err;
  EXPECT_EQ(grow.out, ro.out);
  const auto longer_size = fs::file_size(cache);
  EXPECT_GT(longer_size, saved.size());
  // --prompt-cache-all: the 7 generated tokens that went through the model are saved too.
  Result all = zenmoe(run + longer + with + " --prompt-cache-all");
  ASSERT_EQ(all.status, 0) << all.err;
  const auto per_token = (longer_size - saved.size()) / static_cast<uint64_t>(std::stoi(m[1]) - n_prompt);
  EXPECT_EQ(fs::file_size(cache), longer_size + 7 * per_token);

  expect_one_line_error(run + p + " --prompt-cache-ro", "--prompt-cache-ro needs --prompt-cache FILE");
  expect_one_line_error(run + p + " --prompt-cache-all", "--prompt-cache-all needs --prompt-cache FILE");
  expect_one_line_error(run + p + with + " --prompt-cache-all --prompt-cache-ro", "contradict");
  expect_one_line_error(run + "-cnv" + with, "--prompt-cache does not work with --conversation");
  // Made by the reference engine (F32 rows): the fast one with an F16 cache refuses it.
  expect_one_line_error("run -m '" + kModel + "' -n 2 " + p + with, "this run keeps f16 rows");
  std::string damaged = slurp(cache);
  damaged[damaged.size() / 2] = static_cast<char>(damaged[damaged.size() / 2] ^ 4);
  std::ofstream(cache, std::ios::binary | std::ios::trunc) << damaged;
  expect_one_line_error(run + p + with, "checksum mismatch");
}

// -r stops at the first place the output holds its text (given twice: the first of either);
// the escapes in -p are read as llama.cpp's CLI reads them unless --no-escape.
TEST_F(RunCli, ReversePromptStopsAndEscapesAreRead) {
  const std::string run = "run -m '" + kModel + "' -p 'The quick brown fox' -n 32 --temp 0 --ignore-eos";
  Result full = zenmoe(run);
  ASSERT_EQ(full.status, 0) << full.err;
  // Three letters or digits from past the first token or two.
  size_t at = 4;
  while (at + 3 <= full.out.size() &&
         !std::all_of(full.out.begin() + at, full.out.begin() + at + 3, [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    ++at;
  ASSERT_LE(at + 3, full.out.size()) << full.out;
  const std::string rp = full.out.substr(at, 3);
  const size_t end = full.out.find(rp) + rp.size();
  Result cut = zenmoe(run + " -r '" + rp + "'");
  ASSERT_EQ(cut.status, 0) << cut.err;
  EXPECT_EQ(full.out.compare(0, cut.out.size(), cut.out), 0) << cut.out;
  EXPECT_GE(cut.out.size(), end) << rp;
  EXPECT_LT(cut.out.size(), end + 48) << rp;  // the token that completed it, no more
  EXPECT_LT(cut.out.size(), full.out.size());
  Result two = zenmoe(run + " -r 'never in the output' --reverse-prompt '" + rp + "'");
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_EQ(two.out, cut.out);
  expect_one_line_error(run + " -r ''", "--reverse-prompt is empty");
  expect_one_line_error(run + " -t 1 -t 2", "flag --threads given twice");  // other flags stay single

  const std::regex tokens(R"(prompt (\d+) tokens, .*\n)");
  std::smatch m;
  Result escaped = zenmoe("run -m '" + kModel + "' -p 'one\\ntwo\\tthree' -n 4 --temp 0 --ignore-eos");
  Result literal = zenmoe("run -m '" + kModel + "' -p 'one\ntwo\tthree' -n 4 --temp 0 --ignore-eos");
  Result kept = zenmoe("run -m '" + kModel + "' -p 'one\\ntwo\\tthree' -n 4 --temp 0 --ignore-eos --no-escape");
  ASSERT_EQ(escaped.status, 0) << escaped.err;
  ASSERT_EQ(literal.status, 0) << literal.err;
  ASSERT_EQ(kept.status, 0) << kept.err;
  EXPECT_EQ(escaped.out, literal.out);
  ASSERT_TRUE(std::regex_match(escaped.err, m, tokens)) << escaped.err;
  const std::string n_escaped = m[1];
  ASSERT_TRUE(std::regex_match(literal.err, m, tokens)) << literal.err;
  EXPECT_EQ(n_escaped, m[1]);
  ASSERT_TRUE(std::regex_match(kept.err, m, tokens)) << kept.err;
  EXPECT_NE(n_escaped, m[1]);
}

using testing_cli::read_f32;

TEST_F(RunCli, LogitsWritesEveryPositionRepeatably) {
  const fs::path pre = dir_ / "pre.f32", pre2 = dir_ / "pre2.f32", dec = dir_ / "dec.f32";
  const std::string base = "logits -m '" + kModel + "' --tokens '1 17 200 3 45' ";
  ASSERT_EQ(zenmoe(base + "--mode prefill -o '" + pre.string() + "'").status, 0);
  ASSERT_EQ(zenmoe(base + "--mode prefill -o '" + pre2.string() + "'").status, 0);
  Result d = zenmoe(base + "--mode decode -o '" + dec.string() + "'");
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_TRUE(d.out.empty());
  EXPECT_EQ(fs::file_size(pre), 5u * 512u * 4u);
  EXPECT_EQ(fs::file_size(dec), 5u * 512u * 4u);
  EXPECT_EQ(slurp(pre), slurp(pre2));  // two runs, identical bits
  const auto a = read_f32(pre), b = read_f32(dec);
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << i;
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  // Prefill and decode compute the same function along different paths (batched attention and
  // glue; from 8 tokens per matrix on, the GEMM kernels instead of the GEMV kernels) whose float
  // summation orders differ, and an activation code rounding the other way moves a logit of
  // this small random model by up to a few tenths.
  EXPECT_LT(max_diff, 0.5);
  for (size_t t = 0; t < 5; ++t) {
    const auto* pa = a.data() + t * 512, * pb = b.data() + t * 512;
    EXPECT_EQ(std::max_element(pa, pa + 512) - pa, std::max_element(pb, pb + 512) - pb) << "position " << t;
  }
}

TEST_F(RunCli, BadLogitsInputsGiveOneErrorLine) {
  const std::string m = "logits -m '" + kModel + "' ";
  const std::string o = " -o '" + (dir_ / "x.f32").string() + "'";
  expect_one_line_error(m + "--tokens '1 2' --mode sideways" + o, "--mode must be prefill or decode");
  expect_one_line_error(m + "--tokens '1 x 2' --mode prefill" + o, "'x' is not a token id");
  expect_one_line_error(m + "--tokens '' --mode prefill" + o, "--tokens is empty");
  expect_one_line_error(m + "--tokens '1 99999' --mode decode" + o, "token id 99999 is out of range");
  expect_one_line_error(m + "--tokens '1 2 3' --mode prefill -c 2" + o, "more than the context size 2");
  expect_one_line_error(m + "--tokens '1 2' --mode prefill", "missing --output");
  expect_one_line_error(m + "--tokens '1 2' --mode prefill -o /nonexistent/dir/x.f32", "/nonexistent/dir/x.f32");
  expect_one_line_error("logits -m /nonexistent.gguf --tokens 1 --mode prefill" + o, "/nonexistent.gguf");
  expect_one_line_error(m + "--tokens 1 --mode prefill --what" + o, "unknown flag '--what'");
  EXPECT_FALSE(fs::exists(dir_ / "x.f32"));
}

}  // namespace
}  // namespace zenmoe
