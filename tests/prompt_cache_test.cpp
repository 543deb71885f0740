// Prompt cache files and the executor calls behind them (kv_caches, rewind, restore) on the
// oracle tiny model: a restored prefix continues exactly as the sequence that was saved, the
// longest usable prefix is restored, and every kind of bad file is one clear error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/fast_executor.h"
#include "runtime/gguf.h"
#include "runtime/plan_file.h"
#include "runtime/prompt_cache.h"
#include "runtime/ref_executor.h"
#include "tests/fuzz/prompt_cache_fake.h"
#include "tests/tiny_compiled.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;

struct Engine {
  bool fast = true;
  KvCacheType kv = KvCacheType::F16;
  bool scalar = false;  // the fast executor compiled for the scalar target (SGEMM attention on F32 copies)
};

std::string engine_name(const ::testing::TestParamInfo<Engine>& p) {
  return std::string(p.param.fast ? (p.param.scalar ? "scalar_" : "fast_") : "ref_") + kv_cache_type_name(p.param.kv);
}

class PromptCache : public testing_cli::TinyCompiledSuite<Engine> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zenmoe_prompt_cache_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "cache.bin").string();
    fs::remove(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::unique_ptr<Executor> make(Engine e, int n_ctx = 128) {
    if (!e.fast) {
      ExecutorOptions ro;
      ro.n_ctx = n_ctx;
      auto ex = make_reference_executor(tiny_->model, ro);
      EXPECT_TRUE(ex.has_value()) << ex.error();
      return ex ? std::move(*ex) : nullptr;
    }
    FastExecutorOptions fo;
    fo.base.n_ctx = n_ctx;
    fo.base.n_threads = 2;
    fo.base.kv_type = e.kv;
    auto ex = make_fast_executor(e.scalar ? tiny_->scalar : tiny_->host, fo);
    EXPECT_TRUE(ex.has_value()) << ex.error();
    return ex ? std::unique_ptr<Executor>(std::move(*ex)) : nullptr;
  }
  static uint64_t model_id() { return plan::gguf_table_checksum(tiny_->model); }

  static std::vector<int32_t> tokens(int n, unsigned seed, int n_vocab) {
    return testing_cli::random_tokens(n, seed, n_vocab);
  }

  fs::path dir_;
  std::string path_;
};

// The saved positions restored into a fresh executor give the logits the original one gives
// when it goes on from them, bit for bit; rewinding the original to them does too.
TEST_P(PromptCache, RestoredPrefixContinuesAsTheSavedSequence) {
  auto ex = make(GetParam());
  ASSERT_TRUE(ex);
  const int nv = ex->n_vocab();
  const std::vector<int32_t> a = tokens(21, 1, nv), b = tokens(6, 2, nv);
  std::vector<float> logits(static_cast<size_t>(nv) * b.size()), first(logits.size()), again(logits.size());
  ASSERT_TRUE(ex->eval(a, logits.data(), false).is_ok());
  ASSERT_TRUE(save_prompt_cache(path_, model_id(), *ex, a).is_ok());
  ASSERT_TRUE(ex->eval(b, first.data(), true).is_ok());

  std::vector<int32_t> prompt = a;
  prompt.insert(prompt.end(), b.begin(), b.end());
  auto other = make(GetParam());
  ASSERT_TRUE(other);
  auto loaded = load_prompt_cache(path_, model_id(), *other, prompt);
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  EXPECT_EQ(loaded->restored, static_cast<int>(a.size()));
  EXPECT_EQ(loaded->saved, a);
  EXPECT_EQ(other->n_past(), static_cast<int>(a.size()));
  ASSERT_TRUE(other->eval(b, again.data(), true).is_ok());
  EXPECT_EQ(first, again);

  ASSERT_TRUE(ex->rewind(static_cast<int>(a.size())).is_ok());
  EXPECT_EQ(ex->n_past(), static_cast<int>(a.size()));
  std::fill(again.begin(), again.end(), 0.0f);
  ASSERT_TRUE(ex->eval(b, again.data(), true).is_ok());
  EXPECT_EQ(first, again);
  EXPECT_FALSE(ex->rewind(ex->n_past() + 1).is_ok());
}

// At most prompt.size() - 1 positions (the last prompt token is evaluated for its logits), only
// the leading tokens both share, nothing when the first differs.
TEST_P(PromptCache, RestoresTheLongestSharedPrefixShortOfTheLastToken) {
  auto ex = make(GetParam());
  ASSERT_TRUE(ex);
  const std::vector<int32_t> a = tokens(16, 3, ex->n_vocab());
  std::vector<float> logits(static_cast<size_t>(ex->n_vocab()));
  ASSERT_TRUE(ex->eval(a, logits.data(), false).is_ok());
  ASSERT_TRUE(save_prompt_cache(path_, model_id(), *ex, a).is_ok());

  auto same = load_prompt_cache(path_, model_id(), *ex, a);
  ASSERT_TRUE(same.has_value()) << same.error();
  EXPECT_EQ(same->restored, 15);
  EXPECT_EQ(ex->n_past(), 15);

  std::vector<int32_t> part(a.begin(), a.begin() + 9);
  part.push_back((a[9] + 1) % ex->n_vocab());
  part.push_back(a[10]);
  auto shared = load_prompt_cache(path_, model_id(), *ex, part);
  ASSERT_TRUE(shared.has_value()) << shared.error();
  EXPECT_EQ(shared->restored, 9);

  std::vector<int32_t> other = a;
  other[0] = (a[0] + 1) % ex->n_vocab();
  auto none = load_prompt_cache(path_, model_id(), *ex, other);
  ASSERT_TRUE(none.has_value()) << none.error();
  EXPECT_EQ(none->restored, 0);
  EXPECT_EQ(ex->n_past(), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, PromptCache,
                         ::testing::Values(Engine{true, KvCacheType::F16}, Engine{true, KvCacheType::Q8_0},
                                           Engine{true, KvCacheType::BF16}, Engine{true, KvCacheType::F32},
                                           Engine{true, KvCacheType::F16, true}, Engine{true, KvCacheType::BF16, true},
                                           Engine{false, KvCacheType::F32}),
                         engine_name);

class PromptCacheFile : public PromptCache {
 protected:
  // A cache file of 12 positions from the F16 fast executor.
  std::unique_ptr<Executor> saved(std::vector<int32_t>* toks) {
    auto ex = make(Engine{});
    EXPECT_TRUE(ex);
    if (!ex) return nullptr;
    *toks = tokens(12, 4, ex->n_vocab());
    std::vector<float> logits(static_cast<size_t>(ex->n_vocab()));
    EXPECT_TRUE(ex->eval(*toks, logits.data(), false).is_ok());
    Status st = save_prompt_cache(path_, model_id(), *ex, *toks);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return ex;
  }
  void expect_error(Executor& ex, const std::vector<int32_t>& prompt, const std::string& needle,
                    uint64_t id = 0) {
    auto r = load_prompt_cache(path_, id == 0 ? model_id() : id, ex, prompt);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("prompt cache " + path_ + ": "), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
    EXPECT_EQ(ex.n_past(), 0);
  }
  std::string bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void write(const std::string& b) const { std::ofstream(path_, std::ios::binary | std::ios::trunc) << b; }
};

TEST_F(PromptCacheFile, RefusesAnotherModelCacheTypeOrEngine) {
  std::vector<int32_t> t;
  auto ex = saved(&t);
  ASSERT_TRUE(ex);
  expect_error(*ex, t, "made with another model", model_id() ^ 1);
  auto q8 = make(Engine{true, KvCacheType::Q8_0});
  ASSERT_TRUE(q8);
  expect_error(*q8, t, "as f16 rows of 576, this run keeps q8_0 rows of 576");
  auto ref = make(Engine{false, KvCacheType::F32});
  ASSERT_TRUE(ref);
  expect_error(*ref, t, "this run keeps f32 rows");
}

TEST_F(PromptCacheFile, RefusesDamagedTruncatedAndForeignFiles) {
  std::vector<int32_t> t;
  auto ex = saved(&t);
  ASSERT_TRUE(ex);
  const std::string good = bytes();
  ASSERT_GT(good.size(), 64u);
  // A flipped bit in every region: header fields, descriptors, tokens, rows, checksum.
  for (size_t at : {size_t{9}, size_t{20}, size_t{40}, good.size() / 2, good.size() - 20, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    write(bad);
    auto r = load_prompt_cache(path_, model_id(), *ex, t);
    EXPECT_FALSE(r.has_value()) << "byte " << at;
    EXPECT_EQ(ex->n_past(), 0);
  }
  write(good.substr(0, good.size() - 1));
  expect_error(*ex, t, "truncated");
  write(good.substr(0, 20));
  expect_error(*ex, t, "not a prompt cache file");
  write("hello, this is not a prompt cache, just text of some length here");
  expect_error(*ex, t, "not a prompt cache file");
  write(good.substr(0, good.size() / 2));
  expect_error(*ex, t, "truncated");
  std::string damaged = good;
  damaged[good.size() / 2] = static_cast<char>(damaged[good.size() / 2] ^ 1);
  write(damaged);
  expect_error(*ex, t, "checksum mismatch");
  std::string version = good;
  version[8] = 9;
  write(version);
  expect_error(*ex, t, "version 9");
  write(good);
  auto ok = load_prompt_cache(path_, model_id(), *ex, t);
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_EQ(ok->restored, 11);
}

TEST_F(PromptCacheFile, FailedSaveLeavesNoFileAndKeepsAnOldOne) {
  std::vector<int32_t> t;
  auto ex = saved(&t);
  ASSERT_TRUE(ex);
  const std::string before = bytes();
  // The token count must match the executor's sequence.
  std::vector<int32_t> fewer(t.begin(), t.end() - 1);
  Status st = save_prompt_cache(path_, model_id(), *ex, fewer);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("11 tokens given for a sequence of 12"), std::string::npos) << st.message();
  EXPECT_EQ(bytes(), before);
  const std::string missing = (dir_ / "no" / "such" / "dir" / "c.bin").string();
  st = save_prompt_cache(missing, model_id(), *ex, t);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("cannot create a temporary file"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(missing));
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);  // the cache, and no temporary beside it
}

// Replays every input kept in tests/fuzz/regressions-prompt-cache/ (fuzzer findings and
// hand-made hostile files) as the fuzzer reads them (the checksum recomputed, an executor
// without a model): each is refused with one line naming the file, or restores a valid prefix.
TEST(PromptCacheRegressions, EveryKeptInputIsHandledCleanly) {
  const fs::path dir = fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions-prompt-cache";
  const fs::path scratch = fs::temp_directory_path() / ("zenmoe_prompt_cache_replay_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 7 % 100);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    if (bytes.size() >= 8) {
      const uint64_t sum = prompt_cache_checksum(bytes.data(), bytes.size() - 8);
      std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
    }
    const std::string path = (scratch / e.path().filename()).string();
    std::ofstream(path, std::ios::binary) << bytes;
    fuzz::FakeExecutor ex;
    auto r = load_prompt_cache(path, fuzz::kFakeModelId, ex, prompt);
    if (r) {
      EXPECT_EQ(ex.n_past(), r->restored) << e.path();
      EXPECT_LT(static_cast<size_t>(r->restored), prompt.size()) << e.path();
    } else {
      EXPECT_EQ(r.error().rfind("prompt cache " + path + ": ", 0), 0u) << r.error();
      EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
      EXPECT_EQ(ex.n_past(), 0) << e.path();
    }
    ++n;
  }
  fs::remove_all(scratch);
  EXPECT_GE(n, 5u);
}

}  // namespace
}  // namespace zenmoe
