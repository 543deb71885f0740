// Helpers for writing glue kernels as explicit-vector LLVM IR: typed constants, unaligned and
// masked vector memory access, counted loops, horizontal reductions and a vector expf.
// Vectors are `vf` floats wide (16 with AVX-512, 8 with AVX2, 4 otherwise).
#pragma once

#include <cstdint>
#include <functional>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

namespace zenmoe::glue_ir {

class Kit {
 public:
  Kit(llvm::IRBuilder<>& b, llvm::Function* fn, unsigned vf);

  llvm::IRBuilder<>& b;
  llvm::Function* fn;
  const unsigned vf;
  llvm::Type *f32, *f64, *i8, *i16, *i32, *i64, *ptr;
  llvm::VectorType *vf32, *vf64, *vi32, *vi8;

  llvm::Constant* cf(float v) const;
  llvm::Constant* ci32(int32_t v) const;
  llvm::Constant* ci64(int64_t v) const;
  llvm::Constant* splat(float v) const;
  llvm::Constant* splat_i32(int32_t v) const;
  llvm::Constant* iota() const;  // <0, 1, .., vf-1> as i32

  // Address of element `idx` (i64) of type `elt` from `base`.
  llvm::Value* at(llvm::Type* elt, llvm::Value* base, llvm::Value* idx);
  llvm::Value* at_bytes(llvm::Value* base, llvm::Value* bytes);
  // Vector of vf floats at base[idx]; lanes off in `mask` (nullptr: all on) read `pad`.
  llvm::Value* load(llvm::Value* base, llvm::Value* idx, llvm::Value* mask, float pad = 0.0f);
  void store(llvm::Value* v, llvm::Value* base, llvm::Value* idx, llvm::Value* mask);
  llvm::Value* load_f32(llvm::Value* base, llvm::Value* idx);
  void store_f32(llvm::Value* v, llvm::Value* base, llvm::Value* idx);

  // Lanes whose index is below `remaining` (i64).
  llvm::Value* lanes_below(llvm::Value* remaining);
  // Stack slot in the entry block (promoted to registers by the optimiser when possible).
  llvm::AllocaInst* slot(llvm::Type* t, uint64_t count = 1, const char* name = "");

  // for (i = begin; i < end; i += step) body(i)   (i64, signed compare)
  void loop(llvm::Value* begin, llvm::Value* end, int64_t step, const std::function<void(llvm::Value*)>& body);
  // Walks [0, n) a vector at a time: body(i, nullptr) over whole vectors, then body(i, mask)
  // once over the remainder (skipped when n is a constant multiple of vf).
  void vec_loop(llvm::Value* n, const std::function<void(llvm::Value* i, llvm::Value* mask)>& body);
  // if (cond) then_fn() [else else_fn()]
  void if_then(llvm::Value* cond, const std::function<void()>& then_fn,
               const std::function<void()>& else_fn = nullptr);

  // a > b ? a : b and a < b ? a : b lane-wise (vmaxps / vminps; NaN handling not needed).
  llvm::Value* vmax(llvm::Value* a, llvm::Value* b);
  llvm::Value* vmin(llvm::Value* a, llvm::Value* b);
  // Pairwise (tree) horizontal reductions of a float or double vector.
  llvm::Value* hmax(llvm::Value* v);
  llvm::Value* hmin(llvm::Value* v);
  llvm::Value* hsum(llvm::Value* v);

  // expf lane-wise: Cody-Waite range reduction and a degree-6 polynomial (within ~1 ulp of
  // libm over the normal range), overflow to +inf, gradual underflow to 0.
  llvm::Value* exp(llvm::Value* x);
  // Round half to even to int32 with ggml's 1.5*2^23 trick (valid for |x| < 2^22), as
  // ref::nearest_int does.
  llvm::Value* nearest_int(llvm::Value* x);

 private:
  llvm::Value* hreduce(llvm::Value* v, const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& op);
};

}  // namespace zenmoe::glue_ir
