// The callable side of a generated kernel: its call record and the Kernel object the
// registry hands out. No xbyak or LLVM types appear here, so the runtime may include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_desc.h"

namespace zenmoe {

// One GEMV call. Field offsets are part of the generated code's ABI (static_asserts below).
struct GemvCall {
  const uint8_t* w = nullptr;  // packed weights (kernels/pack.h, layout for desc.weight and desc.row_block)
  const void* x = nullptr;     // one activation row in desc.act format (e.g. BlockQ8_K[K/256])
  float* y = nullptr;          // output row; only y[r0 .. r1) is read or written
  int64_t r0 = 0, r1 = 0;      // rows to compute; any 0 <= r0 <= r1 <= packed rows
  float alpha = 1.0f;          // kGemvAccumulate: y[r] += alpha * dot(row r, x)
  uint32_t reserved = 0;
  // kGateUpSwiglu only: output BlockQ8_K[rows / 256] (y is unused). Rows r count outputs
  // h[r] = silu(gate r . x) * (up r . x); r0 and r1 must be multiples of 256.
  void* q8_out = nullptr;
};
static_assert(offsetof(GemvCall, w) == 0 && offsetof(GemvCall, x) == 8 && offsetof(GemvCall, y) == 16 &&
              offsetof(GemvCall, r0) == 24 && offsetof(GemvCall, r1) == 32 && offsetof(GemvCall, alpha) == 40 &&
              offsetof(GemvCall, q8_out) == 48);

using GemvFn = void (*)(const GemvCall*);

// One GEMM call (KernelOp::kGemm / kGemmAccumulate, prefill): for t < n and r in [r0, r1),
//   y_t[r] = dot(W row r, x_t)   or   y_t[r] += alpha[t] * dot(W row r, x_t)
// with x_t = x + i * x_stride (bytes), i = x_rows ? x_rows[t] : t, and y_t = y + j * y_stride
// (floats), j = y_rows ? y_rows[t] : t. Row indices let a batch of routed tokens read and
// write their rows in place. Offsets are ABI.
// Through a GEMV kernel (KernelCode::run_gemm) the same call means one GEMV per token; for the
// fused gate+up op (kGateUpSwiglu) token t's output row of Q8_K blocks is then
// q8_out + j * q8_stride bytes (y, y_stride and alpha unused), rows counting outputs as in
// GemvCall.
struct GemmCall {
  const uint8_t* w = nullptr;    // packed weights, the same layout the GEMV kernels read
  const void* x = nullptr;       // activation row 0 in desc.act format
  float* y = nullptr;            // output row 0; only y_t[r0 .. r1) is read or written
  int64_t r0 = 0, r1 = 0;        // rows to compute; any 0 <= r0 <= r1 <= packed rows
  int64_t n = 0;                 // activation rows (tokens); n <= 0 does nothing
  int64_t x_stride = 0;          // bytes between activation rows
  int64_t y_stride = 0;          // floats between output rows
  const float* alpha = nullptr;  // kGemmAccumulate: n per-token factors (unused otherwise)
  const int32_t* x_rows = nullptr;  // optional: activation row of each token
  const int32_t* y_rows = nullptr;  // optional: output row of each token
  void* q8_out = nullptr;           // kGateUpSwiglu: output row 0 (Q8_K blocks)
  int64_t q8_stride = 0;            // kGateUpSwiglu: bytes between output rows
};
static_assert(offsetof(GemmCall, w) == 0 && offsetof(GemmCall, x) == 8 && offsetof(GemmCall, y) == 16 &&
              offsetof(GemmCall, r0) == 24 && offsetof(GemmCall, r1) == 32 && offsetof(GemmCall, n) == 40 &&
              offsetof(GemmCall, x_stride) == 48 && offsetof(GemmCall, y_stride) == 56 &&
              offsetof(GemmCall, alpha) == 64 && offsetof(GemmCall, x_rows) == 72 &&
              offsetof(GemmCall, y_rows) == 80);

inline const uint8_t* gemm_x_row(const GemmCall& c, int64_t t) {
  return static_cast<const uint8_t*>(c.x) + (c.x_rows != nullptr ? c.x_rows[t] : t) * c.x_stride;
}
inline float* gemm_y_row(const GemmCall& c, int64_t t) { return c.y + (c.y_rows != nullptr ? c.y_rows[t] : t) * c.y_stride; }
inline void* gemm_q8_row(const GemmCall& c, int64_t t) {
  if (c.q8_out == nullptr) return nullptr;
  return static_cast<uint8_t*>(c.q8_out) + (c.y_rows != nullptr ? c.y_rows[t] : t) * c.q8_stride;
}

using GemmFn = void (*)(const GemmCall*);

// Generated machine code (or the scalar reference for IsaLevel::kScalar).
class KernelCode {
 public:
  virtual ~KernelCode() = default;
  virtual void run(const GemvCall& c) const = 0;
  // GEMM kernels override this; any other kernel runs as one GEMV per token (alpha[t] for
  // its accumulate op), which is what a GEMM over a GEMV descriptor means (the Q4_K and Q6_K
  // GEMV kernels of AVX-512 VNNI override it too, with passes of a few tokens giving those bits).
  virtual void run_gemm(const GemmCall& c) const {
    for (int64_t t = 0; t < c.n; ++t) {
      GemvCall g;
      g.w = c.w;
      g.x = gemm_x_row(c, t);
      g.y = c.y != nullptr ? gemm_y_row(c, t) : nullptr;
      g.q8_out = gemm_q8_row(c, t);
      g.r0 = c.r0;
      g.r1 = c.r1;
      g.alpha = c.alpha != nullptr ? c.alpha[t] : 1.0f;
      run(g);
    }
  }
  // Whether run_gemm reads each weight once for several tokens (rather than once per token).
  virtual bool several_tokens() const { return false; }
  virtual const uint8_t* code() const = 0;  // nullptr for the scalar reference
  virtual size_t code_size() const = 0;
};

class Kernel {
 public:
  Kernel(const KernelDesc& d, std::unique_ptr<KernelCode> code)
      : desc_(d), name_(instance_name(d)), code_(std::move(code)) {}
  const KernelDesc& desc() const { return desc_; }
  const std::string& name() const { return name_; }  // instance_name(desc)
  // Runs rows [c.r0, c.r1). Thread safe: kernels keep no state between calls.
  void operator()(const GemvCall& c) const { code_->run(c); }
  // Runs a GemmCall (a GEMM descriptor's kernel; see KernelCode::run_gemm for the others).
  void gemm(const GemmCall& c) const { code_->run_gemm(c); }
  bool several_tokens() const { return code_->several_tokens(); }
  const uint8_t* code() const { return code_->code(); }
  size_t code_size() const { return code_->code_size(); }

 private:
  KernelDesc desc_;
  std::string name_;
  std::unique_ptr<KernelCode> code_;
};

}  // namespace zenmoe
