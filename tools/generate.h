// The decode loop `run` and `serve` share: after a prefill has left the last prompt position's
// logits, sample a token, stream its text, evaluate it, until the token limit, an
// end-of-generation token, a stop text or the context limit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/status.h"
#include "runtime/executor.h"
#include "runtime/grammar.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"

namespace zenmoe::tools {

struct DecodeLimits {
  int64_t n_predict = -1;          // tokens to generate; -1: no limit
  bool ignore_eos = false;         // end-of-generation tokens are sampled like any other
  std::vector<std::string> stops;  // stop once the generated text holds one of these
  // >= 0: record each generated token's log-probability and this many most likely tokens
  // (Decoded::logprobs).
  int top_logprobs = -1;
  // Set: only tokens the grammar allows are sampled (a token the sampler picks that it does not
  // allow is replaced by a draw among those it does), an end-of-generation token only once the
  // text is a whole sentence of it, and generation ends when the grammar allows nothing more.
  std::shared_ptr<const grammar::Grammar> grammar;
};

// A generated token's log-probability under the model (the log-softmax of its logits as the
// model gave them: before penalties, filters and temperature) and the most likely tokens at
// that step, most likely first (ties by id).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// kCancelled: on_text returned false (the reader went away).
enum class StopReason { kLength, kEndOfGeneration, kStopText, kContextFull, kCancelled };

struct Decoded {
  std::string text;                 // all of it, as streamed
  int64_t generated = 0;            // tokens sampled and accepted
  int64_t evals = 0;                // of them evaluated (the decode steps)
  double seconds = 0;               // in those evals
  StopReason why = StopReason::kLength;
  std::vector<int32_t> evaluated;   // the tokens that went through the model, in order
  std::vector<int32_t> unevaluated;  // the last sampled token when a limit or stop text came first
  std::vector<TokenLogprob> logprobs;  // per generated token, when DecodeLimits::top_logprobs >= 0
};

// n / s with two decimals ("n/a" when either is 0): the tok/s figures of summary lines.
std::string rate(double n, double s);

// Whether the last `added` bytes of `said` complete one of `stops`; the position where that
// stop text starts goes to *at.
bool completes_stop(const std::vector<std::string>& stops, const std::string& said, size_t added, size_t* at = nullptr);

// The log-probability of `token` under one row of n_vocab logits, and the `top` most likely.
TokenLogprob token_logprob(const float* logits, int n_vocab, int32_t token, int top);

// One sequence's decode loop a token at a time, for callers that evaluate the tokens
// themselves (several sequences in one batch): step() samples from the last evaluated
// position's logits and streams the text, then says which token to evaluate next, or that the
// generation is over.
class Generation {
 public:
  // All must outlive the generation; on_text as for decode_loop; n_vocab: logits per row.
  Generation(const tok::Tokenizer& tk, Sampler& sampler, const DecodeLimits& limits, int n_vocab,
             std::function<bool(const std::string&)> on_text);
  // `past`: the positions the sequence holds, of a context of n_ctx. Returns the token to
  // evaluate next, or nothing when the generation stopped (done() then holds why).
  std::optional<int32_t> step(const float* logits, int past, int n_ctx);
  // The token step() returned went through the model, in `seconds`.
  void evaluated(int32_t token, double seconds);
  // Once step() returned nothing: the result (the text the stream decoder held back added).
  Decoded finish();
  // The log-probabilities of the tokens sampled so far (when the limits ask for them): within
  // on_text, those of the tokens whose text it is are there already.
  std::span<const TokenLogprob> logprobs() const { return d_.logprobs; }

 private:
  const tok::Tokenizer& tk_;
  Sampler& sampler_;
  const DecodeLimits& limits_;
  int n_vocab_;
  std::function<bool(const std::string&)> on_text_;
  tok::StreamDecoder dec_;
  Decoded d_;
  bool reading_ = true;  // on_text has not asked to stop
  std::optional<grammar::State> grammar_;
  std::vector<float> masked_;  // logits with the tokens the grammar refuses at -inf
  void out(const std::string& text);
  bool grammar_allows(int32_t token) const;
  // The sampled token, or one drawn among those the grammar allows; nothing when it allows none.
  std::optional<int32_t> sample(const float* logits);
};

// `logits` holds the last evaluated position's row (n_vocab floats) and is overwritten as the
// loop goes. on_text receives the text as tokens complete it (UTF-8 held back until whole) and
// returns false to stop.
Expected<Decoded> decode_loop(Executor& ex, const tok::Tokenizer& tk, Sampler& sampler, std::vector<float>& logits,
                              const DecodeLimits& limits, const std::function<bool(const std::string&)>& on_text);

}  // namespace zenmoe::tools
