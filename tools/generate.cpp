#include "tools/generate.h"

#include <chrono>
#include <cstdio>
#include <span>

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

Expected<Decoded> decode_loop(Executor& ex, const tok::Tokenizer& tk, Sampler& sampler, std::vector<float>& logits,
                              const DecodeLimits& limits, const std::function<bool(const std::string&)>& on_text) {
  Decoded d;
  tok::StreamDecoder dec(tk);
  bool reading = true;  // on_text has not asked to stop
  const auto out = [&](const std::string& text) {
    if (text.empty()) return;
    d.text += text;
    if (reading) reading = on_text(text);
  };
  while (limits.n_predict < 0 || d.generated < limits.n_predict) {
    const int32_t next = sampler.sample(logits.data());
    if (tk.is_eog(next) && !limits.ignore_eos) {
      d.why = StopReason::kEndOfGeneration;
      break;
    }
    sampler.accept(next);
    ++d.generated;
    const std::string piece = dec.push(next);
    out(piece);
    const bool at_limit = limits.n_predict >= 0 && d.generated >= limits.n_predict;
    if (at_limit || !reading || completes_stop(limits.stops, d.text, piece.size())) {
      d.why = at_limit ? StopReason::kLength : !reading ? StopReason::kCancelled : StopReason::kStopText;
      d.unevaluated.push_back(next);
      break;
    }
    if (ex.n_past() >= ex.n_ctx()) {
      d.why = StopReason::kContextFull;
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(&next, 1), logits.data(), false));
    d.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++d.evals;
    d.evaluated.push_back(next);
  }
  out(dec.flush());
  return d;
}

}  // namespace zenmoe::tools
