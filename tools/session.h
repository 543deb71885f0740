// The sequence slots behind the request front ends (`serve`, `batch`): a request body (the JSON
// of OpenAI's completion and chat completion requests) read into a job, and jobs run on one
// executor, one per sequence it holds (side by side, a decode batch over all of them), each
// keeping the cache positions its prompt shares with the sequence its slot holds (an earlier
// job's prompt and reply) and evaluating only the rest.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "runtime/chat.h"
#include "runtime/executor.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"
#include "tools/args.h"
#include "tools/engine.h"
#include "tools/generate.h"

namespace zenmoe::tools {

using json = nlohmann::json;

// Most likely alternatives a request may ask for per generated token.
inline constexpr int kMaxTopLogprobs = 20;

// A request refused: the HTTP status and the message of its JSON error object.
struct BadRequest {
  int status = 400;
  std::string message;
};

// What one request asks for.
struct Job {
  bool chat = false;
  bool stream = false;
  std::vector<int32_t> prompt;
  DecodeLimits limits;
  SamplerParams sampling;
  int n = 1;  // choices asked for: the job runs that many times (Session::choices)
};

// Most choices a request may ask for.
inline constexpr int kMaxChoices = 16;

// j as compact JSON text; bytes that are not UTF-8 (generated text can cut a character)
// become U+FFFD.
std::string dump(const json& j);

// An optional boolean field of a request body, type-checked; absent or null: *out unchanged.
std::optional<BadRequest> read_bool(const json& body, const char* key, bool* out);

// The flags of the commands that answer requests on one session (serve, batch): -m first,
// then the command's own, then -t, -c, -ctk, -ctv, -np, --ref, the engine flags and --help.
std::vector<FlagSpec> with_session_flags(std::vector<FlagSpec> own);

// A model loaded for a session as those flags ask: the file, its tokenizer, an executor.
struct SessionModel {
  OpenedModel model;
  std::optional<tok::Tokenizer> tk;
  std::unique_ptr<Executor> ex;  // after the model it reads, so destroyed before it
};
// Checks the session flags, then loads; `command` names the command in the missing -m error.
// The executor holds a sequence per --parallel slot.
Expected<std::unique_ptr<SessionModel>> load_session_model(const Args& a, const std::string& command);

class Session {
 public:
  // Both must outlive the session; chat jobs need the tokenizer's chat template.
  Session(const tok::Tokenizer& tk, Executor& ex);

  // A request body (as json::parse(text, nullptr, false) gives it: discarded when the text is not
  // JSON) read into a job (`chat`: a chat completion, else a completion), or why not.
  // Sampling defaults are llama.cpp's; max_tokens defaults to no limit.
  std::variant<Job, BadRequest> parse(const json& body, bool chat) const;

  // The figures of a finished job.
  struct Outcome {
    Decoded d;
    size_t cached = 0;    // prompt positions kept from the held sequence
    double prompt_s = 0;  // evaluating the rest of the prompt
  };
  // Runs one job (callers take turns) as run_all below does: the held positions the prompt
  // starts with are kept, at most all but its last token, the rest evaluated, then the decode
  // loop streams through on_text (false: stop).
  Expected<Outcome> run(const Job& job, const std::function<bool(const std::string&)>& on_text);

  // What run_all's decode steps did, over all jobs.
  struct StepTotals {
    int64_t steps = 0, tokens = 0;  // batches evaluated, tokens in them
    double seconds = 0;
  };
  // Where run_all takes its jobs from and gives their text and results to; a job is known by
  // its address, which must stay valid until done() is called for it.
  struct JobFeed {
    // The next job to start, or null when none waits now.
    std::function<const Job*()> next;
    // A job's text as it is generated (false: stop that job, as Session::run's on_text), with
    // the log-probabilities of its tokens so far (when the job asks for them; those of the
    // tokens this text comes from included).
    std::function<bool(const Job*, const std::string&, std::span<const TokenLogprob>)> on_text;
    // A job is over: its outcome, or the executor error that ended it.
    std::function<void(const Job*, Expected<Outcome>&&)> done;
  };
  // Runs jobs side by side, one per sequence of the executor (slots: Executor::n_seq()), taking
  // them from the feed as slots free up: a free slot (the one whose held sequence shares the
  // most of the prompt) keeps the positions the prompt shares with it and evaluates the rest,
  // and every decode step then evaluates the next token of every running job in one batch
  // (Executor::eval_seqs). Each job's Outcome counts the steps it took part in (their whole time
  // as its decode time). Returns once no job runs and the feed gives none; an executor error
  // ends every running job with it (done) and is returned.
  Status run_all(const JobFeed& feed, StepTotals* totals = nullptr);

  // The generated text as the client sees it: cut where a stop string starts.
  static std::string visible(const Decoded& d, const DecodeLimits& limits);
  // OpenAI's logprobs object of a choice, for the tokens whose text starts in the visible text
  // (completions: tokens, token_logprobs, top_logprobs, text_offset from the completion's
  // start; chat: content[] of token, logprob, bytes, top_logprobs); null when not asked for.
  json logprobs(const Job& job, const Decoded& d) const;
  // Where a stream's logprobs have got to: the next token, and where its text starts.
  struct LogprobCursor {
    size_t token = 0;
    size_t offset = 0;
  };
  // The logprobs object of a streamed piece: the tokens from *at whose text starts before byte
  // `limit` of the generated text (*at moves past them); null when the job asks for none.
  json logprobs(const Job& job, std::span<const TokenLogprob> lps, LogprobCursor* at, size_t limit) const;
  // OpenAI's finish_reason: "length" (max_tokens or the context), else "stop".
  static const char* finish_reason(const Decoded& d);
  // The runs of a job asking for n choices: n copies asking for one each, choice i seeded with
  // the job's seed + i (the later ones take the prompt's cache rows from the first).
  static std::vector<Job> choices(const Job& job);
  // OpenAI's usage object (with prompt_tokens_details.cached_tokens) and llama.cpp's timings,
  // over a job's choices: the prompt counted once (its figures from the first choice), the
  // generated tokens of all, the decode time of the longest.
  static json usage(const Job& job, std::span<const Outcome> o);
  static json timings(const Job& job, std::span<const Outcome> o);
  static json usage(const Job& job, const Outcome& o) { return usage(job, std::span(&o, 1)); }
  static json timings(const Job& job, const Outcome& o) { return timings(job, std::span(&o, 1)); }

  int n_ctx() const { return ex_->n_ctx(); }
  int n_vocab() const { return ex_->n_vocab(); }
  const tok::Tokenizer& tokenizer() const { return tk_; }

 private:
  const tok::Tokenizer& tk_;
  Executor* ex_;
  ChatStyle style_ = ChatStyle::DeepSeekV3;
  std::string no_chat_;  // why chat jobs are refused (empty: they are not)
  // Per sequence, the tokens whose positions the executor holds.
  std::vector<std::vector<int32_t>> held_;
  // Selects sequence s and keeps the positions `prompt` shares with it (at most all but its last
  // token), or takes them from another sequence that holds more of the prompt; returns how many.
  Expected<size_t> keep_prefix(int s, const std::vector<int32_t>& prompt);
  // How many positions keep_prefix(s, prompt) would keep.
  size_t shared_prefix(int s, const std::vector<int32_t>& prompt) const;
};

}  // namespace zenmoe::tools
