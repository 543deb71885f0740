// `zenmoe logits`: the logits of every position of a token sequence, float32
// [n_tokens][n_vocab], so any engine can be compared with llama.cpp's outputs or another engine.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/gguf.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/engine.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_engine_flags({
    {"model", "m", true, "model file (.gguf; first part of a split model)"},
    {"tokens", "", true, "token ids separated by spaces or commas, e.g. \"1 2 3\""},
    {"mode", "", true, "prefill (one eval of all tokens) or decode (one token at a time)"},
    {"output", "o", true, "output file: float32 [n_tokens][n_vocab]"},
    {"ctx-size", "c", true, "context size (default: the number of tokens)"},
    {"threads", "t", true, "threads (default 1)"},
    {"cache-type-k", "ctk", true, "KV cache type: f16 (default), f32, bf16 or q8_0"},
    {"cache-type-v", "ctv", true, "KV cache type for values (MLA: must match --cache-type-k)"},
    {"ref", "", false, "force the scalar reference executor"},
    {"help", "h", false, "show this help"},
});

Expected<std::vector<int32_t>> parse_tokens(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == ',' || s[i] == '\t' || s[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j - i > 9 || (j < s.size() && s[j] != ' ' && s[j] != ',' && s[j] != '\t' && s[j] != '\n'))
      return Error{"--tokens: '" + s.substr(i, s.find_first_of(" ,", i) - i) +
                   "' is not a token id (expected non-negative integers)"};
    out.push_back(static_cast<int32_t>(std::stol(s.substr(i, j - i))));
    i = j;
  }
  if (out.empty()) return Error{"--tokens is empty"};
  return out;
}

Status write_all(const std::string& path, const std::vector<float>& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Error{"cannot create " + path};
  const size_t n = std::fwrite(data.data(), sizeof(float), data.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (n != data.size() || !closed) {
    std::remove(path.c_str());
    return Error{"cannot write " + path + " (disk full?)"};
  }
  return Status::ok();
}

// Runs the tokens through `ex` and returns [n][n_vocab] logits.
Expected<std::vector<float>> compute(Executor& ex, const std::vector<int32_t>& tokens, bool prefill) {
  const size_t nv = static_cast<size_t>(ex.n_vocab());
  std::vector<float> logits(tokens.size() * nv);
  if (prefill) {
    ZENMOE_RETURN_IF_ERROR(ex.eval(tokens, logits.data(), true));
    return logits;
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(&tokens[i], 1), logits.data() + i * nv, false));
  return logits;
}

}  // namespace

int cmd_logits(int argc, char** argv, int first) {
  const std::string synopsis = "logits -m MODEL --tokens \"1 2 3\" --mode prefill|decode -o OUT.f32 [--ref]";
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text(synopsis, kFlags).c_str(), stdout);
    return 0;
  }
  if (!args->positionals().empty()) return fail("unexpected argument '" + args->positionals()[0] + "'");
  for (const char* req : {"model", "tokens", "mode", "output"})
    if (!args->has(req)) return fail(std::string("missing --") + req + " (usage: zenmoe " + synopsis + ")");
  const std::string mode = args->get("mode");
  if (mode != "prefill" && mode != "decode") return fail("--mode must be prefill or decode, got '" + mode + "'");
  auto tokens = parse_tokens(args->get("tokens"));
  if (!tokens) return fail(tokens.error());
  const int64_t n = static_cast<int64_t>(tokens->size());
  auto ctx = args->get_int("ctx-size", n, 1, 1 << 24);
  if (!ctx) return fail(ctx.error());
  if (*ctx < n) return fail("--tokens has " + std::to_string(n) + " tokens, more than the context size " +
                            std::to_string(*ctx));
  auto threads = args->get_int("threads", 1, 1, 1024);
  if (!threads) return fail(threads.error());

  auto ef = parse_engine_flags(*args);
  if (!ef) return fail(ef.error());
  auto model = open_model(args->get("model"), ef->load);
  if (!model) return fail(model.error());
  ExecutorOptions opts;
  opts.n_ctx = static_cast<int>(*ctx);
  opts.n_threads = static_cast<int>(*threads);
  ef->apply(opts);
  auto kv = kv_cache_type(args->get("cache-type-k"), args->get("cache-type-v"));
  if (!kv) return fail(kv.error());
  opts.kv_type = *kv;
  auto ex = make_engine(*model, opts, args->has("ref") ? Engine::Reference : Engine::Best);
  if (!ex) return fail(ex.error());
  for (int32_t t : *tokens)
    if (t >= (*ex)->n_vocab())
      return fail("token id " + std::to_string(t) + " is out of range (vocabulary of " +
                  std::to_string((*ex)->n_vocab()) + ")");
  auto logits = compute(**ex, *tokens, mode == "prefill");
  if (!logits) return fail(logits.error());
  Status st = write_all(args->get("output"), *logits);
  if (!st) return fail(st.message());
  return 0;
}

}  // namespace zenmoe::tools
