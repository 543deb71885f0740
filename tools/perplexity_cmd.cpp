// `zenmoe perplexity`: the perplexity of a model over a text, and the KL divergence of its
// next-token distributions from those saved in a log-probability file, as llama.cpp's
// perplexity tool computes and prints them (tools/perplexity.h), so the figures compare with
// llama.cpp's on the same file and text, and a base file saved by either tool is read by the
// other.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/logprob_file.h"
#include "runtime/temp_files.h"
#include "runtime/thread_pool.h"
#include "runtime/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/engine.h"
#include "tools/perplexity.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = with_engine_flags({
    {"model", "m", true, "model file (.gguf, first part of a split model, or a .zplan)"},
    {"file", "f", true, "text to score (tokenised with BOS as the model adds it)"},
    {"ctx-size", "c", true, "tokens per chunk (default 512); each chunk's second half is scored"},
    {"chunks", "", true, "score at most this many chunks (default: all the text gives)"},
    {"kl-divergence-base", "", true,
     "log-probability file: written while scoring -f, or with --kl-divergence read as the base"},
    {"kl-divergence", "", false, "compare with --kl-divergence-base's log-probabilities (its tokens; no -f)"},
    {"threads", "t", true, "threads (default: one per core this process may use)"},
    {"cache-type-k", "ctk", true, "KV cache type: f16 (default), f32, bf16 or q8_0"},
    {"cache-type-v", "ctv", true, "KV cache type for values (MLA: must match --cache-type-k)"},
    {"ref", "", false, "force the scalar reference executor"},
    {"help", "h", false, "show this help"},
});

// Evaluates one chunk from an empty cache and leaves the logits of positions [n/2, n) in
// `logits` (row r: position n/2 + r). The first token becomes BOS when the model adds one.
Status eval_chunk(Executor& ex, std::span<const int32_t> chunk, int32_t bos, std::vector<float>& logits) {
  const size_t nv = static_cast<size_t>(ex.n_vocab());
  const size_t n = chunk.size(), first = n / 2;
  std::vector<int32_t> toks(chunk.begin(), chunk.end());
  if (bos >= 0) toks[0] = bos;
  ex.reset();
  logits.resize((n - first) * nv);
  ZENMOE_RETURN_IF_ERROR(ex.eval(std::span<const int32_t>(toks.data(), first), logits.data(), false));
  return ex.eval(std::span<const int32_t>(toks.data() + first, n - first), logits.data(), true);
}

void print_eta(double seconds_per_chunk, int n_chunk) {
  std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", seconds_per_chunk,
               seconds_per_chunk * n_chunk / 60.0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Writes the log-probability file as chunks are scored: a temporary renamed into place at the end.
class BaseWriter {
 public:
  Status open(const std::string& path) {
    path_ = path;
    return out_.open(path);
  }
  Status write(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, out_.file()) != bytes) return Error{path_ + ": write failed (disk full?)"};
    return Status::ok();
  }
  Status commit() { return out_.commit("the log-probabilities"); }

 private:
  std::string path_;
  TempOutput out_;
};

struct Common {
  int64_t chunks_limit = 0;
  int threads = 1;
  KvCacheType kv{};
  EngineFlags ef;
  Engine engine = Engine::Best;
};

Expected<std::unique_ptr<Executor>> engine_for(const OpenedModel& model, const Common& c, int n_ctx) {
  ExecutorOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_threads = c.threads;
  c.ef.apply(eo);
  eo.kv_type = c.kv;
  return make_engine(model, eo, c.engine);
}

int32_t bos_if_added(const tok::Tokenizer& tk) { return tk.add_bos() ? tk.bos() : -1; }

int perplexity(const Args& a, const OpenedModel& model, const tok::Tokenizer& tk, const Common& c) {
  auto text = read_text_file(a.get("file"), "text file");
  if (!text) return fail(text.error());
  const std::vector<int32_t> tokens = tk.encode(*text, /*add_special=*/true, /*parse_special=*/false);
  auto ctx = a.get_int("ctx-size", 512, 4, 1 << 20);
  if (!ctx) return fail(ctx.error());
  const int n_ctx = static_cast<int>(*ctx);
  if (tokens.size() < 2 * static_cast<size_t>(n_ctx))
    return fail(a.get("file") + " gives " + std::to_string(tokens.size()) + " tokens; a context of " +
                std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx) + " (lower -c)");
  const int n_chunk = static_cast<int>(
      std::min<int64_t>(static_cast<int64_t>(tokens.size() / static_cast<size_t>(n_ctx)), c.chunks_limit));
  auto ex = engine_for(model, c, n_ctx);
  if (!ex) return fail(ex.error());
  const int n_vocab = (*ex)->n_vocab();
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) return fail("token " + std::to_string(t) + " is outside the model's vocabulary");

  std::optional<BaseWriter> base;
  std::vector<uint16_t> records;
  const int scored = ppl::scored_positions(n_ctx);
  if (a.has("kl-divergence-base")) {
    base.emplace();
    Status st = base->open(a.get("kl-divergence-base"));
    const uint32_t sizes[3] = {static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(n_vocab),
                               static_cast<uint32_t>(n_chunk)};
    if (st) st = base->write("_logits_", 8);
    if (st) st = base->write(sizes, sizeof sizes);
    if (st) st = base->write(tokens.data(), sizeof(int32_t) * static_cast<size_t>(n_chunk) * n_ctx);
    if (!st) return fail(st.message());
    records.resize(static_cast<size_t>(scored) * ppl::record_u16(n_vocab));
  }
  std::fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d (%d scored each)\n", tokens.size(), n_chunk, n_ctx,
               scored);
  double sum = 0, sum2 = 0;
  size_t count = 0;
  std::vector<float> logits;
  const size_t nv = static_cast<size_t>(n_vocab);
  for (int i = 0; i < n_chunk; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const int32_t> chunk(tokens.data() + static_cast<size_t>(i) * n_ctx, static_cast<size_t>(n_ctx));
    Status st = eval_chunk(**ex, chunk, bos_if_added(tk), logits);
    if (!st) return fail(st.message());
    if (i == 0) print_eta(seconds_since(t0), n_chunk);
    const size_t first = static_cast<size_t>(n_ctx / 2);
    for (int r = 0; r < scored; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * nv;
      const int next = chunk[first + static_cast<size_t>(r) + 1];
      const double v = base ? ppl::encode_log_probs(row, n_vocab, next, records.data() + r * ppl::record_u16(n_vocab))
                            : ppl::nll(row, n_vocab, next);
      sum += v;
      sum2 += v * v;
      ++count;
    }
    if (base) {
      st = base->write(records.data(), records.size() * sizeof(uint16_t));
      if (!st) return fail(st.message());
    }
    std::printf("[%d]%.4f,", i + 1, std::exp(sum / static_cast<double>(count)));
    std::fflush(stdout);
  }
  std::printf("\n");
  if (base) {
    Status st = base->commit();
    if (!st) return fail(st.message());
  }
  const double mean = sum / static_cast<double>(count);
  const double var = sum2 / static_cast<double>(count) - mean * mean;
  const double ppl = std::exp(mean);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl,
              var > 0 ? ppl * std::sqrt(var / static_cast<double>(count - 1)) : 0.0);
  return 0;
}

int kl_divergence(const Args& a, const OpenedModel& model, const tok::Tokenizer& tk, const Common& c) {
  if (!a.has("kl-divergence-base")) return fail("--kl-divergence needs --kl-divergence-base FILE");
  if (a.has("file")) return fail("--kl-divergence scores the tokens of --kl-divergence-base; drop -f");
  if (a.has("ctx-size")) return fail("--kl-divergence uses the context size of --kl-divergence-base; drop -c");
  const std::string path = a.get("kl-divergence-base");
  auto header = logprob::read_header(path);
  if (!header) return fail(header.error());
  const int n_ctx = static_cast<int>(header->n_ctx);
  const int n_vocab = header->n_vocab;
  const int n_chunk = static_cast<int>(std::min<int64_t>(header->n_chunk, c.chunks_limit));
  auto ex = engine_for(model, c, n_ctx);
  if (!ex) return fail(ex.error());
  if ((*ex)->n_vocab() != n_vocab)
    return fail(path + " was made with a vocabulary of " + std::to_string(n_vocab) + " tokens, the model has " +
                std::to_string((*ex)->n_vocab()));
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(header->records_offset));
  const int scored = ppl::scored_positions(n_ctx);
  const size_t rec = ppl::record_u16(n_vocab);
  std::vector<uint16_t> records(static_cast<size_t>(scored) * rec);
  std::vector<float> logits, klds, p_diffs;
  klds.reserve(static_cast<size_t>(scored) * n_chunk);
  p_diffs.reserve(klds.capacity());
  ppl::KldSums sums;
  std::printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
              "Δp RMS            Same top p\n");
  for (int i = 0; i < n_chunk; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!in.read(reinterpret_cast<char*>(records.data()), static_cast<std::streamsize>(header->chunk_bytes)))
      return fail("cannot read the log-probabilities of chunk " + std::to_string(i + 1) + " from " + path);
    const std::span<const int32_t> chunk(header->tokens.data() + static_cast<size_t>(i) * n_ctx,
                                         static_cast<size_t>(n_ctx));
    Status st = eval_chunk(**ex, chunk, bos_if_added(tk), logits);
    if (!st) return fail(st.message());
    if (i == 0) print_eta(seconds_since(t0), n_chunk);
    const size_t first = static_cast<size_t>(n_ctx / 2);
    for (int r = 0; r < scored; ++r) {
      float kld = 0, p_diff = 0;
      ppl::kld_accumulate(logits.data() + static_cast<size_t>(r) * static_cast<size_t>(n_vocab), n_vocab,
                          records.data() + static_cast<size_t>(r) * rec, chunk[first + static_cast<size_t>(r) + 1],
                          &sums, &kld, &p_diff);
      klds.push_back(kld);
      p_diffs.push_back(p_diff);
    }
    std::fputs(ppl::kld_chunk_row(i + 1, sums).c_str(), stdout);
    std::fflush(stdout);
  }
  std::printf("\n%s", ppl::kld_report(sums, std::move(klds), std::move(p_diffs)).c_str());
  return 0;
}

}  // namespace

int cmd_perplexity(int argc, char** argv, int first) {
  const std::string synopsis =
      "perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [--kl-divergence-base FILE [--kl-divergence]]";
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text(synopsis, kFlags).c_str(), stdout);
    return 0;
  }
  if (!args->positionals().empty()) return fail("unexpected argument '" + args->positionals()[0] + "'");
  if (!args->has("model")) return fail("missing -m MODEL (usage: zenmoe " + synopsis + ")");
  const bool kld = args->has("kl-divergence");
  if (!kld && !args->has("file")) return fail("missing -f TEXT (usage: zenmoe " + synopsis + ")");
  Common c;
  auto chunks = args->get_int("chunks", int64_t{1} << 30, 1, int64_t{1} << 30);
  if (!chunks) return fail(chunks.error());
  c.chunks_limit = *chunks;
  auto threads = args->get_int("threads", args->has("threads") ? 1 : default_thread_count(), 1, 1024);
  if (!threads) return fail(threads.error());
  c.threads = static_cast<int>(*threads);
  auto kv = kv_cache_type(args->get("cache-type-k"), args->get("cache-type-v"));
  if (!kv) return fail(kv.error());
  c.kv = *kv;
  auto ef = parse_engine_flags(*args);
  if (!ef) return fail(ef.error());
  c.ef = *ef;
  c.engine = args->has("ref") ? Engine::Reference : Engine::Best;
  auto model = open_model(args->get("model"), ef->load);
  if (!model) return fail(model.error());
  auto tk = tok::Tokenizer::from_metadata(model->gguf.metadata());
  if (!tk) return fail(tk.error());
  return kld ? kl_divergence(*args, *model, *tk, c) : perplexity(*args, *model, *tk, c);
}

}  // namespace zenmoe::tools
