// Attention and routing glue ops: YaRN RoPE, softmax, the MoE router. Constants that depend
// only on the descriptor (YaRN ramp, theta scale, magnitude) are computed here at generation
// time with the same f32 expressions as kernels/ref/ops.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/glue_ir.h"
#include "kernels/ref/ops.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

ref::RopeParams rope_params(const GlueDesc& d) {
  ref::RopeParams p;
  p.n_dims = d.rope_dims;
  p.freq_base = d.freq_base;
  p.freq_scale = d.freq_scale;
  p.n_ctx_orig = d.n_ctx_orig;
  p.ext_factor = d.ext_factor;
  p.attn_factor = d.attn_factor;
  p.beta_fast = d.beta_fast;
  p.beta_slow = d.beta_slow;
  return p;
}

// The YaRN ramp of ref::rope_thetas, times ext_factor, per pair.
std::vector<float> rope_mix(const ref::RopeParams& p) {
  float corr[2];
  ref::rope_corr_dims(p, corr);
  std::vector<float> mix(static_cast<size_t>(p.n_dims / 2));
  for (int i = 0; i < p.n_dims / 2; ++i) {
    const float y = (static_cast<float>(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
    mix[i] = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
  }
  return mix;
}

llvm::GlobalVariable* const_floats(llvm::Module& m, const std::vector<float>& v, const char* name) {
  auto* ty = llvm::ArrayType::get(llvm::Type::getFloatTy(m.getContext()), v.size());
  auto* init = llvm::ConstantDataArray::get(m.getContext(), llvm::ArrayRef<float>(v));
  return new llvm::GlobalVariable(m, ty, true, llvm::GlobalValue::PrivateLinkage, init, name);
}

llvm::FunctionCallee libm(Kit& k, const char* name) {
  auto* ty = llvm::FunctionType::get(k.f32, {k.f32}, false);
  return k.fn->getParent()->getOrInsertFunction(name, ty);
}

// cc[2i] = cc[2i+1] = cos(theta_i)*m, ss[2i] = -sin(theta_i)*m, ss[2i+1] = sin(theta_i)*m:
// the rotation becomes y = x*cc + swap_pairs(x)*ss, exact against ref::rope_apply_norm.
void rope_tables(Kit& k, const GlueDesc& d, const Args& a, Value* cc, Value* ss) {
  auto& b = k.b;
  const ref::RopeParams p = rope_params(d);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  float mag = p.attn_factor;
  if (p.ext_factor != 0.0f) mag *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  const std::vector<float> mix = rope_mix(p);
  std::vector<float> keep(mix.size());
  for (size_t i = 0; i < mix.size(); ++i) keep[i] = 1.0f - mix[i];
  llvm::Module& m = *k.fn->getParent();
  llvm::GlobalVariable* g_mix = const_floats(m, mix, "rope_mix");
  llvm::GlobalVariable* g_keep = const_floats(m, keep, "rope_keep");
  llvm::AllocaInst* extrap = k.slot(k.f32, 1, "extrap");
  b.CreateStore(b.CreateSIToFP(a.pos, k.f32), extrap);
  llvm::FunctionCallee cosf = libm(k, "cosf"), sinf = libm(k, "sinf");
  k.loop(k.ci64(0), k.ci64(p.n_dims / 2), 1, [&](Value* i) {
    Value* e = b.CreateLoad(k.f32, extrap);
    Value* t = b.CreateFMul(k.cf(p.freq_scale), e);
    if (p.ext_factor != 0.0f)
      t = b.CreateFAdd(b.CreateFMul(t, k.load_f32(g_keep, i)), b.CreateFMul(e, k.load_f32(g_mix, i)));
    Value* c = b.CreateFMul(b.CreateCall(cosf, {t}), k.cf(mag));
    Value* s = b.CreateFMul(b.CreateCall(sinf, {t}), k.cf(mag));
    Value* i0 = b.CreateMul(i, k.ci64(2));
    Value* i1 = b.CreateAdd(i0, k.ci64(1));
    k.store_f32(c, cc, i0);
    k.store_f32(c, cc, i1);
    k.store_f32(b.CreateFNeg(s), ss, i0);
    k.store_f32(s, ss, i1);
    b.CreateStore(b.CreateFMul(e, k.cf(theta_scale)), extrap);  // ggml's running product
  });
}

}  // namespace

void emit_rope(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  Value* cc = k.slot(k.f32, static_cast<uint64_t>(d.rope_dims), "cos");
  Value* ss = k.slot(k.f32, static_cast<uint64_t>(d.rope_dims), "sin");
  rope_tables(k, d, a, cc, ss);
  std::vector<int> swap;
  for (unsigned j = 0; j < k.vf; ++j) swap.push_back(static_cast<int>(j ^ 1u));
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
    Value* off = b.CreateMul(h, a.stride);
    Value* x = k.at(k.f32, a.x, off);
    Value* y = k.at(k.f32, a.y, off);
    k.vec_loop(k.ci64(d.rope_dims), [&](Value* i, Value* m) {
      Value* v = k.load(x, i, m);
      Value* rot = b.CreateFMul(b.CreateShuffleVector(v, swap), k.load(ss, i, m));
      k.store(b.CreateFAdd(b.CreateFMul(v, k.load(cc, i, m)), rot), y, i, m);
    });
  });
}

void emit_softmax_row(Kit& k, float scale, Value* x, Value* y, Value* n, Value* n_visible) {
  auto& b = k.b;
  Value* nv = b.CreateVectorSplat(k.vf, b.CreateTrunc(n_visible, k.i32));
  auto visible = [&](Value* i) {
    return b.CreateICmpSLT(b.CreateAdd(k.iota(), b.CreateVectorSplat(k.vf, b.CreateTrunc(i, k.i32))), nv);
  };
  llvm::AllocaInst* vmax = k.slot(k.vf32, 1, "vmax");
  b.CreateStore(k.splat(kNegInf), vmax);
  k.vec_loop(n, [&](Value* i, Value* m) {
    Value* v = b.CreateSelect(visible(i), b.CreateFMul(k.load(x, i, m), k.splat(scale)), k.splat(kNegInf));
    k.store(v, y, i, m);
    b.CreateStore(k.vmax(b.CreateLoad(k.vf32, vmax), v), vmax);
  });
  Value* mx = b.CreateVectorSplat(k.vf, k.hmax(b.CreateLoad(k.vf32, vmax)));
  llvm::AllocaInst* acc = k.slot(k.vf64, 1, "sum");
  b.CreateStore(llvm::Constant::getNullValue(k.vf64), acc);
  k.vec_loop(n, [&](Value* i, Value* m) {
    Value* e = b.CreateSelect(visible(i), k.exp(b.CreateFSub(k.load(y, i, m), mx)), k.splat(0.0f));
    k.store(e, y, i, m);
    b.CreateStore(b.CreateFAdd(b.CreateLoad(k.vf64, acc), b.CreateFPExt(e, k.vf64)), acc);
  });
  Value* inv = b.CreateFPTrunc(b.CreateFDiv(llvm::ConstantFP::get(k.f64, 1.0), k.hsum(b.CreateLoad(k.vf64, acc))),
                               k.f32);
  Value* vinv = b.CreateVectorSplat(k.vf, inv);
  k.vec_loop(n, [&](Value* i, Value* m) { k.store(b.CreateFMul(k.load(y, i, m), vinv), y, i, m); });
}

void emit_softmax(Kit& k, const GlueDesc& d, const Args& a) {
  auto& b = k.b;
  // Out-of-range visible counts are clamped to [0, n] so a bad call cannot index past the row.
  Value* nv = b.CreateSelect(b.CreateICmpSGT(a.n_visible, a.n), a.n, a.n_visible);
  nv = b.CreateSelect(b.CreateICmpSLT(nv, k.ci64(0)), k.ci64(0), nv);
  k.loop(k.ci64(0), a.n_rows, 1, [&](Value* r) {
    Value* off = b.CreateMul(r, a.stride);
    emit_softmax_row(k, d.scale, k.at(k.f32, a.x, off), k.at(k.f32, a.y, off), a.n, nv);
  });
}

}  // namespace zenmoe::glue_ir
