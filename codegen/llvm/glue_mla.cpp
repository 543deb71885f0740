// MLA attention pieces (absorbed form): scores q·K over the compressed cache and the
// probability-weighted sum of cache rows. Both walk the cache in tiles of kTile rows so each
// cache row is read from memory once for all heads and then served from L1.
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/glue_ir.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

constexpr int64_t kTile = 8;

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

// y[s + r] = dot(q, cache row s + r) for r < count, sharing each load of q.
void dot_rows(Kit& k, const GlueDesc& d, const Args& a, Value* q, Value* s, int count, Value* y) {
  auto& b = k.b;
  std::vector<Value*> rows;
  std::vector<llvm::AllocaInst*> acc;
  for (int r = 0; r < count; ++r) {
    rows.push_back(cache_row(k, d, a, b.CreateAdd(s, k.ci64(r))));
    acc.push_back(k.slot(k.vf32, 1, "dot"));
    b.CreateStore(k.splat(0.0f), acc.back());
  }
  k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
    Value* qv = k.load(q, i, m);
    for (int r = 0; r < count; ++r) {
      Value* prod = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {k.vf32},
                                      {qv, load_kv(k, d, rows[r], i, m), b.CreateLoad(k.vf32, acc[r])});
      b.CreateStore(prod, acc[r]);
    }
  });
  for (int r = 0; r < count; ++r) k.store_f32(k.hsum(b.CreateLoad(k.vf32, acc[r])), y, b.CreateAdd(s, k.ci64(r)));
}

}  // namespace

void emit_attn_scores(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  k.loop(k.ci64(0), a.n, kTile, [&](Value* s0) {
    Value* s_end = min64(k, b.CreateAdd(s0, k.ci64(kTile)), a.n);
    Value* quads_end = b.CreateAdd(s0, b.CreateAnd(b.CreateSub(s_end, s0), k.ci64(~int64_t{3})));
    k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
      Value* q = k.at(k.f32, a.x, b.CreateMul(h, k.ci64(d.n)));
      Value* y = k.at(k.f32, a.y, b.CreateMul(h, a.n));
      k.loop(s0, quads_end, 4, [&](Value* s) { dot_rows(k, d, a, q, s, 4, y); });
      k.loop(quads_end, s_end, 1, [&](Value* s) { dot_rows(k, d, a, q, s, 1, y); });
    });
  });
}

void emit_attn_values(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
    Value* y = k.at(k.f32, a.y, b.CreateMul(h, k.ci64(d.n)));
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) { k.store(k.splat(0.0f), y, i, m); });
  });
  llvm::AllocaInst* acc = k.slot(k.vf32, 1, "acc");
  k.loop(k.ci64(0), a.n, kTile, [&](Value* s0) {
    Value* s_end = min64(k, b.CreateAdd(s0, k.ci64(kTile)), a.n);
    k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
      Value* p = k.at(k.f32, a.x, b.CreateMul(h, a.n));
      Value* y = k.at(k.f32, a.y, b.CreateMul(h, k.ci64(d.n)));
      k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
        b.CreateStore(k.load(y, i, m), acc);
        k.loop(s0, s_end, 1, [&](Value* s) {
          // Rounded product, then the add: the reference's `out[d] += ps * v[d]`, in order.
          Value* pv = b.CreateFMul(b.CreateVectorSplat(k.vf, k.load_f32(p, s)),
                                   load_kv(k, d, cache_row(k, d, a, s), i, m));
          b.CreateStore(b.CreateFAdd(b.CreateLoad(k.vf32, acc), pv), acc);
        });
        k.store(b.CreateLoad(k.vf32, acc), y, i, m);
      });
    });
  });
}

}  // namespace zenmoe::glue_ir
