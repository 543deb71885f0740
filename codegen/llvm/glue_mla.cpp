// MLA attention pieces (absorbed form): scores q·K over the compressed cache and the
// probability-weighted sum of cache rows, for the query rows (heads) of one token.
// Both walk the cache in tiles of rows so each cache row is read from memory once for all
// heads and then served from L1, and both are register-blocked over heads and cache rows
// (scores) or heads and value chunks (values): every cache vector loaded serves several
// heads, every query vector or probability several cache vectors.
// A layer's cache was last read a whole forward pass ago, so it streams from DRAM, and the
// hardware prefetcher alone keeps too few lines in flight for rows read side by side. The
// first head block prefetches the rows ahead of the ones it reads, at the columns it reads,
// one vector at a time: spread over the work instead of one burst per tile, which filled the
// core's miss buffers and stalled it (decode over a cache in DRAM ran 1.3-2x slower that way).
#include <algorithm>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/glue_ir.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

constexpr int64_t kScoreTile = 8;   // cache rows per scores tile (8 x 576 f32: 18 KB)
constexpr int64_t kValueTile = 64;  // cache rows per values tile (64 x 4 chunks: 16 KB of f32)
constexpr int64_t kPrefetchRows = 16;  // scores: rows ahead of the ones being read (values: one tile)
constexpr int kPrefetchLocality = 3;
constexpr int kHeadBlock = 4;       // heads per register block
constexpr int kRowBlock = 4;        // cache rows per scores block: 4 x 4 dot products
constexpr int kChunkBlock = 4;      // value chunks (vectors) per values block: 4 x 4 sums

llvm::Type* kv_elt(Kit& k, const GlueDesc& d) { return d.kv_type ? k.b.getHalfTy() : k.f32; }

// Cache row `s` (i64) as a pointer to its first element.
Value* cache_row(Kit& k, const GlueDesc& d, const Args& a, Value* s) {
  return k.at(kv_elt(k, d), a.x2, k.b.CreateMul(s, a.stride));
}

// vf cache elements at row[idx] widened to f32.
Value* load_kv(Kit& k, const GlueDesc& d, Value* row, Value* idx, Value* mask) {
  if (!d.kv_type) return k.load(row, idx, mask);
  auto* vh = llvm::FixedVectorType::get(k.b.getHalfTy(), k.vf);
  Value* p = k.at(k.b.getHalfTy(), row, idx);
  Value* h = mask ? static_cast<Value*>(k.b.CreateMaskedLoad(vh, p, llvm::Align(2), mask,
                                                             llvm::Constant::getNullValue(vh)))
                  : static_cast<Value*>(k.b.CreateAlignedLoad(vh, p, llvm::Align(2)));
  return k.b.CreateFPExt(h, k.vf32);
}

Value* min64(Kit& k, Value* a, Value* b) { return k.b.CreateSelect(k.b.CreateICmpSLT(a, b), a, b); }

// Horizontal sums of v.size() vectors (a power of two, at most vf) at once: lane j of the
// result (v.size() lanes) is the sum of v[j]. Pairs of vectors are folded together, each half
// of a segment onto the other, so the additions of each vector are the ones of Kit::hsum (the
// same pairwise tree, bit for bit) at a fraction of the shuffles.
Value* hsum_many(Kit& k, std::vector<Value*> v) {
  unsigned len = k.vf, seg = k.vf;  // lanes per vector, lanes per segment (one sum each)
  for (; seg > 1; seg /= 2) {
    std::vector<int> lo, hi;
    const unsigned sources = v.size() > 1 ? 2 : 1;
    for (unsigned src = 0; src < sources; ++src)
      for (unsigned s0 = 0; s0 < len; s0 += seg)
        for (unsigned j = 0; j < seg / 2; ++j) {
          lo.push_back(static_cast<int>(src * len + s0 + j));
          hi.push_back(static_cast<int>(src * len + s0 + seg / 2 + j));
        }
    std::vector<Value*> next;
    if (sources == 1) {  // one vector left: halve its width
      next.push_back(k.b.CreateFAdd(k.b.CreateShuffleVector(v[0], lo), k.b.CreateShuffleVector(v[0], hi)));
      len /= 2;
    } else {
      for (size_t p = 0; p < v.size(); p += 2)
        next.push_back(k.b.CreateFAdd(k.b.CreateShuffleVector(v[p], v[p + 1], lo),
                                      k.b.CreateShuffleVector(v[p], v[p + 1], hi)));
    }
    v = std::move(next);
  }
  return v[0];
}

// Runs block(h, hb, first) over the n_rows heads: blocks of kHeadBlock, then one of 2 and one
// of 1 for the remainder. `first` is true for exactly one block (the first), which prefetches.
void head_blocks(Kit& k, Value* n_rows, const std::function<void(Value*, int, bool)>& block) {
  auto& b = k.b;
  static_assert(kHeadBlock == 4);
  Value* h4 = b.CreateAnd(n_rows, k.ci64(~int64_t{3}));
  Value* has4 = b.CreateICmpNE(h4, k.ci64(0));
  k.if_then(has4, [&] { block(k.ci64(0), kHeadBlock, true); });
  k.loop(k.ci64(kHeadBlock), h4, kHeadBlock, [&](Value* h) { block(h, kHeadBlock, false); });
  // Fewer than four heads: the first remainder block prefetches instead.
  Value* has2 = b.CreateICmpNE(b.CreateAnd(n_rows, k.ci64(2)), k.ci64(0));
  k.if_then(b.CreateAnd(has2, has4), [&] { block(h4, 2, false); });
  k.if_then(b.CreateAnd(has2, b.CreateNot(has4)), [&] { block(h4, 2, true); });
  Value* h1 = b.CreateAnd(n_rows, k.ci64(~int64_t{1}));
  Value* has1 = b.CreateICmpNE(b.CreateAnd(n_rows, k.ci64(1)), k.ci64(0));
  Value* before = b.CreateICmpNE(h1, k.ci64(0));
  k.if_then(b.CreateAnd(has1, before), [&] { block(h1, 1, false); });
  k.if_then(b.CreateAnd(has1, b.CreateNot(before)), [&] { block(h1, 1, true); });
}

// Prefetches the cache element `idx` of row `s` (i64 values). Plain (not inbounds) address: it
// may lie past the cache, which a prefetch never faults on.
void prefetch_at(Kit& k, const GlueDesc& d, const Args& a, Value* s, Value* idx) {
  auto& b = k.b;
  const int64_t elt = d.kv_type ? 2 : 4;
  Value* off = b.CreateMul(b.CreateAdd(b.CreateMul(s, a.stride), idx), k.ci64(elt));
  b.CreateIntrinsic(llvm::Intrinsic::prefetch, {k.ptr},
                    {b.CreateGEP(k.i8, a.x2, off), k.ci32(0), k.ci32(kPrefetchLocality), k.ci32(1)});
}

// y[(h + i) * n + s + r] = dot(q_{h+i}, cache row s + r) for i < hb, r < rb: hb + rb loads
// feed hb * rb multiply-adds. With `prefetch`, rows s + kPrefetchRows + r are prefetched at the
// columns read.
void dot_block(Kit& k, const GlueDesc& d, const Args& a, Value* h, int hb, Value* s, int rb, bool prefetch) {
  auto& b = k.b;
  std::vector<Value *> q, rows;
  std::vector<llvm::AllocaInst*> acc;
  for (int i = 0; i < hb; ++i) q.push_back(k.at(k.f32, a.x, b.CreateMul(b.CreateAdd(h, k.ci64(i)), k.ci64(d.n))));
  for (int r = 0; r < rb; ++r) rows.push_back(cache_row(k, d, a, b.CreateAdd(s, k.ci64(r))));
  for (int j = 0; j < hb * rb; ++j) {
    acc.push_back(k.slot(k.vf32, 1, "dot"));
    b.CreateStore(k.splat(0.0f), acc.back());
  }
  k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
    std::vector<Value *> qv, kv;
    if (prefetch)
      for (int r = 0; r < rb; ++r) prefetch_at(k, d, a, b.CreateAdd(s, k.ci64(kPrefetchRows + r)), i);
    for (int r = 0; r < rb; ++r) kv.push_back(load_kv(k, d, rows[r], i, m));
    for (int hi = 0; hi < hb; ++hi) qv.push_back(k.load(q[hi], i, m));
    for (int hi = 0; hi < hb; ++hi)
      for (int r = 0; r < rb; ++r) {
        llvm::AllocaInst* slot = acc[hi * rb + r];
        b.CreateStore(b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {k.vf32}, {qv[hi], kv[r], b.CreateLoad(k.vf32, slot)}),
                      slot);
      }
  });
  // Sums of vf accumulators (fewer when the block is smaller) per reduction; a head's rb
  // sums are neighbouring lanes, stored as one short vector.
  const int count = hb * rb, group = std::min(count, static_cast<int>(k.vf));
  for (int g0 = 0; g0 < count; g0 += group) {
    std::vector<Value*> v;
    for (int j = g0; j < g0 + group; ++j) v.push_back(b.CreateLoad(k.vf32, acc[j]));
    Value* sums = hsum_many(k, v);
    for (int j = 0; j < group; j += rb) {
      Value* y = k.at(k.f32, a.y, b.CreateAdd(b.CreateMul(b.CreateAdd(h, k.ci64((g0 + j) / rb)), a.n), s));
      if (rb == 1) {
        b.CreateAlignedStore(b.CreateExtractElement(sums, uint64_t(j)), y, llvm::Align(4));
        continue;
      }
      std::vector<int> lanes;
      for (int r = 0; r < rb; ++r) lanes.push_back(j + r);
      b.CreateAlignedStore(b.CreateShuffleVector(sums, lanes), y, llvm::Align(4));
    }
  }
}

// y[(h + i) * d.n + c] += sum over cache rows s in [s0, s_end) of p[(h + i) * n + s] * row_s[c]
// for i < hb and the columns c of the vectors at i0, i0 + vf, ... (one per mask; a mask is
// nullptr for a whole vector). Each element sees its products one at a time in s order,
// rounded product then add, as the reference `out[c] += p * v[c]` does.
void values_block(Kit& k, const GlueDesc& d, const Args& a, Value* h, int hb, Value* i0,
                  const std::vector<Value*>& masks, Value* s0, Value* s_end, bool prefetch) {
  auto& b = k.b;
  const int cb = static_cast<int>(masks.size());
  std::vector<Value *> p, y, idx;
  std::vector<llvm::AllocaInst*> acc;
  for (int c = 0; c < cb; ++c) idx.push_back(b.CreateAdd(i0, k.ci64(int64_t{c} * k.vf)));
  for (int hi = 0; hi < hb; ++hi) {
    Value* row = b.CreateAdd(h, k.ci64(hi));
    p.push_back(k.at(k.f32, a.x, b.CreateMul(row, a.n)));
    y.push_back(k.at(k.f32, a.y, b.CreateMul(row, k.ci64(d.n))));
    for (int c = 0; c < cb; ++c) {
      acc.push_back(k.slot(k.vf32, 1, "acc"));
      b.CreateStore(k.load(y[hi], idx[c], masks[c]), acc.back());
    }
  }
  k.loop(s0, s_end, 1, [&](Value* s) {
    Value* row = cache_row(k, d, a, s);
    if (prefetch)  // the same columns of the row one tile on, a line at a time
      for (int64_t at = 0; at < int64_t{cb} * k.vf * (d.kv_type ? 2 : 4); at += 64)
        prefetch_at(k, d, a, b.CreateAdd(s, k.ci64(kValueTile)), b.CreateAdd(i0, k.ci64(at / (d.kv_type ? 2 : 4))));
    std::vector<Value*> v;
    for (int c = 0; c < cb; ++c) v.push_back(load_kv(k, d, row, idx[c], masks[c]));
    for (int hi = 0; hi < hb; ++hi) {
      Value* ps = b.CreateVectorSplat(k.vf, k.load_f32(p[hi], s));
      for (int c = 0; c < cb; ++c) {
        llvm::AllocaInst* slot = acc[hi * cb + c];
        b.CreateStore(b.CreateFAdd(b.CreateLoad(k.vf32, slot), b.CreateFMul(ps, v[c])), slot);
      }
    }
  });
  for (int hi = 0; hi < hb; ++hi)
    for (int c = 0; c < cb; ++c) k.store(b.CreateLoad(k.vf32, acc[hi * cb + c]), y[hi], idx[c], masks[c]);
}

}  // namespace

void emit_attn_scores(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  k.loop(k.ci64(0), a.n, kScoreTile, [&](Value* s0) {
    Value* s_end = min64(k, b.CreateAdd(s0, k.ci64(kScoreTile)), a.n);
    Value* quads_end = b.CreateAdd(s0, b.CreateAnd(b.CreateSub(s_end, s0), k.ci64(~int64_t{kRowBlock - 1})));
    head_blocks(k, a.n_rows, [&](Value* h, int hb, bool first) {
      k.loop(s0, quads_end, kRowBlock, [&](Value* s) { dot_block(k, d, a, h, hb, s, kRowBlock, first); });
      k.loop(quads_end, s_end, 1, [&](Value* s) { dot_block(k, d, a, h, hb, s, 1, first); });
    });
  });
}

void emit_attn_values(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
    Value* y = k.at(k.f32, a.y, b.CreateMul(h, k.ci64(d.n)));
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) { k.store(k.splat(0.0f), y, i, m); });
  });
  // The value's vectors: blocks of kChunkBlock whole ones, then one block of what is left
  // (the last vector partial when vf does not divide the width).
  const int64_t vf = k.vf, block = kChunkBlock * vf, whole = d.n / block * block;
  std::vector<Value*> full(kChunkBlock, nullptr), tail;
  for (int64_t i = whole; i < d.n; i += vf) tail.push_back(d.n - i >= vf ? nullptr : k.lanes_below(k.ci64(d.n - i)));
  k.loop(k.ci64(0), a.n, kValueTile, [&](Value* s0) {
    Value* s_end = min64(k, b.CreateAdd(s0, k.ci64(kValueTile)), a.n);
    k.loop(k.ci64(0), k.ci64(whole), block, [&](Value* i) {
      head_blocks(k, a.n_rows,
                  [&](Value* h, int hb, bool first) { values_block(k, d, a, h, hb, i, full, s0, s_end, first); });
    });
    if (!tail.empty())
      head_blocks(k, a.n_rows, [&](Value* h, int hb, bool first) {
        values_block(k, d, a, h, hb, k.ci64(whole), tail, s0, s_end, first);
      });
  });
}

}  // namespace zenmoe::glue_ir
