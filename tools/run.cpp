// `zenmoe run`: tokenise a prompt (optionally in the model's chat format), prefill it, then
// sample and stream tokens until -n, an end-of-generation token or the context limit.
// stdout carries only the generated text; the one summary line goes to stderr. With
// --conversation, turn after turn: each line of standard input is a user message, and each turn
// evaluates only what the conversation added since the last one (the cache keeps the rest).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/chat.h"
#include "runtime/executor.h"
#include "runtime/gguf.h"
#include "runtime/plan_file.h"
#include "runtime/prompt_cache.h"
#include "runtime/sampler.h"
#include "runtime/thread_pool.h"
#include "runtime/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "runtime/fast_executor.h"
#include "tools/engine.h"
#include "tools/generate.h"
#include "tools/json_schema.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_engine_flags({
    {"model", "m", true, "model file (.gguf, first part of a split model, or a .zplan from zenmoe compile)"},
    {"prompt", "p", true, "prompt text"},
    {"file", "f", true, "read the prompt from this file"},
    {"n-predict", "n", true, "tokens to generate (default 128; -1 = until end of generation)"},
    {"threads", "t", true, "threads (default: one per core this process may use)"},
    {"cache-type-k", "ctk", true, "KV cache type: f16 (default), f32, bf16 or q8_0"},
    {"cache-type-v", "ctv", true, "KV cache type for values (MLA: must match --cache-type-k)"},
    {"ctx-size", "c", true, "context size in tokens (default 4096, at most the model's)"},
    {"temp", "", true, "temperature (default 0.8; 0 = greedy)"},
    {"top-k", "", true, "top-k (default 40; 0 = off)"},
    {"top-p", "", true, "top-p (default 0.95; 1 = off)"},
    {"min-p", "", true, "min-p (default 0.05; 0 = off)"},
    {"repeat-penalty", "", true, "repetition penalty (default 1 = off)"},
    {"repeat-last-n", "", true, "tokens the repetition penalty looks back at (default 64)"},
    {"seed", "s", true, "sampling seed (default: random)"},
    {"chat", "", false, "wrap the prompt in the model's chat format"},
    {"system-prompt", "sys", true, "system message for --chat or --conversation"},
    {"conversation", "cnv", false,
     "chat turn by turn in the model's chat format: each line of standard input is a user message (-p or -f, if "
     "given, the first), until the input ends or a line reads /exit"},
    {"prompt-cache", "", true,
     "file keeping the prompt's KV cache: a prompt starting with the tokens it holds evaluates only the rest; "
     "written after the prompt is evaluated"},
    {"prompt-cache-all", "", false, "write the generated tokens to the prompt cache too, at the end"},
    {"prompt-cache-ro", "", false, "read the prompt cache but never write it"},
    {"reverse-prompt", "r", true,
     "stop generating (with --conversation: end the turn) once the output holds this text; may be given more than once",
     true},
    {"no-escape", "", false, "take \\n, \\t, \\\\ and the like in -p, -r and -sys literally (default: as escapes)"},
    {"ignore-eos", "", false, "keep generating past end-of-generation tokens"},
    {"grammar", "", true,
     "GBNF grammar the generated text follows (start rule: root); generation ends when it is complete"},
    {"grammar-file", "", true, "read the GBNF grammar from this file"},
    {"json-schema", "j", true, "JSON schema the generated text follows (a grammar made from it)"},
    {"json-schema-file", "jf", true, "read the JSON schema from this file"},
    {"ref", "", false, "force the scalar reference executor"},
    {"profile", "", false, "print the time spent per op kind"},
    {"verbose", "v", false, "print which kernel runs each weight and where threads run"},
    {"help", "h", false, "show this help"},
});

// The dispatch log of the fast executor (one line per weight) on stderr.
void print_dispatch(const Executor& ex) {
  const auto* fast = dynamic_cast<const FastExecutor*>(&ex);
  if (fast == nullptr) {
    std::fprintf(stderr, "engine: reference executor (scalar)\n");
    return;
  }
  std::fprintf(stderr, "engine: fast executor, threads %s\n", fast->placement().c_str());
  for (const std::string& line : fast->dispatch_log()) std::fprintf(stderr, "  %s\n", line.c_str());
}

struct RunOptions {
  std::string model_path;
  std::string prompt;
  int64_t n_predict = 128;
  int n_ctx = 4096;
  bool ctx_given = false;
  int n_threads = 1;
  bool chat = false;
  bool conversation = false;
  std::string system_prompt;
  std::string prompt_cache;
  bool prompt_cache_all = false;
  bool prompt_cache_ro = false;
  std::vector<std::string> reverse_prompts;
  bool ignore_eos = false;
  std::shared_ptr<const grammar::Grammar> grammar;  // --grammar, --json-schema or their file forms
  bool force_ref = false;
  bool profile = false;
  bool verbose = false;
  KvCacheType kv_type = KvCacheType::F16;
  SamplerParams sampling;
};

// The escapes llama.cpp's CLI reads in a prompt: \n \r \t \' \" \\ and \xHH; any other
// backslash stays as it is.
std::string process_escapes(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  const auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 == in.size()) {
      out += in[i];
      continue;
    }
    const char c = in[i + 1];
    const char plain = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c == '\'' || c == '"' || c == '\\' ? c : 0;
    if (plain != 0) {
      out += plain;
      ++i;
    } else if (c == 'x' && i + 3 < in.size() && hex(in[i + 2]) >= 0 && hex(in[i + 3]) >= 0) {
      out += static_cast<char>(hex(in[i + 2]) * 16 + hex(in[i + 3]));
      i += 3;
    } else {
      out += in[i];
    }
  }
  return out;
}

// --grammar, --grammar-file, --json-schema or --json-schema-file (at most one): the grammar the
// generated text follows, null without any.
Expected<std::shared_ptr<const grammar::Grammar>> grammar_flags(const Args& a) {
  const char* const flags[] = {"grammar", "grammar-file", "json-schema", "json-schema-file"};
  const char* given = nullptr;
  for (const char* f : flags) {
    if (!a.has(f)) continue;
    if (given) return Error{"give one of --grammar, --grammar-file, --json-schema and --json-schema-file"};
    given = f;
  }
  if (!given) return std::shared_ptr<const grammar::Grammar>();
  const std::string flag = given, source = flag.ends_with("-file") ? a.get(flag) + ": " : "--" + flag + ": ";
  const bool schema = flag.starts_with("json-schema");
  Expected<std::string> text = flag.ends_with("-file")
                                   ? read_text_file(a.get(flag), schema ? "JSON schema file" : "grammar file")
                                   : Expected<std::string>(a.get(flag));
  if (!text) return Error{text.error()};
  Expected<grammar::Grammar> g = Error{""};
  if (schema) {
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Error{source + "not valid JSON"};
    g = json_schema_grammar(j);
  } else {
    g = grammar::Grammar::parse(*text);
  }
  if (!g) return Error{source + g.error()};
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

Status parse_sampling(const Args& a, SamplerParams* s) {
  auto temp = a.get_double("temp", 0.8, -1e9, 1e9);
  auto top_k = a.get_int("top-k", 40, -1, 1 << 30);
  auto top_p = a.get_double("top-p", 0.95, 0.0, 1.0);
  auto min_p = a.get_double("min-p", 0.05, 0.0, 1.0);
  auto pen = a.get_double("repeat-penalty", 1.0, 1e-6, 1e6);
  auto last_n = a.get_int("repeat-last-n", 64, 0, 1 << 30);
  auto seed = a.get_int("seed", -1, -1, INT64_MAX);
  for (const Status& st : {temp.status(), top_p.status(), min_p.status(), pen.status()})
    if (!st) return st;
  for (const Status& st : {top_k.status(), last_n.status(), seed.status()})
    if (!st) return st;
  s->temp = static_cast<float>(*temp);
  s->top_k = static_cast<int>(*top_k);
  s->top_p = static_cast<float>(*top_p);
  s->min_p = static_cast<float>(*min_p);
  s->repeat_penalty = static_cast<float>(*pen);
  s->repeat_last_n = static_cast<int>(*last_n);
  // llama.cpp's convention: no seed (or -1) means a fresh random one.
  s->seed = *seed >= 0 ? static_cast<uint64_t>(*seed) : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  return check_sampler_params(*s);
}

Expected<RunOptions> parse_options(const Args& a) {
  RunOptions o;
  if (!a.positionals().empty()) return Error{"unexpected argument '" + a.positionals()[0] + "'"};
  if (!a.has("model")) return Error{"missing -m MODEL.gguf (try zenmoe run --help)"};
  o.model_path = a.get("model");
  o.conversation = a.has("conversation");
  if (a.has("prompt") && a.has("file")) return Error{"give the prompt with -p or -f, not both"};
  if (!a.has("prompt") && !a.has("file") && !o.conversation)
    return Error{"missing prompt: give -p TEXT or -f FILE (or --conversation)"};
  if (a.has("file")) {
    auto text = read_text_file(a.get("file"), "prompt file");
    if (!text) return Error{text.error()};
    o.prompt = std::move(*text);
  } else if (a.has("prompt")) {
    o.prompt = a.has("no-escape") ? a.get("prompt") : process_escapes(a.get("prompt"));
  }
  if (o.prompt.empty() && (a.has("prompt") || a.has("file"))) return Error{"the prompt is empty"};
  auto n = a.get_int("n-predict", 128, -1, INT32_MAX);
  auto ctx = a.get_int("ctx-size", 4096, 1, 1 << 24);
  // The machine's topology is read only when no count is given.
  auto threads = a.get_int("threads", a.has("threads") ? 1 : default_thread_count(), 1, 1024);
  for (const Status& st : {n.status(), ctx.status(), threads.status()})
    if (!st) return Error{st.message()};
  o.n_predict = *n;
  o.n_ctx = static_cast<int>(*ctx);
  o.ctx_given = a.has("ctx-size");
  o.n_threads = static_cast<int>(*threads);
  o.chat = a.has("chat") || o.conversation;
  o.system_prompt = a.has("no-escape") ? a.get("system-prompt") : process_escapes(a.get("system-prompt"));
  for (const std::string& rp : a.get_all("reverse-prompt")) {
    if (rp.empty()) return Error{"--reverse-prompt is empty"};
    o.reverse_prompts.push_back(a.has("no-escape") ? rp : process_escapes(rp));
  }
  if (a.has("system-prompt") && !o.chat) return Error{"--system-prompt needs --chat or --conversation"};
  o.prompt_cache = a.get("prompt-cache");
  o.prompt_cache_all = a.has("prompt-cache-all");
  o.prompt_cache_ro = a.has("prompt-cache-ro");
  if (a.has("prompt-cache") && o.prompt_cache.empty()) return Error{"--prompt-cache needs a file name"};
  if ((o.prompt_cache_all || o.prompt_cache_ro) && o.prompt_cache.empty())
    return Error{std::string(o.prompt_cache_all ? "--prompt-cache-all" : "--prompt-cache-ro") + " needs --prompt-cache FILE"};
  if (o.prompt_cache_all && o.prompt_cache_ro) return Error{"--prompt-cache-all and --prompt-cache-ro contradict each other"};
  if (!o.prompt_cache.empty() && o.conversation) return Error{"--prompt-cache does not work with --conversation"};
  o.ignore_eos = a.has("ignore-eos");
  auto g = grammar_flags(a);
  if (!g) return Error{g.error()};
  o.grammar = *g;
  o.force_ref = a.has("ref");
  o.profile = a.has("profile");
  o.verbose = a.has("verbose");
  auto kv = kv_cache_type(a.get("cache-type-k"), a.get("cache-type-v"));
  if (!kv) return Error{kv.error()};
  o.kv_type = *kv;
  ZENMOE_RETURN_IF_ERROR(parse_sampling(a, &o.sampling));
  return o;
}

// The prompt as the model sees it: chat-formatted when asked, BOS as the vocabulary says,
// special-token texts parsed (like llama.cpp's CLI).
Expected<std::vector<int32_t>> prompt_tokens(const RunOptions& o, const tok::Tokenizer& tk) {
  std::string text = o.prompt;
  if (o.chat) {
    auto style = detect_chat_style(tk.chat_template());
    if (!style) return Error{"--chat: " + style.error()};
    std::vector<ChatMessage> msgs;
    if (!o.system_prompt.empty()) msgs.push_back({"system", o.system_prompt});
    msgs.push_back({"user", o.prompt});
    auto formatted = format_chat(*style, msgs, true);
    if (!formatted) return Error{"--chat: " + formatted.error()};
    text = std::move(*formatted);
  }
  return tk.encode(text, /*add_special=*/true, /*parse_special=*/true);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void emit(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

struct Stats {
  size_t prompt_tokens = 0;  // evaluated (not restored from a prompt cache)
  size_t restored_tokens = 0;
  double prefill_s = 0;
  int64_t generated = 0;
  int64_t decode_evals = 0;
  double decode_s = 0;
  bool context_full = false;
  void add(const Stats& t) {
    prompt_tokens += t.prompt_tokens;
    prefill_s += t.prefill_s;
    generated += t.generated;
    decode_evals += t.decode_evals;
    decode_s += t.decode_s;
    context_full = t.context_full;
  }
};

// What a turn generated: its text, the tokens that went through the model, and the last token
// when -n or a reverse prompt stopped the turn before the token went through the model (the
// next turn evaluates it first).
struct Reply {
  std::string text;
  std::vector<int32_t> evaluated;
  std::vector<int32_t> unevaluated;
};

// Prefill (the sampler has seen the prompt), then sample / stream / decode until a stop
// condition. Returns the figures; `reply`, when given, collects the text and tokens;
// `after_prefill`, when given, runs once the prompt is in the cache.
Expected<Stats> generate(const RunOptions& o, Executor& ex, const tok::Tokenizer& tk, Sampler& sampler,
                         std::span<const int32_t> prompt, Reply* reply = nullptr,
                         const std::function<Status()>& after_prefill = nullptr) {
  Stats st;
  st.prompt_tokens = prompt.size();
  std::vector<float> logits(static_cast<size_t>(ex.n_vocab()));
  const auto t0 = std::chrono::steady_clock::now();
  ZENMOE_RETURN_IF_ERROR(ex.eval(prompt, logits.data(), false));
  st.prefill_s = seconds_since(t0);
  if (after_prefill) ZENMOE_RETURN_IF_ERROR(after_prefill());
  DecodeLimits limits;
  limits.n_predict = o.n_predict;
  limits.ignore_eos = o.ignore_eos;
  limits.stops = o.reverse_prompts;
  limits.grammar = o.grammar;
  auto d = decode_loop(ex, tk, sampler, logits, limits, [](const std::string& text) {
    emit(text);
    return true;
  });
  if (!d) return Error{d.error()};
  st.generated = d->generated;
  st.decode_evals = d->evals;
  st.decode_s = d->seconds;
  st.context_full = d->why == StopReason::kContextFull;
  if (reply != nullptr) {
    reply->text = std::move(d->text);
    reply->evaluated = std::move(d->evaluated);
    reply->unevaluated = std::move(d->unevaluated);
  }
  return st;
}

// --conversation: the -p / -f message first, then one user message per line of standard input.
// Each turn renders the whole conversation; when it extends what the cache holds (the
// rendering so far plus the reply as generated), only the new part is tokenised and evaluated,
// else the cache starts over from the full rendering.
Expected<Stats> converse(const RunOptions& o, Executor& ex, const tok::Tokenizer& tk, ChatStyle style,
                         int* turns) {
  Stats total;
  Sampler sampler(o.sampling, ex.n_vocab());
  std::vector<ChatMessage> msgs;
  if (!o.system_prompt.empty()) msgs.push_back({"system", o.system_prompt});
  std::string cached;           // the text whose tokens the cache holds (after BOS)
  std::vector<int32_t> carry;   // a reply's last token, not yet through the model
  const bool prompt_marks = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  bool first = true;
  std::string user;
  for (;;) {
    if (first && !o.prompt.empty()) {
      user = o.prompt;
    } else {
      if (prompt_marks) emit("> ");
      if (!std::getline(std::cin, user) || user == "/exit") break;
    }
    first = false;
    if (user.empty()) continue;
    msgs.push_back({"user", user});
    auto full = format_chat(style, msgs, true);
    if (!full) return Error{"--conversation: " + full.error()};
    std::vector<int32_t> toks;
    size_t seen = 0;  // leading tokens the sampler has already accepted (the carried one)
    if (ex.n_past() > 0 && full->starts_with(cached)) {
      toks = carry;
      seen = carry.size();
      const std::vector<int32_t> more = tk.encode(std::string_view(*full).substr(cached.size()), false, true);
      toks.insert(toks.end(), more.begin(), more.end());
    } else {
      ex.reset();
      toks = tk.encode(*full, true, true);
    }
    if (ex.n_past() + toks.size() > static_cast<size_t>(ex.n_ctx()))
      return Error{"the conversation needs " + std::to_string(ex.n_past() + toks.size()) +
                   " tokens, more than the context size " + std::to_string(ex.n_ctx()) + " (raise -c)"};
    for (size_t i = seen; i < toks.size(); ++i) sampler.accept(toks[i]);
    Reply reply;
    auto st = generate(o, ex, tk, sampler, toks, &reply);
    if (!st) return Error{st.error()};
    total.add(*st);
    ++*turns;
    emit("\n");
    cached = *full + reply.text;
    carry = std::move(reply.unevaluated);
    msgs.push_back({"assistant", std::move(reply.text)});
    if (st->context_full) break;
  }
  return total;
}

// One prompt (no --conversation), through the prompt cache when one is named: the positions
// it holds for the prompt's leading tokens are restored, the rest evaluated; then the file is
// written with the prompt (unless it holds exactly that already, or is read-only), or with
// --prompt-cache-all at the end with the generated tokens too.
Expected<Stats> run_prompt(const RunOptions& o, Executor& ex, const tok::Tokenizer& tk, uint64_t model_id,
                           const std::vector<int32_t>& prompt) {
  PromptCacheLoad cached;
  std::error_code ec;
  if (!o.prompt_cache.empty() && std::filesystem::exists(o.prompt_cache, ec)) {
    auto loaded = load_prompt_cache(o.prompt_cache, model_id, ex, prompt);
    if (!loaded) return Error{loaded.error()};
    cached = std::move(*loaded);
  }
  Sampler sampler(o.sampling, ex.n_vocab());
  for (int32_t t : prompt) sampler.accept(t);
  const bool save_prompt = !o.prompt_cache.empty() && !o.prompt_cache_ro && !o.prompt_cache_all && cached.saved != prompt;
  std::function<Status()> after_prefill;
  if (save_prompt) after_prefill = [&] { return save_prompt_cache(o.prompt_cache, model_id, ex, prompt); };
  Reply reply;
  const auto rest = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cached.restored));
  auto st = generate(o, ex, tk, sampler, rest, &reply, after_prefill);
  if (!st) return st;
  st->restored_tokens = static_cast<size_t>(cached.restored);
  if (o.prompt_cache_all) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), reply.evaluated.begin(), reply.evaluated.end());
    ZENMOE_RETURN_IF_ERROR(save_prompt_cache(o.prompt_cache, model_id, ex, all));
  }
  return st;
}

// --profile: time per op kind over the whole run (prefill and decode), largest first, with
// its share of the total, in aligned columns on stderr.
void print_profile(const std::vector<std::pair<std::string, double>>& profile) {
  if (profile.empty()) return;
  const std::string head = "op (prefill + decode)";
  size_t width = head.size();
  double total = 0;
  for (const auto& [op, secs] : profile) {
    width = std::max(width, op.size());
    total += secs;
  }
  const int w = static_cast<int>(width);
  std::fprintf(stderr, "  %-*s %10s %7s\n", w, head.c_str(), "ms", "share");
  for (const auto& [op, secs] : profile)
    std::fprintf(stderr, "  %-*s %10.3f %6.1f%%\n", w, op.c_str(), secs * 1e3, total > 0 ? 100.0 * secs / total : 0.0);
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text("run -m MODEL.gguf -p TEXT [-n N] [options]", kFlags).c_str(), stdout);
    return 0;
  }
  auto opts = parse_options(*args);
  if (!opts) return fail(opts.error());
  auto ef = parse_engine_flags(*args);
  if (!ef) return fail(ef.error());
  auto model = open_model(opts->model_path, ef->load);
  if (!model) return fail(model.error());
  auto tk = tok::Tokenizer::from_metadata(model->gguf.metadata());
  if (!tk) return fail(tk.error());
  ChatStyle style = ChatStyle::DeepSeekV3;  // --conversation: the model's
  if (opts->conversation) {
    auto detected = detect_chat_style(tk->chat_template());
    if (!detected) return fail("--conversation: " + detected.error());
    style = *detected;
  }
  // --conversation tokenises its messages turn by turn (converse checks the context).
  auto prompt = opts->conversation ? std::vector<int32_t>{} : prompt_tokens(*opts, *tk);
  if (!prompt) return fail(prompt.error());
  if (prompt->empty() && !opts->conversation) return fail("the prompt gives no tokens");
  opts->n_ctx = context_size(model->gguf, opts->n_ctx, opts->ctx_given);
  if (prompt->size() > static_cast<size_t>(opts->n_ctx))
    return fail("the prompt has " + std::to_string(prompt->size()) + " tokens, more than the context size " +
                std::to_string(opts->n_ctx) + " (raise -c)");
  ExecutorOptions eo;
  eo.n_ctx = opts->n_ctx;
  eo.n_threads = opts->n_threads;
  ef->apply(eo);
  eo.profile = opts->profile;
  eo.kv_type = opts->kv_type;
  auto ex = make_engine(*model, eo, opts->force_ref ? Engine::Reference : Engine::Best);
  if (!ex) return fail(ex.error());
  if (opts->verbose) print_dispatch(**ex);
  for (int32_t t : *prompt)
    if (t < 0 || t >= (*ex)->n_vocab())
      return fail("prompt token " + std::to_string(t) + " is outside the model's vocabulary of " +
                  std::to_string((*ex)->n_vocab()));
  int turns = 0;
  Expected<Stats> st = Stats{};
  if (opts->conversation) {
    st = converse(*opts, **ex, *tk, style, &turns);
  } else {
    st = run_prompt(*opts, **ex, *tk, plan::gguf_table_checksum(model->gguf), *prompt);
  }
  if (!st) {
    std::fputc('\n', stdout);
    return fail(st.error());
  }
  if (isatty(STDOUT_FILENO) && !opts->conversation) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (opts->conversation) std::fprintf(stderr, "conversation of %d turns: ", turns);
  const std::string restored =
      st->restored_tokens > 0 ? " (" + std::to_string(st->restored_tokens) + " from the prompt cache)" : "";
  std::fprintf(stderr, "prompt %zu tokens%s, prefill %s tok/s | generated %lld tokens, decode %s tok/s%s\n",
               st->prompt_tokens + st->restored_tokens, restored.c_str(),
               rate(static_cast<double>(st->prompt_tokens), st->prefill_s).c_str(),
               static_cast<long long>(st->generated),
               rate(static_cast<double>(st->decode_evals), st->decode_s).c_str(),
               st->context_full ? " (context full)" : "");
  print_profile((*ex)->profile());
  return 0;
}

}  // namespace zenmoe::tools
