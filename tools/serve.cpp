// `zenmoe serve`: an OpenAI-compatible HTTP server over one model.
// POST /v1/completions and /v1/chat/completions (streamed as server-sent events with
// "stream": true, log-probabilities and several choices too), GET /v1/models and /health.
// Requests wait for one of --parallel sequence slots (one engine thread runs them all, every
// decode step one batch over the running ones);
// each keeps the cache positions its prompt shares with the sequence its slot holds (an earlier
// request's prompt and reply) and evaluates only the rest, so requests sharing a long system
// prompt or document pay for it once (usage.prompt_tokens_details.cached_tokens says how many).
// Bad requests get a JSON error object and a 4xx status; the server keeps running.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "runtime/executor.h"
#include "runtime/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/engine.h"
#include "tools/session.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_session_flags({
    {"host", "", true, "address to listen on (default 127.0.0.1)"},
    {"port", "", true, "port to listen on (default 8080; 0: a free one, printed at start)"},
    {"alias", "a", true, "the model's name in responses (default: the model file's name)"},
    {"api-key", "", true, "answer only requests with the header 'Authorization: Bearer KEY' (GET /health excepted)"},
});

// Request bodies past this size are refused (413) before they are read: far more text than any
// context holds.
constexpr size_t kMaxBody = size_t{32} << 20;

void send_error(httplib::Response& res, int status, const std::string& message) {
  const char* type = status == 404   ? "not_found_error"
                     : status == 401 ? "authentication_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  res.status = status;
  res.set_content(dump(json{{"error", {{"code", status}, {"message", message}, {"type", type}}}}), "application/json");
}

// What a handler waits on: one per request, shared by the runs of its choices.
struct Signal {
  std::mutex mu;
  std::condition_variable cv;
};

// A run handed to the engine thread: its job, then its text as it is generated and its
// outcome, which the handler waits for (all under sig->mu).
struct Pending {
  Job job;
  std::shared_ptr<Signal> sig = std::make_shared<Signal>();
  std::string text;                    // generated, not yet taken by the handler
  std::vector<TokenLogprob> logprobs;  // of the tokens generated so far, when the job asks for them
  std::optional<Expected<Session::Outcome>> result;  // set once the job is over
  std::atomic<bool> cancelled{false};                // the client went away: stop generating
};

// How much of a streamed choice's text may go out (`sent` bytes of it are): up to the first
// stop string, less the longest tail that could start one.
size_t sendable(const std::string& text, size_t sent, const std::vector<std::string>& stops) {
  size_t limit = text.size();
  for (const std::string& s : stops) {
    const size_t found = text.find(s, sent >= s.size() ? sent - s.size() + 1 : 0);
    if (found != std::string::npos) limit = std::min(limit, found);
    for (size_t k = std::min(s.size() - 1, text.size()); k > text.size() - limit; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        limit = text.size() - k;
        break;
      }
  }
  return limit;
}

// The thread that runs every request: handlers queue theirs, it hands the queue to
// Session::run_all, which starts them as sequence slots free up.
class Engine {
 public:
  explicit Engine(Session& session) : session_(session), thread_([this] { loop(); }) {}
  ~Engine() {
    stop_generating();
    if (thread_.joinable()) thread_.join();
  }
  void submit(const std::shared_ptr<Pending>& p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        finish(*p, Error{"the server is stopping"});
        return;
      }
      queue_.push_back(p);
    }
    cv_.notify_one();
  }
  // Running requests end at their next token, waiting ones are refused, the thread ends.
  void stop_generating() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

 private:
  static void finish(Pending& p, Expected<Session::Outcome>&& o) {
    {
      std::lock_guard<std::mutex> lock(p.sig->mu);
      p.result = std::move(o);
    }
    p.sig->cv.notify_all();
  }
  void loop() {
    std::map<const Job*, std::shared_ptr<Pending>> running;
    Session::JobFeed feed;
    feed.next = [&]() -> const Job* {
      std::lock_guard<std::mutex> lock(mu_);
      for (; !queue_.empty(); queue_.pop_front()) {
        std::shared_ptr<Pending>& p = queue_.front();
        if (stopping_) finish(*p, Error{"the server is stopping"});
        else if (p->cancelled) finish(*p, Error{"the client went away"});
        else break;
      }
      if (queue_.empty()) return nullptr;
      std::shared_ptr<Pending> p = std::move(queue_.front());
      queue_.pop_front();
      return &running.emplace(&p->job, p).first->second->job;
    };
    feed.on_text = [&](const Job* job, const std::string& text, std::span<const TokenLogprob> lps) {
      Pending& p = *running.at(job);
      if (p.cancelled || stopping_) return false;
      {
        std::lock_guard<std::mutex> lock(p.sig->mu);
        p.text += text;
        if (lps.size() > p.logprobs.size())
          p.logprobs.insert(p.logprobs.end(), lps.begin() + static_cast<std::ptrdiff_t>(p.logprobs.size()), lps.end());
      }
      p.sig->cv.notify_all();
      return true;
    };
    feed.done = [&](const Job* job, Expected<Session::Outcome>&& o) {
      const auto it = running.find(job);
      const std::shared_ptr<Pending> p = it->second;
      running.erase(it);
      finish(*p, std::move(o));
    };
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty()) return;
      }
      (void)session_.run_all(feed);  // an executor error reaches each request it ended through done
    }
  }

  Session& session_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;  // under mu_
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // last: starts once the rest is made
};

class Server {
 public:
  Server(std::unique_ptr<SessionModel> m, std::string alias, std::string api_key)
      : m_(std::move(m)),
        tk_(*m_->tk),
        ex_(m_->ex.get()),
        session_(tk_, *ex_),
        engine_(session_),
        alias_(std::move(alias)),
        api_key_(std::move(api_key)) {}
  // Generation stops at the next token; requests still waiting are refused.
  void stop_generating() { engine_.stop_generating(); }

  void install(httplib::Server& svr) {
    // Browsers may call from any page (as llama.cpp's server allows); their preflight requests
    // are answered before the key check.
    svr.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
    svr.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.status = 204;
    });
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (api_key_.empty() || req.method == "OPTIONS" || req.path == "/health")
        return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + api_key_)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, 401, "a valid API key is needed (Authorization: Bearer KEY)");
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json models = {{"object", "list"},
                           {"data", json::array({{{"id", alias_}, {"object", "model"}, {"created", started_},
                                                  {"owned_by", "zenmoe"}, {"meta", {{"n_ctx", ex_->n_ctx()},
                                                                                    {"n_vocab", ex_->n_vocab()}}}}})}};
      res.set_content(dump(models), "application/json");
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
    // llama.cpp's server's: {"content": text, "add_special": bool} -> {"tokens": [...]}, and
    // {"tokens": [...]} -> {"content": text}.
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("content") || !body["content"].is_string())
        return send_error(res, 400, "the body must be a JSON object with a string 'content'");
      bool add_special = false;
      if (auto bad = read_bool(body, "add_special", &add_special)) return send_error(res, bad->status, bad->message);
      res.set_content(dump(json{{"tokens", tk_.encode(body["content"].get<std::string>(), add_special, true)}}),
                      "application/json");
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
        return send_error(res, 400, "the body must be a JSON object with an array 'tokens'");
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tk_.n_vocab())
          return send_error(res, 400, "'tokens' must hold token ids of the vocabulary");
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      res.set_content(dump(json{{"content", tk_.decode(ids)}}), "application/json");
    });
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own error
      send_error(res, res.status,
                 res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                 : res.status == 413 ? "the request body is larger than " + std::to_string(kMaxBody >> 20) + " MiB"
                                     : "request failed with status " + std::to_string(res.status));
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, what);
    });
  }

 private:
  // One line on stderr per answered request.
  static void log_request(const std::string& id, const Job& job, std::span<const Session::Outcome> o) {
    const json u = Session::usage(job, o), t = Session::timings(job, o);
    std::fprintf(stderr, "%s: prompt %zu tokens (%zu cached) in %.1f ms | generated %lld tokens%s, decode %.2f tok/s\n",
                 id.c_str(), job.prompt.size(), u["prompt_tokens_details"]["cached_tokens"].get<size_t>(),
                 t["prompt_ms"].get<double>(), u["completion_tokens"].get<long long>(),
                 o.size() > 1 ? (" in " + std::to_string(o.size()) + " choices").c_str() : "",
                 t["predicted_per_second"].get<double>());
  }

  json envelope(const Job& job, const std::string& id, bool chunk) const {
    return {{"id", id},
            {"object", job.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", static_cast<int64_t>(std::time(nullptr))},
            {"model", alias_}};
  }
  static json choice(const Job& job, const std::string& text, const char* finish, bool chunk, int index = 0) {
    json c = {{"index", index}, {"finish_reason", finish == nullptr ? json(nullptr) : json(finish)}};
    if (!job.chat) c["text"] = text;
    else if (chunk) c["delta"] = text.empty() ? json::object() : json{{"content", text}};
    else c["message"] = {{"role", "assistant"}, {"content", text}};
    return c;
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json body = json::parse(req.body, nullptr, false);
    auto parsed = session_.parse(body, chat);
    if (auto* bad = std::get_if<BadRequest>(&parsed)) {
      send_error(res, bad->status, bad->message);
      return;
    }
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++requests_);
    Job request = std::move(std::get<Job>(parsed));
    // Each choice runs as a job of its own (side by side given slots), all signalling one waiter.
    auto sig = std::make_shared<Signal>();
    std::vector<std::shared_ptr<Pending>> runs;
    for (Job& c : Session::choices(request)) {
      runs.push_back(std::make_shared<Pending>());
      runs.back()->job = std::move(c);
      runs.back()->sig = sig;
    }
    if (!request.stream) {  // the answer once all are done
      for (const std::shared_ptr<Pending>& p : runs) engine_.submit(p);
      std::vector<Session::Outcome> outcomes;
      json out = envelope(request, id, false);
      out["choices"] = json::array();
      std::unique_lock<std::mutex> lock(sig->mu);
      for (const std::shared_ptr<Pending>& p : runs) {
        sig->cv.wait(lock, [&] { return p->result.has_value(); });
        if (!*p->result) {
          for (const std::shared_ptr<Pending>& q : runs) q->cancelled = true;
          send_error(res, 500, p->result->error());
          return;
        }
        const Decoded& d = (*p->result)->d;
        out["choices"].push_back(choice(request, Session::visible(d, request.limits), Session::finish_reason(d), false,
                                        static_cast<int>(outcomes.size())));
        out["choices"].back()["logprobs"] = session_.logprobs(request, d);
        outcomes.push_back(std::move(**p->result));
      }
      lock.unlock();
      out["usage"] = Session::usage(request, outcomes);
      out["timings"] = Session::timings(request, outcomes);
      log_request(id, request, outcomes);
      res.set_content(dump(out), "application/json");
      return;
    }
    auto job = std::make_shared<const Job>(std::move(request));
    // Server-sent events: per choice ("index"), a chunk per piece of text (held back while it
    // could be the start of a stop string) with its tokens' logprobs when asked for, and a last
    // chunk with its finish reason; usage and timings in the one choice's last chunk, or after
    // several choices in a chunk of their own with no choices; then [DONE].
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, job, sig, runs, id](size_t, httplib::DataSink& sink) {
      const auto event = [&](const json& j) {
        const std::string line = "data: " + dump(j) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      const auto chunk = [&](size_t i, const std::string& text, const char* finish) {
        json c = envelope(*job, id, true);
        c["choices"] = json::array({choice(*job, text, finish, true, static_cast<int>(i))});
        return c;
      };
      struct Streamed {
        std::string text;  // taken from the run so far
        size_t sent = 0;   // bytes of it sent
        Session::LogprobCursor lp;
        bool over = false;
      };
      std::vector<Streamed> cs(runs.size());
      bool open = true;
      if (job->chat)
        for (size_t i = 0; i < runs.size() && open; ++i) {
          json first = chunk(i, "", nullptr);
          first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
          open = event(first);
        }
      for (const std::shared_ptr<Pending>& p : runs) engine_.submit(p);
      std::vector<Session::Outcome> outcomes(runs.size());
      std::optional<std::string> failed;
      size_t left = runs.size();
      std::unique_lock<std::mutex> lock(sig->mu);
      const auto send = [&](const json& j) {
        lock.unlock();
        open = open && event(j);
        lock.lock();
      };
      while (left > 0 && open && !failed) {
        sig->cv.wait(lock, [&] {
          for (size_t i = 0; i < runs.size(); ++i)
            if (!cs[i].over && (!runs[i]->text.empty() || runs[i]->result.has_value())) return true;
          return false;
        });
        for (size_t i = 0; i < runs.size() && open && !failed; ++i) {
          Pending& p = *runs[i];
          Streamed& c = cs[i];
          if (c.over) continue;
          const std::string piece = std::exchange(p.text, std::string());
          c.text += piece;
          // Woken by the outcome alone, nothing is new: the last chunk sends the rest.
          const size_t limit = sendable(c.text, c.sent, job->limits.stops);
          if (!piece.empty() && limit > c.sent) {
            json j = chunk(i, c.text.substr(c.sent, limit - c.sent), nullptr);
            j["choices"][0]["logprobs"] = session_.logprobs(*job, p.logprobs, &c.lp, limit);
            c.sent = limit;
            send(j);
          }
          if (!p.result.has_value() || !p.text.empty()) continue;
          c.over = true;
          --left;
          if (!*p.result) {
            failed = p.result->error();
            break;
          }
          Session::Outcome& o = outcomes[i] = std::move(**p.result);
          const std::string all = Session::visible(o.d, job->limits);
          json last = chunk(i, all.size() > c.sent ? all.substr(c.sent) : "", Session::finish_reason(o.d));
          last["choices"][0]["logprobs"] = session_.logprobs(*job, o.d.logprobs, &c.lp, all.size());
          if (runs.size() == 1) {
            last["usage"] = Session::usage(*job, o);
            last["timings"] = Session::timings(*job, o);
          }
          send(last);
        }
      }
      lock.unlock();
      if (left > 0)  // the client went away, or a run failed: the others stop at their next token
        for (const std::shared_ptr<Pending>& p : runs) p->cancelled = true;
      if (!open) return false;
      if (failed) {
        event(json{{"error", {{"code", 500}, {"message", *failed}, {"type", "server_error"}}}});
      } else {
        if (runs.size() > 1) {
          json tail = envelope(*job, id, true);
          tail["choices"] = json::array();
          tail["usage"] = Session::usage(*job, outcomes);
          tail["timings"] = Session::timings(*job, outcomes);
          event(tail);
        }
        log_request(id, *job, outcomes);
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  }

  std::unique_ptr<SessionModel> m_;
  const tok::Tokenizer& tk_;
  Executor* ex_;
  Session session_;  // run by the engine thread only (parse() and logprobs() by any)
  Engine engine_;
  std::string alias_;
  std::string api_key_;  // empty: none needed
  int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<int64_t> requests_{0};
};

}  // namespace

int cmd_serve(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text("serve -m MODEL [--host H] [--port P] [options]", kFlags).c_str(), stdout);
    return 0;
  }
  if (!args->positionals().empty()) return fail("unexpected argument '" + args->positionals()[0] + "'");
  auto port = args->get_int("port", 8080, 0, 65535);
  if (!port) return fail(port.error());
  if (args->has("api-key") && args->get("api-key").empty()) return fail("--api-key is empty");
  auto loaded = load_session_model(*args, "serve");
  if (!loaded) return fail(loaded.error());
  const int n_ctx = (*loaded)->ex->n_ctx();
  const std::string path = args->get("model");
  const std::string alias = args->has("alias") ? args->get("alias") : std::filesystem::path(path).filename().string();

  // SIGINT and SIGTERM stop the server: blocked in every thread, taken by one that waits.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Server server(std::move(*loaded), alias, args->get("api-key"));
  httplib::Server svr;
  svr.set_payload_max_length(kMaxBody);
  // SO_REUSEADDR only: the library's default adds SO_REUSEPORT, with which a second server on a
  // taken port would start and share its connections instead of failing.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.install(svr);
  const std::string host = args->get("host", "127.0.0.1");
  int bound = static_cast<int>(*port);
  if (bound == 0) bound = svr.bind_to_any_port(host);
  else if (!svr.bind_to_port(host, bound)) bound = -1;
  if (bound < 0) return fail("cannot listen on " + host + ":" + std::to_string(*port));
  std::fprintf(stderr, "zenmoe serve: %s on http://%s:%d (context %d)\n", alias.c_str(), host.c_str(), bound, n_ctx);
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop_generating();
    svr.stop();
  });
  const bool ok = svr.listen_after_bind();
  if (stopper.joinable()) {
    pthread_kill(stopper.native_handle(), SIGTERM);  // wakes the waiter when the server ended otherwise
    stopper.join();
  }
  return ok ? 0 : fail("the server stopped with an error");
}

}  // namespace zenmoe::tools
