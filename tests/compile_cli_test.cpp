// zenmoe compile: a plan runs without repacking and gives the same logits as its GGUF compiled
// in memory; a plan whose GGUF changed or vanished is refused with one line; bad flags and
// unwritable outputs fail cleanly without leaving files behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli_util.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;
using testing_cli::CliResult;

// KL(softmax(p) || softmax(q)) of two logit rows.
double softmax_kl(const std::vector<float>& p, const std::vector<float>& q) {
  auto log_softmax = [](const std::vector<float>& v) {
    const double m = *std::max_element(v.begin(), v.end());
    double s = 0;
    for (float x : v) s += std::exp(x - m);
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] - m - std::log(s);
    return out;
  };
  const std::vector<double> lp = log_softmax(p), lq = log_softmax(q);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kl;
}

class CompileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zenmoe_compile_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    gguf_ = dir_ / "model.gguf";
    fs::copy_file(fs::path(ZENMOE_ORACLE_DIR) / "tiny-q4ks.gguf", gguf_);
    plan_ = dir_ / "model.zplan";
  }
  void TearDown() override { fs::remove_all(dir_); }
  CliResult zenmoe(const std::string& args) { return testing_cli::run_zenmoe(args, dir_); }
  void expect_one_line_error(const std::string& args, const std::string& needle) {
    testing_cli::expect_one_line_error(zenmoe(args), args, needle);
  }
  std::string q(const fs::path& p) {
    std::string s = "'";  // appended, not "'" + ...: GCC 12 warns (-Wrestrict) on that form
    s += p.string();
    s += '\'';
    return s;
  }

  fs::path dir_, gguf_, plan_;
};

TEST_F(CompileCli, PlanGivesTheLogitsOfItsGguf) {
  CliResult c = zenmoe("compile " + q(gguf_) + " -o " + q(plan_) + " --threads 2");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_TRUE(fs::exists(plan_));
  EXPECT_TRUE(fs::exists(dir_ / "model.zplan.weights"));
  const std::string toks = " --tokens '1 17 200 3 45 9 8' --mode prefill -o ";
  ASSERT_EQ(zenmoe("logits -m " + q(plan_) + toks + q(dir_ / "plan.f32")).status, 0);
  ASSERT_EQ(zenmoe("logits -m " + q(gguf_) + toks + q(dir_ / "gguf.f32")).status, 0);
  const std::string a = testing_cli::slurp_file(dir_ / "plan.f32"), b = testing_cli::slurp_file(dir_ / "gguf.f32");
  EXPECT_EQ(a.size(), 7u * 512u * 4u);
  EXPECT_EQ(a, b);
  // Seven tokens in chunks of two: the last chunk's token goes through the GEMV kernels instead
  // of the GEMM, which sums in another order; on this random model that can move a near-tie
  // in the router. The predictions must agree and the distributions stay within the oracle
  // bound (mean KL 5e-3) at every position.
  ASSERT_EQ(zenmoe("logits -m " + q(plan_) + " -ub 2" + toks + q(dir_ / "ub.f32")).status, 0);
  const std::string chunked = testing_cli::slurp_file(dir_ / "ub.f32");
  ASSERT_EQ(chunked.size(), a.size());
  for (size_t pos = 0; pos < 7; ++pos) {
    std::vector<float> x(512), y(512);
    std::memcpy(x.data(), a.data() + pos * 512 * 4, 512 * 4);
    std::memcpy(y.data(), chunked.data() + pos * 512 * 4, 512 * 4);
    EXPECT_EQ(std::max_element(x.begin(), x.end()) - x.begin(), std::max_element(y.begin(), y.end()) - y.begin())
        << "position " << pos;
    EXPECT_LE(softmax_kl(x, y), 5e-3) << "position " << pos;
  }
  // Mapped or copied into huge-page memory, the weights are the same bytes.
  for (const std::string load : {"--mmap", "--no-mmap"}) {
    ASSERT_EQ(zenmoe("logits -m " + q(plan_) + " " + load + " " + toks + q(dir_ / "load.f32")).status, 0) << load;
    EXPECT_EQ(testing_cli::slurp_file(dir_ / "load.f32"), a) << load;
  }
  CliResult r = zenmoe("run -m " + q(plan_) + " -p 'Hello world' -n 4 --temp 0 --ignore-eos");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("decode"), std::string::npos) << r.err;
}

// The cache directory's file names, sorted.
std::vector<std::string> cache_files(const fs::path& dir) {
  std::vector<std::string> names;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// compile generates the glue kernels into the disk cache, for every KV cache type: a run of
// the plan afterwards, whichever cache type it picks, adds nothing to the cache.
TEST_F(CompileCli, CompileGeneratesTheGlueKernelsARunNeeds) {
  const fs::path cache = dir_ / "glue-cache";
  const char* old = std::getenv("ZENMOE_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("ZENMOE_CACHE_DIR", cache.c_str(), 1);
  CliResult c = zenmoe("compile " + q(gguf_) + " -o " + q(plan_));
  const std::vector<std::string> after_compile = cache_files(cache);
  std::vector<CliResult> runs;
  for (const char* kv : {"f16", "f32", "bf16", "q8_0"})
    runs.push_back(zenmoe("run -m " + q(plan_) + " -p 'Hello world' -n 2 --temp 0 -ctk " + kv));
  const std::vector<std::string> after_runs = cache_files(cache);
  if (old) ::setenv("ZENMOE_CACHE_DIR", saved.c_str(), 1);
  else ::unsetenv("ZENMOE_CACHE_DIR");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("glue kernels into"), std::string::npos) << c.err;
  EXPECT_FALSE(after_compile.empty());
  for (const CliResult& r : runs) EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(after_runs, after_compile);
}

// With more heads than one vector of lanes, the decode attention kernels depend on the thread
// count (one thread's share of the heads): compile also generates those of the thread count a
// run takes by default, so that run adds nothing to the cache either.
TEST_F(CompileCli, CompileGeneratesTheDecodeKernelsOfTheDefaultThreadCount) {
  const fs::path cache = dir_ / "glue-cache", model = dir_ / "heads40.gguf", plan = dir_ / "heads40.zplan";
  ASSERT_EQ(zenmoe("mkmodel --preset tiny --heads 40 -o " + q(model)).status, 0);
  const char* old = std::getenv("ZENMOE_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("ZENMOE_CACHE_DIR", cache.c_str(), 1);
  CliResult c = zenmoe("compile " + q(model) + " -o " + q(plan));
  const std::vector<std::string> after_compile = cache_files(cache);
  CliResult r = zenmoe("run -m " + q(plan) + " -p 'Hello world' -n 2 --temp 0");
  const std::vector<std::string> after_run = cache_files(cache);
  if (old) ::setenv("ZENMOE_CACHE_DIR", saved.c_str(), 1);
  else ::unsetenv("ZENMOE_CACHE_DIR");
  ASSERT_EQ(c.status, 0) << c.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(after_compile.empty());
  EXPECT_EQ(after_run, after_compile);
}

TEST_F(CompileCli, DumpAfterPrintsTheIr) {
  CliResult c = zenmoe("compile " + q(gguf_) + " -o " + q(plan_) + " --dump-after all");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("; IR after verify"), std::string::npos);
  EXPECT_NE(c.err.find("graph deepseek2 {"), std::string::npos);
}

TEST_F(CompileCli, ChangedOrMissingGgufIsRefused) {
  ASSERT_EQ(zenmoe("compile " + q(gguf_) + " -o " + q(plan_)).status, 0);
  const std::string run = "logits -m " + q(plan_) + " --tokens '1 2' --mode prefill -o " + q(dir_ / "x.f32");
  fs::copy_file(fs::path(ZENMOE_ORACLE_DIR) / "tiny-f16.gguf", gguf_, fs::copy_options::overwrite_existing);
  expect_one_line_error(run, "changed since the plan was compiled");
  fs::remove(gguf_);
  expect_one_line_error(run, "is missing");
  EXPECT_FALSE(fs::exists(dir_ / "x.f32"));
}

TEST_F(CompileCli, BadInputsFailCleanly) {
  expect_one_line_error("compile " + q(gguf_) + " --target zen9", "unknown --target 'zen9'");
  expect_one_line_error("compile " + q(dir_ / "absent.gguf"), "absent.gguf");
  expect_one_line_error("compile " + q(gguf_) + " -t 0", "threads");
  expect_one_line_error("compile", "one model file");
  expect_one_line_error("compile " + q(gguf_) + " -o /nonexistent/dir/m.zplan", "/nonexistent/dir");
  expect_one_line_error("run -m " + q(gguf_) + " -p hi -n 1 --cache-type-k q4", "unknown cache type 'q4'");
  expect_one_line_error("run -m " + q(gguf_) + " -p hi -n 1 -ctk f16 -ctv f32", "one latent cache");
  expect_one_line_error("run -m " + q(gguf_) + " -p hi -n 1 --mmap --no-mmap", "not both");
  expect_one_line_error("run -m " + q(gguf_) + " -p hi -n 1 --mla sometimes", "--mla must be auto, absorbed or");
  expect_one_line_error("logits -m " + q(gguf_) + " --tokens 1 --mode prefill -o x -ub 0", "ubatch-size");
  expect_one_line_error("run -m " + q(gguf_) + " -p hi -n 1 --attn-prefetch -3", "--attn-prefetch must be in");
  expect_one_line_error("bench model " + q(gguf_) + " --attn-prefetch x", "--attn-prefetch expects an integer");
  // A plan that is not a plan.
  fs::copy_file(fs::path(ZENMOE_ORACLE_DIR) / "tiny-q4ks.dequant.json", dir_ / "bad.zplan");
  expect_one_line_error("run -m " + q(dir_ / "bad.zplan") + " -p hi -n 1", "bad.zplan");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace zenmoe
