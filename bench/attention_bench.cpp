// Decode attention (one token's MLA heads over the latent cache) per KV cache type, through the
// fast executor's MlaOp on one thread (the heads-in-lanes kernels for every cache type; BF16 in
// bf16 pairs on AVX512_BF16 hosts; Q8_0 scored in int8 on AVX-512 VNNI hosts; F16 and BF16 on the
// AMX tile unit on hosts of level amx, unless ZENMOE_ISA caps the level below it). Heads 16 (the
// bench preset) and 64 (Kimi-K2), 16 positions (mostly what a call costs besides its rows: query
// and output transposes, value sums zeroed), 512 and 4096 positions, and the shares of two ways
// to split 64 heads on 16 threads (below).
// Two regimes: `stream` 0 keeps one cache resident between iterations (L2 / L3), so the figure
// is the kernels' arithmetic rate; `stream` 1 rotates over copies of it filling 64 MiB, as a
// model's layers do, so every iteration reads its cache from memory. Counter: multiply-adds
// per second (scores over 576-wide rows plus values over 512 columns, per head and position).
// `then_read`: after each call the thread reads `read` KiB of other memory, a line at a time (as
// the weight products after the attention read their weights), rotating over 256 MiB so they
// come from memory; with `prefetch` 1 the call asks for them into L2 while it scores (the
// executor's side stream, --attn-prefetch). Time per call and read; the counters as above.
// MlaSplit: one token's decode attention on a pool, the heads dealt out to the threads or the
// positions split into shares (see its comment).
// Also the F16 cache's row conversions of a 512-token prompt's rows (512 x 576 elements): to F16
// when the rows are stored, back to F32 for the prompt-sized products, reference against
// AVX-512 (counter: elements per second).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "codegen/isa.h"
#include "ir/graph.h"
#include "kernels/formats.h"
#include "runtime/fast_attention.h"
#include "runtime/kv_f16.h"
#include "runtime/thread_pool.h"

namespace zenmoe {
namespace {

using refexec::Tensor;

constexpr int64_t kLat = 512, kRope = 64, kRow = kLat + kRope;

// One MLA attention node over `heads` heads, its cache filled through store() to `ctx` positions
// and the position set to the last one; nullptr (the state told why) when it cannot run here.
struct Setup {
  ir::Graph g;
  std::unique_ptr<MlaOp> op;
  std::vector<float> q_lat, q_pe, c, k, y;
  std::vector<uint8_t> cache;
  int32_t pos = 0;
  Tensor tq, tp, tc, tk, tcache, tpos, ty;
  Tensor* in[6] = {&tq, &tp, &tc, &tk, &tcache, &tpos};
};

std::unique_ptr<Setup> make_setup(benchmark::State& state, int64_t heads, int64_t ctx, KvCacheType kv,
                                  int threads = 1) {
  auto su = std::make_unique<Setup>();
  ir::Graph& g = su->g;
  auto val = [&](const char* name, std::vector<int64_t> shape) {
    return g.add_value({name, ir::ValueKind::Temp, GgmlType::F32, std::move(shape)});
  };
  const int ins[] = {val("q_lat", {kLat, heads, ir::kDimTokens}), val("q_pe", {kRope, heads, ir::kDimTokens}),
                     val("c", {kLat, ir::kDimTokens}),           val("k_pe", {kRope, ir::kDimTokens}),
                     val("cache", {kRow, ir::kDimContext}),      val("pos", {ir::kDimTokens})};
  const int out = val("out", {kLat, heads, ir::kDimTokens});
  g.add_node(ir::OpKind::MlaAttention, {ins, ins + 6}, {out}, {{"scale", 1.0f / std::sqrt(float(kRow))}});
  const Expected<isa::Target> target = isa::resolve_target("");  // ZENMOE_ISA caps it
  if (!target) {
    state.SkipWithError(target.error().c_str());
    return nullptr;
  }
  auto op = MlaOp::create(g.nodes.back(), g, *target, kv, threads);
  if (!op) {
    state.SkipWithError(op.error().c_str());
    return nullptr;
  }
  su->op = std::move(*op);
  const GgmlType type = kv == KvCacheType::F16    ? GgmlType::F16
                        : kv == KvCacheType::BF16 ? GgmlType::BF16
                        : kv == KvCacheType::Q8_0 ? GgmlType::Q8_0
                                                  : GgmlType::F32;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto floats = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    return v;
  };
  su->q_lat = floats(kLat * heads);
  su->q_pe = floats(kRope * heads);
  su->y.resize(static_cast<size_t>(kLat * heads));
  su->cache.resize(static_cast<size_t>(row_bytes(type, kRow) * ctx));
  auto wrap = [](Tensor& t, void* p, std::vector<int64_t> ne, GgmlType ty_ = GgmlType::F32) {
    t.type = ty_;
    t.ne = std::move(ne);
    t.data = static_cast<uint8_t*>(p);
    t.cdata = t.data;
  };
  wrap(su->tq, su->q_lat.data(), {kLat, heads, 1});
  wrap(su->tp, su->q_pe.data(), {kRope, heads, 1});
  wrap(su->tcache, su->cache.data(), {kRow, ctx}, type);
  wrap(su->ty, su->y.data(), {kLat, heads, 1});
  // Fill the cache one position at a time through store(), then attend from the last one.
  su->c = floats(kLat);
  su->k = floats(kRope);
  wrap(su->tc, su->c.data(), {kLat, 1});
  wrap(su->tk, su->k.data(), {kRope, 1});
  wrap(su->tpos, &su->pos, {1}, GgmlType::I32);
  for (su->pos = 0; su->pos < ctx; ++su->pos) {
    for (float& x : su->c) x = nd(rng);
    su->op->store(su->in);
  }
  su->pos = static_cast<int32_t>(ctx - 1);
  return su;
}

void BM_MlaDecode(benchmark::State& state, KvCacheType kv, bool then_read) {
  const int64_t heads = state.range(0), ctx = state.range(1), stream = state.range(2);
  const int64_t read = then_read ? state.range(3) << 10 : 0;
  const bool prefetch = then_read && state.range(4) != 0;
  const std::unique_ptr<Setup> su = make_setup(state, heads, ctx, kv);
  if (!su) return;
  const std::vector<uint8_t>& cache = su->cache;
  const Tensor& tcache = su->tcache;
  const std::span<Tensor*> in(su->in);
  const MlaOp& op = *su->op;
  Tensor& ty = su->ty;
  std::vector<float>& y = su->y;
  const size_t copies = stream ? (size_t{64} << 20) / cache.size() + 1 : 1;
  std::vector<std::vector<uint8_t>> caches(copies, cache);
  std::vector<Tensor> tcaches(copies, tcache);
  for (size_t i = 0; i < copies; ++i) {
    tcaches[i].data = caches[i].data();
    tcaches[i].cdata = tcaches[i].data;
  }
  AttentionScratch scratch;
  size_t next = 0;
  std::vector<uint8_t> other(read > 0 ? size_t{256} << 20 : 0, 1);
  int64_t other_at = 0, side[2] = {0, read};
  uint64_t sum = 0;
  for (auto _ : state) {
    in[4] = &tcaches[next];
    next = next + 1 == copies ? 0 : next + 1;
    if (read > 0 && other_at + read > static_cast<int64_t>(other.size())) other_at = 0;
    const uint8_t* r = other.data() + other_at;
    if (prefetch) {
      side[0] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(r));
      scratch.side = side;
      scratch.side_ranges = 1;
    }
    op.run(0, 1, in, ty, scratch);
    for (int64_t i = 0; i < read; i += 64) sum += r[i];
    other_at += read;
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(sum);
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(heads * ctx * (kRow + kLat)) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// One token's decode attention (F16 cache) on a pool of `threads`, with its positions split into
// shares of at least `min_rows` (MlaOp::prepare_split: the shares' pass, then the merge) or,
// with min_rows 0, never split (the heads dealt out to the threads, whole vectors of 16 lanes
// each however few heads they hold). The cache stays resident; the time includes the pool's
// steps. On a host whose two CPUs are one core's two hardware threads, two FMA-bound threads
// share its arithmetic units and the split gains nothing: pin to separate cores.
void BM_MlaSplit(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t heads = state.range(1), ctx = state.range(2), min_rows = state.range(3);
  if (threads > static_cast<int>(std::thread::hardware_concurrency())) return state.SkipWithError("more threads than CPUs");
  const std::unique_ptr<Setup> su = make_setup(state, heads, ctx, KvCacheType::F16, threads);
  if (!su) return;
  auto pool = ThreadPool::create({threads, true, 200});
  if (!pool) return state.SkipWithError(pool.error().c_str());
  std::vector<AttentionScratch> scratch(static_cast<size_t>(threads));
  const MlaOp& op = *su->op;
  bool split = false;
  for (auto _ : state) {
    split = min_rows > 0 && op.prepare_split(1, threads, su->tpos, min_rows);
    if (split) {
      (*pool)->run([&](int tid) { op.run_part(tid, su->in, scratch[static_cast<size_t>(tid)]); });
      (*pool)->run([&](int tid) { op.merge(tid, threads, su->ty); });
    } else {
      (*pool)->run([&](int tid) { op.run(tid, threads, su->in, su->ty, scratch[static_cast<size_t>(tid)]); });
    }
    benchmark::DoNotOptimize(su->y.data());
  }
  state.counters["split"] = split ? 1 : 0;
}
BENCHMARK(BM_MlaSplit)
    ->ArgNames({"threads", "heads", "ctx", "min_rows"})
    ->ArgsProduct({{2}, {16}, {32, 48, 64, 128, 256, 512}, {0, 16, 32, 128}})
    ->ArgsProduct({{2}, {64}, {64, 256, 1024}, {0, 32, 128}})
    ->Unit(benchmark::kMicrosecond);

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "ctx", "stream"})->Unit(benchmark::kMicrosecond);
  for (int64_t stream : {0, 1})
    for (int64_t h : {16, 64})
      for (int64_t n : {16, 512, 4096}) b->Args({h, n, stream});
  // One thread's share of Kimi-K2's 64 heads on 16 threads at 1024 positions: split by heads,
  // 4 heads (a quarter-used vector) over all positions; split by vectors and positions, 16
  // heads over a quarter of them.
  for (int64_t stream : {0, 1}) {
    b->Args({4, 1024, stream});
    b->Args({16, 256, stream});
  }
}

// round 1: F32 to F16 (store), 0: F16 to F32 (widen); fast 1: AVX-512, 0: the reference.
void BM_KvF16Rows(benchmark::State& state) {
  const bool round = state.range(0) != 0, fast = state.range(1) != 0;
  if (fast && !isa::host_supports(isa::IsaLevel::kAvx512)) return state.SkipWithError("host lacks AVX-512");
  constexpr int64_t n = 512 * kRow;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  std::vector<f16_t> h(n);
  kv_f16_round_row(x.data(), h.data(), n, false);
  for (auto _ : state) {
    if (round)
      kv_f16_round_row(x.data(), h.data(), n, fast);
    else
      kv_f16_widen_row(h.data(), x.data(), n, fast);
    benchmark::ClobberMemory();
  }
  state.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KvF16Rows)->ArgNames({"round", "avx512"})->ArgsProduct({{1, 0}, {0, 1}})->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_MlaDecode, f32, KvCacheType::F32, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MlaDecode, f16, KvCacheType::F16, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MlaDecode, bf16, KvCacheType::BF16, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MlaDecode, q8_0, KvCacheType::Q8_0, false)->Apply(Shapes);
// The bench preset's 16 heads at 512 positions, cache from memory, then 512 KiB to 2 MiB read (a
// thread's attn_v_b and attn_output in one layer: 2.9 MiB at 1 thread, half at 2).
BENCHMARK_CAPTURE(BM_MlaDecode, f16_then_read, KvCacheType::F16, true)
    ->ArgNames({"heads", "ctx", "stream", "read_kib", "prefetch"})
    ->ArgsProduct({{16}, {512}, {1}, {512, 1024, 2048}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace zenmoe
