// End-to-end tests of `zenmoe serve` on the oracle tiny model: completions and chat give what
// `zenmoe run` prints for the same request (greedy, reference engine, whose numerics do not
// depend on how tokens are batched), a repeated prompt is served from the cache, streams add
// up to the whole answer, stop strings cut it, and every bad request is a JSON error while the
// server keeps serving.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/grammar.h"
#include "tests/cli_util.h"
#include "tests/model_util.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kModel = std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf";

// A `zenmoe serve` process on a free port, stopped with SIGTERM.
class ServerProcess {
 public:
  // Starts the server (on `port`, 0: a free one); false (with its stderr in `log`) when it did
  // not come up.
  bool start(const std::string& args, const fs::path& dir, std::string* log, int port = 0) {
    err_ = dir / ("serve_" + std::to_string(++count_) + ".err");
    const std::string cmd = std::string("exec '") + ZENMOE_BINARY + "' serve --port " + std::to_string(port) + " " + args;
    const std::string err = err_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int nul = ::open("/dev/null", O_RDWR);
      ::dup2(fd, 2);
      ::dup2(nul, 0);
      ::dup2(nul, 1);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const std::regex listening(R"(http://127\.0\.0\.1:(\d+) )");
    for (int i = 0; i < 1200; ++i) {  // up to a minute (a sanitizer build starts slowly)
      *log = testing_cli::slurp_file(err_);
      std::smatch m;
      if (std::regex_search(*log, m, listening)) {
        port_ = std::stoi(m[1]);
        return true;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        *log = testing_cli::slurp_file(err_);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // SIGTERM, then the exit status (-1: killed by a signal or not running).
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~ServerProcess() { stop(); }
  int port() const { return port_; }
  int exit_status() const { return exit_status_; }  // after a start() that failed
  std::string log() const { return testing_cli::slurp_file(err_); }  // its stderr so far

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
  fs::path err_;
  static inline int count_ = 0;
};

class ServeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zenmoe_serve_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // POSTs `body` to `path`; the status and the parsed JSON body (null when not JSON).
  static std::pair<int, json> post(int port, const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {-1, nullptr};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  // POSTs a streaming request; the "data:" payloads in order.
  static std::vector<std::string> post_stream(int port, const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    std::vector<std::string> events;
    if (!r) return events;
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    size_t at = 0;
    while ((at = r->body.find("data: ", at)) != std::string::npos) {
      const size_t end = r->body.find("\n\n", at);
      events.push_back(r->body.substr(at + 6, end - at - 6));
      at = end;
    }
    return events;
  }
  // Per choice index, what the streamed chunks of a request say: their text joined
  // (completions: "text", chat: "delta.content"), the finish reason, and their logprobs joined
  // (completions: each array appended, chat: content[] appended) and how many chunks carried
  // some; `last` gets the last chunk before [DONE].
  struct Streamed {
    std::string text, finish;
    json logprobs;
    int logprob_chunks = 0;
  };
  static std::map<int, Streamed> by_choice(const std::vector<std::string>& events, bool chat, json* last = nullptr) {
    std::map<int, Streamed> out;
    for (const std::string& e : events) {
      if (e == "[DONE]") continue;
      const json j = json::parse(e, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << e;
      if (j.is_discarded()) continue;
      if (last != nullptr) *last = j;
      for (const json& c : j["choices"]) {
        Streamed& s = out[c["index"].get<int>()];
        if (chat && c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
        if (!chat) s.text += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"].get<std::string>();
        if (!c.contains("logprobs") || c["logprobs"].is_null()) continue;
        ++s.logprob_chunks;
        for (const auto& [key, items] : c["logprobs"].items())
          for (const json& x : items) s.logprobs[key].push_back(x);
      }
    }
    return out;
  }
  // The text of a one-choice stream's chunks joined, and its finish reason.
  static std::string joined(const std::vector<std::string>& events, bool chat, std::string* finish) {
    const std::map<int, Streamed> s = by_choice(events, chat);
    EXPECT_EQ(s.size(), 1u);
    if (s.empty()) return "";
    *finish = s.begin()->second.finish;
    return s.begin()->second.text;
  }
  testing_cli::CliResult zenmoe(const std::string& args) { return testing_cli::run_zenmoe(args, dir_); }
  // The tiny model with a DeepSeek-V3 chat template, written as ds.gguf in the test's directory
  // ("" on failure).
  std::string chat_model() const {
    return testing_cli::model_with_template(kModel, dir_, "ds.gguf",
                                            "{{'<｜User｜>'}}{{'<｜Assistant｜>'}}{{'<｜end▁of▁sentence｜>'}}");
  }

  fs::path dir_;
};

TEST_F(ServeCli, CompletionsMatchRunStreamStopAndReuseThePrompt) {
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' --ref -a tiny", dir_, &log)) << log;
  const int port = server.port();
  httplib::Client c("127.0.0.1", port);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");

  const auto run = zenmoe("run -m '" + kModel + "' --ref -p 'The quick brown fox' -n 12 --temp 0 --ignore-eos");
  ASSERT_EQ(run.status, 0) << run.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.err, m, std::regex(R"(prompt (\d+) tokens)"))) << run.err;
  const int n_prompt = std::stoi(m[1]);
  const std::string req = R"({"prompt":"The quick brown fox","max_tokens":12,"temperature":0,"ignore_eos":true)";
  auto [status, first] = post(port, "/v1/completions", req + "}");
  ASSERT_EQ(status, 200) << first.dump();
  EXPECT_EQ(first["object"], "text_completion");
  EXPECT_EQ(first["model"], "tiny");
  EXPECT_EQ(first["choices"][0]["text"], run.out);
  EXPECT_EQ(first["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(first["usage"]["prompt_tokens"], n_prompt);
  EXPECT_EQ(first["usage"]["completion_tokens"], 12);
  EXPECT_EQ(first["usage"]["total_tokens"], n_prompt + 12);
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The same prompt again: all but its last token come from the cache, the answer is the same.
  auto [status2, again] = post(port, "/v1/completions", req + "}");
  ASSERT_EQ(status2, 200);
  EXPECT_EQ(again["choices"][0]["text"], run.out);
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], n_prompt - 1);
  EXPECT_EQ(again["timings"]["prompt_n"], 1);
  EXPECT_NE(server.log().find("cmpl-2: prompt " + std::to_string(n_prompt) + " tokens (" + std::to_string(n_prompt - 1) +
                              " cached) in "),
            std::string::npos)
      << server.log();

  std::string finish;
  const auto events = post_stream(port, "/v1/completions", req + R"(,"stream":true})");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(joined(events, false, &finish), run.out);
  EXPECT_EQ(finish, "length");

  // A stop string: the text up to where it starts, finish "stop", streamed alike.
  const std::string text = run.out;
  size_t at = 4;
  while (at + 3 <= text.size() && !std::all_of(text.begin() + at, text.begin() + at + 3,
                                               [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }))
    ++at;
  ASSERT_LE(at + 3, text.size()) << text;
  const std::string stop = text.substr(at, 3);
  const std::string cut = text.substr(0, text.find(stop));
  auto [status3, stopped] = post(port, "/v1/completions", req + R"(,"stop":[")" + stop + R"("]})");
  ASSERT_EQ(status3, 200);
  EXPECT_EQ(stopped["choices"][0]["text"], cut);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  const auto stop_events = post_stream(port, "/v1/completions", req + R"(,"stream":true,"stop":")" + stop + R"("})");
  EXPECT_EQ(joined(stop_events, false, &finish), cut);
  EXPECT_EQ(finish, "stop");
  // Token ids in, as they are: the ids /tokenize gives (with BOS) answer the same.
  auto [status4, tokens] = post(port, "/tokenize", R"({"content":"The quick brown fox","add_special":true})");
  ASSERT_EQ(status4, 200) << tokens.dump();
  ASSERT_EQ(tokens["tokens"].size(), static_cast<size_t>(n_prompt));
  const std::string by_ids_req =
      R"({"max_tokens":12,"temperature":0,"ignore_eos":true,"prompt":)" + tokens["tokens"].dump() + "}";
  auto [status5, by_ids] = post(port, "/v1/completions", by_ids_req);
  ASSERT_EQ(status5, 200) << by_ids.dump();
  EXPECT_EQ(by_ids["choices"][0]["text"], run.out);
  auto [status6, text_back] = post(port, "/detokenize", R"({"tokens":)" + tokens["tokens"].dump() + "}");
  ASSERT_EQ(status6, 200);
  EXPECT_NE(text_back["content"].get<std::string>().find("The quick brown fox"), std::string::npos) << text_back.dump();
  EXPECT_EQ(server.stop(), 0);  // SIGTERM ends it cleanly
}

TEST_F(ServeCli, ChatAnswersInTheModelsFormat) {
  const std::string ds = chat_model();
  ASSERT_FALSE(ds.empty());
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + ds + "' --ref", dir_, &log)) << log;
  const auto run = zenmoe("run -m '" + ds + "' --ref --chat -sys 'Be brief.' -p 'hello there' -n 6 --temp 0 --ignore-eos");
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string msgs = R"("messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hello there"}])";
  const std::string opts = R"("max_tokens":6,"temperature":0,"ignore_eos":true)";
  auto [status, chat] = post(server.port(), "/v1/chat/completions", "{" + msgs + "," + opts + "}");
  ASSERT_EQ(status, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["model"], "ds.gguf");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], run.out);
  // Content given as parts reads the same.
  const std::string parts =
      R"("messages":[{"role":"system","content":[{"type":"text","text":"Be "},{"type":"text","text":"brief."}]},)"
      R"({"role":"user","content":"hello there"}])";
  auto [status2, chat2] = post(server.port(), "/v1/chat/completions", "{" + parts + "," + opts + "}");
  ASSERT_EQ(status2, 200) << chat2.dump();
  EXPECT_EQ(chat2["choices"][0]["message"]["content"], run.out);
  std::string finish;
  const auto events = post_stream(server.port(), "/v1/chat/completions", "{" + msgs + "," + opts + R"(,"stream":true})");
  ASSERT_GE(events.size(), 3u);
  const json first = json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(joined(events, true, &finish), run.out);
  EXPECT_EQ(finish, "length");
}

TEST_F(ServeCli, BadRequestsGetJsonErrorsAndTheServerGoesOn) {
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' -c 24 -t 1", dir_, &log)) << log;
  const int port = server.port();
  const auto expect_error = [&](const std::string& path, const std::string& body, int want, const std::string& needle) {
    auto [status, j] = post(port, path, body);
    EXPECT_EQ(status, want) << body;
    ASSERT_TRUE(j.is_object()) << body;
    ASSERT_TRUE(j.contains("error")) << j.dump();
    EXPECT_EQ(j["error"]["code"], want);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << j.dump();
  };
  expect_error("/v1/completions", "{not json", 400, "the body is not valid JSON");
  expect_error("/v1/completions", "[1,2]", 400, "not a JSON object");
  expect_error("/v1/completions", R"({"max_tokens":4})", 400, "'prompt' must be a string");
  expect_error("/v1/completions", R"({"prompt":"hi","temperature":"hot"})", 400, "'temperature' must be a number");
  expect_error("/v1/completions", R"({"prompt":"hi","max_tokens":-5})", 400, "'max_tokens' must be in");
  expect_error("/v1/completions", R"({"prompt":"hi","max_tokens":1.5})", 400, "'max_tokens' must be an integer");
  expect_error("/v1/completions", R"({"prompt":"hi","top_p":2})", 400, "'top_p' must be in");
  expect_error("/v1/completions", R"({"prompt":"hi","n":17})", 400, "'n' must be in");
  expect_error("/v1/completions", R"({"prompt":"hi","stop":[""]})", 400, "must not be empty");
  expect_error("/v1/completions", R"({"prompt":"hi","stop":5})", 400, "'stop' must be a string or an array");
  expect_error("/v1/completions", R"({"prompt":"hi","stream":"yes"})", 400, "'stream' must be true or false");
  expect_error("/v1/completions", R"({"prompt":")" + std::string(400, 'a') + " " + std::string(400, 'b') + R"("})", 400,
               "more than the context size 24");
  expect_error("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})", 400, "no chat format");
  expect_error("/v1/completions", R"({"prompt":[1,2,100000]})", 400, "prompt token 100000 is outside");
  expect_error("/v1/completions", R"({"prompt":[1,"a"]})", 400, "'prompt' must be a string or an array of token ids");
  expect_error("/v1/completions", R"({"prompt":[]})", 400, "the prompt gives no tokens");
  expect_error("/tokenize", R"({"text":"hi"})", 400, "a string 'content'");
  expect_error("/detokenize", R"({"tokens":[-1]})", 400, "token ids of the vocabulary");
  expect_error("/v1/completions", R"({"prompt":")" + std::string(33 << 20, 'a') + R"("})", 413, "larger than 32 MiB");
  expect_error("/v1/nothing", "{}", 404, "no such endpoint");
  httplib::Client c("127.0.0.1", port);
  auto get = c.Get("/v1/completions");  // the wrong method
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 404);
  // Still serving; the next request keeps the positions it shares with this one (fast engine).
  auto [status, ok] = post(port, "/v1/completions", R"({"prompt":"hi there","max_tokens":3,"ignore_eos":true,"seed":5})");
  EXPECT_EQ(status, 200) << ok.dump();
  EXPECT_EQ(ok["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ok["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto [status2, more] = post(port, "/v1/completions", R"({"prompt":"hi there you","max_tokens":3,"ignore_eos":true})");
  EXPECT_EQ(status2, 200) << more.dump();
  EXPECT_EQ(more["usage"]["prompt_tokens_details"]["cached_tokens"], ok["usage"]["prompt_tokens"]);
}

// --api-key: requests without the key get 401 (a JSON error), with it they are answered;
// /health and browsers' preflight requests need none.
TEST_F(ServeCli, ApiKeyGuardsEveryEndpointButHealth) {
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' -t 1 --api-key s3cret", dir_, &log)) << log;
  httplib::Client c("127.0.0.1", server.port());
  const std::string body = R"({"prompt":"hi","max_tokens":2,"ignore_eos":true})";
  auto none = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "authentication_error");
  auto wrong = c.Post("/v1/completions", {{"Authorization", "Bearer nope"}}, body, "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto right = c.Post("/v1/completions", {{"Authorization", "Bearer s3cret"}}, body, "application/json");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200) << right->body;
  EXPECT_EQ(json::parse(right->body)["usage"]["completion_tokens"], 2);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->get_header_value("Access-Control-Allow-Origin"), "*");
  auto preflight = c.Options("/v1/chat/completions");
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
}

TEST_F(ServeCli, BadFlagsAreOneErrorLine) {
  const auto expect_error = [&](const std::string& args, const std::string& needle) {
    testing_cli::expect_one_line_error(zenmoe(args), args, needle);
  };
  expect_error("serve", "missing -m MODEL");
  expect_error("serve -m '" + kModel + "' --port 70000", "--port must be in");
  expect_error("serve -m '" + kModel + "' --port x", "--port expects an integer");
  expect_error("serve -m /no/such/model.gguf", "/no/such/model.gguf");
  expect_error("serve -m '" + kModel + "' -ctk q4_0", "q4_0");
  expect_error("serve -m '" + kModel + "' --api-key ''", "--api-key is empty");
  // A port already taken: the second server ends with one error line instead of sharing it.
  ServerProcess server, second;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' -t 1", dir_, &log)) << log;
  EXPECT_FALSE(second.start("-m '" + kModel + "' -t 1", dir_, &log, server.port())) << log;
  EXPECT_EQ(second.exit_status(), 1);
  EXPECT_EQ(log, "zenmoe: cannot listen on 127.0.0.1:" + std::to_string(server.port()) + "\n");
}

// --parallel: requests sent at once run side by side (one decode batch over all of them on the
// fast engine) and each answers as `zenmoe run` does for it alone, streamed or not.
TEST_F(ServeCli, ParallelRequestsAnswerAsEachDoesAlone) {
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' -t 1 -c 128 -np 3", dir_, &log)) << log;
  const std::vector<std::string> prompts = {"The quick brown fox", "Dear diary,", "Once upon a time"};
  const std::vector<int> max_tokens = {5, 12, 8};
  std::vector<std::string> texts(prompts.size());
  {
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i)
      clients.emplace_back([&, i] {
        const json body = {{"prompt", prompts[i]}, {"max_tokens", max_tokens[i]}, {"temperature", 0},
                           {"ignore_eos", true}, {"stream", i == 1}};
        if (i == 1) {
          std::string finish;
          texts[i] = joined(post_stream(server.port(), "/v1/completions", body.dump()), false, &finish);
          EXPECT_EQ(finish, "length");
          return;
        }
        const auto [status, j] = post(server.port(), "/v1/completions", body.dump());
        EXPECT_EQ(status, 200) << j.dump();
        if (status == 200) texts[i] = j["choices"][0]["text"].get<std::string>();
      });
    for (std::thread& c : clients) c.join();
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto run = zenmoe("run -m '" + kModel + "' -t 1 -c 128 -p '" + prompts[i] + "' -n " +
                            std::to_string(max_tokens[i]) + " --temp 0 --ignore-eos");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(texts[i], run.out) << prompts[i];
  }
  EXPECT_EQ(server.stop(), 0);
  const std::string all = server.log();
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 4) << all;  // the banner and one line per request
  testing_cli::expect_one_line_error(zenmoe("serve -m '" + kModel + "' --ref -np 2 --port 0"), "serve --ref -np 2",
                                     "needs the fast engine");
}

// "n": several choices of one prompt, side by side on the fast engine: choice i is what the
// same request asking for one gives with the seed + i (asked in turn of a second server, so
// that each evaluates the same part of the prompt as its choice did: the first all of it, the
// others its last token); usage counts the prompt once; streamed, the same choices by index.
TEST_F(ServeCli, ChoicesAreTheSameRequestWithTheNextSeeds) {
  ServerProcess server, single;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' -t 1 -c 128 -np 3", dir_, &log)) << log;
  ASSERT_TRUE(single.start("-m '" + kModel + "' -t 1 -c 128", dir_, &log)) << log;
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":6,"temperature":1.5,"top_k":0,"top_p":1,)"
                          R"("min_p":0,"ignore_eos":true,)";
  const auto [status, many] = post(server.port(), "/v1/completions", req + R"("n":3,"seed":40})");
  ASSERT_EQ(status, 200) << many.dump();
  ASSERT_EQ(many["choices"].size(), 3u);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(many["choices"][i]["index"], i);
    const auto [st, one] = post(single.port(), "/v1/completions", req + R"("seed":)" + std::to_string(40 + i) + "}");
    ASSERT_EQ(st, 200) << one.dump();
    EXPECT_EQ(many["choices"][i]["text"], one["choices"][0]["text"]) << i;
    distinct.insert(many["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);  // sampled at a high temperature: not all alike
  EXPECT_EQ(many["usage"]["completion_tokens"], 18);
  const int prompt = many["usage"]["prompt_tokens"].get<int>();
  EXPECT_EQ(many["usage"]["total_tokens"], prompt + 18);
  // Streamed: the chunks of each choice carry its index and join into its text; usage comes
  // in a chunk of its own after every choice's last.
  json last;
  const auto events = post_stream(server.port(), "/v1/completions", req + R"("n":3,"seed":40,"stream":true})");
  const auto streamed = by_choice(events, false, &last);
  ASSERT_EQ(streamed.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(streamed.at(i).text, many["choices"][i]["text"]) << i;
    EXPECT_EQ(streamed.at(i).finish, "length") << i;
  }
  EXPECT_TRUE(last["choices"].empty()) << last.dump();
  EXPECT_EQ(last["usage"]["completion_tokens"], 18);
  EXPECT_EQ(server.stop(), 0);
  const std::string log_text = server.log();
  size_t lines = 0;
  for (size_t at = 0; (at = log_text.find("generated 18 tokens in 3 choices", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 2u) << log_text;
}

// SIGTERM while a request generates: it ends at its next token with what it has (status 200,
// fewer tokens than asked), and the server exits with status 0.
TEST_F(ServeCli, StopEndsARunningRequestAtItsNextToken) {
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + kModel + "' --ref -t 1 -c 4096", dir_, &log)) << log;
  std::pair<int, json> answer;
  std::thread client([&] {
    answer = post(server.port(), "/v1/completions",
                  R"({"prompt":"Tell me everything.","max_tokens":4000,"temperature":0,"ignore_eos":true})");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(), 0);
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  EXPECT_LT(answer.second["usage"]["completion_tokens"].get<int>(), 4000);
}

// Log-probabilities: the first generated token's equals the log-softmax of the logits that
// `zenmoe logits` gives for the prompt (reference engine on both sides); greedy picks the most
// likely of the alternatives; the pieces join into the text, offsets follow them; chat has
// OpenAI's content[] form; streamed, the chunks' logprobs join into the same; bad values are
// refused.
TEST_F(ServeCli, LogprobsAreTheModelsLogSoftmax) {
  const std::string ds = chat_model();
  ASSERT_FALSE(ds.empty());
  ServerProcess server;
  std::string log;
  ASSERT_TRUE(server.start("-m '" + ds + "' --ref -t 1 -c 128", dir_, &log)) << log;
  const auto [tst, tok] = post(server.port(), "/tokenize", R"({"content":"The quick brown fox","add_special":true})");
  ASSERT_EQ(tst, 200);
  std::string ids;
  for (const json& t : tok["tokens"]) ids += std::to_string(t.get<int>()) + " ";
  const auto [status, j] = post(server.port(), "/v1/completions",
                                R"({"prompt":"The quick brown fox","max_tokens":5,"temperature":0,"logprobs":3})");
  ASSERT_EQ(status, 200) << j.dump();
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u) << lp.dump();
  std::string joinedtext;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joinedtext.size());
    joinedtext += lp["tokens"][i].get<std::string>();
    const json& top = lp["top_logprobs"][i];
    ASSERT_EQ(top.size(), 3u);
    float best = -1e30f;
    for (const auto& [piece, v] : top.items()) best = std::max(best, v.get<float>());
    EXPECT_EQ(lp["token_logprobs"][i].get<float>(), best) << i;  // greedy: the most likely
    EXPECT_LE(best, 0.0f);
  }
  EXPECT_EQ(joinedtext, j["choices"][0]["text"]);

  const fs::path out = dir_ / "logits.f32";
  const auto logits = zenmoe("logits -m '" + ds + "' --ref --mode prefill --tokens '" + ids + "' -o '" +
                             out.string() + "'");
  ASSERT_EQ(logits.status, 0) << logits.err;
  std::vector<float> rows(fs::file_size(out) / sizeof(float));
  std::ifstream(out, std::ios::binary)
      .read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(fs::file_size(out)));
  const size_t n_vocab = rows.size() / tok["tokens"].size();
  const float* last = rows.data() + rows.size() - n_vocab;
  double mx = -1e30, sum = 0;
  for (size_t i = 0; i < n_vocab; ++i) mx = std::max(mx, static_cast<double>(last[i]));
  for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(last[i] - mx);
  const size_t first = static_cast<size_t>(std::max_element(last, last + n_vocab) - last);
  EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), last[first] - mx - std::log(sum), 1e-4);

  const auto [cst, chat] = post(server.port(), "/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,)"
                                R"("logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(cst, 200) << chat.dump();
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << chat.dump();
  std::string said;
  for (const json& c : content) {
    EXPECT_EQ(c["top_logprobs"].size(), 2u);
    EXPECT_EQ(c["logprob"], c["top_logprobs"][0]["logprob"]);  // greedy: the most likely, listed first
    std::string from_bytes;
    for (const json& b : c["bytes"]) from_bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(from_bytes, c["token"].get<std::string>());
    said += from_bytes;
  }
  EXPECT_EQ(said, chat["choices"][0]["message"]["content"]);

  // Streamed, each chunk carries the logprobs of its tokens: joined, the answer's own.
  const auto events = post_stream(server.port(), "/v1/completions",
                                  R"({"prompt":"The quick brown fox","max_tokens":5,"temperature":0,"logprobs":3,)"
                                  R"("stream":true})");
  const auto streamed = by_choice(events, false);
  ASSERT_EQ(streamed.size(), 1u);
  EXPECT_EQ(streamed.at(0).text, j["choices"][0]["text"]);
  EXPECT_EQ(streamed.at(0).logprobs, lp);
  EXPECT_GT(streamed.at(0).logprob_chunks, 1);
  const auto chat_events = post_stream(server.port(), "/v1/chat/completions",
                                       R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,)"
                                       R"("temperature":0,"logprobs":true,"top_logprobs":2,"stream":true})");
  const auto chat_streamed = by_choice(chat_events, true);
  ASSERT_EQ(chat_streamed.size(), 1u);
  EXPECT_EQ(chat_streamed.at(0).text, chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(chat_streamed.at(0).logprobs, chat["choices"][0]["logprobs"]);
  for (const char* bad : {R"({"prompt":"x","logprobs":21})",
                          R"({"prompt":"x","logprobs":-1})",
                          R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":2})"}) {
    const auto [st, e] = post(server.port(), std::string(bad).find("messages") != std::string::npos
                                                 ? "/v1/chat/completions"
                                                 : "/v1/completions",
                              bad);
    EXPECT_EQ(st, 400) << bad << " " << e.dump();
  }
  EXPECT_EQ(server.stop(), 0);
}

// zenmoe batch: an answer line per request line (blank lines skipped), the same answers as
// `zenmoe run` and serve, the prefix kept from one request to the next, refused lines answered
// with an error, and the output file written whole or not at all.
TEST_F(ServeCli, BatchAnswersEveryLine) {
  const std::string req = R"("max_tokens":8,"temperature":0,"ignore_eos":true)";
  const fs::path in = dir_ / "requests.jsonl";
  std::ofstream(in) << R"({"id":"a","prompt":"The quick brown fox",)" << req << "}\n\n"
                    << R"({"id":7,"prompt":"The quick brown fox jumps",)" << req << "}\n"
                    << "{bad json\n"
                    << R"({"messages":[{"role":"user","content":"hi"}]})" << "\n"
                    << R"({"prompt":"x","stream":true})" << "\n";
  const auto run = zenmoe("run -m '" + kModel + "' --ref -p 'The quick brown fox' -n 8 --temp 0 --ignore-eos");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto batch = zenmoe("batch -m '" + kModel + "' --ref -i '" + in.string() + "'");
  ASSERT_EQ(batch.status, 0) << batch.err;
  std::vector<json> lines;
  std::istringstream out(batch.out);
  for (std::string l; std::getline(out, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 5u) << batch.out;
  EXPECT_EQ(lines[0]["line"], 1);
  EXPECT_EQ(lines[0]["id"], "a");
  EXPECT_EQ(lines[0]["text"], run.out);
  EXPECT_EQ(lines[0]["finish_reason"], "length");
  const int first_prompt = lines[0]["usage"]["prompt_tokens"].get<int>();
  EXPECT_EQ(lines[1]["line"], 3);
  EXPECT_EQ(lines[1]["id"], 7);
  EXPECT_EQ(lines[1]["usage"]["prompt_tokens_details"]["cached_tokens"], first_prompt);
  EXPECT_EQ(lines[2]["error"], "the body is not valid JSON");
  EXPECT_NE(lines[3]["error"].get<std::string>().find("no chat format"), std::string::npos);
  EXPECT_EQ(lines[4]["error"], "'stream' has no meaning here");
  EXPECT_TRUE(std::regex_match(batch.err, std::regex(R"(batch: 2 requests answered, 3 refused \| prompt \d+ tokens \()" +
                                                     std::to_string(first_prompt) + R"( cached\), .*\n)")))
      << batch.err;
  // To a file: the same answers.
  const fs::path answers = dir_ / "answers.jsonl";
  const auto to_file = zenmoe("batch -m '" + kModel + "' --ref -i '" + in.string() + "' -o '" + answers.string() + "'");
  ASSERT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_TRUE(to_file.out.empty());
  std::ifstream written(answers);
  std::string first;
  ASSERT_TRUE(std::getline(written, first));
  EXPECT_EQ(json::parse(first)["text"], run.out);

  const auto expect_error = [&](const std::string& args, const std::string& needle) {
    testing_cli::expect_one_line_error(zenmoe(args), args, needle);
  };
  expect_error("batch -m '" + kModel + "'", "missing -i");
  expect_error("batch -m '" + kModel + "' -i '" + (dir_ / "none.jsonl").string() + "'", "cannot open requests file");
  const std::string missing = (dir_ / "no" / "answers.jsonl").string();
  expect_error("batch -m '" + kModel + "' -i '" + in.string() + "' -o '" + missing + "'", "cannot create a temporary");
  EXPECT_FALSE(fs::exists(missing));
}

// Constrained output: a request's GBNF "grammar" is followed to its end (finish "stop"); with
// "response_format" json_object every answer is a JSON object, or the beginning of one when
// max_tokens cut it; a JSON schema (response_format json_schema, or "json_schema") gives a text
// of that schema; grammars that do not parse and schemas with unsupported keywords are refused
// per request. `run` takes --grammar, --grammar-file and -j the same way.
TEST_F(ServeCli, BatchAndRunFollowGrammarsAndJsonMode) {
  const fs::path in = dir_ / "requests.jsonl";
  const std::string object_grammar = R"("root ::= \"{\\\"a\\\": \" [0-9]{1,3} \"}\"")";  // {"a": 0-999}
  std::ofstream(in) << R"({"prompt":"Answer:","max_tokens":40,"seed":3,"grammar":)" << object_grammar << "}\n";
  for (int seed = 1; seed <= 4; ++seed)
    std::ofstream(in, std::ios::app) << R"({"prompt":"JSON:","max_tokens":60,"response_format":{"type":"json_object"},)"
                                     << R"("seed":)" << seed << "}\n";
  const std::string schema = R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})";
  std::ofstream(in, std::ios::app)
      << R"({"prompt":"JSON:","max_tokens":60,"seed":1,"response_format":{"type":"json_schema","json_schema":)"
      << R"({"name":"answer","strict":true,"schema":)" << schema << "}}}\n"
      << R"({"prompt":"JSON:","max_tokens":60,"seed":2,"json_schema":)" << schema << "}\n";
  for (const char* bad : {R"({"prompt":"x","grammar":"root ::= foo"})",
                          R"({"prompt":"x","response_format":{"type":"json_schema",)"
                          R"("json_schema":{"schema":{"pattern":"a+"}}}})",
                          R"({"prompt":"x","grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})",
                          R"({"prompt":"x","response_format":"json"})"})
    std::ofstream(in, std::ios::app) << bad << "\n";
  const auto batch = zenmoe("batch -m '" + kModel + "' -i '" + in.string() + "'");
  ASSERT_EQ(batch.status, 0) << batch.err;
  std::vector<json> lines;
  std::istringstream out(batch.out);
  for (std::string l; std::getline(out, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 11u) << batch.out;
  EXPECT_EQ(lines[0]["finish_reason"], "stop") << lines[0].dump();
  EXPECT_TRUE(std::regex_match(lines[0]["text"].get<std::string>(), std::regex(R"(\{"a": [0-9]{1,3}\})")))
      << lines[0].dump();
  const auto json_mode = std::make_shared<const grammar::Grammar>(
      std::move(*grammar::Grammar::parse(grammar::Grammar::json_object_text())));
  for (size_t i = 1; i <= 4; ++i) {
    const std::string text = lines[i]["text"].get<std::string>();
    ASSERT_FALSE(text.empty()) << lines[i].dump();
    EXPECT_EQ(text[0], '{') << text;
    if (lines[i]["finish_reason"] == "stop") {
      const json j = json::parse(text, nullptr, false);
      EXPECT_TRUE(j.is_object()) << text;
    } else {
      EXPECT_EQ(lines[i]["finish_reason"], "length") << lines[i].dump();
      grammar::State st(json_mode);
      EXPECT_TRUE(st.accepts(text)) << text;  // the beginning of an object
    }
  }
  for (size_t i = 5; i <= 6; ++i) {  // the schema's one boolean member, whatever the sampler draws
    EXPECT_EQ(lines[i]["finish_reason"], "stop") << lines[i].dump();
    const json j = json::parse(lines[i]["text"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(j.is_object()) << lines[i].dump();
    EXPECT_EQ(j.size(), 1u) << j.dump();
    EXPECT_TRUE(j.contains("ok") && j["ok"].is_boolean()) << j.dump();
  }
  EXPECT_EQ(lines[7]["error"], "'grammar': grammar: rule 'foo' is used but not defined");
  EXPECT_EQ(lines[8]["error"], "'response_format.json_schema.schema': json schema: #: 'pattern' is not supported");
  EXPECT_EQ(lines[9]["error"], "give one of 'grammar', 'json_schema' and 'response_format', not several");
  EXPECT_NE(lines[10]["error"].get<std::string>().find("must be an object"), std::string::npos);

  for (int seed = 1; seed <= 3; ++seed) {
    const auto run = zenmoe("run -m '" + kModel + "' -p 'Answer:' -n 20 -s " + std::to_string(seed) +
                            " --grammar 'root ::= \"yes\" | \"no\"'");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_TRUE(run.out == "yes" || run.out == "no") << run.out;
  }
  std::ofstream(dir_ / "digits.gbnf") << "root ::= [0-9]{4}  # four digits\n";
  const auto digits = zenmoe("run -m '" + kModel + "' -p 'PIN:' -n 20 -s 9 --grammar-file '" +
                             (dir_ / "digits.gbnf").string() + "'");
  ASSERT_EQ(digits.status, 0) << digits.err;
  EXPECT_TRUE(std::regex_match(digits.out, std::regex("[0-9]{4}"))) << digits.out;
  const auto typed = zenmoe("run -m '" + kModel + "' -p 'JSON:' -n 40 -s 4 -j '" + schema + "'");
  ASSERT_EQ(typed.status, 0) << typed.err;
  const json j = json::parse(typed.out, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.size() == 1 && j["ok"].is_boolean()) << typed.out;
  const std::string run = "run -m '" + kModel + "' -p hi ";
  testing_cli::expect_one_line_error(zenmoe(run + "-j '{\"type\": \"object\", \"minProperties\": 1}'"), "-j",
                                     "--json-schema: json schema: #: 'minProperties' is not supported");
  testing_cli::expect_one_line_error(zenmoe(run + "-j '{bad'"), "-j", "--json-schema: not valid JSON");
  testing_cli::expect_one_line_error(zenmoe(run + "--grammar 'root ::= x'"), "--grammar",
                                     "--grammar: grammar: rule 'x' is used but not defined");
  testing_cli::expect_one_line_error(zenmoe(run + "--grammar-file '" + (dir_ / "none.gbnf").string() + "'"),
                                     "--grammar-file", "cannot open grammar file");
  testing_cli::expect_one_line_error(zenmoe(run + "--grammar 'root ::= \"a\"' --grammar-file x"), "both",
                                     "give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
}

// batch --parallel: a request starting beside another that holds its beginning (a shared
// document) takes those cache rows instead of evaluating them: as many positions kept as when
// the requests run one after another, and the same answers.
TEST_F(ServeCli, BatchParallelSharesAPromptsBeginningAcrossSequences) {
  const std::string doc =
      "The harbour town kept its lighthouse lit every night of the year, and the keeper wrote the "
      "weather, the ships and the tides in a thick book that nobody read. ";
  const fs::path in = dir_ / "requests.jsonl";
  {
    std::ofstream f(in);
    for (const char* q : {"Who read the book?", "What was lit?", "Where was the town?"})
      f << json{{"prompt", doc + q}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}}.dump() << "\n";
  }
  const std::string base = "batch -m '" + kModel + "' -t 1 -c 256 -i '" + in.string() + "'";
  const auto one = zenmoe(base);
  const auto two = zenmoe(base + " -np 2");
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(two.status, 0) << two.err;
  std::istringstream a(one.out), b(two.out);
  std::string la, lb;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(std::getline(a, la) && std::getline(b, lb));
    const json ja = json::parse(la), jb = json::parse(lb);
    EXPECT_EQ(jb["text"], ja["text"]) << i;
    const int kept = jb["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    EXPECT_EQ(kept, ja["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>()) << i;
    if (i > 0) {
      EXPECT_GT(kept, 20) << i;
    }
  }
}

// zenmoe batch --sort: requests run in the order of their prompts' tokens, so the two sharing a
// beginning follow each other and the second keeps it; answers stay in input order and equal
// those of the unsorted run (greedy, reference engine).
TEST_F(ServeCli, BatchSortRunsRequestsSharingABeginningTogether) {
  const std::string req = R"(,"max_tokens":4,"temperature":0,"ignore_eos":true})";
  const fs::path in = dir_ / "requests.jsonl";
  std::ofstream(in) << R"({"prompt":"Once upon a time there was a fox that)" << " ran\"" << req << "\n"
                    << R"({"prompt":"Quarterly report of the bank:")" << req << "\n"
                    << R"({"prompt":"Once upon a time there was a fox that)" << " slept\"" << req << "\n";
  const std::string cmd = "batch -m '" + kModel + "' --ref -i '" + in.string() + "'";
  const auto plain = zenmoe(cmd);
  const auto sorted = zenmoe(cmd + " --sort");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(sorted.status, 0) << sorted.err;
  const auto parse_lines = [](const std::string& out) {
    std::vector<json> lines;
    std::istringstream ss(out);
    for (std::string l; std::getline(ss, l);) lines.push_back(json::parse(l));
    return lines;
  };
  const std::vector<json> a = parse_lines(plain.out), b = parse_lines(sorted.out);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  int64_t cached_plain = 0, cached_sorted = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i]["line"], static_cast<int>(i + 1));
    EXPECT_EQ(b[i]["text"], a[i]["text"]) << i;
    cached_plain += a[i]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    cached_sorted += b[i]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  // Sorted, the first and third requests run one after the other: the later keeps their shared
  // beginning.
  const auto kept = [&](size_t i) { return b[i]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); };
  EXPECT_GT(std::max(kept(0), kept(2)), 5);
  EXPECT_GT(cached_sorted, cached_plain + 4);
}

// zenmoe batch --parallel: requests run side by side, one decode batch over all running ones.
// The three that start together answer exactly as each does alone on the fast engine (short
// prompts: a kept beginning-of-sequence row changes nothing); the two after them take the
// slots the first to finish free; answers stay in input order; the reference engine, which
// holds one sequence, is refused with one line.
TEST_F(ServeCli, BatchParallelRunsRequestsSideBySide) {
  const std::vector<std::string> prompts = {"The quick brown fox", "Quarterly report of the bank:", "Once upon a time",
                                            "A list of prime numbers:", "Dear diary,", "Two answers:"};
  const std::vector<int> max_tokens = {3, 9, 6, 5, 4, 4};
  const fs::path in = dir_ / "requests.jsonl";
  {
    std::ofstream f(in);
    for (size_t i = 0; i < prompts.size(); ++i) {
      json r = {{"id", i}, {"prompt", prompts[i]}, {"max_tokens", max_tokens[i]}, {"temperature", 0},
                {"ignore_eos", true}};
      if (i == 1) r["logprobs"] = 2;
      if (i == 5) r["n"] = 2;
      f << r.dump() << "\n";
    }
  }
  const std::string base = "batch -m '" + kModel + "' -t 1 -c 64";
  const auto par = zenmoe(base + " -np 3 -i '" + in.string() + "'");
  ASSERT_EQ(par.status, 0) << par.err;
  std::vector<json> lines;
  std::istringstream out(par.out);
  for (std::string l; std::getline(out, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), prompts.size()) << par.out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(lines[i]["id"], i);
    if (i == 5) {  // two choices
      ASSERT_EQ(lines[i]["choices"].size(), 2u) << lines[i].dump();
      EXPECT_EQ(lines[i]["choices"][1]["finish_reason"], "length");
      EXPECT_EQ(lines[i]["usage"]["completion_tokens"], 2 * max_tokens[i]);
      continue;
    }
    EXPECT_EQ(lines[i]["usage"]["completion_tokens"], max_tokens[i]);
    EXPECT_EQ(lines[i]["finish_reason"], "length");
    EXPECT_EQ(lines[i].contains("logprobs"), i == 1);
    if (i == 1) {
      EXPECT_EQ(lines[i]["logprobs"]["token_logprobs"].size(), static_cast<size_t>(max_tokens[i]));
    }
    if (i >= 3) continue;
    const fs::path one = dir_ / ("one" + std::to_string(i) + ".jsonl");
    std::ofstream(one) << json{{"prompt", prompts[i]}, {"max_tokens", max_tokens[i]}, {"temperature", 0},
                               {"ignore_eos", true}}.dump() << "\n";
    const auto alone = zenmoe(base + " -i '" + one.string() + "'");
    ASSERT_EQ(alone.status, 0) << alone.err;
    EXPECT_EQ(lines[i]["text"], json::parse(alone.out)["text"]) << i;
  }
  EXPECT_TRUE(std::regex_search(par.err, std::regex(R"(batch: 6 requests answered, 0 refused .* generated 35 tokens)")))
      << par.err;
  testing_cli::expect_one_line_error(zenmoe(base + " --ref -np 2 -i '" + in.string() + "'"), "--ref -np 2",
                                     "needs the fast engine");
  testing_cli::expect_one_line_error(zenmoe(base + " -np 0 -i '" + in.string() + "'"), "-np 0", "parallel");
}

}  // namespace
}  // namespace zenmoe
