// What every forward-pass engine offers the front ends (run, logits, bench, serve):
// feed tokens at the next positions of one sequence, get logits back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe {

namespace gguf {
class Model;
}

// Element type of the KV cache. The fast executor keeps the MLA latent cache in it (Q8_0:
// ggml's 32-code blocks with an F16 scale); the reference engine always keeps F32.
enum class KvCacheType : uint8_t { F32, F16, Q8_0, BF16 };
inline const char* kv_cache_type_name(KvCacheType t) {
  return t == KvCacheType::F16 ? "f16" : t == KvCacheType::Q8_0 ? "q8_0" : t == KvCacheType::BF16 ? "bf16" : "f32";
}

// How the fast executor runs MLA attention over a batch of tokens. Absorbed: the queries are
// mapped into the latent space and attend to the cached latent rows (what decode needs).
// Decompressed: every visible position's keys and values are rebuilt per head from the latent
// rows, then ordinary attention over them; cheaper for long prompts. Auto picks per batch.
enum class MlaForm : uint8_t { kAuto, kAbsorbed, kDecompressed };
inline const char* mla_form_name(MlaForm f) {
  return f == MlaForm::kAbsorbed ? "absorbed" : f == MlaForm::kDecompressed ? "decompressed" : "auto";
}

namespace ir {
struct Graph;
struct Node;
}  // namespace ir

// How profile() and decode_weight_bytes() group their figures: by op kind, or by node, the
// same node of every layer summed (see profile_key).
enum class ProfileBy : uint8_t { kOpKind, kNode };

struct ExecutorOptions {
  int n_ctx = 4096;   // context limit (positions); eval past it is an error
  int n_threads = 1;  // worker threads (engines may use fewer)
  int n_ubatch = 512;  // tokens per forward chunk of a long batch (engines may use fewer)
  bool profile = false;  // accumulate time per op kind (Executor::profile())
  ProfileBy profile_by = ProfileBy::kOpKind;
  KvCacheType kv_type = KvCacheType::F32;  // KV cache element type (see KvCacheType)
  MlaForm mla_form = MlaForm::kAuto;        // fast executor only (see MlaForm)
  // Fast executor: while decode attention computes, each thread asks into its core's L2 the
  // packed weights it reads next, up to this many bytes (kAttnPrefetchAuto: the L2's size less
  // the cache rows a call reads, on Zen 4 every byte up to 4 MiB; 0: none).
  static constexpr int64_t kAttnPrefetchAuto = -1;
  int64_t attn_prefetch_bytes = kAttnPrefetchAuto;
  // Independent sequences the engine holds, each with its own positions and KV cache rows
  // (Executor::select_seq, eval_seqs); the fast executor only, others hold one.
  int n_seq = 1;
};

// The checks every engine's eval() makes before it runs: a non-empty batch, within the
// context limit, every id a row of the embedding table (n_rows of them).
Status check_eval_tokens(std::span<const int32_t> tokens, int n_past, int n_ctx, int64_t n_rows);

class Executor;
// The checks eval_seqs makes before it runs: as many sequences as tokens, at least one, each a
// sequence of ex (no two the same) with room for one more position, every id a row of the
// embedding table (n_rows of them).
Status check_eval_seqs(const Executor& ex, std::span<const int32_t> tokens, std::span<const int> seqs, int64_t n_rows);
// The checks copy_seq makes: both sequences of ex, n within what src holds.
Status check_copy_seq(const Executor& ex, int src, int dst, int n);

// Node n's key in profiles: its op kind's name, or with kNode "op:name", name being its first
// output's value name without a leading "blk.N." (e.g. "matmul:q_lat" for every layer's q_lat).
std::string profile_key(const ir::Graph& g, const ir::Node& n, ProfileBy by);
// Seconds per node (nodes[i] took seconds[i]) summed by profile_key, largest first, entries
// without time left out: what Executor::profile() returns.
std::vector<std::pair<std::string, double>> sum_by_profile_key(const ir::Graph& g,
                                                                std::span<const ir::Node* const> nodes,
                                                                std::span<const double> seconds, ProfileBy by);

// One of an engine's KV caches (a state value of its graph), a row per position: position p
// is bytes [p * row_bytes, (p + 1) * row_bytes) of data, which holds n_ctx() rows. What a
// prompt cache file saves and restores (runtime/prompt_cache.h).
struct KvCacheRows {
  std::string name;
  GgmlType type = GgmlType::F32;  // element type
  int64_t row_elems = 0;          // elements per position
  int64_t row_bytes = 0;
  uint8_t* data = nullptr;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual int n_vocab() const = 0;
  virtual int n_ctx() const = 0;
  // Positions already held in the KV cache; the next eval starts here.
  virtual int n_past() const = 0;
  // Appends `tokens` at positions n_past() .. n_past()+n-1 as one batch (prefill when n > 1,
  // decode when n == 1). Writes logits row-major: [n][n_vocab] when all_logits, else only the
  // last position's [n_vocab]. Errors: token id out of range, context limit exceeded.
  virtual Status eval(std::span<const int32_t> tokens, float* logits, bool all_logits) = 0;
  // Forgets the sequence (n_past() becomes 0).
  virtual void reset() = 0;
  // The KV caches, in graph order (rows past n_past() hold nothing of the sequence).
  virtual std::vector<KvCacheRows> kv_caches() = 0;
  // Keeps the first n positions of the sequence (0 <= n <= n_past()): the next eval starts at n.
  virtual Status rewind(int n) = 0;
  // The caller wrote rows [0, n) of every kv_caches() entry (a saved sequence, 0 <= n <=
  // n_ctx()): they are now the sequence, and the next eval starts at n.
  virtual Status restore(int n) = 0;
  // Sequences (ExecutorOptions::n_seq): the calls above act on the selected one, sequence 0
  // until select_seq picks another; each keeps its positions while others are selected.
  virtual int n_seq() const { return 1; }
  virtual Status select_seq(int s);
  virtual int selected_seq() const { return 0; }
  // Positions sequence s holds (n_past() of the selected one).
  virtual int seq_past(int s) const { return s == 0 ? n_past() : 0; }
  // Sequence dst becomes the first n positions of sequence src (0 <= n <= seq_past(src)): their
  // KV cache rows are copied, so a prompt two sequences share is evaluated once.
  virtual Status copy_seq(int src, int dst, int n);
  // One token for each of several distinct sequences, appended at each one's next position in
  // one pass over the weights (batched decoding); logits [n][n_vocab] in the order given. The
  // selected sequence stays selected. Checks every token, sequence and context limit before
  // evaluating any. This default evaluates them one after another.
  virtual Status eval_seqs(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits);
  // Seconds per op kind (or node: ExecutorOptions::profile_by) accumulated over evals when
  // ExecutorOptions::profile was set, largest first; empty for engines that do not profile.
  virtual std::vector<std::pair<std::string, double>> profile() const { return {}; }
  // Weight bytes one decoded token streams, by profile key, as the engine stores them (repacked
  // layouts; routed experts count the experts a token uses); empty when the engine does not
  // say. With profile() this gives each op kind's read bandwidth.
  virtual std::map<std::string, uint64_t> decode_weight_bytes() const { return {}; }
  // Seconds the calling thread, done with its part of a parallel step, waited for the other
  // threads, accumulated over evals when ExecutorOptions::profile was set; 0 for engines
  // without a thread pool.
  virtual double barrier_wait_seconds() const { return 0; }

 protected:
  // eval_seqs without its checks (the caller made them): each token selected and evaluated in
  // turn, then the selected sequence selected again.
  Status eval_seqs_in_turn(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits);
};

}  // namespace zenmoe
