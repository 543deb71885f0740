// Absorbed MLA attention for the fast executor. The cache row of a position is [c | k_pe]
// (kv_lora + rope dims); a query row is [q_lat | q_pe] per head. For a block of query rows
// (token, head) the scores are one matrix product Q·Cacheᵀ, the causal mask and softmax run
// per row, and the output is P·V with V the first kv_lora columns of the same cache rows —
// two SGEMMs per block, the rows split across the pool's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "kernels/ref/fp16.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "kernels/status.h"
#include "runtime/ref_executor_ops.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

// Allocates on 64-byte boundaries: the decode kernels load whole query rows a cache line at a
// time, and loads split across two lines cost the scores kernels about a third of their speed.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: allocator rebinding
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const CacheLineAllocator&) const { return true; }
};
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;

struct AttentionScratch {
  AlignedFloats q, s;       // per thread: query block and score block
  AlignedFloats k, v;       // decompressed form, not keeping: one head's keys and values
  std::vector<float> kv;    // Q8_0 cache, SGEMM path: a chunk of cache rows widened to F32
  AlignedFloats flash;      // decode: the generated attention kernel's working memory
  // Decode: byte ranges (address, size pairs) the next decode kernel call asks into L2 while it
  // computes, the weights this thread reads after the attention; cleared by that call.
  const int64_t* side = nullptr;
  int64_t side_ranges = 0;
};
// The first `budget` bytes of the side stream `ranges` (address, size pairs) into `out`: the
// ranges in order, the last one cut short.
void side_ranges_within(const std::vector<int64_t>& ranges, int64_t budget, std::vector<int64_t>& out);

// Batches of at most this many tokens take the decode kernels (every cache type).
inline constexpr int64_t kMlaGlueMaxTokens = 4;
// Split decode: the fewest cache positions worth a share of their own. Split by heads, a thread
// whose heads leave lanes of its vectors idle (the bench preset's 16 heads on 2 threads: 8 heads
// in a vector of 16) walks every position at the cost of whole vectors, so shares of positions
// pay from a few dozen (MlaSplit, 16 heads, 2 threads on two cores, cache resident: by heads
// against split 21.5 / 38.6 / 75 us at 64 / 128 / 256 positions, split into shares of at least
// 32 positions 18.7 / 30.8 / 52-64 us; 32-48 positions even). When the heads fill every
// thread's vectors (64 heads on 2 threads), splitting adds the merge and the per-call costs of
// more vectors to the same multiply-adds (64 heads, 256 positions: 191-196 by heads against
// 232-241 us split): only past kMlaSplitMinRowsWhole positions a thread, where reading the
// cache once per token instead of once per thread weighs more.
inline constexpr int64_t kMlaSplitMinRows = 32;
inline constexpr int64_t kMlaSplitMinRowsWhole = 128;

class MlaOp {
 public:
  // Decode-sized batches (at most kMlaGlueMaxTokens tokens) run the generated heads-in-lanes
  // kernel (GlueOp::kAttnDecode) over the cache rows of any type, larger ones the SGEMM pair;
  // without AVX-512 (scalar target) SGEMM serves both. kv: the cache's element type. F16 and BF16:
  // store() converts, and batches of any size run the decode kernels token by token over the
  // rows each token sees; without them, every batch runs the SGEMM pair over an F32 copy of the
  // stored rows, each row widened once when it is stored. Q8_0: store() quantises; SGEMM batches
  // widen chunks of kKvChunkRows rows into each thread's scratch, so the cache is never held in
  // F32.
  // `threads`: the pool's size. One token's heads split across that many threads, each thread
  // runs a decode kernel laid out for its share of the heads (whole vectors of 16): one laid
  // out for all of them would walk every head's lanes on every thread.
  static Expected<std::unique_ptr<MlaOp>> create(const ir::Node& n, const ir::Graph& g, isa::Target target,
                                                 KvCacheType kv, int threads = 1);
  // The lanes (16 per vector) each decode kernel is laid out for, ascending; empty without them.
  std::vector<int64_t> decode_lanes() const {
    std::vector<int64_t> l;
    for (const AttnKernel& a : attn_) l.push_back(a.layout.lanes);
    return l;
  }
  // Whether the decode kernels multiply in bf16 pairs (glue_attn_bf16_dot: a BF16 cache on an
  // AVX512_BF16 target scheduled for Zen 4 or Zen 5); the queries and probabilities are then
  // rounded to bf16.
  bool decode_bf16_pairs() const { return bf16_pairs_ && !amx_; }
  // Whether the decode kernels score a Q8_0 cache in int8 (glue_attn_q8_dot: an AVX-512 VNNI
  // target); the queries are then quantised to q8_0 blocks as ggml quantises activations.
  bool decode_q8_scores() const { return q8_scores_; }
  // Whether decode-sized batches run on the AMX tile unit instead (runtime/attn_amx.h): an F16
  // or BF16 cache on a target of level amx.
  bool decode_amx() const { return amx_; }
  // Caller thread: writes this batch's cache rows. `row0`: a batch of tokens from several
  // sequences (Executor::eval_seqs), token t's sequence holding cache rows row0[t] .. row0[t] +
  // pos[t] (its own positions 0 .. pos[t]); null: one sequence, rows 0 .. pos[t].
  void store(std::span<refexec::Tensor* const> in, const int64_t* row0 = nullptr) const;
  // Whether batches from several sequences can run (run() with row0): the decode kernels,
  // which take each token over its own rows, exist for this cache type and target.
  bool runs_sequences() const { return avx512_; }
  // Cache rows [from, to) were written from outside (a restored prompt cache; from == to after
  // a rewind): keys and values kept from position `from` on are forgotten, and the F32 copy the
  // SGEMM path reads is widened again from those rows.
  void rows_replaced(const refexec::Tensor& cache, int64_t from, int64_t to) const;
  // Caller thread, after store(): whether this batch runs split by cache positions (below) on
  // nth threads, sizing the partial results if so. Decode of one token, where the decode kernels
  // run, over at least min_rows positions per thread: every thread then reads only its share of
  // the cache, for all heads (split by heads, every thread would read all of it; on CPUs with
  // an L3 per core complex, each complex from memory). Over fewer positions, with more threads
  // than vectors of 16 heads (64 heads on 16 threads: 4 vectors), each vector's positions are
  // split into shares of at least min_rows, one thread per vector and share: split by heads,
  // every thread would walk all positions for a quarter-used vector. `min_rows` 0:
  // kMlaSplitMinRowsWhole when the heads split into whole vectors per thread, else
  // kMlaSplitMinRows (benchmarks pass others).
  bool prepare_split(int64_t T, int nth, const refexec::Tensor& pos, int64_t min_rows = 0) const;
  // After prepare_split returned true: the shares the positions are split into.
  int64_t split_shares() const { return split_shares_; }
  // Thread `tid` of the nth prepare_split laid out, over its share of the positions: scores for
  // its heads (all, or one vector of 16), softmax within the share, partial values. Then, once
  // all threads are done, merge() on each thread's heads rescales the partial results by their
  // softmax sums and maxima and adds them into y.
  void run_part(int tid, std::span<refexec::Tensor* const> in, AttentionScratch& scratch) const;
  void merge(int tid, int nth, refexec::Tensor& y) const;
  // Thread `tid` of `nth`: its share of the (token, head) rows. `row0` as for store() (then
  // runs_sequences() must hold): every token runs the decode kernels over its sequence's rows.
  void run(int tid, int nth, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
           AttentionScratch& scratch, const int64_t* row0 = nullptr) const;

  // The decompressed form (runtime/fast_mla_full.cpp), for executors that skip the absorbing
  // matmuls around this op: q_nope [dn, H, T] as the first of them reads it (F32 or quantised:
  // the decompressed scores see the same rounding), the weights k_b [dn, R, H] and v_b
  // [R, dv, H] of those matmuls (any format with a reference dequantisation), and instead of
  // the latent output, the heads' outputs [dv, H, T] (what the v_b matmul would have made).
  Status enable_decompressed(const refexec::Tensor* q_nope, const refexec::Tensor* k_b, const refexec::Tensor* v_b);
  bool has_decompressed() const { return q_nope_ != nullptr; }
  // Whether a batch of T tokens after n_past cached positions costs less decompressed (an
  // estimate from the multiply-adds of both forms and their measured rates).
  bool decompressed_pays(int64_t T, int64_t n_past) const;
  // Keys and values decompressed for one prompt chunk are kept for the next ones while all
  // heads' rows fit `bytes` (0: never kept).
  void set_keep_bytes(int64_t bytes) { keep_bytes_ = bytes; }
  // After store(), on the caller thread: sizes the shared buffers for this batch and picks the
  // positions whose keys and values it decompresses (those not kept from earlier batches).
  void prepare_decompressed(int64_t T, const refexec::Tensor& pos);
  // Two passes over the pool: the visible cache rows widened to F32 (a share per thread), then
  // whole heads per thread: keys and values decompressed, scores, softmax, values. The heads
  // are claimed one at a time from `heads`, reset by the caller to heads() units in even shares
  // (each head is the same work; claimed, the last ones go to whichever thread is free first).
  void widen_decompressed(int tid, int nth, std::span<refexec::Tensor* const> in) const;
  void run_decompressed(int tid, WorkQueue& heads, std::span<refexec::Tensor* const> in, AttentionScratch& sc) const;
  int64_t heads() const { return H_; }
  // Copies the heads' outputs of the last decompressed batch into o_heads [dv, H, T].
  void copy_decompressed(refexec::Tensor& o_heads) const;

 private:
  // Decode-sized batches: each token's query rows against the cache rows it sees (decode_rows).
  void run_decode(int64_t i0, int64_t i1, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
                  AttentionScratch& sc, const int64_t* row0) const;
  void run_sgemm(int64_t i0, int64_t i1, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
                 AttentionScratch& sc) const;
  // Q8_0 cache: the SGEMM pair over chunks of widened rows.
  void run_sgemm_q8(int64_t i0, int64_t i1, std::span<refexec::Tensor* const> in, refexec::Tensor& y,
                    AttentionScratch& sc) const;
  // Whether a batch of T tokens runs the SGEMM pair (on F32 rows).
  bool sgemm_batch(int64_t T) const;
  // Widens cache rows [j0, j0 + n) into sc.kv (W floats each).
  const float* widen_chunk(const refexec::Tensor& cache, int64_t j0, int64_t n, int64_t W,
                           AttentionScratch& sc) const;

  const float* f32_cache(const refexec::Tensor& cache) const;
  // F16 / BF16 cache: the F32 copy of rows [p0, p1) (widened_) made from the cache.
  void widen_copy(const refexec::Tensor& cache, int64_t p0, int64_t p1) const;

  float scale_ = 1.0f;
  KvCacheType kv_ = KvCacheType::F32;
  bool avx512_ = false;  // the target allows AVX-512 (the decode kernels)
  bool bf16_pairs_ = false;  // the decode kernels take the bf16 dot form
  bool q8_scores_ = false;   // the decode kernels score in int8 (Q8_0 cache)
  bool amx_ = false;         // decode batches run amx_attend
  mutable std::vector<float> widened_;  // F16 / BF16 cache rows as F32 for the SGEMM path
  // Split decode: heads per thread (H, or 16) and position shares per head. Thread t takes
  // heads from t / split_shares_ * split_heads_ and share j = t % split_shares_; per share j and
  // head h: partial values part_y_[(j * H + h) * R ...], the scaled score maximum
  // part_max_[j * H + h] and 1 / (softmax sum) part_inv_[j * H + h] of the share's positions
  // (part_inv_ 0: no positions).
  mutable int64_t split_heads_ = 0, split_shares_ = 0;
  mutable std::vector<float> part_y_, part_max_, part_inv_;
  // The m query rows in sc.q against cache rows [j0, j0 + n) with the decode kernels: scores,
  // softmax over those rows, values into y (m rows of R). When smax / inv are given, row k's
  // largest scaled score goes to smax[k] and 1 / its softmax sum to inv[k].
  void decode_rows(int64_t m, int64_t j0, int64_t n, const refexec::Tensor& cache, float* y, AttentionScratch& sc,
                   float* smax = nullptr, float* inv = nullptr) const;
  int64_t R_ = 0, W_ = 0, H_ = 0;  // latent width, cache row width, heads
  // Causal softmax rows (generated; the reference softmax when the target has no glue).
  void softmax_rows(float* s, int64_t rows, int64_t stride, int64_t vis) const;
  // Query rows [i0, i1) of a score block with row stride n_vis: each token's rows see up to
  // its own position.
  void causal_softmax(float* s, int64_t i0, int64_t i1, int64_t n_vis, int64_t H, const refexec::Tensor& pos) const;

  GlueFn softmax_ = nullptr;
  // Decode attention (kAttnDecode) over this cache type, by lanes ascending: laid out for H_
  // heads last, before it for a thread's share of them when that takes fewer vectors.
  struct AttnKernel {
    GlueFn fn = nullptr;
    GlueAttnLayout layout;  // its working memory
  };
  std::vector<AttnKernel> attn_;

  // Decompressed form.
  const refexec::Tensor *q_nope_ = nullptr, *k_b_ = nullptr, *v_b_ = nullptr;
  int64_t dn_ = 0, dv_ = 0;
  // k_b and v_b per head as F32, made on first use by the thread that runs the head:
  // kb_[h] is R x dn (k_b's rows), vb_[h] dv x R.
  mutable std::vector<AlignedFloats> kb_, vb_;
  mutable AlignedFloats rows_;  // the visible cache rows as F32 (non-F32 caches)
  mutable AlignedFloats out_;   // heads' outputs, [T][H][dv]
  int64_t full_T_ = 0, full_vis_ = 0;
  // Kept keys keep_k_[h] (rows of dn + r) and values keep_v_[h] (rows of dv) of positions
  // [0, kept_): store() lowers kept_ to the first position it rewrites. This batch decompresses
  // positions [full_from_, full_vis_) (from 0 into per-thread scratch when not keeping).
  mutable std::vector<AlignedFloats> keep_k_, keep_v_;
  mutable int64_t kept_ = 0;
  int64_t full_from_ = 0, keep_bytes_ = 0;
  bool keeping_ = false;
  // Whether the keys and values of this many positions fit the budget.
  bool keeps(int64_t positions) const;
  const float* full_rows(const refexec::Tensor& cache) const;
  void dequantize_head(int64_t h) const;
};

// Q8_0 cache rows widened at a time on the SGEMM path (576 dims: 1.2 MB of F32, about a core's L2).
inline constexpr int64_t kKvChunkRows = 512;

// The calling thread's dense-algebra library runs single-threaded (the pool owns the cores).
void single_threaded_blas();

}  // namespace zenmoe
