#include "tools/session.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <variant>

#include "runtime/thread_pool.h"
#include "tools/json_schema.h"

namespace zenmoe::tools {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

// Optional fields of the request body, type-checked; absent or null: the default.
std::optional<BadRequest> read_number(const json& body, const char* key, double lo, double hi, double* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number()) return BadRequest{400, std::string("'") + key + "' must be a number"};
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    return BadRequest{400, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  *out = d;
  return std::nullopt;
}

std::optional<BadRequest> read_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number_integer()) return BadRequest{400, std::string("'") + key + "' must be an integer"};
  const auto i = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                        : v.get<int64_t>();
  if (i < lo || i > hi)
    return BadRequest{400, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
  *out = i;
  return std::nullopt;
}

// The grammar of a JSON schema, or a bad request naming the field it came from.
std::variant<std::shared_ptr<const grammar::Grammar>, BadRequest> schema_grammar(const json& schema,
                                                                                  const std::string& field) {
  auto g = json_schema_grammar(schema);
  if (!g) return BadRequest{400, "'" + field + "': " + g.error()};
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

// Constrained output, at most one of: "grammar" (GBNF text, as llama.cpp's server takes it),
// "json_schema" (a schema, as llama.cpp's server takes it), "response_format" {"type":
// "json_object"} (OpenAI's JSON mode: one JSON object) or {"type": "json_schema",
// "json_schema": {"schema": ...}} (OpenAI's structured output); "text" is the default.
std::optional<BadRequest> read_grammar(const json& body, std::shared_ptr<const grammar::Grammar>* out) {
  const auto given = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  std::string rf_type = "text";
  if (given("response_format")) {
    const json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      return BadRequest{400, "'response_format' must be an object with a string 'type'"};
    rf_type = rf["type"].get<std::string>();
    if (rf_type != "text" && rf_type != "json_object" && rf_type != "json_schema")
      return BadRequest{400, "'response_format' type '" + rf_type + "' is unknown"};
  }
  if (int(given("grammar")) + int(given("json_schema")) + int(rf_type != "text") > 1)
    return BadRequest{400, "give one of 'grammar', 'json_schema' and 'response_format', not several"};
  std::variant<std::shared_ptr<const grammar::Grammar>, BadRequest> g;
  if (given("grammar")) {
    if (!body["grammar"].is_string()) return BadRequest{400, "'grammar' must be a string"};
    auto parsed = grammar::Grammar::parse(body["grammar"].get_ref<const std::string&>());
    if (!parsed) return BadRequest{400, "'grammar': " + parsed.error()};
    g = std::make_shared<const grammar::Grammar>(std::move(*parsed));
  } else if (given("json_schema")) {
    g = schema_grammar(body["json_schema"], "json_schema");
  } else if (rf_type == "json_schema") {
    const json& rf = body["response_format"];
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
      return BadRequest{400, "'response_format' json_schema needs 'json_schema': {\"schema\": ...}"};
    g = schema_grammar(rf["json_schema"]["schema"], "response_format.json_schema.schema");
  } else if (rf_type == "json_object") {
    static const std::shared_ptr<const grammar::Grammar> json_object = [] {
      auto parsed = grammar::Grammar::parse(grammar::Grammar::json_object_text());
      return std::make_shared<const grammar::Grammar>(std::move(*parsed));
    }();
    g = json_object;
  }
  if (auto* bad = std::get_if<BadRequest>(&g)) return *bad;
  *out = std::get<std::shared_ptr<const grammar::Grammar>>(g);
  return std::nullopt;
}

}  // namespace

std::optional<BadRequest> read_bool(const json& body, const char* key, bool* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_boolean()) return BadRequest{400, std::string("'") + key + "' must be true or false"};
  *out = body[key].get<bool>();
  return std::nullopt;
}

std::vector<FlagSpec> with_session_flags(std::vector<FlagSpec> own) {
  std::vector<FlagSpec> flags = {
      {"model", "m", true, "model file (.gguf, first part of a split model, or a .zplan from zenmoe compile)"}};
  flags.insert(flags.end(), own.begin(), own.end());
  const std::vector<FlagSpec> common = {
      {"threads", "t", true, "threads (default: one per core this process may use)"},
      {"ctx-size", "c", true, "context size in tokens (default 4096, at most the model's)"},
      {"cache-type-k", "ctk", true, "KV cache type: f16 (default), f32, bf16 or q8_0"},
      {"cache-type-v", "ctv", true, "KV cache type for values (MLA: must match --cache-type-k)"},
      {"parallel", "np", true,
       "requests run side by side, each decode step one batch over all of them (default 1; each keeps a KV cache "
       "of -c positions)"},
      {"ref", "", false, "force the scalar reference executor"},
      {"help", "h", false, "show this help"},
  };
  flags.insert(flags.end(), common.begin(), common.end());
  return with_engine_flags(std::move(flags));
}

Expected<std::unique_ptr<SessionModel>> load_session_model(const Args& a, const std::string& command) {
  if (!a.has("model")) return Error{"missing -m MODEL (try zenmoe " + command + " --help)"};
  auto parallel = a.get_int("parallel", 1, 1, 256);
  if (!parallel) return Error{parallel.error()};
  if (*parallel > 1 && a.has("ref"))
    return Error{"--parallel " + std::to_string(*parallel) +
                 " needs the fast engine (the reference engine runs one sequence)"};
  auto ctx = a.get_int("ctx-size", 4096, 1, 1 << 24);
  auto threads = a.get_int("threads", a.has("threads") ? 1 : default_thread_count(), 1, 1024);
  for (const Status& st : {ctx.status(), threads.status()})
    if (!st) return Error{st.message()};
  auto kv = kv_cache_type(a.get("cache-type-k"), a.get("cache-type-v"));
  if (!kv) return Error{kv.error()};
  auto ef = parse_engine_flags(a);
  if (!ef) return Error{ef.error()};
  auto m = std::make_unique<SessionModel>();
  auto model = open_model(a.get("model"), ef->load);
  if (!model) return Error{model.error()};
  m->model = std::move(*model);
  auto tk = tok::Tokenizer::from_metadata(m->model.gguf.metadata());
  if (!tk) return Error{tk.error()};
  m->tk.emplace(std::move(*tk));
  ExecutorOptions eo;
  eo.n_ctx = context_size(m->model.gguf, static_cast<int>(*ctx), a.has("ctx-size"));
  eo.n_threads = static_cast<int>(*threads);
  ef->apply(eo);
  eo.kv_type = *kv;
  eo.n_seq = static_cast<int>(*parallel);
  auto ex = make_engine(m->model, eo, a.has("ref") ? Engine::Reference : Engine::Best);
  if (!ex) return Error{ex.error()};
  m->ex = std::move(*ex);
  return m;
}

Session::Session(const tok::Tokenizer& tk, Executor& ex)
    : tk_(tk), ex_(&ex), held_(static_cast<size_t>(ex.n_seq())) {
  auto style = detect_chat_style(tk_.chat_template());
  if (style) style_ = *style;
  else no_chat_ = style.error();
}

std::variant<Job, BadRequest> Session::parse(const json& body, bool chat) const {
  if (body.is_discarded()) return BadRequest{400, "the body is not valid JSON"};
  if (!body.is_object()) return BadRequest{400, "the body is not a JSON object"};
  Job job;
  job.chat = chat;
  std::string rendered;
  bool ids = false;  // the prompt came as token ids
  if (chat) {
    if (!no_chat_.empty()) return BadRequest{400, "this model has no chat format: " + no_chat_};
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      return BadRequest{400, "'messages' must be a non-empty array"};
    std::vector<ChatMessage> msgs;
    for (const json& m : body["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
        return BadRequest{400, "each message needs a string 'role' and a 'content'"};
      // The content: a string, or an array of parts of which the text ones are joined.
      const json& c = m["content"];
      std::string content;
      if (c.is_string()) {
        content = c.get<std::string>();
      } else if (c.is_array()) {
        for (const json& part : c) {
          if (!part.is_object() || !part.contains("type") || part["type"] != "text") continue;
          if (!part.contains("text") || !part["text"].is_string())
            return BadRequest{400, "a text part of a message's content needs a string 'text'"};
          content += part["text"].get<std::string>();
        }
      } else {
        return BadRequest{400, "a message's 'content' must be a string or an array of parts"};
      }
      msgs.push_back({m["role"].get<std::string>(), std::move(content)});
    }
    auto formatted = format_chat(style_, msgs, true);
    if (!formatted) return BadRequest{400, formatted.error()};
    rendered = std::move(*formatted);
  } else {
    // A string, or token ids as they are (no BOS added).
    const json* prompt = body.contains("prompt") ? &body["prompt"] : nullptr;
    if (prompt != nullptr && prompt->is_array()) {
      ids = true;
      for (const json& t : *prompt) {
        if (!t.is_number_integer()) return BadRequest{400, "'prompt' must be a string or an array of token ids"};
        const auto id = t.get<int64_t>();
        if (id < 0 || id >= ex_->n_vocab())
          return BadRequest{400, "prompt token " + std::to_string(id) + " is outside the model's vocabulary"};
        job.prompt.push_back(static_cast<int32_t>(id));
      }
    } else if (prompt != nullptr && prompt->is_string()) {
      rendered = prompt->get<std::string>();
    } else {
      return BadRequest{400, "'prompt' must be a string or an array of token ids"};
    }
  }
  if (!ids) job.prompt = tk_.encode(rendered, /*add_special=*/true, /*parse_special=*/true);
  if (job.prompt.empty()) return BadRequest{400, "the prompt gives no tokens"};
  if (job.prompt.size() > static_cast<size_t>(ex_->n_ctx()))
    return BadRequest{400, "the prompt has " + std::to_string(job.prompt.size()) +
                               " tokens, more than the context size " + std::to_string(ex_->n_ctx())};
  for (int32_t t : job.prompt)
    if (t < 0 || t >= ex_->n_vocab())
      return BadRequest{400, "prompt token " + std::to_string(t) + " is outside the model's vocabulary"};

  int64_t max_tokens = -1, top_k = 40, last_n = 64, seed = -1, n_choices = 1;
  double temp = 0.8, top_p = 0.95, min_p = 0.05, penalty = 1.0;
  bool ignore_eos = false;
  for (auto bad : {read_int(body, "max_tokens", -1, INT32_MAX, &max_tokens),
                   read_int(body, "max_completion_tokens", -1, INT32_MAX, &max_tokens),
                   read_int(body, "n_predict", -1, INT32_MAX, &max_tokens),
                   read_int(body, "top_k", -1, 1 << 30, &top_k),
                   read_int(body, "repeat_last_n", 0, 1 << 30, &last_n),
                   read_int(body, "seed", -1, INT64_MAX, &seed), read_int(body, "n", 1, kMaxChoices, &n_choices),
                   read_number(body, "temperature", -1e9, 1e9, &temp),
                   read_number(body, "top_p", 0.0, 1.0, &top_p),
                   read_number(body, "min_p", 0.0, 1.0, &min_p),
                   read_number(body, "repeat_penalty", 1e-6, 1e6, &penalty),
                   read_bool(body, "stream", &job.stream), read_bool(body, "ignore_eos", &ignore_eos)})
    if (bad) return *bad;
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      job.limits.stops.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) {
        if (!x.is_string()) return BadRequest{400, "'stop' must be a string or an array of strings"};
        job.limits.stops.push_back(x.get<std::string>());
      }
    } else {
      return BadRequest{400, "'stop' must be a string or an array of strings"};
    }
    for (const std::string& x : job.limits.stops)
      if (x.empty()) return BadRequest{400, "'stop' strings must not be empty"};
  }
  // Log-probabilities: completions "logprobs": N (the N most likely tokens too); chat
  // "logprobs": true with "top_logprobs": N.
  int64_t top = -1;
  if (chat) {
    bool want = false;
    if (auto bad = read_bool(body, "logprobs", &want)) return *bad;
    if (auto bad = read_int(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return *bad;
    if (top >= 0 && !want) return BadRequest{400, "'top_logprobs' needs 'logprobs': true"};
    if (want) top = std::max<int64_t>(top, 0);
  } else if (auto bad = read_int(body, "logprobs", 0, kMaxTopLogprobs, &top)) {
    return *bad;
  }
  if (auto bad = read_grammar(body, &job.limits.grammar)) return *bad;
  job.n = static_cast<int>(n_choices);
  job.limits.top_logprobs = static_cast<int>(top);
  job.limits.n_predict = max_tokens;
  job.limits.ignore_eos = ignore_eos;
  job.sampling.temp = static_cast<float>(temp);
  job.sampling.top_k = static_cast<int>(top_k);
  job.sampling.top_p = static_cast<float>(top_p);
  job.sampling.min_p = static_cast<float>(min_p);
  job.sampling.repeat_penalty = static_cast<float>(penalty);
  job.sampling.repeat_last_n = static_cast<int>(last_n);
  job.sampling.seed =
      seed >= 0 ? static_cast<uint64_t>(seed) : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  if (Status st = check_sampler_params(job.sampling); !st) return BadRequest{400, st.message()};
  return job;
}

size_t Session::shared_prefix(int s, const std::vector<int32_t>& prompt) const {
  const std::vector<int32_t>& held = held_[static_cast<size_t>(s)];
  size_t m = 0;
  const size_t cap = std::min(held.size(), prompt.size() - 1);
  while (m < cap && held[m] == prompt[m]) ++m;
  return m;
}

Expected<size_t> Session::keep_prefix(int s, const std::vector<int32_t>& prompt) {
  ZENMOE_RETURN_IF_ERROR(ex_->select_seq(s));
  std::vector<int32_t>& held = held_[static_cast<size_t>(s)];
  if (held.size() != static_cast<size_t>(ex_->n_past())) {  // an earlier request failed part way
    ex_->reset();
    held.clear();
  }
  size_t m = shared_prefix(s, prompt);
  // Another sequence holding more of the prompt (a shared system prompt or document) gives its
  // rows instead of them being evaluated again.
  int from = s;
  for (int k = 0; k < ex_->n_seq(); ++k) {
    const std::vector<int32_t>& other = held_[static_cast<size_t>(k)];
    if (k == s || other.size() != static_cast<size_t>(ex_->seq_past(k))) continue;
    if (const size_t mk = shared_prefix(k, prompt); mk > m) m = mk, from = k;
  }
  ZENMOE_RETURN_IF_ERROR(ex_->copy_seq(from, s, static_cast<int>(m)));
  if (from != s) {
    const std::vector<int32_t>& other = held_[static_cast<size_t>(from)];
    held.assign(other.begin(), other.begin() + static_cast<std::ptrdiff_t>(m));
  }
  held.resize(m);
  return m;
}

Expected<Session::Outcome> Session::run(const Job& job, const std::function<bool(const std::string&)>& on_text) {
  std::optional<Expected<Outcome>> result;
  bool taken = false;
  JobFeed feed;
  feed.next = [&]() -> const Job* { return std::exchange(taken, true) ? nullptr : &job; };
  feed.on_text = [&](const Job*, const std::string& text, std::span<const TokenLogprob>) { return on_text(text); };
  feed.done = [&](const Job*, Expected<Outcome>&& o) { result = std::move(o); };
  const Status st = run_all(feed);
  if (!result) return Error{st.message()};
  return std::move(*result);
}

Status Session::run_all(const JobFeed& feed, StepTotals* totals) {
  struct Slot {
    const Job* job = nullptr;  // null: free
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<Generation> gen;
    Outcome o;
    int32_t next = 0;  // the token to evaluate in the next step
  };
  const int n = ex_->n_seq();
  std::vector<Slot> slots(static_cast<size_t>(n));
  const auto nv = static_cast<size_t>(ex_->n_vocab());
  std::vector<float> logits(nv * static_cast<size_t>(n));
  // A job over: its text and figures to done(), the slot free.
  const auto finish = [&](Slot& sl) {
    sl.o.d = sl.gen->finish();
    const Job* job = std::exchange(sl.job, nullptr);
    feed.done(job, std::move(sl.o));
  };
  // An executor error ends the running jobs and the one starting.
  const auto fail_all = [&](const Job* starting, const std::string& message) -> Status {
    for (Slot& sl : slots)
      if (sl.job != nullptr) feed.done(std::exchange(sl.job, nullptr), Error{message});
    if (starting != nullptr) feed.done(starting, Error{message});
    return Error{message};
  };
  // Slot s takes the job: the rest of its prompt evaluated, its first token sampled.
  const auto start = [&](int s, const Job* job) -> Status {
    Slot& sl = slots[static_cast<size_t>(s)];
    sl = Slot{};
    auto m = keep_prefix(s, job->prompt);
    if (!m) return Error{m.error()};
    sl.o.cached = *m;
    sl.sampler = std::make_unique<Sampler>(job->sampling, ex_->n_vocab());
    for (int32_t t : job->prompt) sl.sampler->accept(t);
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const int32_t> rest = std::span<const int32_t>(job->prompt).subspan(*m);
    ZENMOE_RETURN_IF_ERROR(ex_->eval(rest, logits.data(), false));
    sl.o.prompt_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<int32_t>& held = held_[static_cast<size_t>(s)];
    held.insert(held.end(), rest.begin(), rest.end());
    sl.gen = std::make_unique<Generation>(
        tk_, *sl.sampler, job->limits, ex_->n_vocab(),
        [&feed, &sl, job](const std::string& text) { return feed.on_text(job, text, sl.gen->logprobs()); });
    sl.job = job;
    const std::optional<int32_t> first = sl.gen->step(logits.data(), ex_->n_past(), ex_->n_ctx());
    if (first) sl.next = *first;
    else finish(sl);
    return Status::ok();
  };
  for (;;) {
    // Free slots take the waiting jobs; a job whose first step ends it frees its slot at once.
    for (;;) {
      int free_slots = 0;
      for (const Slot& sl : slots) free_slots += sl.job == nullptr ? 1 : 0;
      if (free_slots == 0) break;
      const Job* job = feed.next();
      if (job == nullptr) break;
      int s = -1;
      size_t best = 0;
      for (int k = 0; k < n; ++k) {
        if (slots[static_cast<size_t>(k)].job != nullptr) continue;
        const size_t shared = shared_prefix(k, job->prompt);
        if (s < 0 || shared > best) s = k, best = shared;
      }
      if (Status st = start(s, job); !st) return fail_all(job, st.message());
    }
    std::vector<int32_t> tokens;
    std::vector<int> seqs;
    for (int k = 0; k < n; ++k)
      if (slots[static_cast<size_t>(k)].job != nullptr) {
        tokens.push_back(slots[static_cast<size_t>(k)].next);
        seqs.push_back(k);
      }
    if (tokens.empty()) return Status::ok();  // no job runs, none waits
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = ex_->eval_seqs(tokens, seqs, logits.data()); !st) return fail_all(nullptr, st.message());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (totals != nullptr) {
      ++totals->steps;
      totals->tokens += static_cast<int64_t>(tokens.size());
      totals->seconds += secs;
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      Slot& sl = slots[static_cast<size_t>(seqs[i])];
      held_[static_cast<size_t>(seqs[i])].push_back(tokens[i]);
      sl.gen->evaluated(tokens[i], secs);
      const std::optional<int32_t> next = sl.gen->step(logits.data() + i * nv, ex_->seq_past(seqs[i]), ex_->n_ctx());
      if (next) sl.next = *next;
      else finish(sl);
    }
  }
}

std::string Session::visible(const Decoded& d, const DecodeLimits& limits) {
  size_t cut = d.text.size();
  for (const std::string& s : limits.stops) cut = std::min(cut, d.text.find(s));
  return d.text.substr(0, std::min(cut, d.text.size()));
}

json Session::logprobs(const Job& job, const Decoded& d) const {
  // The tokens whose text starts within the text the client sees (before a stop string).
  LogprobCursor at;
  return logprobs(job, d.logprobs, &at, visible(d, job.limits).size());
}

json Session::logprobs(const Job& job, std::span<const TokenLogprob> lps, LogprobCursor* at, size_t limit) const {
  if (job.limits.top_logprobs < 0) return nullptr;
  const auto bytes = [](std::string_view piece) {
    json b = json::array();
    for (char c : piece) b.push_back(static_cast<unsigned char>(c));
    return b;
  };
  json tokens = json::array(), token_lp = json::array(), top = json::array(), offsets = json::array(),
       content = json::array();
  for (; at->token < lps.size() && at->offset < limit; ++at->token) {
    const TokenLogprob& t = lps[at->token];
    const std::string piece(tk_.piece(t.token));
    if (job.chat) {
      json alts = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string alt(tk_.piece(id));
        alts.push_back({{"token", alt}, {"logprob", lp}, {"bytes", bytes(alt)}});
      }
      content.push_back({{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes(piece)}, {"top_logprobs", alts}});
    } else {
      tokens.push_back(piece);
      token_lp.push_back(t.logprob);
      offsets.push_back(at->offset);
      json alts = json::object();
      for (const auto& [id, lp] : t.top) alts[std::string(tk_.piece(id))] = lp;
      top.push_back(alts);
    }
    at->offset += piece.size();
  }
  if (job.chat) return {{"content", content}};
  return {{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}, {"text_offset", offsets}};
}

const char* Session::finish_reason(const Decoded& d) {
  return d.why == StopReason::kLength || d.why == StopReason::kContextFull ? "length" : "stop";
}

std::vector<Job> Session::choices(const Job& job) {
  std::vector<Job> runs(static_cast<size_t>(job.n), job);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].n = 1;
    runs[i].sampling.seed = job.sampling.seed + i;
  }
  return runs;
}

json Session::usage(const Job& job, std::span<const Outcome> o) {
  int64_t generated = 0;
  for (const Outcome& c : o) generated += c.d.generated;
  return {{"prompt_tokens", job.prompt.size()},
          {"completion_tokens", generated},
          {"total_tokens", static_cast<int64_t>(job.prompt.size()) + generated},
          {"prompt_tokens_details", {{"cached_tokens", o.empty() ? 0 : o[0].cached}}}};
}

json Session::timings(const Job& job, std::span<const Outcome> o) {
  const Outcome none;
  const Outcome& first = o.empty() ? none : o[0];
  int64_t evals = 0;
  double seconds = 0;
  for (const Outcome& c : o) {
    evals += c.d.evals;
    seconds = std::max(seconds, c.d.seconds);
  }
  const auto evaluated = static_cast<double>(job.prompt.size() - first.cached);
  return {{"prompt_n", job.prompt.size() - first.cached},
          {"prompt_ms", first.prompt_s * 1e3},
          {"prompt_per_second", first.prompt_s > 0 ? evaluated / first.prompt_s : 0.0},
          {"predicted_n", evals},
          {"predicted_ms", seconds * 1e3},
          {"predicted_per_second", seconds > 0 ? static_cast<double>(evals) / seconds : 0.0}};
}

}  // namespace zenmoe::tools
