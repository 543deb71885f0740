#include "tools/generate.h"

#include <chrono>
#include <cstdio>
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

Generation::Generation(const tok::Tokenizer& tk, Sampler& sampler, const DecodeLimits& limits,
                       std::function<bool(const std::string&)> on_text)
    : tk_(tk), sampler_(sampler), limits_(limits), on_text_(std::move(on_text)), dec_(tk) {}

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
  const int32_t next = sampler_.sample(logits);
  if (tk_.is_eog(next) && !limits_.ignore_eos) {
    d_.why = StopReason::kEndOfGeneration;
    return std::nullopt;
  }
  sampler_.accept(next);
  ++d_.generated;
  const std::string piece = dec_.push(next);
  out(piece);
  const bool at_limit = limits_.n_predict >= 0 && d_.generated >= limits_.n_predict;
  if (at_limit || !reading_ || completes_stop(limits_.stops, d_.text, piece.size())) {
    d_.why = at_limit ? StopReason::kLength : !reading_ ? StopReason::kCancelled : StopReason::kStopText;
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
  Generation g(tk, sampler, limits, on_text);
  while (const std::optional<int32_t> next = g.step(logits.data(), ex.n_past(), ex.n_ctx())) {
    const auto t0 = std::chrono::steady_clock::now();
    ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(&*next, 1), logits.data(), false));
    g.evaluated(*next, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return g.finish();
}

}  // namespace zenmoe::tools
