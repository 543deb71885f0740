// `zenmoe batch`: a file of requests (JSON lines, each the body of an OpenAI completion request
// with "prompt" or chat completion request with "messages") answered one after another by one
// loaded model, an answer line per request: the model loads once for a night of prompts, and
// each request keeps the cache positions it shares with the one before (requests sorted so that
// those sharing a system prompt or document follow each other evaluate it once).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
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
     "(answers still in input order, written at the end)"},
});

// Where answer lines go: standard output, a line at a time, or a temporary beside the output
// file renamed into place once every request is answered.
class Sink {
 public:
  Status open(const std::string& path) {
    path_ = path;
    if (path.empty()) return Status::ok();
    temps_.emplace();
    auto fd = temps_->create(0, path);
    if (!fd) return Error{fd.error()};
    file_ = ::fdopen(*fd, "w");
    if (file_ == nullptr) {
      ::close(*fd);
      return Error{path + ": cannot open for writing"};
    }
    return Status::ok();
  }
  Status line(const std::string& s) {
    std::FILE* f = file_ != nullptr ? file_ : stdout;
    if (std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fputc('\n', f) == EOF)
      return Error{(path_.empty() ? std::string("standard output") : path_) + ": write failed"};
    if (file_ == nullptr) std::fflush(stdout);
    return Status::ok();
  }
  Status commit() {
    if (file_ == nullptr) return Status::ok();
    const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
    std::fclose(file_);
    file_ = nullptr;
    if (!ok) return Error{path_ + ": cannot write the answers to disk"};
    return temps_->commit(0, path_);
  }
  ~Sink() {
    if (file_ != nullptr) std::fclose(file_);
  }

 private:
  std::string path_;
  std::optional<TempFiles> temps_;
  std::FILE* file_ = nullptr;
};

struct Totals {
  int64_t answered = 0, refused = 0;
  int64_t prompt = 0, cached = 0, generated = 0, decode_evals = 0;
  double prompt_s = 0, decode_s = 0;
};

// A request line: its answer so far ({"line", "id" when the request has one, and "error" when it
// is refused}) and, unless refused, the job.
struct Request {
  json out;
  std::optional<Job> job;
};

Request read_request(const Session& session, const std::string& text, int64_t line_no, Totals& totals) {
  Request r{json{{"line", line_no}}, std::nullopt};
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
    return r;
  }
  ++totals.refused;
  return r;
}

// Runs a request that was not refused, completing its answer with "text", "finish_reason",
// "usage" and "timings".
Status answer(Session& session, Request& r, Totals& totals) {
  if (!r.job) return Status::ok();
  const Job& job = *r.job;
  auto o = session.run(job, [](const std::string&) { return true; });
  if (!o) return Error{"line " + std::to_string(r.out["line"].get<int64_t>()) + ": " + o.error()};
  r.out["text"] = Session::visible(o->d, job.limits);
  r.out["finish_reason"] = Session::finish_reason(o->d);
  r.out["usage"] = Session::usage(job, *o);
  r.out["timings"] = Session::timings(job, *o);
  ++totals.answered;
  totals.prompt += static_cast<int64_t>(job.prompt.size());
  totals.cached += static_cast<int64_t>(o->cached);
  totals.generated += o->d.generated;
  totals.decode_evals += o->d.evals;
  totals.prompt_s += o->prompt_s;
  totals.decode_s += o->d.seconds;
  return Status::ok();
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
  const bool sort = args->has("sort");
  std::vector<Request> all;  // --sort: every request, in input order
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    Request r = read_request(session, text, line_no, totals);
    if (sort) {
      all.push_back(std::move(r));
      continue;
    }
    if (Status st = answer(session, r, totals); !st) return fail(st.message());
    if (Status st = sink.line(dump(r.out)); !st) return fail(st.message());
  }
  if (in.bad()) return fail("cannot read requests file " + input);
  if (sort) {
    // Prompts in token order: those that share a beginning run one after another (the order of
    // a depth-first walk of their prefix tree), so each shared beginning is evaluated once.
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (!all[a].job || !all[b].job) return all[a].job.has_value() < all[b].job.has_value();
      return all[a].job->prompt < all[b].job->prompt;
    });
    for (size_t i : order)
      if (Status st = answer(session, all[i], totals); !st) return fail(st.message());
    for (const Request& r : all)
      if (Status st = sink.line(dump(r.out)); !st) return fail(st.message());
  }
  if (Status st = sink.commit(); !st) return fail(st.message());
  std::fprintf(stderr,
               "batch: %lld requests answered, %lld refused | prompt %lld tokens (%lld cached), prefill %s tok/s | "
               "generated %lld tokens, decode %s tok/s\n",
               static_cast<long long>(totals.answered), static_cast<long long>(totals.refused),
               static_cast<long long>(totals.prompt), static_cast<long long>(totals.cached),
               rate(static_cast<double>(totals.prompt - totals.cached), totals.prompt_s).c_str(),
               static_cast<long long>(totals.generated),
               rate(static_cast<double>(totals.decode_evals), totals.decode_s).c_str());
  return 0;
}

}  // namespace zenmoe::tools
