// Row-wise glue ops: rms_norm, quantisers, SwiGLU, add, weighted sum. Each follows the order
// and precision of its kernels/ref counterpart so the integer parts match bit for bit.
#include <functional>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/glue_ir.h"
#include "kernels/formats.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

using Produce = std::function<Value*(Value* i, Value* mask)>;

// First index of a lane equal to `target` over the block's vectors (2^30 when none).
Value* first_index_of(Kit& k, const std::vector<Value*>& vals, Value* target) {
  Value* best = k.splat_i32(1 << 30);
  Value* t = k.b.CreateVectorSplat(k.vf, target);
  for (size_t j = 0; j < vals.size(); ++j) {
    Value* idx = k.b.CreateAdd(k.iota(), k.splat_i32(static_cast<int32_t>(j * k.vf)));
    Value* cand = k.b.CreateSelect(k.b.CreateFCmpOEQ(vals[j], t), idx, k.splat_i32(1 << 30));
    best = k.b.CreateSelect(k.b.CreateICmpSLT(cand, best), cand, best);
  }
  return k.b.CreateIntMinReduce(best, true);
}

// The 16 sums of 16 consecutive codes (Q8_K bsums) from the block's i32 code vectors, in
// order, vf per vector. A transposing tree: each level adds the two halves of every group's
// lanes while packing two vectors into one, so 16 groups need 15 adds instead of 16
// horizontal reductions.
std::vector<Value*> group_sums(Kit& k, const std::vector<Value*>& qs) {
  const unsigned w = k.vf;  // vf <= 16 divides 16
  std::vector<Value*> level;
  for (size_t g = 0; g < 16; ++g) {
    Value* s = qs[g * (16 / w)];
    for (size_t j = 1; j < 16 / w; ++j) s = k.b.CreateAdd(s, qs[g * (16 / w) + j]);
    level.push_back(s);
  }
  for (unsigned seg = w; seg > 1; seg /= 2) {  // lanes per group in each vector
    std::vector<int> lo, hi;
    for (unsigned src = 0; src < 2; ++src)
      for (unsigned g = 0; g < w / seg; ++g)
        for (unsigned l = 0; l < seg / 2; ++l) {
          lo.push_back(static_cast<int>(src * w + g * seg + l));
          hi.push_back(static_cast<int>(src * w + g * seg + seg / 2 + l));
        }
    std::vector<Value*> next;
    for (size_t j = 0; j + 1 < level.size(); j += 2)
      next.push_back(k.b.CreateAdd(k.b.CreateShuffleVector(level[j], level[j + 1], lo),
                                   k.b.CreateShuffleVector(level[j], level[j + 1], hi)));
    level = next;
  }
  return level;
}

// One Q8_K block from 256 floats held in vectors (ref::from_float_q8_K): the signed value of
// largest magnitude (first one on ties), iscale = -127/max, round half to even, clamp at 127,
// sums per 16, d = 1/iscale. An all-zero block is all zero bytes.
void quant_block_q8k(Kit& k, const std::vector<Value*>& vals, Value* out) {
  auto& b = k.b;
  Value* vmx = vals[0];
  Value* vmn = vals[0];
  for (size_t j = 1; j < vals.size(); ++j) {
    vmx = k.vmax(vmx, vals[j]);
    vmn = k.vmin(vmn, vals[j]);
  }
  Value* mx = k.hmax(vmx);
  Value* mn = k.hmin(vmn);
  Value* neg_mn = b.CreateFNeg(mn);
  llvm::AllocaInst* max_slot = k.slot(k.f32, 1, "max");
  b.CreateStore(b.CreateSelect(b.CreateFCmpOGT(mx, neg_mn), mx, mn), max_slot);
  // +a and -a both present as the largest magnitude: the first one in the row decides.
  k.if_then(b.CreateAnd(b.CreateFCmpOEQ(mx, neg_mn), b.CreateFCmpONE(mx, k.cf(0.0f))), [&] {
    Value* first_pos = first_index_of(k, vals, mx);
    Value* first_neg = first_index_of(k, vals, mn);
    b.CreateStore(b.CreateSelect(b.CreateICmpSLT(first_pos, first_neg), mx, mn), max_slot);
  });
  Value* all_zero = b.CreateAnd(b.CreateFCmpOEQ(mx, k.cf(0.0f)), b.CreateFCmpOEQ(mn, k.cf(0.0f)));
  k.if_then(
      all_zero, [&] { b.CreateMemSet(out, b.getInt8(0), sizeof(BlockQ8_K), llvm::Align(1)); },
      [&] {
        Value* iscale = b.CreateFDiv(k.cf(-127.0f), b.CreateLoad(k.f32, max_slot));
        Value* vis = b.CreateVectorSplat(k.vf, iscale);
        std::vector<Value*> qs;
        for (size_t j = 0; j < vals.size(); ++j) {
          Value* q = k.nearest_int(b.CreateFMul(vis, vals[j]));
          q = b.CreateSelect(b.CreateICmpSLT(q, k.splat_i32(127)), q, k.splat_i32(127));
          qs.push_back(q);
          b.CreateAlignedStore(b.CreateTrunc(q, k.vi8), k.at_bytes(out, k.ci64(4 + j * k.vf)), llvm::Align(1));
        }
        std::vector<Value*> sums = group_sums(k, qs);
        for (size_t j = 0; j < sums.size(); ++j)
          b.CreateAlignedStore(b.CreateTrunc(sums[j], llvm::FixedVectorType::get(k.i16, k.vf)),
                               k.at_bytes(out, k.ci64(4 + 256 + 2 * j * k.vf)), llvm::Align(1));
        b.CreateAlignedStore(b.CreateFDiv(k.cf(1.0f), iscale), out, llvm::Align(1));
      });
}

// One Q8_0 block from 32 floats (ref::from_float_q8_0): d = amax/127, q = round(x/d) half
// away from zero, d stored as binary16 (round to nearest even).
void quant_block_q80(Kit& k, const std::vector<Value*>& vals, Value* out) {
  auto& b = k.b;
  Value* va = nullptr;
  for (Value* v : vals) {
    Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v);
    va = va ? k.vmax(va, a) : a;
  }
  Value* amax = k.hmax(va);
  Value* d = b.CreateFDiv(amax, k.cf(127.0f));
  Value* id = b.CreateSelect(b.CreateFCmpUNE(d, k.cf(0.0f)), b.CreateFDiv(k.cf(1.0f), d), k.cf(0.0f));
  Value* d16 = b.CreateBitCast(b.CreateFPTrunc(d, b.getHalfTy()), k.i16);
  b.CreateAlignedStore(d16, out, llvm::Align(1));
  Value* vid = b.CreateVectorSplat(k.vf, id);
  for (size_t j = 0; j < vals.size(); ++j) {
    Value* r = b.CreateUnaryIntrinsic(llvm::Intrinsic::round, b.CreateFMul(vals[j], vid));
    Value* q = b.CreateTrunc(b.CreateFPToSI(r, k.vi32), k.vi8);
    b.CreateAlignedStore(q, k.at_bytes(out, k.ci64(2 + j * k.vf)), llvm::Align(1));
  }
}

// Writes one row produced vector by vector: f32 to y_row (when desc.write_f32 or no
// quantised output) and/or quantised blocks to q_row.
void emit_row_out(Kit& k, const GlueDesc& d, const Produce& produce, Value* y_row, Value* q_row) {
  auto& b = k.b;
  if (d.quant == GlueQuant::kNone) {
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) { k.store(produce(i, m), y_row, i, m); });
    return;
  }
  const bool q8k = d.quant == GlueQuant::kQ8K;
  const int64_t qk = q8k ? 256 : 32;
  const int64_t bytes = q8k ? sizeof(BlockQ8_K) : sizeof(BlockQ8_0);
  k.loop(k.ci64(0), k.ci64(d.n / qk), 1, [&](Value* blk) {
    Value* base = b.CreateMul(blk, k.ci64(qk));
    std::vector<Value*> vals;
    for (int64_t j = 0; j < qk; j += k.vf) {
      Value* i = b.CreateAdd(base, k.ci64(j));
      Value* v = produce(i, nullptr);
      if (d.write_f32) k.store(v, y_row, i, nullptr);
      vals.push_back(v);
    }
    Value* out = k.at_bytes(q_row, b.CreateMul(blk, k.ci64(bytes)));
    if (q8k) quant_block_q8k(k, vals, out);
    else quant_block_q80(k, vals, out);
  });
}

int64_t quant_row_bytes(const GlueDesc& d) {
  if (d.quant == GlueQuant::kQ8K) return d.n / 256 * static_cast<int64_t>(sizeof(BlockQ8_K));
  if (d.quant == GlueQuant::kQ80) return d.n / 32 * static_cast<int64_t>(sizeof(BlockQ8_0));
  return 0;
}

// Runs body(x_row, y_row, q_row, row) over call.n_rows rows of n.
void for_rows(Kit& k, const GlueDesc& d, const Args& a,
              const std::function<void(Value*, Value*, Value*, Value*)>& body) {
  auto& b = k.b;
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* r) {
    Value* off = b.CreateMul(r, k.ci64(d.n));
    Value* q_row = k.at_bytes(a.q, b.CreateMul(r, k.ci64(quant_row_bytes(d))));
    body(k.at(k.f32, a.x, off), k.at(k.f32, a.y, off), q_row, off);
  });
}

}  // namespace

void emit_rms_norm(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  llvm::AllocaInst* acc = k.slot(k.vf64, 1, "sumsq");
  for_rows(k, d, a, [&](Value* x, Value* y, Value* q, Value*) {
    // Squares rounded to f32, summed in double (ref::rms_norm); only the order differs.
    b.CreateStore(llvm::Constant::getNullValue(k.vf64), acc);
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
      Value* v = k.load(x, i, m);
      Value* sq = b.CreateFPExt(b.CreateFMul(v, v), k.vf64);
      b.CreateStore(b.CreateFAdd(b.CreateLoad(k.vf64, acc), sq), acc);
    });
    Value* sum = k.hsum(b.CreateLoad(k.vf64, acc));
    Value* mean = b.CreateFPTrunc(b.CreateFDiv(sum, llvm::ConstantFP::get(k.f64, double(d.n))), k.f32);
    Value* root = b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b.CreateFAdd(mean, k.cf(d.eps)));
    Value* scale = b.CreateVectorSplat(k.vf, b.CreateFDiv(k.cf(1.0f), root));
    Value* w = (d.flags & kGlueHasWeight) ? k.at(k.f32, a.w, k.ci64(0)) : nullptr;
    emit_row_out(
        k, d,
        [&](Value* i, Value* m) {
          Value* v = b.CreateFMul(k.load(x, i, m), scale);  // rounded before the weight, like ggml
          return w ? b.CreateFMul(v, k.load(w, i, m)) : v;
        },
        y, q);
  });
}

void emit_quantize(Kit& k, const GlueDesc& d, const Args& a) {
  for_rows(k, d, a, [&](Value* x, Value* y, Value* q, Value*) {
    emit_row_out(k, d, [&](Value* i, Value* m) { return k.load(x, i, m); }, y, q);
  });
}

void emit_swiglu(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  for_rows(k, d, a, [&](Value*, Value* y, Value* q, Value* off) {
    Value* g_row = k.at(k.f32, a.x, off);
    Value* u_row = k.at(k.f32, a.x2, off);
    emit_row_out(
        k, d,
        [&](Value* i, Value* m) {
          Value* g = k.load(g_row, i, m);
          Value* e = k.exp(b.CreateFNeg(g));
          return b.CreateFMul(b.CreateFDiv(g, b.CreateFAdd(k.splat(1.0f), e)), k.load(u_row, i, m));
        },
        y, q);
  });
}

void emit_add(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  for_rows(k, d, a, [&](Value* x, Value* y, Value*, Value* off) {
    Value* x2 = k.at(k.f32, a.x2, off);
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
      k.store(b.CreateFAdd(k.load(x, i, m), k.load(x2, i, m)), y, i, m);
    });
  });
}

void emit_weighted_sum(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  const int64_t terms = d.top_k;
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* r) {
    Value* y = k.at(k.f32, a.y, b.CreateMul(r, k.ci64(d.n)));
    Value* t0 = b.CreateMul(r, k.ci64(terms));
    std::vector<Value*> ws, xs;
    for (int64_t t = 0; t < terms; ++t) {
      Value* ti = b.CreateAdd(t0, k.ci64(t));
      ws.push_back(b.CreateVectorSplat(k.vf, k.load_f32(a.w, ti)));
      xs.push_back(k.at(k.f32, a.x, b.CreateMul(ti, a.stride)));
    }
    k.vec_loop(k.ci64(d.n), [&](Value* i, Value* m) {
      // In term order from zero without fusing, exactly as repeated ref::axpy.
      Value* acc = k.splat(0.0f);
      for (int64_t t = 0; t < terms; ++t) acc = b.CreateFAdd(acc, b.CreateFMul(ws[t], k.load(xs[t], i, m)));
      k.store(acc, y, i, m);
    });
  });
}

}  // namespace zenmoe::glue_ir
