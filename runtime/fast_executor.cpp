#include "runtime/fast_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "ir/memory_plan.h"
#include "ir/memplan.h"
#include "runtime/fast_attention.h"
#include "runtime/fast_gate_up.h"
#include "runtime/fast_glue.h"
#include "runtime/fast_matmul.h"
#include "runtime/huge_buffer.h"
#include "runtime/ref_executor_ops.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

namespace {

using refexec::Tensor;

// The automatic decode attention side stream on Zen 4: at most this many bytes a thread (Impl::init).
constexpr int64_t kZen4SideBytes = int64_t{4} << 20;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer zeroed(int64_t bytes) {
  const auto n = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  Buffer b(static_cast<uint8_t*>(std::aligned_alloc(64, n)));
  if (b) std::memset(b.get(), 0, n);
  return b;
}

int64_t resolve(int64_t d, int64_t n_tokens, int64_t n_ctx) {
  return d == ir::kDimTokens ? n_tokens : d == ir::kDimContext ? n_ctx : d;
}

// Ops whose every token is independent of the others: split by tokens across threads.
bool per_token(ir::OpKind op) {
  switch (op) {
    case ir::OpKind::Embed: case ir::OpKind::RmsNorm: case ir::OpKind::Quantize: case ir::OpKind::Slice:
    case ir::OpKind::Rope: case ir::OpKind::Router: case ir::OpKind::SwiGlu: case ir::OpKind::WeightedSum:
    case ir::OpKind::Add: case ir::OpKind::RmsNormQuantize:
      return true;
    default:
      return false;
  }
}

enum class StepKind { Light, Mat, GateUp, Mla, Serial, View };

// The steps around an MLA step that its decompressed form replaces: the matmul moving the
// queries into the latent space, the quantisation of the latent output and the matmul moving
// it back out (which then only copies the heads' outputs).
enum class MlaRole { None, AbsorbQuery, QuantizeLatent, ExpandOutput };

struct Step {
  const ir::Node* node = nullptr;
  StepKind kind = StepKind::Light;
  std::unique_ptr<MatOp> mat;
  std::unique_ptr<GateUpOp> gate_up;
  std::unique_ptr<MlaOp> mla;
  std::unique_ptr<LightGlue> glue;  // generated kernel of a light op (else the reference)
  std::vector<Tensor*> in, out;
  std::vector<bool> in_t, out_t;  // the value has a token dimension (last)
  MlaRole role = MlaRole::None;
  size_t mla_step = 0;  // with a role: the MLA step it belongs to
  // A dense gate/up step's partner (link_gate_up_pairs): the routed gate/up right after it over
  // the same activations, run with it, or -1; `ran_early`: the routed step already ran.
  int partner = -1;
  bool ran_early = false;
  // MLA step: per thread, the weight ranges it reads next, as address and size pairs
  // (link_side_streams).
  std::vector<std::vector<int64_t>> side;
  // A product or attention step: the weights of the light steps after it (link_light_warmups),
  // as address and size pairs, asked into the caches as it starts.
  std::vector<std::pair<const uint8_t*, int64_t>> warm;
};

// The part of `t` (token dimension last) holding tokens [t0, t1).
Tensor token_view(const Tensor& t, int64_t t0, int64_t t1) {
  Tensor v = t;
  int64_t per = row_bytes(t.type, t.ne.size() == 1 ? 1 : t.ne[0]);
  for (size_t i = 1; i + 1 < t.ne.size(); ++i) per *= t.ne[i];
  v.ne.back() = t1 - t0;
  v.cdata = t.cdata + t0 * per;
  v.data = t.data == nullptr ? nullptr : t.data + t0 * per;
  return v;
}

bool is_mla_cache(const ir::Graph& g, int value) {
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::OpKind::MlaAttention && n.inputs.size() > 4 && n.inputs[4] == value) return true;
  return false;
}

class Impl final : public FastExecutor {
 public:
  Status init(std::shared_ptr<const CompiledModel> cm, const FastExecutorOptions& o);
  int n_vocab() const override { return n_vocab_; }
  int n_ctx() const override { return n_ctx_; }
  int n_past() const override { return n_past_; }
  Status eval(std::span<const int32_t> tokens, float* logits, bool all_logits) override;
  int n_seq() const override { return static_cast<int>(seq_past_.size()); }
  Status select_seq(int s) override;
  int selected_seq() const override { return seq_; }
  int seq_past(int s) const override {
    return s == seq_ ? n_past_ : s >= 0 && s < n_seq() ? seq_past_[static_cast<size_t>(s)] : 0;
  }
  Status eval_seqs(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits) override;
  Status copy_seq(int src, int dst, int n) override;
  void reset() override { n_past_ = 0; }
  std::vector<KvCacheRows> kv_caches() override { return refexec::kv_cache_rows(cm_->graph, tensors_); }
  Status rewind(int n) override;
  Status restore(int n) override;
  std::vector<std::pair<std::string, double>> profile() const override;
  std::map<std::string, uint64_t> decode_weight_bytes() const override;
  std::vector<std::string> dispatch_log() const override { return dispatch_; }
  double barrier_wait_seconds() const override { return pool_->caller_wait_seconds(); }
  const std::string& placement() const override { return pool_->placement(); }
  int64_t decompressed_chunks() const override { return decompressed_chunks_; }

 private:
  Status bind_values();
  Status build_steps();
  void link_decompressed_mla();
  void link_gate_up_pairs();
  void link_light_warmups();
  void link_side_streams(int64_t budget);
  // Decode attention with the automatic side stream: each thread's ranges cut to its L2 less the
  // cache rows its call reads (at most half the L2), so the lines asked for early are not
  // evicted by those rows before the weight products read them.
  void set_side_streams(const Step& s, bool split);
  // A thread that ran no decode kernel (no heads or positions of its own) still holds the
  // ranges it was given: forgotten, so no later layer's attention asks for them.
  void drop_side_streams() {
    for (AttentionScratch& sc : scratch_) {
      sc.side = nullptr;
      sc.side_ranges = 0;
    }
  }
  bool overlaps(int a, int b) const;  // the arena bytes of values a and b intersect
  // Points every KV cache tensor at sequence s's rows.
  void point_caches(int s);
  // Runs the steps over the T tokens and positions already in the inputs.
  Status run_steps(int64_t T);
  bool decompressed_batch(int64_t T) const;
  void size_for(int64_t T);
  Status run_step(Step& s, int64_t T);
  void run_light(Step& s, int64_t T);

  std::shared_ptr<const CompiledModel> cm_;
  FastExecutorOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  ir::MemoryPlan mem_;
  Buffer arena_;
  std::vector<std::shared_ptr<uint8_t>> states_;  // KV caches: zero pages until written
  std::vector<Tensor> tensors_;
  std::vector<Step> steps_;
  std::vector<AttentionScratch> scratch_;
  // Gate/up blocks (GateUpOp::run_blocks) dealt out by cost, then claimed as the threads go
  // (WorkQueue): runs within one matrix's blocks, so a claim is one kernel call as before, and
  // the last blocks go to whichever thread is free first (bench preset, 2 threads: thread 0
  // had waited 25-55 us per routed gate/up step of ~430 us for the other thread to finish).
  void deal_blocks(int64_t n, const std::function<int64_t(int64_t)>& cost) {
    cost_shares(n, cost, pool_->size(), shares_);
    work_.reset(shares_);
  }
  // n units of equal work (heads) in even shares, claimed the same way.
  void deal_even(int64_t n) {
    const int nth = pool_->size();
    shares_.resize(static_cast<size_t>(nth));
    for (int t = 0; t < nth; ++t) shares_[static_cast<size_t>(t)] = split_range(n, nth, t);
    work_.reset(shares_);
  }
  std::vector<Range> shares_;
  WorkQueue work_;
  int64_t side_l2_ = 0;                          // the L2 the automatic side stream fills
  // The automatic side stream: cut per call to the L2 less the cache rows, or (Zen 4) whole.
  bool side_cut_ = false, side_whole_ = false;
  std::vector<std::vector<int64_t>> side_trim_;  // per thread: its ranges cut for this call
  std::vector<float> gate_up_scratch_;
  std::vector<std::string> dispatch_;
  std::vector<double> step_seconds_;  // per step of steps_ when profiling
  int tokens_ = -1, positions_ = -1, logits_ = -1;
  int n_vocab_ = 0, n_ctx_ = 0, n_past_ = 0;
  // Sequences: the selected one (its positions in n_past_), every one's positions as of the
  // last time it was selected, and the KV cache bytes each holds per state value (0 for
  // values that are not caches). A batch from several sequences (eval_seqs) runs with the
  // caches pointed at sequence 0 and seq_rows_[t] the first cache row of token t's sequence.
  int seq_ = 0;
  std::vector<int> seq_past_ = {0};
  std::vector<int64_t> seq_bytes_;
  std::vector<int64_t> seq_rows_;
  bool seqs_batch_ = false;  // the running batch is from several sequences
  bool seqs_native_ = false;  // such batches run in one pass (else one token at a time)
  int64_t n_rows_embd_ = 0;
  bool decompressed_ = false;  // this chunk runs MLA in the decompressed form
  int mla_linked_ = 0, mla_total_ = 0;
  int64_t decompressed_chunks_ = 0;
};

Status Impl::bind_values() {
  const ir::Graph& g = cm_->graph;
  // The layout the memplan pass recorded (plan files carry it), else one made now.
  auto recorded = ir::recorded_memory_plan(g, opts_.max_batch);
  if (!recorded) return Error{"fast executor: " + recorded.error()};
  if (recorded->has_value()) {
    mem_ = std::move(**recorded);
  } else {
    auto plan = ir::plan_memory(g, opts_.max_batch);
    if (!plan) return Error{plan.error()};
    mem_ = std::move(*plan);
  }
  arena_ = zeroed(mem_.arena_bytes);
  if (!arena_) return Error{"fast executor: cannot allocate a " + std::to_string(mem_.arena_bytes) + "-byte arena"};
  tensors_.assign(g.values.size(), Tensor{});
  int64_t cache_bytes = 0;
  const uint64_t phys = physical_memory_bytes();
  states_.resize(g.values.size());
  seq_bytes_.assign(g.values.size(), 0);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value& v = g.values[i];
    Tensor& t = tensors_[i];
    t.type = v.type;
    for (int64_t d : v.shape) t.ne.push_back(resolve(d, opts_.max_batch, n_ctx_));
    if (v.kind == ir::ValueKind::Weight) {
      auto it = cm_->raw.find(v.name);
      if (it == cm_->raw.end()) return Error{"fast executor: no data for weight '" + v.name + "'"};
      const int64_t want = row_bytes(v.type, t.ne[0]) * (t.numel() / t.ne[0]);
      if (it->second.nbytes != static_cast<uint64_t>(want))
        return Error{"fast executor: weight '" + v.name + "' has " + std::to_string(it->second.nbytes) +
                     " bytes, expected " + std::to_string(want)};
      t.cdata = static_cast<const uint8_t*>(it->second.data);
    } else if (v.kind == ir::ValueKind::State) {
      // The MLA latent cache may be kept in F16, BF16 or Q8_0 (ExecutorOptions::kv_type); MHA
      // caches stay F32.
      if (opts_.base.kv_type != KvCacheType::F32 && is_mla_cache(g, static_cast<int>(i)))
        t.type = opts_.base.kv_type == KvCacheType::F16    ? GgmlType::F16
                 : opts_.base.kv_type == KvCacheType::BF16 ? GgmlType::BF16
                                                            : GgmlType::Q8_0;
      if (row_bytes(t.type, t.ne[0]) < 0)
        return Error{"fast executor: KV cache '" + v.name + "' rows of " + std::to_string(t.ne[0]) +
                     " elements cannot be kept as " + kv_cache_type_name(opts_.base.kv_type) + " (blocks of 32)"};
      // Anonymous memory reads as zeros and takes pages only as positions are written: a long
      // context costs memory for the positions used, and nothing is cleared up front.
      const int64_t per_seq = row_bytes(t.type, t.ne[0]) * (t.numel() / t.ne[0]);
      const int64_t bytes = per_seq * static_cast<int64_t>(seq_past_.size());
      // Refused here rather than when the positions are written, where the machine would run
      // out of memory part way through a generation.
      if (phys > 0 && static_cast<uint64_t>(cache_bytes + bytes) > phys)
        return Error{"fast executor: a KV cache of " + std::to_string(n_ctx_) + " positions" +
                     (seq_past_.size() > 1 ? " for each of " + std::to_string(seq_past_.size()) + " sequences" : "") +
                     " needs more than " +
                     std::to_string(phys >> 20) + " MiB, the machine's memory; use a smaller context (-c)"};
      auto cache = alloc_huge_buffer(static_cast<uint64_t>(bytes), ("KV cache '" + v.name + "'").c_str());
      if (!cache) return Error{"fast executor: " + cache.error()};
      states_[i] = std::move(*cache);
      seq_bytes_[i] = per_seq;
      cache_bytes += bytes;
      t.data = states_[i].get();
      t.cdata = t.data;
    } else {
      t.data = arena_.get() + mem_.offset[i];
      t.cdata = t.data;
    }
  }
  dispatch_.push_back("KV cache: " + std::to_string(cache_bytes) + " bytes for " + std::to_string(n_ctx_) +
                      " positions" +
                      (seq_past_.size() > 1 ? " x " + std::to_string(seq_past_.size()) + " sequences" : "") +
                      " (MLA latent rows as " + kv_cache_type_name(opts_.base.kv_type) + ")");
  return Status::ok();
}

Status Impl::build_steps() {
  const ir::Graph& g = cm_->graph;
  TileBudget tiles;
  const CacheSizes caches = detect_cache_sizes();
  if (caches.l2 > 0) tiles.l2_bytes = caches.l2;
  std::set<std::string> glue_names;
  for (const ir::Node& n : g.nodes) {
    Step s;
    s.node = &n;
    for (int id : n.inputs) {
      s.in.push_back(&tensors_[static_cast<size_t>(id)]);
      const auto& sh = g.values[static_cast<size_t>(id)].shape;
      s.in_t.push_back(!sh.empty() && sh.back() == ir::kDimTokens);
    }
    for (int id : n.outputs) {
      s.out.push_back(&tensors_[static_cast<size_t>(id)]);
      s.out_t.push_back(true);
    }
    if (n.op == ir::OpKind::GateUpSwiGlu || n.op == ir::OpKind::GateUpSwiGluId) {
      auto m = GateUpOp::create(n, g, *cm_, tiles.l2_bytes, &gate_up_scratch_);
      if (!m) return Error{"fast executor: " + m.error()};
      s.kind = StepKind::GateUp;
      dispatch_.push_back(gate_up_pack_name(n, g) + ": " + (*m)->kernel_name());
      s.gate_up = std::move(*m);
    } else if (n.op == ir::OpKind::MatMul || n.op == ir::OpKind::MatMulId || n.op == ir::OpKind::MatMulAdd ||
             n.op == ir::OpKind::MatMulIdSum) {
      auto m = MatOp::create(n, g, *cm_, tiles);
      if (!m) return Error{"fast executor: " + m.error()};
      s.kind = StepKind::Mat;
      dispatch_.push_back(g.values[static_cast<size_t>(n.inputs[0])].name + ": " + (*m)->kernel_name());
      s.mat = std::move(*m);
    } else if (n.op == ir::OpKind::MlaAttention) {
      auto m = MlaOp::create(n, g, cm_->target, opts_.base.kv_type, pool_->size());
      if (!m) return Error{"fast executor: " + m.error()};
      s.kind = StepKind::Mla;
      s.mla = std::move(*m);
    } else if (n.op == ir::OpKind::Reshape) {
      s.kind = StepKind::View;  // shares its input's arena bytes (memory plan)
    } else {
      s.kind = per_token(n.op) ? StepKind::Light : StepKind::Serial;
      if (s.kind == StepKind::Light && cm_->target.level != isa::IsaLevel::kScalar) {
        auto glue = LightGlue::create(n, g, cm_->target);
        if (!glue) return Error{"fast executor: " + glue.error()};
        s.glue = std::move(*glue);
        if (s.glue) glue_names.insert(std::string(ir::op_name(n.op)) + ": " + s.glue->name());
      }
    }
    steps_.push_back(std::move(s));
  }
  dispatch_.insert(dispatch_.end(), glue_names.begin(), glue_names.end());
  if (opts_.base.mla_form != MlaForm::kAbsorbed) link_decompressed_mla();
  link_gate_up_pairs();
  link_light_warmups();
  const int64_t side = opts_.base.attn_prefetch_bytes;
  side_l2_ = tiles.l2_bytes;
  // On the tile unit the attention is short and reads its cache rows at the memory's pace: a
  // side stream then only competes with them (bench preset, 1 thread, 1 / 512 / 2048 positions:
  // 82 / 81-82 / 58-63 % of the read probe with it, 89-90 / 82-85 / 63-66 % without).
  // On Zen 4, whose attention computes at half Zen 5's rate, the automatic side stream is
  // every byte of the next products up to kZen4SideBytes a thread, not cut to the L2: what the
  // L2 cannot hold it passes to the L3 (filled by the L2's evictions), which the products read
  // faster than memory. The stream is spread over the call's steps, at most a line each, so a
  // short attention asks for less. bench model --profile-nodes, bench preset, 512-token prompt,
  // 64 decoded, Zen 4 host, the budgets in turn (--attn-prefetch), two undisturbed rounds of
  // three: attention and the three products after it 247-252 ms a run with the cut, 232-233
  // with 4 MiB, 237-239 with 2 MiB, 255 with none, at 1 thread; at 2 threads, three rounds,
  // 131-146 ms with 2 MiB against 147-152 with the cut (of a per-thread share of about 1.7 MB).
  // Then this rule against the cut, old and new binary in turn, three rounds: 228-238 ms against
  // 240-246 at 1 thread, 135-140 against 143-149 at 2; 1-token prompts unchanged.
  bool amx = false;
  for (const Step& s : steps_) amx = amx || (s.kind == StepKind::Mla && s.mla->decode_amx());
  const bool automatic = side == ExecutorOptions::kAttnPrefetchAuto;
  side_whole_ = automatic && !amx && cm_->target.tuning == isa::Tuning::kZen4;
  side_cut_ = automatic && !side_whole_;
  link_side_streams(!automatic ? side : amx ? 0 : side_whole_ ? kZen4SideBytes : tiles.l2_bytes);
  if (mla_total_ > 0)
    dispatch_.push_back("mla_attention: " + std::string(mla_form_name(opts_.base.mla_form)) + ", decompressed form in " +
                        std::to_string(mla_linked_) + " of " + std::to_string(mla_total_) + " layers");
  for (const Step& s : steps_)
    if (s.kind == StepKind::Mla && s.mla->decode_amx()) {
      dispatch_.push_back(std::string("mla_attention: decode on the AMX tile unit (") +
                          kv_cache_type_name(opts_.base.kv_type) + " cache rows" +
                          (opts_.base.kv_type == KvCacheType::F16 ? ", split into two bf16 parts)" : ")"));
      break;
    } else if (s.kind == StepKind::Mla && !s.mla->decode_lanes().empty()) {
      std::string lanes;
      for (int64_t l : s.mla->decode_lanes()) lanes += (lanes.empty() ? "" : ", ") + std::to_string(l);
      dispatch_.push_back("mla_attention: decode kernels for " + lanes + " lanes");
      break;
    }
  return Status::ok();
}

// Decode attention computes for a while without streaming weights: meanwhile each thread asks
// into its L2 the packed weights it reads next (its rows of the matrix products up to the next
// MLA step, gate/up or routed product, whose threads' shares depend on the routing), up to
// the L2's size; by default each call then cuts that to the L2 less the cache rows it reads
// (set_side_streams): asking for the whole L2 while 590 KB of rows passed through it evicted
// the first lines asked for before the products read them (bench preset, 512 positions, 1
// thread: attention and the two products after it 21.6-22.0 % of decode time with the whole
// L2, 20.4-20.7 % with 1 MiB, 20.0 % with the cut).
void Impl::link_side_streams(int64_t budget) {
  const int nth = pool_->size();
  int64_t most = 0;
  for (size_t m = 0; m < steps_.size(); ++m) {
    if (steps_[m].kind != StepKind::Mla || steps_[m].mla->decode_lanes().empty()) continue;  // no decode kernels
    steps_[m].side.assign(static_cast<size_t>(nth), {});
    for (int tid = 0; tid < nth; ++tid) {
      std::vector<int64_t>& ranges = steps_[m].side[static_cast<size_t>(tid)];
      std::vector<std::pair<const uint8_t*, int64_t>> reads;
      for (size_t i = m + 1; i < steps_.size(); ++i) {
        const Step& s = steps_[i];
        if (s.kind == StepKind::GateUp || s.kind == StepKind::Mla) break;
        if (s.kind == StepKind::Mat && !s.mat->decode_share(tid, nth, reads)) break;
      }
      int64_t left = budget;
      for (size_t r = 0; r < reads.size() && left > 0; ++r) {
        ranges.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(reads[r].first)));
        ranges.push_back(std::min(reads[r].second, left));
        left -= reads[r].second;
      }
      most = std::max(most, budget - std::max<int64_t>(left, 0));
    }
  }
  if (most > 0)
    dispatch_.push_back("mla_attention: decode prefetches up to " + std::to_string(most >> 10) +
                        " KiB of the next weights per thread" +
                        (side_whole_ ? " (Zen 4: all of them, through the L2 into the L3)"
                         : side_cut_ ? " (less the cache rows a call reads, at most half of it)"
                                     : ""));
}

void Impl::set_side_streams(const Step& s, bool split) {
  const Tensor& cache = *s.in[4];
  const int64_t rows = static_cast<int64_t>(s.in[5]->ci32()[0]) + 1;
  const int64_t kv = rows * cache.row_size() / (split ? s.mla->split_shares() : 1);
  const int64_t budget = side_l2_ - std::min(kv, side_l2_ / 2);
  side_trim_.resize(s.side.size());
  for (size_t t = 0; t < s.side.size(); ++t) {
    const std::vector<int64_t>* ranges = &s.side[t];
    if (side_cut_) {
      side_ranges_within(s.side[t], budget, side_trim_[t]);
      ranges = &side_trim_[t];
    }
    scratch_[t].side = ranges->data();
    scratch_[t].side_ranges = static_cast<int64_t>(ranges->size() / 2);
  }
}

// Finds, around each MLA step, the absorbing matmuls (q_lat = k_b · q_nope, o_heads = v_b ·
// o_lat, with or without a quantisation of their inputs) that the decompressed form skips, and
// checks that the queries of the first (q_nope as that matmul reads it, F32 or quantised), which
// the decompressed form reads instead of q_lat, are still intact when the MLA step runs.
// Layers without that pattern keep the absorbed form.
void Impl::link_decompressed_mla() {
  const ir::Graph& g = cm_->graph;
  const size_t nv = g.values.size();
  std::vector<int> producer(nv, -1), uses(nv, 0), consumer(nv, -1);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (int out : g.nodes[k].outputs) producer[static_cast<size_t>(out)] = static_cast<int>(k);
    for (int in : g.nodes[k].inputs) {
      ++uses[static_cast<size_t>(in)];
      consumer[static_cast<size_t>(in)] = static_cast<int>(k);
    }
  }
  for (int out : g.outputs) ++uses[static_cast<size_t>(out)];
  auto is = [&](int node, ir::OpKind op) { return node >= 0 && g.nodes[static_cast<size_t>(node)].op == op; };
  auto value = [&](int id) -> const ir::Value& { return g.values[static_cast<size_t>(id)]; };
  auto only_use = [&](int id) { return uses[static_cast<size_t>(id)] == 1 ? consumer[static_cast<size_t>(id)] : -1; };
  for (size_t m = 0; m < steps_.size(); ++m) {
    if (steps_[m].kind != StepKind::Mla) continue;
    ++mla_total_;
    const ir::Node& n = *steps_[m].node;
    const int absorb = producer[static_cast<size_t>(n.inputs[0])];
    if (!is(absorb, ir::OpKind::MatMul) || only_use(n.inputs[0]) != static_cast<int>(m)) continue;
    const ir::Node& na = g.nodes[static_cast<size_t>(absorb)];
    const int q_nope = na.inputs[1];
    int expand = only_use(n.outputs[0]), quant = -1;
    if (is(expand, ir::OpKind::Quantize)) {
      quant = expand;
      expand = only_use(g.nodes[static_cast<size_t>(quant)].outputs[0]);
    }
    if (!is(expand, ir::OpKind::MatMul) || value(na.inputs[0]).kind != ir::ValueKind::Weight)
      continue;
    const ir::Node& nb = g.nodes[static_cast<size_t>(expand)];
    if (value(nb.inputs[0]).kind != ir::ValueKind::Weight) continue;
    // Nothing run between q_nope's definition and the MLA step may overwrite it.
    bool intact = true;
    for (int k = producer[static_cast<size_t>(q_nope)] + 1; k < static_cast<int>(m) && intact; ++k) {
      if (k == absorb || steps_[static_cast<size_t>(k)].kind == StepKind::View) continue;
      for (int out : g.nodes[static_cast<size_t>(k)].outputs) intact = intact && !overlaps(out, q_nope);
    }
    // The heads' outputs [dv, H, T] of v_b [R, dv, H], which the MLA step then provides.
    const auto& o_heads = tensors_[static_cast<size_t>(nb.outputs[0])];
    const auto& v_b = value(nb.inputs[0]).shape;
    if (!intact || o_heads.type != GgmlType::F32 || o_heads.ne.size() != 3 || v_b.size() != 3 ||
        o_heads.ne[0] != v_b[1] || o_heads.ne[1] != v_b[2])
      continue;
    MlaOp& op = *steps_[m].mla;
    if (!op.enable_decompressed(&tensors_[static_cast<size_t>(q_nope)], &tensors_[static_cast<size_t>(na.inputs[0])],
                                &tensors_[static_cast<size_t>(nb.inputs[0])]))
      continue;
    for (auto [k, role] : {std::pair{absorb, MlaRole::AbsorbQuery}, std::pair{quant, MlaRole::QuantizeLatent},
                           std::pair{expand, MlaRole::ExpandOutput}}) {
      if (k < 0) continue;
      steps_[static_cast<size_t>(k)].role = role;
      steps_[static_cast<size_t>(k)].mla_step = m;
    }
    ++mla_linked_;
  }
  const int64_t keep = opts_.mla_keep_bytes >= 0 ? opts_.mla_keep_bytes
                                                 : static_cast<int64_t>(physical_memory_bytes() / 16);
  for (Step& s : steps_)
    if (s.kind == StepKind::Mla && s.mla->has_decompressed()) s.mla->set_keep_bytes(keep / mla_linked_);
}

bool Impl::overlaps(int a, int b) const {
  const auto ia = static_cast<size_t>(a), ib = static_cast<size_t>(b);
  if (mem_.offset[ia] < 0 || mem_.offset[ib] < 0) return false;
  return mem_.offset[ia] < mem_.offset[ib] + mem_.bytes[ib] && mem_.offset[ib] < mem_.offset[ia] + mem_.bytes[ia];
}

// Links each dense gate/up step to the routed gate/up step right after it over the same
// activations (a MoE layer's shared expert, placed there by the fusion pass). Both then run as
// one list of blocks dealt out to the threads by cost: alone, the shared expert's 8 blocks at
// Kimi-K2's size would leave half of 16 cores idle. They run at once, so neither may write
// bytes the other reads or writes (their GEMM scratch rows are apart: prepare's scratch_at).
void Impl::link_gate_up_pairs() {
  int routed = 0, linked = 0;
  for (size_t j = 1; j < steps_.size(); ++j) {
    if (steps_[j].kind != StepKind::GateUp || !steps_[j].gate_up->routed()) continue;
    ++routed;
    const size_t i = j - 1;
    if (steps_[i].kind != StepKind::GateUp || steps_[i].gate_up->routed()) continue;
    const ir::Node &dense = *steps_[i].node, &rn = *steps_[j].node;
    if (dense.inputs[2] != rn.inputs[2]) continue;
    bool clear = !overlaps(dense.outputs[0], rn.outputs[0]);
    for (int in : rn.inputs) clear = clear && !overlaps(dense.outputs[0], in);
    for (int in : dense.inputs) clear = clear && !overlaps(rn.outputs[0], in);
    if (!clear) continue;
    steps_[i].partner = static_cast<int>(j);
    ++linked;
  }
  if (routed > 0)
    dispatch_.push_back("gate_up_swiglu_id: runs with the shared expert's gate_up_swiglu as one block list in " +
                        std::to_string(linked) + " of " + std::to_string(routed) + " layers");
}

// Between two products (or attention) the light steps run on data left in the caches, except
// their own weights (norm scales, the router's bias): the megabytes streamed since the same
// layer's step last ran have pushed those out, and the first touch of each line waited on
// memory (bench preset, 1 thread, decode: rms_norm_quantize 2.3-3.1 us per call where the same
// call repeated takes 0.4-0.5 us). The product before them now asks for them as it starts; its
// own weights stream past the L2 (prefetchnta), so they are still there when the light steps
// run (bench model --profile, 1 and 2 threads, 64 decoded, two rounds: rms_norm_quantize
// 6.0-7.4 -> 3.7-4.3 ms per run, rms_norm 0.44-0.54 -> 0.33-0.48). Weights larger than
// kWarmMaxBytes (a token embedding table, of which a step reads rows) are left alone.
void Impl::link_light_warmups() {
  constexpr int64_t kWarmMaxBytes = 64 * 1024;
  const ir::Graph& g = cm_->graph;
  auto heavy = [](StepKind k) { return k == StepKind::Mat || k == StepKind::GateUp || k == StepKind::Mla; };
  std::vector<bool> partner(steps_.size(), false);
  for (const Step& s : steps_)
    if (s.partner >= 0) partner[static_cast<size_t>(s.partner)] = true;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = steps_[i];
    if (!heavy(s.kind) || partner[i]) continue;  // a partner runs inside the step before it
    for (size_t j = i + 1; j < steps_.size(); ++j) {
      const Step& n = steps_[j];
      if (static_cast<int>(j) == s.partner) continue;
      if (heavy(n.kind)) break;
      if (n.kind != StepKind::Light) continue;
      for (size_t k = 0; k < n.node->inputs.size(); ++k) {
        if (g.values[static_cast<size_t>(n.node->inputs[k])].kind != ir::ValueKind::Weight) continue;
        const int64_t bytes = n.in[k]->rows() * n.in[k]->row_size();
        if (bytes <= kWarmMaxBytes) s.warm.emplace_back(n.in[k]->cdata, bytes);
      }
    }
  }
}

bool Impl::decompressed_batch(int64_t T) const {
  if (mla_linked_ == 0 || seqs_batch_) return false;
  if (opts_.base.mla_form == MlaForm::kDecompressed) return true;
  for (const Step& s : steps_)
    if (s.kind == StepKind::Mla && s.mla->has_decompressed()) return s.mla->decompressed_pays(T, n_past_);
  return false;
}

Status Impl::init(std::shared_ptr<const CompiledModel> cm, const FastExecutorOptions& o) {
  cm_ = std::move(cm);
  opts_ = o;
  n_ctx_ = o.base.n_ctx;
  if (n_ctx_ < 1) return Error{"fast executor: context size must be at least 1"};
  if (opts_.max_batch < 1) return Error{"fast executor: max batch must be at least 1"};
  if (o.base.n_seq < 1) return Error{"fast executor: the number of sequences must be at least 1"};
  seq_past_.assign(static_cast<size_t>(o.base.n_seq), 0);
  opts_.max_batch = std::min(opts_.max_batch, n_ctx_);  // no chunk is longer than the context
  const ir::Graph& g = cm_->graph;
  tokens_ = g.find("tokens");
  positions_ = g.find("positions");
  if (tokens_ < 0 || positions_ < 0 || g.outputs.size() != 1)
    return Error{"fast executor: the graph needs inputs 'tokens', 'positions' and one output"};
  logits_ = g.outputs[0];
  const ir::Value& lv = g.values[static_cast<size_t>(logits_)];
  if (lv.type != GgmlType::F32 || lv.shape.size() != 2 || lv.shape[1] != ir::kDimTokens)
    return Error{"fast executor: the graph output must be f32 [n_vocab, T]"};
  n_vocab_ = static_cast<int>(lv.shape[0]);
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::OpKind::Embed) n_rows_embd_ = g.values[static_cast<size_t>(n.inputs[0])].shape[1];
  ThreadPoolOptions po;
  po.n_threads = o.base.n_threads;
  po.pin = o.pin;
  auto pool = ThreadPool::create(po);
  if (!pool) return Error{pool.error()};
  pool_ = std::move(*pool);
  pool_->set_timing(o.base.profile);
  scratch_.resize(static_cast<size_t>(pool_->size()));
  ZENMOE_RETURN_IF_ERROR(bind_values());
  ZENMOE_RETURN_IF_ERROR(build_steps());
  // Several sequences in one pass: every cache is an MLA op's, whose decode kernels take each
  // token over its own rows.
  seqs_native_ = true;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].kind == ir::ValueKind::State && !is_mla_cache(g, static_cast<int>(i))) seqs_native_ = false;
  for (const Step& s : steps_)
    if (s.mla && !s.mla->runs_sequences()) seqs_native_ = false;
  return Status::ok();
}

void Impl::size_for(int64_t T) {
  const ir::Graph& g = cm_->graph;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value& v = g.values[i];
    if (v.kind != ir::ValueKind::Temp && v.kind != ir::ValueKind::Input) continue;
    Tensor& t = tensors_[i];
    for (size_t d = 0; d < v.shape.size(); ++d) t.ne[d] = resolve(v.shape[d], T, n_ctx_);
  }
}

void Impl::run_light(Step& s, int64_t T) {
  const int nth = pool_->size();
  if (s.glue) {
    if (T < 2 * nth || nth == 1) {
      s.glue->run(0, T, s.in, s.out);
      return;
    }
    pool_->run([&](int tid) {
      const Range r = split_range(T, nth, tid);
      if (r.begin < r.end) s.glue->run(r.begin, r.end, s.in, s.out);
    });
    return;
  }
  if (T < 2 * nth || nth == 1) {
    (void)refexec::run_node(*s.node, s.in, s.out);
    return;
  }
  pool_->run([&](int tid) {
    const Range r = split_range(T, nth, tid);
    if (r.begin >= r.end) return;
    std::vector<Tensor> in_v, out_v;
    std::vector<Tensor*> in_p, out_p;
    in_v.reserve(s.in.size());
    out_v.reserve(s.out.size());
    for (size_t i = 0; i < s.in.size(); ++i)
      in_v.push_back(s.in_t[i] ? token_view(*s.in[i], r.begin, r.end) : *s.in[i]);
    for (auto* o : s.out) out_v.push_back(token_view(*o, r.begin, r.end));
    for (auto& t : in_v) in_p.push_back(&t);
    for (auto& t : out_v) out_p.push_back(&t);
    (void)refexec::run_node(*s.node, in_p, out_p);
  });
}

Status Impl::run_step(Step& s, int64_t T) {
  const int nth = pool_->size();
  if (decompressed_ && s.role != MlaRole::None) {
    if (s.role == MlaRole::ExpandOutput) steps_[s.mla_step].mla->copy_decompressed(*s.out[0]);
    return Status::ok();
  }
  switch (s.kind) {
    case StepKind::View:
      return Status::ok();
    case StepKind::Light:
      run_light(s, T);
      return Status::ok();
    case StepKind::Serial:
      return refexec::run_node(*s.node, s.in, s.out);
    case StepKind::GateUp: {
      if (s.ran_early) {
        s.ran_early = false;
        return Status::ok();
      }
      ZENMOE_RETURN_IF_ERROR(s.gate_up->prepare(s.in.size() > 3 ? s.in[3] : nullptr, *s.in[2]));
      if (s.partner >= 0) {  // one list: this step's blocks, then the partner's (its own scratch)
        Step& p = steps_[static_cast<size_t>(s.partner)];
        ZENMOE_RETURN_IF_ERROR(p.gate_up->prepare(p.in[3], *p.in[2], s.gate_up->scratch_floats()));
        const int64_t nb = s.gate_up->blocks();
        auto cost = [&](int64_t b) {
          return b < nb ? s.gate_up->block_cost(b, *s.in[2]) : p.gate_up->block_cost(b - nb, *p.in[2]);
        };
        deal_blocks(nb + p.gate_up->blocks(), cost);
        const std::function<int64_t(int64_t)> run_end = [&](int64_t b) {
          return b < nb ? s.gate_up->run_end(b) : nb + p.gate_up->run_end(b - nb);
        };
        pool_->run([&](int tid) {
          for (Range r; work_.next(tid, 1, r, &run_end);) {
            s.gate_up->run_blocks(std::min(r.begin, nb), std::min(r.end, nb), *s.in[2], *s.out[0]);
            p.gate_up->run_blocks(std::max(r.begin, nb) - nb, std::max(r.end, nb) - nb, *p.in[2], *p.out[0]);
          }
        });
        p.ran_early = true;
        return Status::ok();
      }
      deal_blocks(s.gate_up->blocks(), [&](int64_t b) { return s.gate_up->block_cost(b, *s.in[2]); });
      const std::function<int64_t(int64_t)> run_end = [&](int64_t b) { return s.gate_up->run_end(b); };
      pool_->run([&](int tid) {
        for (Range r; work_.next(tid, 1, r, &run_end);) s.gate_up->run_blocks(r.begin, r.end, *s.in[2], *s.out[0]);
      });
      return Status::ok();
    }
    case StepKind::Mat:
      if (s.node->op == ir::OpKind::MatMulAdd && s.out[0]->data != s.in[2]->cdata)  // not planned in place
        std::memcpy(s.out[0]->data, s.in[2]->cdata, static_cast<size_t>(s.out[0]->numel()) * sizeof(float));
      ZENMOE_RETURN_IF_ERROR(s.mat->prepare(s.in.size() > 2 && s.node->op != ir::OpKind::MatMulAdd ? s.in[2] : nullptr,
                                            s.node->op == ir::OpKind::MatMulIdSum ? s.in[3] : nullptr, *s.in[1]));
      pool_->run([&](int tid) { s.mat->run(tid, nth, *s.in[1], *s.out[0]); });
      return Status::ok();
    case StepKind::Mla:
      if (seqs_batch_) {
        s.mla->store(s.in, seq_rows_.data());
        pool_->run([&](int tid) {
          s.mla->run(tid, nth, s.in, *s.out[0], scratch_[static_cast<size_t>(tid)], seq_rows_.data());
        });
        return Status::ok();
      }
      s.mla->store(s.in);
      if (decompressed_ && s.mla->has_decompressed()) {
        s.mla->prepare_decompressed(T, *s.in[5]);
        pool_->run([&](int tid) { s.mla->widen_decompressed(tid, nth, s.in); });
        deal_even(s.mla->heads());
        pool_->run([&](int tid) { s.mla->run_decompressed(tid, work_, s.in, scratch_[static_cast<size_t>(tid)]); });
        return Status::ok();
      }
      const bool split = s.mla->prepare_split(T, nth, *s.in[5]);
      if (T == 1) set_side_streams(s, split);
      if (split) {  // cache positions split, then merged per head
        pool_->run([&](int tid) { s.mla->run_part(tid, s.in, scratch_[static_cast<size_t>(tid)]); });
        drop_side_streams();
        pool_->run([&](int tid) { s.mla->merge(tid, nth, *s.out[0]); });
        return Status::ok();
      }
      pool_->run([&](int tid) { s.mla->run(tid, nth, s.in, *s.out[0], scratch_[static_cast<size_t>(tid)]); });
      drop_side_streams();
      return Status::ok();
  }
  return Status::ok();
}

Status Impl::eval(std::span<const int32_t> tokens, float* logits, bool all_logits) {
  ZENMOE_RETURN_IF_ERROR(check_eval_tokens(tokens, n_past_, n_ctx_, n_rows_embd_));
  const int64_t total = static_cast<int64_t>(tokens.size());
  for (int64_t c0 = 0; c0 < total; c0 += opts_.max_batch) {
    const int64_t T = std::min<int64_t>(opts_.max_batch, total - c0);
    size_for(T);
    std::memcpy(tensors_[static_cast<size_t>(tokens_)].data, tokens.data() + c0,
                static_cast<size_t>(T) * sizeof(int32_t));
    int32_t* pos = tensors_[static_cast<size_t>(positions_)].i32();
    for (int64_t t = 0; t < T; ++t) pos[t] = n_past_ + static_cast<int32_t>(t);
    ZENMOE_RETURN_IF_ERROR(run_steps(T));
    n_past_ += static_cast<int>(T);
    const float* y = tensors_[static_cast<size_t>(logits_)].cf32();
    const auto row = static_cast<size_t>(n_vocab_);
    if (all_logits)
      std::memcpy(logits + static_cast<size_t>(c0) * row, y, static_cast<size_t>(T) * row * sizeof(float));
    else if (c0 + T == total)
      std::memcpy(logits, y + static_cast<size_t>(T - 1) * row, row * sizeof(float));
  }
  return Status::ok();
}

Status Impl::run_steps(int64_t T) {
  decompressed_ = decompressed_batch(T);
  decompressed_chunks_ += decompressed_ ? 1 : 0;
  if (opts_.base.profile) step_seconds_.resize(steps_.size(), 0.0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& s = steps_[i];
    const auto t0 = opts_.base.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    for (const auto& [p, bytes] : s.warm)
      for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
    Status st = run_step(s, T);
    if (!st) return Error{std::string("eval: ") + ir::op_name(s.node->op) + ": " + st.message()};
    if (opts_.base.profile) {  // a step that ran its partner too: the time is the partner's
      const size_t at = s.partner >= 0 && steps_[static_cast<size_t>(s.partner)].ran_early ? s.partner : i;
      step_seconds_[at] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  return Status::ok();
}

void Impl::point_caches(int s) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (seq_bytes_[i] == 0) continue;
    tensors_[i].data = states_[i].get() + static_cast<int64_t>(s) * seq_bytes_[i];
    tensors_[i].cdata = tensors_[i].data;
  }
}

Status Impl::select_seq(int s) {
  ZENMOE_RETURN_IF_ERROR(Executor::select_seq(s));
  if (s == seq_) return Status::ok();
  seq_past_[static_cast<size_t>(seq_)] = n_past_;
  seq_ = s;
  n_past_ = seq_past_[static_cast<size_t>(s)];
  point_caches(s);
  // What the attention ops keep of a sequence (decompressed keys, an F32 copy of the rows) is
  // the other sequence's: made again from this one's rows.
  for (const Step& st : steps_)
    if (st.mla) st.mla->rows_replaced(*st.in[4], 0, n_past_);
  return Status::ok();
}

Status Impl::copy_seq(int src, int dst, int n) {
  if (src == dst) return Executor::copy_seq(src, dst, n);  // a rewind
  ZENMOE_RETURN_IF_ERROR(check_copy_seq(*this, src, dst, n));
  const int64_t rows = n_ctx_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (seq_bytes_[i] == 0) continue;
    const int64_t row = seq_bytes_[i] / rows;
    std::memcpy(states_[i].get() + static_cast<int64_t>(dst) * seq_bytes_[i],
                states_[i].get() + static_cast<int64_t>(src) * seq_bytes_[i], static_cast<size_t>(n * row));
  }
  if (dst == seq_) {
    n_past_ = n;
    for (const Step& st : steps_)
      if (st.mla) st.mla->rows_replaced(*st.in[4], 0, n);
  } else {
    seq_past_[static_cast<size_t>(dst)] = n;
  }
  return Status::ok();
}

Status Impl::eval_seqs(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits) {
  ZENMOE_RETURN_IF_ERROR(check_eval_seqs(*this, tokens, seqs, n_rows_embd_));
  const auto T = static_cast<int64_t>(tokens.size());
  if (!seqs_native_ || T == 1 || T > opts_.max_batch) return eval_seqs_in_turn(tokens, seqs, logits);
  seq_past_[static_cast<size_t>(seq_)] = n_past_;
  size_for(T);
  std::memcpy(tensors_[static_cast<size_t>(tokens_)].data, tokens.data(), static_cast<size_t>(T) * sizeof(int32_t));
  int32_t* pos = tensors_[static_cast<size_t>(positions_)].i32();
  seq_rows_.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto s = static_cast<size_t>(seqs[static_cast<size_t>(t)]);
    pos[t] = seq_past_[s];
    seq_rows_[static_cast<size_t>(t)] = static_cast<int64_t>(s) * n_ctx_;
  }
  point_caches(0);
  seqs_batch_ = true;
  const Status st = run_steps(T);
  seqs_batch_ = false;
  point_caches(seq_);
  if (!st) return st;
  for (int64_t t = 0; t < T; ++t) ++seq_past_[static_cast<size_t>(seqs[static_cast<size_t>(t)])];
  n_past_ = seq_past_[static_cast<size_t>(seq_)];
  const auto row = static_cast<size_t>(n_vocab_);
  std::memcpy(logits, tensors_[static_cast<size_t>(logits_)].cf32(), static_cast<size_t>(T) * row * sizeof(float));
  return Status::ok();
}

Status Impl::rewind(int n) {
  if (n < 0 || n > n_past_)
    return Error{"rewind to " + std::to_string(n) + " positions: the sequence holds " + std::to_string(n_past_)};
  for (const Step& s : steps_)
    if (s.mla) s.mla->rows_replaced(*s.in[4], n, n);
  n_past_ = n;
  return Status::ok();
}

Status Impl::restore(int n) {
  if (n < 0 || n > n_ctx_)
    return Error{"restore of " + std::to_string(n) + " positions: the context holds " + std::to_string(n_ctx_)};
  for (const Step& s : steps_)
    if (s.mla) s.mla->rows_replaced(*s.in[4], 0, n);
  n_past_ = n;
  return Status::ok();
}

std::map<std::string, uint64_t> Impl::decode_weight_bytes() const {
  std::map<std::string, uint64_t> bytes;
  for (const Step& s : steps_) {
    // A dense gate/up run with its routed partner counts with it (as its time does).
    const Step& owner = s.partner >= 0 ? steps_[static_cast<size_t>(s.partner)] : s;
    const std::string key = profile_key(cm_->graph, *owner.node, opts_.base.profile_by);
    if (s.mat) bytes[key] += s.mat->token_bytes();
    if (s.gate_up) bytes[key] += s.gate_up->token_bytes();
  }
  return bytes;
}

std::vector<std::pair<std::string, double>> Impl::profile() const {
  std::vector<const ir::Node*> nodes;
  for (const Step& s : steps_) nodes.push_back(s.node);
  return sum_by_profile_key(cm_->graph, nodes, step_seconds_, opts_.base.profile_by);
}

}  // namespace

Expected<std::unique_ptr<FastExecutor>> make_fast_executor(std::shared_ptr<const CompiledModel> model,
                                                           const FastExecutorOptions& opts) {
  std::unique_ptr<Impl> ex(new Impl());
  ZENMOE_RETURN_IF_ERROR(ex->init(std::move(model), opts));
  return std::unique_ptr<FastExecutor>(std::move(ex));
}

}  // namespace zenmoe
