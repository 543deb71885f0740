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
  // tokens: the tile size N; tile_scratch: stack bytes the format's preparation of one tile
  // needs; tbuf: stack bytes for per-token row results (or the format's own row-block
  // scratch); block_groups: row groups per row block; max_tiles: the most tiles a token block
  // holds; group_rows: rows per group of the row loop (0: the descriptor's row block).
  JitGemmBase(const KernelDesc& d, int tokens, int64_t tile_scratch, int64_t tbuf, int block_groups,
              int max_tiles = 4, int group_rows = 0);
  void run(const GemvCall& c) const override;
  void run_gemm(const GemmCall& c) const override { gfn_(&c); }
  Status seal_gemm();

 protected:
  static constexpr int kGX = 8, kGY = 16, kGR0 = 24, kGR1 = 32, kGN = 40, kGXStride = 48,
                       kGYStride = 56, kGAlpha = 64, kGXRows = 72, kGYRows = 80;
  const Xbyak::Reg64 rArgs = Xbyak::util::rdi, rGroup = Xbyak::util::rbx, rGroupEnd = Xbyak::util::r12;

  // Emits the whole kernel around prep() and body(m). Loop order: token blocks of up to
  // tiles_ tiles (all prepared first, as much as fits a stack budget), then row blocks of
  // block_groups groups, then the block's tiles: a row block's weights are reused by every
  // tile of the token block from L1/L2 instead of being streamed again per tile.
  void emit();
  // Tile of slot_m() tokens starting at slot_t0(): fill the scratch at slot_act().
  virtual void prep() = 0;
  // Row groups [slot_rb(), slot_rb_end()) (rGroup = slot_rb() on entry) for the m tokens of
  // the tile at slot_t0() whose scratch is at slot_act().
  virtual void body(int m) = 0;
  // Once per row block and token block, before the block's tiles (rGroup, rGroupEnd and the
  // slots must survive; every other register is free).
  virtual void row_block_prep() {}

  Xbyak::Address slot_t0() { return qword[rsp + scratch_ + tbuf_]; }
  Xbyak::Address slot_m() { return qword[rsp + scratch_ + tbuf_ + 8]; }
  Xbyak::Address slot_g0() { return qword[rsp + scratch_ + tbuf_ + 16]; }
  Xbyak::Address slot_act() { return qword[rsp + scratch_ + tbuf_ + 24]; }
  Xbyak::Address slot_rb() { return qword[rsp + scratch_ + tbuf_ + 32]; }
  Xbyak::Address slot_rb_end() { return qword[rsp + scratch_ + tbuf_ + 40]; }
  // Free 8-byte slots for the format's loop state, i = 0 .. 3.
  Xbyak::Address slot(int i) { return qword[rsp + scratch_ + tbuf_ + 80 + 8 * i]; }
  int64_t tbuf_offset() const { return scratch_; }

  // dst = x_i, the activation row of call token `index` (a register); clobbers rax.
  void x_row(const Xbyak::Reg64& dst, const Xbyak::Reg64& index);
  // Row-per-lane layouts (16 rows a group): for t < m, lanes of acc[t] to y_{t0+t} with a
  // k2 mask of the group's rows inside [r0, r1). Clobbers rax, rcx, rdx, r8 - r11, k2, tmp.
  void store_lanes(int m, const Xbyak::Zmm* acc, const Xbyak::Zmm& tmp);

  // k2 = rows of group rGroup (of `rows` rows) inside [r0, r1); r9 = y stride in bytes,
  // r8 = &y[first row of the group], r10 = &alpha[t0] (accumulate op).
  void row_mask(int rows);
  // r11 = &y_{t0+t}[first row of the group] after row_mask; clobbers rcx, rdx.
  void y_row(int t);

  KernelDesc d_;
  int N_, R_;
  bool acc_;

 private:
  Xbyak::Address slot_tb0() { return qword[rsp + scratch_ + tbuf_ + 48]; }
  Xbyak::Address slot_ret() { return qword[rsp + scratch_ + tbuf_ + 56]; }
  // Sets slot_t0, slot_m and slot_act for tile i of the token block; jumps to `none` when
  // the tile has no tokens.
  void select_tile(int i, const Xbyak::Label& none);

  int64_t tile_bytes_;
  int tiles_, block_groups_;
  int64_t scratch_, tbuf_;
  GemmFn gfn_ = nullptr;
};

// Generators (one file each).
Expected<std::unique_ptr<KernelCode>> generate_gemm_q4k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemm_q5k_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemm_q80_avx512(const KernelDesc& d);
Expected<std::unique_ptr<KernelCode>> generate_gemm_q6k_avx512(const KernelDesc& d);

}  // namespace zenmoe::x64
