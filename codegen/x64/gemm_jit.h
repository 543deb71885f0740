// Shared skeleton of the xbyak GEMM kernels (KernelOp::kGemm / kGemmAccumulate): the call
// record, the token-tile loop with its remainder dispatch, and the write-back of each
// token's outputs. A format generator supplies the activation preparation of one tile and
// the compute body for a tile of m tokens (m = 1 .. N, one code path per m).
#pragma once

#include <xbyak/xbyak.h>

#include <cstdint>

#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {

class JitGemmBase : public JitKernelBase {
 public:
  // tokens: the tile size N; row_block: rows per packed group; scratch: bytes of stack the
  // format's preparation needs at rsp; tbuf: bytes of stack for per-token row results.
  JitGemmBase(const KernelDesc& d, int tokens, int64_t scratch, int64_t tbuf);
  void run(const GemvCall& c) const override;
  void run_gemm(const GemmCall& c) const override { gfn_(&c); }
  Status seal_gemm();

 protected:
  static constexpr int kGX = 8, kGY = 16, kGR0 = 24, kGR1 = 32, kGN = 40, kGXStride = 48,
                       kGYStride = 56, kGAlpha = 64;
  const Xbyak::Reg64 rArgs = Xbyak::util::rdi, rGroup = Xbyak::util::rbx, rGroupEnd = Xbyak::util::r12;

  // Emits the whole kernel around prep() and body(m).
  void emit();
  virtual void prep() = 0;      // tile of slot_m() tokens starting at slot_t0(): fill scratch
  virtual void body(int m) = 0;  // every row group in [slot_g0(), rGroupEnd) for m tokens

  Xbyak::Address slot_t0() { return qword[rsp + scratch_ + tbuf_]; }
  Xbyak::Address slot_m() { return qword[rsp + scratch_ + tbuf_ + 8]; }
  Xbyak::Address slot_g0() { return qword[rsp + scratch_ + tbuf_ + 16]; }
  // Free 8-byte slots for the format's loop state, i = 0 .. 4.
  Xbyak::Address slot(int i) { return qword[rsp + scratch_ + tbuf_ + 24 + 8 * i]; }
  int64_t tbuf_offset() const { return scratch_; }

  // Loads x_t0 (the tile's first activation row) into `dst`.
  void tile_x(const Xbyak::Reg64& dst);
  // Pair layouts: y_{t0+t}[g*R + i] (+)= tbuf[t][i] for t < m and the rows of group g inside
  // [r0, r1), with masked vector stores. Clobbers rax, rcx, rdx, r9, r10, r11, k2, zmm0, zmm1.
  void write_tbuf(int m);
  // Row-per-lane layouts (16 rows a group): for t < m, lanes of acc[t] to y_{t0+t} with a
  // k2 mask of the group's rows inside [r0, r1). Clobbers rax, rcx, rdx, r9, r10, r11, k2, tmp.
  void store_lanes(int m, const Xbyak::Zmm* acc, const Xbyak::Zmm& tmp);

  // k2 = rows of group rGroup (of `rows` rows) inside [r0, r1); r9 = y stride in bytes,
  // r11 = &y_t0[first row of the group], r10 = &alpha[t0] (accumulate op).
  void row_mask(int rows);

  KernelDesc d_;
  int N_, R_;
  bool acc_;

 private:
  int64_t scratch_, tbuf_;
  GemmFn gfn_ = nullptr;
};

// Generators (one file each).
Expected<std::unique_ptr<KernelCode>> generate_gemm_q4k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemm_q80_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemm_q6k_avx512(const KernelDesc& d);

}  // namespace zenmoe::x64
