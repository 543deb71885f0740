#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/sampler.h"

namespace zenmoe {
namespace {

SamplerParams plain(float temp) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

std::vector<int32_t> ids(const std::vector<Sampler::Candidate>& c) {
  std::vector<int32_t> out;
  for (const auto& x : c) out.push_back(x.id);
  return out;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f), 5);
  const float l[5] = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_TRUE(s.filtered(l).empty());
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  const float l[4] = {4.0f, 3.0f, -1.0f, -1.5f};
  s.accept(0);  // 4 -> 2: token 1 (3.0) now wins
  EXPECT_EQ(s.sample(l), 1);
  s.accept(1);
  s.accept(1);  // window of 2 = {1, 1}: token 0 back at 4, token 1 at 1.5
  EXPECT_EQ(s.sample(l), 0);
  SamplerParams q = plain(1.0f);
  q.repeat_penalty = 2.0f;
  Sampler t(q, 4);
  t.accept(2);
  t.accept(2);  // a token counts once however often it repeats
  t.accept(3);
  std::map<int32_t, float> got;
  for (const auto& c : t.filtered(l)) got[c.id] = c.logit;
  EXPECT_EQ(got[0], 4.0f);
  EXPECT_EQ(got[2], -2.0f);
  EXPECT_EQ(got[3], -3.0f);
}

TEST(Sampler, TopKKeepsTheKBest) {
  SamplerParams p = plain(1.0f);
  p.top_k = 2;
  Sampler s(p, 5);
  const float l[5] = {0.5f, 2.0f, -1.0f, 1.0f, 1.0f};
  EXPECT_EQ(ids(s.filtered(l)), (std::vector<int32_t>{1, 3}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1.
  const float l[4] = {std::log(0.25f), std::log(0.5f), std::log(0.125f), std::log(0.125f)};
  SamplerParams p = plain(1.0f);
  p.top_p = 0.7f;
  EXPECT_EQ(ids(Sampler(p, 4).filtered(l)), (std::vector<int32_t>{1, 0}));
  p.top_p = 0.4f;
  EXPECT_EQ(ids(Sampler(p, 4).filtered(l)), (std::vector<int32_t>{1}));
  p.top_p = 0.8f;
  EXPECT_EQ(ids(Sampler(p, 4).filtered(l)), (std::vector<int32_t>{1, 0, 2}));
}

TEST(Sampler, MinPIsRelativeToTheBestToken) {
  const float l[4] = {std::log(0.25f), std::log(0.5f), std::log(0.125f), std::log(0.1f)};
  SamplerParams p = plain(1.0f);
  p.min_p = 0.3f;  // threshold 0.15: keeps 0.5 and 0.25
  EXPECT_EQ(ids(Sampler(p, 4).filtered(l)), (std::vector<int32_t>{1, 0}));
  p.min_p = 0.9f;
  EXPECT_EQ(ids(Sampler(p, 4).filtered(l)), (std::vector<int32_t>{1}));
}

TEST(Sampler, TemperatureScalesSurvivors) {
  SamplerParams p = plain(0.5f);
  Sampler s(p, 3);
  const float l[3] = {1.0f, -1.0f, 0.5f};
  auto c = s.filtered(l);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].id, 0);
  EXPECT_EQ(c[0].logit, 2.0f);
  EXPECT_EQ(c[1].logit, 1.0f);
  EXPECT_EQ(c[2].logit, -2.0f);
}

TEST(Sampler, SameSeedSameTokensAndFrequenciesFollowProbabilities) {
  const float l[3] = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplerParams p = plain(1.0f);
  p.seed = 1234;
  Sampler a(p, 3), b(p, 3);
  std::vector<int32_t> ra, rb;
  int count[3] = {0, 0, 0};
  for (int i = 0; i < 20000; ++i) {
    ra.push_back(a.sample(l));
    rb.push_back(b.sample(l));
    ++count[ra.back()];
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NEAR(count[0] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(count[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(count[2] / 20000.0, 0.1, 0.02);
  // reset() replays the same stream; another seed gives another one.
  a.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 50; ++i) again.push_back(a.sample(l));
  EXPECT_TRUE(std::equal(again.begin(), again.end(), ra.begin()));
  p.seed = 99;
  Sampler c(p, 3);
  std::vector<int32_t> other;
  for (int i = 0; i < 50; ++i) other.push_back(c.sample(l));
  EXPECT_FALSE(std::equal(other.begin(), other.end(), ra.begin()));
}

TEST(Sampler, FiltersBoundWhatCanBeDrawn) {
  SamplerParams p = plain(5.0f);  // hot, but top-k 2 limits the choice
  p.top_k = 2;
  p.seed = 7;
  Sampler s(p, 6);
  const float l[6] = {0.0f, 0.1f, 3.0f, 0.2f, 2.5f, 0.3f};
  for (int i = 0; i < 500; ++i) {
    int32_t t = s.sample(l);
    EXPECT_TRUE(t == 2 || t == 4) << t;
  }
}

TEST(Sampler, ParameterChecks) {
  SamplerParams p;
  EXPECT_TRUE(check_sampler_params(p).is_ok());
  p.top_p = 1.5f;
  EXPECT_FALSE(check_sampler_params(p).is_ok());
  p = SamplerParams();
  p.min_p = -0.1f;
  EXPECT_FALSE(check_sampler_params(p).is_ok());
  p = SamplerParams();
  p.repeat_penalty = 0.0f;
  EXPECT_FALSE(check_sampler_params(p).is_ok());
  p = SamplerParams();
  p.temp = INFINITY;
  EXPECT_FALSE(check_sampler_params(p).is_ok());
  p = SamplerParams();
  p.repeat_last_n = -1;
  EXPECT_FALSE(check_sampler_params(p).is_ok());
}

}  // namespace
}  // namespace zenmoe
