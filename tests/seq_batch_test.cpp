// Several sequences on one executor (ExecutorOptions::n_seq, select_seq, eval_seqs) on the
// oracle tiny model: tokens of several sequences evaluated in one pass give the logits each
// sequence gives alone, sequences keep their own positions and caches, and bad batches are
// refused before anything is evaluated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/fast_executor.h"
#include "runtime/gguf.h"
#include "runtime/ref_executor.h"
#include "tests/tiny_compiled.h"

namespace zenmoe {
namespace {

struct Engine {
  KvCacheType kv = KvCacheType::F16;
  bool scalar = false;  // compiled for the scalar target: no decode kernels, one token at a time
  int threads = 2;
};

std::string engine_name(const ::testing::TestParamInfo<Engine>& p) {
  return std::string(p.param.scalar ? "scalar_" : "fast_") + kv_cache_type_name(p.param.kv) + "_t" +
         std::to_string(p.param.threads);
}

class SeqBatch : public testing_cli::TinyCompiledSuite<Engine> {
 protected:
  static std::unique_ptr<Executor> make(int n_seq, int n_ctx = 64) {
    const Engine e = GetParam();
    FastExecutorOptions fo;
    fo.base.n_ctx = n_ctx;
    fo.base.n_threads = e.threads;
    fo.base.kv_type = e.kv;
    fo.base.n_seq = n_seq;
    auto ex = make_fast_executor(e.scalar ? tiny_->scalar : tiny_->host, fo);
    EXPECT_TRUE(ex.has_value()) << ex.error();
    return ex ? std::unique_ptr<Executor>(std::move(*ex)) : nullptr;
  }

  static std::vector<int32_t> tokens(int n, unsigned seed, int n_vocab) {
    return testing_cli::random_tokens(n, seed, n_vocab);
  }

  // The largest difference between two logit rows, relative to the larger magnitude of a.
  static double rel_diff(const float* a, const float* b, int n) {
    double diff = 0, scale = 1e-6;
    for (int i = 0; i < n; ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    }
    return diff / scale;
  }
};

// Three sequences with prompts of different lengths, then decode steps of one token each, all
// three in one eval_seqs: every row of logits matches the same sequence run alone on its own
// executor, step after step, and each sequence then goes on alone as it would have.
TEST_P(SeqBatch, BatchedStepsGiveEachSequenceItsOwnLogits) {
  constexpr int kSeqs = 3, kSteps = 6;
  auto many = make(kSeqs);
  ASSERT_TRUE(many);
  ASSERT_EQ(many->n_seq(), kSeqs);
  const int nv = many->n_vocab();
  std::vector<std::vector<int32_t>> prompts, steps;
  for (int s = 0; s < kSeqs; ++s) {
    prompts.push_back(tokens(5 + 7 * s, 10 + s, nv));
    steps.push_back(tokens(kSteps + 1, 20 + s, nv));
  }
  std::vector<float> row(static_cast<size_t>(nv));
  for (int s = 0; s < kSeqs; ++s) {
    ASSERT_TRUE(many->select_seq(s).is_ok());
    ASSERT_TRUE(many->eval(prompts[s], row.data(), false).is_ok());
  }
  ASSERT_TRUE(many->select_seq(1).is_ok());
  std::vector<float> batched(static_cast<size_t>(kSteps * kSeqs * nv));
  const std::vector<int> order = {2, 0, 1};  // not the sequences' own order
  for (int k = 0; k < kSteps; ++k) {
    std::vector<int32_t> t;
    for (int s : order) t.push_back(steps[static_cast<size_t>(s)][static_cast<size_t>(k)]);
    ASSERT_TRUE(many->eval_seqs(t, order, batched.data() + static_cast<size_t>(k * kSeqs * nv)).is_ok());
  }
  EXPECT_EQ(many->selected_seq(), 1);
  for (int s = 0; s < kSeqs; ++s)
    EXPECT_EQ(many->seq_past(s), static_cast<int>(prompts[static_cast<size_t>(s)].size()) + kSteps);
  EXPECT_EQ(many->n_past(), many->seq_past(1));

  for (size_t i = 0; i < order.size(); ++i) {
    const int s = order[i];
    auto alone = make(1);
    ASSERT_TRUE(alone);
    ASSERT_TRUE(alone->eval(prompts[static_cast<size_t>(s)], row.data(), false).is_ok());
    for (int k = 0; k < kSteps; ++k) {
      ASSERT_TRUE(alone->eval(std::span(&steps[static_cast<size_t>(s)][static_cast<size_t>(k)], 1), row.data(), false)
                      .is_ok());
      const float* b = batched.data() + static_cast<size_t>((k * kSeqs + static_cast<int>(i)) * nv);
      // One thread: the same kernels in the same order, bit for bit (two split the attention of
      // a lone token by positions, which sums in another order).
      EXPECT_LE(rel_diff(row.data(), b, nv), GetParam().threads == 1 ? 0.0 : 2e-3)
          << "sequence " << s << " step " << k;
      EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(), std::max_element(b, b + nv) - b);
    }
    // Selected again, the sequence goes on from its own positions.
    std::vector<float> next(static_cast<size_t>(nv));
    const int32_t last = steps[static_cast<size_t>(s)][kSteps];
    ASSERT_TRUE(alone->eval(std::span(&last, 1), row.data(), false).is_ok());
    ASSERT_TRUE(many->select_seq(s).is_ok());
    ASSERT_TRUE(many->eval(std::span(&last, 1), next.data(), false).is_ok());
    EXPECT_LT(rel_diff(row.data(), next.data(), nv), 2e-3) << "sequence " << s;
  }
}

// Rewinding one sequence leaves the others' positions and rows alone; a sequence of one token
// in eval_seqs is an ordinary decode step.
TEST_P(SeqBatch, SequencesKeepTheirOwnPositions) {
  auto ex = make(2);
  ASSERT_TRUE(ex);
  const int nv = ex->n_vocab();
  const std::vector<int32_t> a = tokens(12, 31, nv), b = tokens(9, 32, nv);
  std::vector<float> row(static_cast<size_t>(nv)), again(row.size()), two(row.size() * 2);
  ASSERT_TRUE(ex->eval(a, row.data(), false).is_ok());
  ASSERT_TRUE(ex->select_seq(1).is_ok());
  EXPECT_EQ(ex->n_past(), 0);
  ASSERT_TRUE(ex->eval(b, row.data(), false).is_ok());
  ASSERT_TRUE(ex->rewind(4).is_ok());
  EXPECT_EQ(ex->seq_past(0), 12);
  EXPECT_EQ(ex->seq_past(1), 4);

  const int32_t t = 7;
  ASSERT_TRUE(ex->eval_seqs(std::span(&t, 1), std::vector<int>{0}, row.data()).is_ok());
  EXPECT_EQ(ex->selected_seq(), 1);
  EXPECT_EQ(ex->seq_past(0), 13);
  auto alone = make(1);
  ASSERT_TRUE(alone);
  ASSERT_TRUE(alone->eval(a, again.data(), false).is_ok());
  ASSERT_TRUE(alone->eval(std::span(&t, 1), again.data(), false).is_ok());
  EXPECT_LT(rel_diff(again.data(), row.data(), nv), 2e-3);

  // Both at once after the rewind: sequence 1 sees only its first 4 positions.
  const std::vector<int32_t> both = {3, 5};
  ASSERT_TRUE(ex->eval_seqs(both, std::vector<int>{1, 0}, two.data()).is_ok());
  alone->reset();
  ASSERT_TRUE(alone->eval(b, again.data(), false).is_ok());
  ASSERT_TRUE(alone->rewind(4).is_ok());
  ASSERT_TRUE(alone->eval(std::span(both).first(1), again.data(), false).is_ok());
  EXPECT_LT(rel_diff(again.data(), two.data(), nv), 2e-3);
}

// copy_seq: a sequence given another's first positions goes on as that one did from there,
// selected or not when copied into; the source keeps its own; bad copies are refused.
TEST_P(SeqBatch, CopiedPositionsGoOnAsTheOriginal) {
  auto ex = make(3);
  ASSERT_TRUE(ex);
  const int nv = ex->n_vocab();
  const std::vector<int32_t> p = tokens(14, 51, nv);
  const std::span<const int32_t> head(p.data(), 9), tail(p.data() + 9, 5);
  std::vector<float> want(static_cast<size_t>(nv)), got(want.size());
  ASSERT_TRUE(ex->eval(head, want.data(), false).is_ok());
  ASSERT_TRUE(ex->eval(tail, want.data(), false).is_ok());
  for (int dst : {1, 2}) {
    if (dst == 2) {  // copied into the selected sequence
      ASSERT_TRUE(ex->select_seq(2).is_ok());
    }
    ASSERT_TRUE(ex->copy_seq(0, dst, 9).is_ok());
    EXPECT_EQ(ex->seq_past(dst), 9);
    EXPECT_EQ(ex->seq_past(0), 14);
    ASSERT_TRUE(ex->select_seq(dst).is_ok());
    EXPECT_EQ(ex->n_past(), 9);
    ASSERT_TRUE(ex->eval(tail, got.data(), false).is_ok());
    EXPECT_LT(rel_diff(want.data(), got.data(), nv), 2e-3) << dst;
  }
  ASSERT_TRUE(ex->copy_seq(1, 1, 3).is_ok());  // onto itself: a rewind
  EXPECT_EQ(ex->seq_past(1), 3);
  EXPECT_FALSE(ex->copy_seq(1, 0, 4).is_ok());  // more than it holds
  EXPECT_FALSE(ex->copy_seq(0, 3, 1).is_ok());
  EXPECT_FALSE(ex->copy_seq(-1, 0, 0).is_ok());
  EXPECT_EQ(ex->seq_past(0), 14);
}

// Bad batches: nothing is evaluated, every sequence keeps its positions.
TEST_P(SeqBatch, BadBatchesAreRefusedWhole) {
  auto ex = make(3, 8);
  ASSERT_TRUE(ex);
  const int nv = ex->n_vocab();
  std::vector<float> logits(static_cast<size_t>(3 * nv));
  ASSERT_TRUE(ex->select_seq(2).is_ok());
  ASSERT_TRUE(ex->eval(tokens(8, 41, nv), logits.data(), false).is_ok());  // sequence 2 is full
  ASSERT_TRUE(ex->select_seq(0).is_ok());
  const std::vector<int32_t> two = {1, 2}, three = {1, 2, 3}, bad_id = {1, nv + 5};
  struct Case {
    std::vector<int32_t> tokens;
    std::vector<int> seqs;
    const char* says;
  };
  for (const Case& c : {Case{two, {0, 0}, "given twice"}, Case{two, {0, 3}, "outside 0..2"},
                        Case{two, {0}, "2 tokens for 1 sequences"}, Case{three, {0, 1, 2}, "context limit"},
                        Case{bad_id, {0, 1}, "outside the vocabulary"}, Case{{}, {}, "no tokens"}}) {
    const Status st = ex->eval_seqs(c.tokens, c.seqs, logits.data());
    ASSERT_FALSE(st.is_ok()) << c.says;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_EQ(ex->seq_past(0), 0);
    EXPECT_EQ(ex->seq_past(1), 0);
    EXPECT_EQ(ex->seq_past(2), 8);
  }
  EXPECT_FALSE(ex->select_seq(3).is_ok());
  EXPECT_FALSE(ex->select_seq(-1).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, SeqBatch,
                         ::testing::Values(Engine{KvCacheType::F16}, Engine{KvCacheType::Q8_0},
                                           Engine{KvCacheType::BF16}, Engine{KvCacheType::F32},
                                           Engine{KvCacheType::F16, false, 1}, Engine{KvCacheType::F16, true}),
                         engine_name);

// Engines that hold one sequence take eval_seqs for it as one decode step and refuse others.
TEST(SeqBatchReference, OneSequenceEnginesTakeSequenceZeroOnly) {
  auto m = gguf::Model::open(std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf");
  ASSERT_TRUE(m.has_value()) << m.error();
  ExecutorOptions ro;
  ro.n_ctx = 16;
  auto ex = make_reference_executor(*m, ro);
  ASSERT_TRUE(ex.has_value()) << ex.error();
  Executor& e = **ex;
  EXPECT_EQ(e.n_seq(), 1);
  std::vector<float> a(static_cast<size_t>(e.n_vocab())), b(a.size());
  const int32_t t = 5;
  ASSERT_TRUE(e.eval_seqs(std::span(&t, 1), std::vector<int>{0}, a.data()).is_ok());
  EXPECT_EQ(e.n_past(), 1);
  EXPECT_FALSE(e.eval_seqs(std::span(&t, 1), std::vector<int>{1}, a.data()).is_ok());
  EXPECT_FALSE(e.select_seq(1).is_ok());
  e.reset();
  ASSERT_TRUE(e.eval(std::span(&t, 1), b.data(), false).is_ok());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace zenmoe
