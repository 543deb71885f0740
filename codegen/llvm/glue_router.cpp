// The MoE router (ref::route): probabilities, biased selection scores, optional group-limited
// masking, top-k by repeated vector argmax (ties keep the lower index), weights from the
// unbiased probabilities, normalisation and scale.
#include <limits>

#include <llvm/IR/Constants.h>

#include "codegen/llvm/glue_ir.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Index of the largest of sel[0 .. n) (the lowest such index on ties), clamped into range.
Value* argmax(Kit& k, Value* sel, int64_t n) {
  auto& b = k.b;
  llvm::AllocaInst* bv = k.slot(k.vf32, 1, "best");
  llvm::AllocaInst* bi = k.slot(k.vi32, 1, "best_i");
  b.CreateStore(k.splat(kNegInf), bv);
  b.CreateStore(k.iota(), bi);
  k.vec_loop(k.ci64(n), [&](Value* i, Value* m) {
    Value* v = k.load(sel, i, m, kNegInf);
    Value* cur = b.CreateLoad(k.vf32, bv);
    Value* gt = b.CreateFCmpOGT(v, cur);  // strict: an equal later value keeps the earlier index
    b.CreateStore(b.CreateSelect(gt, v, cur), bv);
    Value* idx = b.CreateAdd(k.iota(), b.CreateVectorSplat(k.vf, b.CreateTrunc(i, k.i32)));
    b.CreateStore(b.CreateSelect(gt, idx, b.CreateLoad(k.vi32, bi)), bi);
  });
  Value* best = b.CreateLoad(k.vf32, bv);
  Value* mx = b.CreateVectorSplat(k.vf, k.hmax(best));
  Value* cand = b.CreateSelect(b.CreateFCmpOEQ(best, mx), b.CreateLoad(k.vi32, bi), k.splat_i32(INT32_MAX));
  Value* idx = b.CreateIntMinReduce(cand, true);
  idx = b.CreateSelect(b.CreateICmpSGT(idx, k.ci32(static_cast<int32_t>(n - 1))), k.ci32(static_cast<int32_t>(n - 1)),
                       idx);
  return b.CreateSExt(idx, k.i64);
}

// Group-limited routing: group score = sum (in double) of its two best selection scores; all
// experts outside the n_group_used best groups get -inf.
void mask_groups(Kit& k, const GlueDesc& d, Value* sel) {
  auto& b = k.b;
  const int64_t per = d.n / d.n_groups;
  Value* gs = k.slot(k.f32, static_cast<uint64_t>(d.n_groups), "gscore");
  llvm::AllocaInst* b1 = k.slot(k.f32, 1, "b1");
  llvm::AllocaInst* b2 = k.slot(k.f32, 1, "b2");
  k.loop(k.ci64(0), k.ci64(d.n_groups), 1, [&](Value* g) {
    Value* base = b.CreateMul(g, k.ci64(per));
    b.CreateStore(k.cf(kNegInf), b1);
    b.CreateStore(k.cf(kNegInf), b2);
    k.loop(k.ci64(0), k.ci64(per), 1, [&](Value* j) {
      Value* v = k.load_f32(sel, b.CreateAdd(base, j));
      Value* x1 = b.CreateLoad(k.f32, b1);
      Value* x2 = b.CreateLoad(k.f32, b2);
      Value* gt1 = b.CreateFCmpOGT(v, x1);
      b.CreateStore(b.CreateSelect(gt1, x1, b.CreateSelect(b.CreateFCmpOGT(v, x2), v, x2)), b2);
      b.CreateStore(b.CreateSelect(gt1, v, x1), b1);
    });
    Value* s = b.CreateFPExt(b.CreateLoad(k.f32, b1), k.f64);
    if (per >= 2) s = b.CreateFAdd(s, b.CreateFPExt(b.CreateLoad(k.f32, b2), k.f64));
    k.store_f32(b.CreateFPTrunc(s, k.f32), gs, g);
  });
  // Pick the kept groups by repeated argmax (a picked score is set to -inf so it is not
  // picked again), then drop every group not picked.
  llvm::AllocaInst* keep = k.slot(k.i8, static_cast<uint64_t>(d.n_groups), "keep");
  b.CreateMemSet(keep, b.getInt8(0), static_cast<uint64_t>(d.n_groups), llvm::Align(1));
  k.loop(k.ci64(0), k.ci64(d.n_group_used), 1, [&](Value*) {
    Value* g = argmax(k, gs, d.n_groups);
    b.CreateStore(b.getInt8(1), k.at(k.i8, keep, g));
    k.store_f32(k.cf(kNegInf), gs, g);
  });
  k.loop(k.ci64(0), k.ci64(d.n_groups), 1, [&](Value* g) {
    Value* kept = b.CreateICmpNE(b.CreateLoad(k.i8, k.at(k.i8, keep, g)), b.getInt8(0));
    k.if_then(b.CreateNot(kept), [&] {
      Value* row = k.at(k.f32, sel, b.CreateMul(g, k.ci64(per)));
      k.vec_loop(k.ci64(per), [&](Value* i, Value* m) { k.store(k.splat(kNegInf), row, i, m); });
    });
  });
}

}  // namespace

void emit_router(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  const int64_t n = d.n, top = d.top_k;
  Value* probs = k.slot(k.f32, static_cast<uint64_t>(n), "probs");
  Value* sel = k.slot(k.f32, static_cast<uint64_t>(n), "sel");
  llvm::AllocaInst* sum = k.slot(k.f64, 1, "wsum");
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* r) {
    Value* logits = k.at(k.f32, a.x, b.CreateMul(r, k.ci64(n)));
    Value* ids = k.at(k.i32, a.ids, b.CreateMul(r, k.ci64(top)));
    Value* w = k.at(k.f32, a.y, b.CreateMul(r, k.ci64(top)));
    if (d.gating == 1) emit_softmax_row(k, 1.0f, logits, probs, k.ci64(n), k.ci64(n));
    k.vec_loop(k.ci64(n), [&](Value* i, Value* m) {
      Value* p = k.load(d.gating == 1 ? probs : logits, i, m);
      if (d.gating == 2) p = b.CreateFDiv(k.splat(1.0f), b.CreateFAdd(k.splat(1.0f), k.exp(b.CreateFNeg(p))));
      k.store(p, probs, i, m);
      k.store((d.flags & kGlueHasBias) ? b.CreateFAdd(p, k.load(a.x2, i, m)) : p, sel, i, m);
    });
    if (d.n_groups > 1) mask_groups(k, d, sel);
    b.CreateStore(llvm::ConstantFP::get(k.f64, 0.0), sum);
    k.loop(k.ci64(0), k.ci64(top), 1, [&](Value* j) {
      Value* e = argmax(k, sel, n);
      b.CreateAlignedStore(b.CreateTrunc(e, k.i32), k.at(k.i32, ids, j), llvm::Align(4));
      Value* p = k.load_f32(probs, e);
      k.store_f32(p, w, j);
      k.store_f32(k.cf(kNegInf), sel, e);
      b.CreateStore(b.CreateFAdd(b.CreateLoad(k.f64, sum), b.CreateFPExt(p, k.f64)), sum);
    });
    if (d.flags & kGlueNormWeights) {
      Value* s = b.CreateFPTrunc(b.CreateLoad(k.f64, sum), k.f32);
      Value* floor = k.cf(6.103515625e-5f);
      Value* denom = b.CreateSelect(b.CreateFCmpOLT(s, floor), floor, s);  // std::max(s, floor)
      k.loop(k.ci64(0), k.ci64(top), 1, [&](Value* j) { k.store_f32(b.CreateFDiv(k.load_f32(w, j), denom), w, j); });
    }
    if (d.scale != 0.0f && d.scale != 1.0f)
      k.loop(k.ci64(0), k.ci64(top), 1, [&](Value* j) { k.store_f32(b.CreateFMul(k.load_f32(w, j), k.cf(d.scale)), w, j); });
  });
}

}  // namespace zenmoe::glue_ir
