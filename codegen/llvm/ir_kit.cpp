#include "codegen/llvm/ir_kit.h"

#include <limits>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>

namespace zenmoe::glue_ir {

using llvm::Value;

Kit::Kit(llvm::IRBuilder<>& builder, llvm::Function* function, unsigned width)
    : b(builder), fn(function), vf(width) {
  llvm::LLVMContext& c = b.getContext();
  f32 = llvm::Type::getFloatTy(c);
  f64 = llvm::Type::getDoubleTy(c);
  i8 = llvm::Type::getInt8Ty(c);
  i16 = llvm::Type::getInt16Ty(c);
  i32 = llvm::Type::getInt32Ty(c);
  i64 = llvm::Type::getInt64Ty(c);
  ptr = llvm::PointerType::get(c, 0);
  vf32 = llvm::FixedVectorType::get(f32, vf);
  vf64 = llvm::FixedVectorType::get(f64, vf);
  vi32 = llvm::FixedVectorType::get(i32, vf);
  vi8 = llvm::FixedVectorType::get(i8, vf);
}

llvm::Constant* Kit::cf(float v) const { return llvm::ConstantFP::get(f32, v); }
llvm::Constant* Kit::ci32(int32_t v) const { return llvm::ConstantInt::get(i32, static_cast<uint64_t>(v), true); }
llvm::Constant* Kit::ci64(int64_t v) const { return llvm::ConstantInt::get(i64, static_cast<uint64_t>(v), true); }
llvm::Constant* Kit::splat(float v) const { return llvm::ConstantVector::getSplat(vf32->getElementCount(), cf(v)); }
llvm::Constant* Kit::splat_i32(int32_t v) const {
  return llvm::ConstantVector::getSplat(vi32->getElementCount(), ci32(v));
}

llvm::Constant* Kit::iota() const {
  std::vector<llvm::Constant*> lanes;
  for (unsigned j = 0; j < vf; ++j) lanes.push_back(ci32(static_cast<int32_t>(j)));
  return llvm::ConstantVector::get(lanes);
}

Value* Kit::at(llvm::Type* elt, Value* base, Value* idx) { return b.CreateInBoundsGEP(elt, base, idx); }
Value* Kit::at_bytes(Value* base, Value* bytes) { return b.CreateInBoundsGEP(i8, base, bytes); }

Value* Kit::load(Value* base, Value* idx, Value* mask, float pad) {
  Value* p = at(f32, base, idx);
  if (mask == nullptr) return b.CreateAlignedLoad(vf32, p, llvm::Align(4));
  return b.CreateMaskedLoad(vf32, p, llvm::Align(4), mask, splat(pad));
}

void Kit::store(Value* v, Value* base, Value* idx, Value* mask) {
  Value* p = at(f32, base, idx);
  if (mask == nullptr) b.CreateAlignedStore(v, p, llvm::Align(4));
  else b.CreateMaskedStore(v, p, llvm::Align(4), mask);
}

Value* Kit::load_f32(Value* base, Value* idx) { return b.CreateAlignedLoad(f32, at(f32, base, idx), llvm::Align(4)); }
void Kit::store_f32(Value* v, Value* base, Value* idx) { b.CreateAlignedStore(v, at(f32, base, idx), llvm::Align(4)); }

Value* Kit::lanes_below(Value* remaining) {
  Value* r = b.CreateTrunc(b.CreateSelect(b.CreateICmpSGT(remaining, ci64(vf)), ci64(vf), remaining), i32);
  return b.CreateICmpSLT(iota(), b.CreateVectorSplat(vf, r));
}

llvm::AllocaInst* Kit::slot(llvm::Type* t, uint64_t count, const char* name) {
  llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
  llvm::AllocaInst* a = eb.CreateAlloca(t, count == 1 ? nullptr : ci64(static_cast<int64_t>(count)), name);
  a->setAlignment(llvm::Align(64));
  return a;
}

void Kit::loop(Value* begin, Value* end, int64_t step, const std::function<void(Value*)>& body) {
  llvm::LLVMContext& c = b.getContext();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* head = llvm::BasicBlock::Create(c, "loop", fn);
  llvm::BasicBlock* inner = llvm::BasicBlock::Create(c, "body", fn);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c, "exit", fn);
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::PHINode* i = b.CreatePHI(i64, 2, "i");
  i->addIncoming(begin, pre);
  b.CreateCondBr(b.CreateICmpSLT(i, end), inner, exit);
  b.SetInsertPoint(inner);
  body(i);
  i->addIncoming(b.CreateAdd(i, ci64(step)), b.GetInsertBlock());
  b.CreateBr(head);
  b.SetInsertPoint(exit);
}

void Kit::vec_loop(Value* n, const std::function<void(Value*, Value*)>& body) {
  const int64_t w = vf;
  Value* whole = b.CreateMul(b.CreateSDiv(n, ci64(w)), ci64(w));
  loop(ci64(0), whole, w, [&](Value* i) { body(i, nullptr); });
  if (auto* cn = llvm::dyn_cast<llvm::ConstantInt>(n); cn != nullptr && cn->getSExtValue() % w == 0) return;
  if_then(b.CreateICmpSLT(whole, n), [&] { body(whole, lanes_below(b.CreateSub(n, whole))); });
}

void Kit::if_then(Value* cond, const std::function<void()>& then_fn, const std::function<void()>& else_fn) {
  llvm::LLVMContext& c = b.getContext();
  llvm::BasicBlock* then_b = llvm::BasicBlock::Create(c, "then", fn);
  llvm::BasicBlock* else_b = else_fn ? llvm::BasicBlock::Create(c, "else", fn) : nullptr;
  llvm::BasicBlock* join = llvm::BasicBlock::Create(c, "join", fn);
  b.CreateCondBr(cond, then_b, else_b ? else_b : join);
  b.SetInsertPoint(then_b);
  then_fn();
  b.CreateBr(join);
  if (else_b) {
    b.SetInsertPoint(else_b);
    else_fn();
    b.CreateBr(join);
  }
  b.SetInsertPoint(join);
}

Value* Kit::vmax(Value* a, Value* c) { return b.CreateSelect(b.CreateFCmpOGT(a, c), a, c); }
Value* Kit::vmin(Value* a, Value* c) { return b.CreateSelect(b.CreateFCmpOLT(a, c), a, c); }

Value* Kit::hreduce(Value* v, const std::function<Value*(Value*, Value*)>& op) {
  unsigned n = llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements();
  while (n > 1) {
    std::vector<int> lo, hi;
    for (unsigned j = 0; j < n / 2; ++j) {
      lo.push_back(static_cast<int>(j));
      hi.push_back(static_cast<int>(j + n / 2));
    }
    v = op(b.CreateShuffleVector(v, lo), b.CreateShuffleVector(v, hi));
    n /= 2;
  }
  return b.CreateExtractElement(v, uint64_t{0});
}

Value* Kit::hmax(Value* v) { return hreduce(v, [&](Value* a, Value* c) { return vmax(a, c); }); }
Value* Kit::hmin(Value* v) { return hreduce(v, [&](Value* a, Value* c) { return vmin(a, c); }); }
Value* Kit::hsum(Value* v) { return hreduce(v, [&](Value* a, Value* c) { return b.CreateFAdd(a, c); }); }

Value* Kit::exp(Value* x) {
  // Inputs above 88.8 overflow to +inf through the two-step scaling below; below -104 the
  // result is 0 in f32 anyway. Clamping keeps n = round(x/ln2) within [-150, 129].
  x = vmin(vmax(x, splat(-104.0f)), splat(88.8f));
  // Round half to even by adding and subtracting 1.5*2^23 (exact for |v| < 2^22), so no
  // SSE4.1 round instruction or libcall is needed at the baseline ISA level.
  Value* n = b.CreateFSub(b.CreateFAdd(b.CreateFMul(x, splat(1.44269504088896341f)), splat(12582912.0f)),
                          splat(12582912.0f));
  // ln2 split in two so n*ln2_hi is exact (Cephes expf).
  Value* r = b.CreateFSub(x, b.CreateFMul(n, splat(0.693359375f)));
  r = b.CreateFSub(r, b.CreateFMul(n, splat(-2.12194440e-4f)));
  Value* p = splat(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = b.CreateFAdd(b.CreateFMul(p, r), splat(c));
  p = b.CreateFAdd(b.CreateFAdd(b.CreateFMul(b.CreateFMul(p, r), r), r), splat(1.0f));
  // 2^n as 2^(n/2) * 2^(n - n/2): each half stays a normal float for n in [-150, 129].
  Value* ni = b.CreateFPToSI(n, vi32);
  Value* n1 = b.CreateAShr(ni, splat_i32(1));
  Value* n2 = b.CreateSub(ni, n1);
  auto pow2 = [&](Value* e) { return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, splat_i32(127)), splat_i32(23)), vf32); };
  return b.CreateFMul(b.CreateFMul(p, pow2(n1)), pow2(n2));
}

Value* Kit::nearest_int(Value* x) {
  Value* v = b.CreateBitCast(b.CreateFAdd(x, splat(12582912.0f)), vi32);
  return b.CreateSub(b.CreateAnd(v, splat_i32(0x007FFFFF)), splat_i32(0x00400000));
}

}  // namespace zenmoe::glue_ir
