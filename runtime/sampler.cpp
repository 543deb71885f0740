#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

namespace zenmoe {

Status check_sampler_params(const SamplerParams& p) {
  if (!std::isfinite(p.temp)) return Error{"temperature must be a finite number"};
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f))
    return Error{"top-p must be in [0, 1], got " + std::to_string(p.top_p)};
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return Error{"min-p must be in [0, 1], got " + std::to_string(p.min_p)};
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    return Error{"repeat penalty must be a positive number, got " + std::to_string(p.repeat_penalty)};
  if (p.repeat_last_n < 0)
    return Error{"repeat-last-n must be >= 0, got " + std::to_string(p.repeat_last_n)};
  return Status::ok();
}

Sampler::Sampler(const SamplerParams& params, int n_vocab)
    : p_(params), n_vocab_(n_vocab), rng_(params.seed) {}

void Sampler::reset() {
  recent_.clear();
  rng_.seed(p_.seed);
}

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int>(recent_.size()) > p_.repeat_last_n) recent_.pop_front();
}

void Sampler::apply_penalty(std::vector<float>& logits) const {
  if (p_.repeat_penalty == 1.0f || recent_.empty()) return;
  // Each distinct token of the window is penalised once, however often it occurs.
  std::unordered_set<int32_t> seen;
  for (int32_t t : recent_) {
    if (t < 0 || t >= n_vocab_ || !seen.insert(t).second) continue;
    float& l = logits[static_cast<size_t>(t)];
    l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
  }
}

namespace {

using Candidate = Sampler::Candidate;

bool before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Keeps the smallest prefix whose temperature-1 probability mass reaches p (at least one).
void cut_top_p(std::vector<Candidate>& c, float p) {
  const float mx = c.front().logit;
  double z = 0.0;
  for (const auto& x : c) z += std::exp(static_cast<double>(x.logit - mx));
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += std::exp(static_cast<double>(c[i].logit - mx)) / z;
    if (cum >= static_cast<double>(p)) {
      c.resize(i + 1);
      return;
    }
  }
}

// Keeps tokens whose probability is at least min_p times the best one's.
void cut_min_p(std::vector<Candidate>& c, float min_p) {
  const float threshold = c.front().logit + std::log(min_p);
  size_t keep = 1;
  while (keep < c.size() && c[keep].logit >= threshold) ++keep;
  c.resize(keep);
}

}  // namespace

std::vector<Sampler::Candidate> Sampler::filtered(const float* logits) const {
  std::vector<float> l(logits, logits + n_vocab_);
  apply_penalty(l);
  if (p_.temp <= 0.0f) return {};
  std::vector<Candidate> c(static_cast<size_t>(n_vocab_));
  for (int i = 0; i < n_vocab_; ++i) c[i] = {i, l[i]};
  if (p_.top_k > 0 && p_.top_k < n_vocab_) {
    std::partial_sort(c.begin(), c.begin() + p_.top_k, c.end(), before);
    c.resize(static_cast<size_t>(p_.top_k));
  } else {
    std::sort(c.begin(), c.end(), before);
  }
  if (p_.top_p < 1.0f) cut_top_p(c, p_.top_p);
  if (p_.min_p > 0.0f) cut_min_p(c, p_.min_p);
  for (auto& x : c) x.logit /= p_.temp;
  return c;
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const float* logits) {
  if (p_.temp <= 0.0f) {
    std::vector<float> l(logits, logits + n_vocab_);
    apply_penalty(l);
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  const std::vector<Candidate> c = filtered(logits);
  const float mx = c.front().logit;
  std::vector<double> w(c.size());
  double z = 0.0;
  for (size_t i = 0; i < c.size(); ++i) z += (w[i] = std::exp(static_cast<double>(c[i].logit - mx)));
  const double u = uniform() * z;
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += w[i];
    if (u < cum) return c[i].id;
  }
  return c.back().id;  // u rounded up to z
}

}  // namespace zenmoe
