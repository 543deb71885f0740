// `zenmoe batch`: a file of requests (JSON lines, each the body of an OpenAI completion request
// with "prompt" or chat completion request with "messages") answered one after another by one
// loaded model, an answer line per request: the model loads once for a night of prompts, and
// each request keeps the cache positions it shares with the one before (requests sorted so that
// those sharing a system prompt or document follow each other evaluate it once).
#include <fcntl.h>
#include <unistd.h>

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

// One request line answered: {"line", "id" (when the request has one), "text", "finish_reason",
// "usage", "timings"}, or {"line", "id", "error"} for a request refused.
json answer(Session& session, const std::string& text, int64_t line_no, Totals& totals, Status* failure) {
  json out = {{"line", line_no}};
  const json body = json::parse(text, nullptr, false);
  if (body.is_object() && body.contains("id")) out["id"] = body["id"];
  const bool chat = body.is_object() && body.contains("messages");
  auto parsed = session.parse(body.is_discarded() ? json() : body, chat);
  if (auto* bad = std::get_if<BadRequest>(&parsed)) {
    out["error"] = bad->message;
    ++totals.refused;
    return out;
  }
  const Job& job = std::get<Job>(parsed);
  if (job.stream) {
    out["error"] = "'stream' has no meaning here";
    ++totals.refused;
    return out;
  }
  auto o = session.run(job, [](const std::string&) { return true; });
  if (!o) {
    *failure = Error{"line " + std::to_string(line_no) + ": " + o.error()};
    return out;
  }
  out["text"] = Session::visible(o->d, job.limits);
  out["finish_reason"] = Session::finish_reason(o->d);
  out["usage"] = Session::usage(job, *o);
  out["timings"] = Session::timings(job, *o);
  ++totals.answered;
  totals.prompt += static_cast<int64_t>(job.prompt.size());
  totals.cached += static_cast<int64_t>(o->cached);
  totals.generated += o->d.generated;
  totals.decode_evals += o->d.evals;
  totals.prompt_s += o->prompt_s;
  totals.decode_s += o->d.seconds;
  return out;
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
  std::string text;
  for (int64_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    Status failure = Status::ok();
    const json out = answer(session, text, line_no, totals, &failure);
    if (!failure) return fail(failure.message());
    if (Status st = sink.line(dump(out)); !st) return fail(st.message());
  }
  if (in.bad()) return fail("cannot read requests file " + input);
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
