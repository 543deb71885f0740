#include "tools/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <utility>

namespace zenmoe::tools {

std::string rate(double n, double s) {
  if (n <= 0 || s <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", n / s);
  return buf;
}

bool completes_stop(const std::vector<std::string>& stops, const std::string& said, size_t added, size_t* at) {
  if (added == 0) return false;
  for (const std::string& s : stops) {
    const size_t from = said.size() >= added + s.size() ? said.size() - added - s.size() + 1 : 0;
    const size_t found = said.find(s, from);
    if (found != std::string::npos) {
      if (at != nullptr) *at = found;
      return true;
    }
  }
  return false;
}

Generation::Generation(const tok::Tokenizer& tk, Sampler& sampler, const DecodeLimits& limits, int n_vocab,
                       std::function<bool(const std::string&)> on_text)
    : tk_(tk), sampler_(sampler), limits_(limits), n_vocab_(n_vocab), on_text_(std::move(on_text)), dec_(tk) {
  if (limits.grammar) grammar_.emplace(limits.grammar);
}

bool Generation::grammar_allows(int32_t token) const {
  if (tk_.is_eog(token)) return !limits_.ignore_eos && grammar_->can_end();
  return grammar_->accepts(tk_.piece(token));
}

std::optional<int32_t> Generation::sample(const float* logits) {
  const int32_t picked = sampler_.sample(logits);
  if (!grammar_ || grammar_allows(picked)) return picked;
  masked_.assign(logits, logits + n_vocab_);
  bool any = false;
  for (int32_t t = 0; t < n_vocab_; ++t) {
    if (grammar_allows(t)) {
      any = true;
    } else {
      masked_[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    }
  }
  if (!any) return std::nullopt;
  return sampler_.sample(masked_.data());
}

TokenLogprob token_logprob(const float* logits, int n_vocab, int32_t token, int top) {
  float max = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n_vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double lse = max + std::log(sum);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = static_cast<float>(logits[token] - lse);
  // The `top` largest logits: a min-heap of the best so far, then sorted.
  const auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> heap;
  for (int32_t i = 0; i < n_vocab && top > 0; ++i) {
    if (static_cast<int>(heap.size()) < top) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(i, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = i;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (int32_t i : heap) lp.top.emplace_back(i, static_cast<float>(logits[i] - lse));
  return lp;
}

void Generation::out(const std::string& text) {
  if (text.empty()) return;
  d_.text += text;
  if (reading_) reading_ = on_text_(text);
}

std::optional<int32_t> Generation::step(const float* logits, int past, int n_ctx) {
  if (limits_.n_predict >= 0 && d_.generated >= limits_.n_predict) {
    d_.why = StopReason::kLength;
    return std::nullopt;
  }
  const std::optional<int32_t> sampled = sample(logits);
  if (!sampled || (tk_.is_eog(*sampled) && !limits_.ignore_eos)) {
    d_.why = StopReason::kEndOfGeneration;
    return std::nullopt;
  }
  const int32_t next = *sampled;
  if (grammar_) grammar_->advance(tk_.piece(next));
  sampler_.accept(next);
  ++d_.generated;
  if (limits_.top_logprobs >= 0) d_.logprobs.push_back(token_logprob(logits, n_vocab_, next, limits_.top_logprobs));
  const std::string piece = dec_.push(next);
  out(piece);
  const bool at_limit = limits_.n_predict >= 0 && d_.generated >= limits_.n_predict;
  const bool grammar_done = grammar_ && grammar_->ended();
  if (at_limit || !reading_ || grammar_done || completes_stop(limits_.stops, d_.text, piece.size())) {
    d_.why = at_limit        ? StopReason::kLength
             : !reading_     ? StopReason::kCancelled
             : grammar_done  ? StopReason::kEndOfGeneration
                             : StopReason::kStopText;
    d_.unevaluated.push_back(next);
    return std::nullopt;
  }
  if (past >= n_ctx) {
    d_.why = StopReason::kContextFull;
    return std::nullopt;
  }
  return next;
}

void Generation::evaluated(int32_t token, double seconds) {
  d_.seconds += seconds;
  ++d_.evals;
  d_.evaluated.push_back(token);
}

Decoded Generation::finish() {
  out(dec_.flush());
  return std::move(d_);
}

Expected<Decoded> decode_loop(Executor& ex, const tok::Tokenizer& tk, Sampler& sampler, std::vector<float>& logits,
                              const DecodeLimits& limits, const std::function<bool(const std::string&)>& on_text) {
  Generation g(tk, sampler, limits, ex.n_vocab(), on_text);
  while (const std::optional<int32_t> next = g.step(logits.data(), ex.n_past(), ex.n_ctx())) {
    const auto t0 = std::chrono::steady_clock::now();
    ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(&*next, 1), logits.data(), false));
    g.evaluated(*next, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return g.finish();
}

}  // namespace zenmoe::tools
