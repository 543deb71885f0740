// `zenmoe batch`: a file of requests (JSON lines, each the body of an OpenAI completion request
// with "prompt" or chat completion request with "messages") answered one after another by one
// loaded model, an answer line per request: the model loads once for a night of prompts, and
// each request keeps the cache positions it shares with the one before (requests sorted so that
// those sharing a system prompt or document follow each other evaluate it once). With
// --parallel N, N requests run side by side, each in its own sequence of the executor, and every
// decode step evaluates the next token of all of them in one pass over the weights.
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/temp_files.h"
#include "runtime/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/engine.h"
#include "tools/session.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_session_flags({
    {"input", "i", true, "requests, one JSON object per line ('-': standard input)"},
    {"output", "o", true, "answers, one JSON object per line (default: standard output, as each is done)"},
    {"sort", "", false,
     "run the requests in the order of their prompts' tokens, so those sharing a beginning follow each other "
     "(answers still in input order)"},
});

// Where answer lines go: standard output, a line at a time, or a temporary beside the output
// file renamed into place once every request is answered.
class Sink {
 public:
  Status open(const std::string& path) {
    path_ = path;
    if (path.empty()) return Status::ok();
    out_.emplace();
    return out_->open(path);
  }
  Status line(const std::string& s) {
    std::FILE* f = out_ ? out_->file() : stdout;
    if (std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fputc('\n', f) == EOF)
      return Error{(path_.empty() ? std::string("standard output") : path_) + ": write failed"};
    if (!out_) std::fflush(stdout);
    return Status::ok();
  }
  Status commit() { return out_ ? out_->commit("the answers") : Status::ok(); }

 private:
  std::string path_;
  std::optional<TempOutput> out_;
};

struct Totals {
  int64_t answered = 0, refused = 0;
  int64_t prompt = 0, cached = 0, generated = 0, decode_evals = 0;
  double prompt_s = 0, decode_s = 0;
};

// A request line: its answer so far ({"line", "id" when the request has one, and "error" when it
// is refused}) and, unless refused, the job.
// A request line: its answer so far ({"line", "id" when the request has one, and "error" when it
// is refused}) and, unless refused, the job, its choices' runs and their outcomes as they end.
struct Request {
  json out;
  std::optional<Job> job;
  std::vector<Job> runs;
  std::vector<std::optional<Session::Outcome>> outcomes;
};

Request read_request(const Session& session, const std::string& text, int64_t line_no, Totals& totals) {
  Request r{json{{"line", line_no}}, std::nullopt, {}, {}};
  const json body = json::parse(text, nullptr, false);
  if (body.is_object() && body.contains("id")) r.out["id"] = body["id"];
  const bool chat = body.is_object() && body.contains("messages");
  auto parsed = session.parse(body, chat);
  if (auto* bad = std::get_if<BadRequest>(&parsed)) {
    r.out["error"] = bad->message;
  } else if (std::get<Job>(parsed).stream) {
    r.out["error"] = "'stream' has no meaning here";
  } else {
    r.job = std::move(std::get<Job>(parsed));
    r.runs = Session::choices(*r.job);
    r.outcomes.resize(r.runs.size());
    return r;
  }
  ++totals.refused;
  return r;
}

// Once every choice of a request ran: its answer completed with "text", "finish_reason" and
// "logprobs" (when asked for), or with n > 1 "choices" of those, then "usage" and "timings".
// Decode time and tokens are added to the totals by the caller.
void complete(const Session& session, Request& r, Totals& totals) {
  const Job& job = *r.job;
  std::vector<Session::Outcome> o;
  for (std::optional<Session::Outcome>& c : r.outcomes) o.push_back(std::move(*c));
  json choices = json::array();
  for (size_t i = 0; i < o.size(); ++i) {
    json c = {{"index", i},
              {"text", Session::visible(o[i].d, job.limits)},
              {"finish_reason", Session::finish_reason(o[i].d)}};
    if (job.limits.top_logprobs >= 0) c["logprobs"] = session.logprobs(job, o[i].d);
    choices.push_back(std::move(c));
  }
  if (o.size() == 1) {
    choices[0].erase("index");
    r.out.update(choices[0]);
  } else {
    r.out["choices"] = std::move(choices);
  }
  r.out["usage"] = Session::usage(job, o);
  r.out["timings"] = Session::timings(job, o);
  ++totals.answered;
  totals.prompt += static_cast<int64_t>(job.prompt.size());
  totals.cached += static_cast<int64_t>(o[0].cached);
  for (const Session::Outcome& c : o) totals.generated += c.d.generated;
  totals.prompt_s += o[0].prompt_s;
}

// Runs a request that was not refused on its own, its choices one after another.
Status answer(Session& session, Request& r, Totals& totals) {
  if (!r.job) return Status::ok();
  for (size_t i = 0; i < r.runs.size(); ++i) {
    auto o = session.run(r.runs[i], [](const std::string&) { return true; });
    if (!o) return Error{"line " + std::to_string(r.out["line"].get<int64_t>()) + ": " + o.error()};
    totals.decode_evals += o->d.evals;
    totals.decode_s += o->d.seconds;
    r.outcomes[i] = std::move(*o);
  }
  complete(session, r, totals);
  return Status::ok();
}

// Every request read (--sort, --parallel): those not refused run in `order` (indices into all)
// side by side on the session's sequences; answers go to the sink in input order, each as soon
// as those before it are written.
Status answer_all(Session& session, std::vector<Request>& all, const std::vector<size_t>& order, Sink& sink,
                  Totals& totals) {
  std::map<const Job*, std::pair<size_t, size_t>> owner;  // a run's request and choice
  std::vector<const Job*> runs;                            // in the order they start
  for (size_t i : order)
    for (size_t k = 0; k < all[i].runs.size(); ++k) {
      owner[&all[i].runs[k]] = {i, k};
      runs.push_back(&all[i].runs[k]);
    }
  std::vector<size_t> left(all.size());  // choices still running, per request
  for (size_t i = 0; i < all.size(); ++i) left[i] = all[i].runs.size();
  size_t written = 0, taken = 0;
  Status sink_status = Status::ok();
  const auto flush = [&] {
    for (; written < all.size() && left[written] == 0 && sink_status; ++written)
      sink_status = sink.line(dump(all[written].out));
  };
  flush();
  Session::StepTotals steps;
  Session::JobFeed feed;
  feed.next = [&]() -> const Job* {
    if (!sink_status) return nullptr;  // the answers cannot be written: start no more
    return taken < runs.size() ? runs[taken++] : nullptr;
  };
  feed.on_text = [](const Job*, const std::string&, std::span<const TokenLogprob>) { return true; };
  std::string failed;  // the first request an executor error ended
  feed.done = [&](const Job* job, Expected<Session::Outcome>&& o) {
    const auto [i, k] = owner.at(job);
    if (!o) {  // the batch stops with the error run_all returns
      if (failed.empty()) failed = "line " + std::to_string(all[i].out["line"].get<int64_t>()) + ": ";
      return;
    }
    all[i].outcomes[k] = std::move(*o);
    if (--left[i] > 0) return;
    complete(session, all[i], totals);
    flush();
  };
  const Status st = session.run_all(feed, &steps);
  totals.decode_evals += steps.tokens;
  totals.decode_s += steps.seconds;
  if (!st) return Error{failed + st.message()};
  return sink_status;
}

}  // namespace

int cmd_batch(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text("batch -m MODEL -i REQUESTS.jsonl [-o ANSWERS.jsonl] [options]", kFlags).c_str(), stdout);
    return 0;
  }
  if (!args->positionals().empty()) return fail("unexpected argument '" + args->positionals()[0] + "'");
  if (!args->has("input")) return fail("missing -i REQUESTS.jsonl");
  const std::string input = args->get("input");
  std::ifstream file;
  if (input != "-") {
    file.open(input, std::ios::binary);
    if (!file) return fail("cannot open requests file " + input);
  }
  std::istream& in = input == "-" ? std::cin : file;

  auto loaded = load_session_model(*args, "batch");
  if (!loaded) return fail(loaded.error());
  Session session(*(*loaded)->tk, *(*loaded)->ex);

  Sink sink;
  if (Status st = sink.open(args->get("output")); !st) return fail(st.message());
  Totals totals;
  const int parallel = (*loaded)->ex->n_seq();
  const bool sort = args->has("sort"), read_all = sort || parallel > 1;
  std::vector<Request> all;  // --sort, --parallel: every request, in input order
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    Request r = read_request(session, text, line_no, totals);
    if (read_all) {
      all.push_back(std::move(r));
      continue;
    }
    if (Status st = answer(session, r, totals); !st) return fail(st.message());
    if (Status st = sink.line(dump(r.out)); !st) return fail(st.message());
  }
  if (in.bad()) return fail("cannot read requests file " + input);
  if (read_all) {
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Prompts in token order: those that share a beginning run one after another (the order of
    // a depth-first walk of their prefix tree), so each shared beginning is evaluated once.
    if (sort)
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (!all[a].job || !all[b].job) return all[a].job.has_value() < all[b].job.has_value();
        return all[a].job->prompt < all[b].job->prompt;
      });
    if (Status st = answer_all(session, all, order, sink, totals); !st) return fail(st.message());
  }
  if (Status st = sink.commit(); !st) return fail(st.message());
  std::fprintf(stderr,
               "batch: %lld requests answered, %lld refused | prompt %lld tokens (%lld cached), prefill %s tok/s | "
               "generated %lld tokens, decode %s tok/s%s\n",
               static_cast<long long>(totals.answered), static_cast<long long>(totals.refused),
               static_cast<long long>(totals.prompt), static_cast<long long>(totals.cached),
               rate(static_cast<double>(totals.prompt - totals.cached), totals.prompt_s).c_str(),
               static_cast<long long>(totals.generated),
               rate(static_cast<double>(totals.decode_evals), totals.decode_s).c_str(),
               parallel > 1 ? (" (up to " + std::to_string(parallel) + " sequences a step)").c_str() : "");
  return 0;
}

}  // namespace zenmoe::tools
