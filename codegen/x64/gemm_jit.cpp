#include "codegen/x64/gemm_jit.h"

#include <algorithm>
#include <vector>

#include "codegen/x64/generators.h"

namespace zenmoe::x64 {

using namespace Xbyak;

namespace {
// Stack budget for the prepared activations of a token block (at least one tile is always
// prepared; kGemmMaxCols bounds a tile).
constexpr int64_t kScratchBudget = 512 * 1024;
}  // namespace

JitGemmBase::JitGemmBase(const KernelDesc& d, int tokens, int64_t tile_scratch, int64_t tbuf, int block_groups,
                         int max_tiles, int group_rows)
    : JitKernelBase(512 * 1024), d_(d), N_(tokens), R_(group_rows > 0 ? group_rows : d.row_block),
      acc_(d.op == KernelOp::kGemmAccumulate), tile_bytes_((tile_scratch + 63) / 64 * 64),
      tiles_(static_cast<int>(std::clamp<int64_t>(kScratchBudget / tile_bytes_, 1, max_tiles))),
      block_groups_(block_groups), scratch_(tiles_ * tile_bytes_), tbuf_((tbuf + 63) / 64 * 64) {}

void JitGemmBase::run(const GemvCall& c) const {
  // A GEMV call through a GEMM kernel is the GEMM of one token.
  GemmCall g;
  g.w = c.w;
  g.x = c.x;
  g.y = c.y;
  g.r0 = c.r0;
  g.r1 = c.r1;
  g.n = 1;
  g.alpha = &c.alpha;
  gfn_(&g);
}

Status JitGemmBase::seal_gemm() {
  ZENMOE_RETURN_IF_ERROR(seal());
  gfn_ = getCode<GemmFn>();
  return Status::ok();
}

void JitGemmBase::select_tile(int i, const Label& none) {
  mov(rax, slot_tb0());
  add(rax, i * N_);
  mov(rcx, qword[rArgs + kGN]);
  sub(rcx, rax);
  jle(none, T_NEAR);
  mov(slot_t0(), rax);
  // m = min(N, n - t0): the last tile may be partial.
  mov(edx, N_);
  cmp(rcx, rdx);
  cmovg(rcx, rdx);
  mov(slot_m(), rcx);
  lea(rax, ptr[rsp + i * tile_bytes_]);
  mov(slot_act(), rax);
}

void JitGemmBase::emit() {
  enter_frame(scratch_ + tbuf_ + 128);
  Label blocks, prepared, row_blocks, dispatch, done;
  std::vector<Label> bodies(static_cast<size_t>(N_) + 1), after(static_cast<size_t>(tiles_) + 1);
  mov(rax, qword[rArgs + kGR0]);
  cmp(rax, qword[rArgs + kGR1]);
  jge(done, T_NEAR);
  cmp(qword[rArgs + kGN], 0);
  jle(done, T_NEAR);
  group_bounds(rArgs, R_, rGroup, rGroupEnd);
  mov(slot_g0(), rGroup);
  mov(slot_tb0(), 0);
  L(blocks);
  for (int i = 0; i < tiles_; ++i) {
    select_tile(i, prepared);
    prep();
  }
  L(prepared);
  mov(rax, slot_g0());
  mov(slot_rb(), rax);
  L(row_blocks);
  mov(rax, slot_rb());
  add(rax, block_groups_);
  cmp(rax, rGroupEnd);
  cmova(rax, rGroupEnd);
  mov(slot_rb_end(), rax);
  row_block_prep();
  Label rb_done;
  for (int i = 0; i < tiles_; ++i) {
    select_tile(i, rb_done);
    lea(rax, ptr[rip + after[static_cast<size_t>(i)]]);
    mov(slot_ret(), rax);
    jmp(dispatch, T_NEAR);
    L(after[static_cast<size_t>(i)]);
  }
  L(rb_done);
  mov(rax, slot_rb_end());
  mov(slot_rb(), rax);
  cmp(rax, rGroupEnd);
  jb(row_blocks, T_NEAR);
  mov(rax, slot_tb0());
  add(rax, tiles_ * N_);
  mov(slot_tb0(), rax);
  cmp(rax, qword[rArgs + kGN]);
  jl(blocks, T_NEAR);
  L(done);
  leave_frame();
  // The tile bodies, one per token count, entered from `dispatch` and returning through the
  // address in slot_ret.
  L(dispatch);
  mov(rax, slot_m());
  mov(rGroup, slot_rb());
  for (int m = 1; m < N_; ++m) {
    cmp(rax, m);
    je(bodies[static_cast<size_t>(m)], T_NEAR);
  }
  for (int m = N_; m >= 1; --m) {
    L(bodies[static_cast<size_t>(m)]);
    body(m);
    jmp(ptr[rsp + scratch_ + tbuf_ + 56]);
  }
}

void JitGemmBase::x_row(const Reg64& dst, const Reg64& index) {
  Label direct;
  mov(dst, index);
  mov(rax, qword[rArgs + kGXRows]);
  test(rax, rax);
  jz(direct);
  movsxd(dst, dword[rax + index * 4]);
  L(direct);
  imul(dst, qword[rArgs + kGXStride]);
  add(dst, qword[rArgs + kGX]);
}

void JitGemmBase::y_row(int t) {
  Label direct;
  mov(rcx, slot_t0());
  add(rcx, t);
  mov(rdx, qword[rArgs + kGYRows]);
  test(rdx, rdx);
  jz(direct);
  movsxd(rcx, dword[rdx + rcx * 4]);
  L(direct);
  imul(rcx, r9);
  lea(r11, ptr[r8 + rcx]);
}

void JitGemmBase::row_mask(int rows) {
  // rax = first row of the group; k2 = the lanes of [r0, r1) inside the group's `rows` rows.
  static_assert(kGR0 == kArgR0 && kGR1 == kArgR1, "GemmCall and GemvCall keep r0 and r1 at the same offsets");
  group_row_bounds(rArgs, rGroup, rows);
  lanes_mask_k2();
  // r9 = bytes between output rows, r8 = y + first row, r10 = &alpha[t0].
  mov(r9, qword[rArgs + kGYStride]);
  shl(r9, 2);
  mov(r8, qword[rArgs + kGY]);
  lea(r8, ptr[r8 + rax * 4]);
  if (acc_) {
    mov(r10, slot_t0());
    shl(r10, 2);
    add(r10, qword[rArgs + kGAlpha]);
  }
}

void JitGemmBase::store_lanes(int m, const Zmm* acc, const Zmm& tmp) {
  row_mask(16);
  for (int t = 0; t < m; ++t) {
    y_row(t);
    if (acc_) {
      vmovups(tmp | k2 | T_z, ptr[r11]);
      vfmadd231ps(tmp, acc[t], ptr_b[r10 + 4 * t]);
      vmovups(ptr[r11] | k2, tmp);
    } else {
      vmovups(ptr[r11] | k2, acc[t]);
    }
  }
}

std::vector<isa::IsaLevel> gemm_levels(GgmlType weight) {
  using isa::IsaLevel;
  if (weight == GgmlType::Q4_K || weight == GgmlType::Q5_K || weight == GgmlType::Q6_K || weight == GgmlType::Q8_0 ||
      weight == GgmlType::Q5_0)
    return {IsaLevel::kAvx512Vnni, IsaLevel::kAvx512Bf16};
  return {};
}

Expected<std::unique_ptr<KernelCode>> generate_gemm(const KernelDesc& d) {
  try {
    if (d.isa >= isa::IsaLevel::kAvx512Vnni && d.weight == GgmlType::Q4_K) return generate_gemm_q4k_avx512(d);
    if (d.isa >= isa::IsaLevel::kAvx512Vnni && d.weight == GgmlType::Q5_K) return generate_gemm_q5k_avx512(d);
    if (d.isa >= isa::IsaLevel::kAvx512Vnni && (d.weight == GgmlType::Q8_0 || d.weight == GgmlType::Q5_0))
      return generate_gemm_q80_avx512(d);
    if (d.isa >= isa::IsaLevel::kAvx512Vnni && d.weight == GgmlType::Q6_K) return generate_gemm_q6k_avx512(d);
    return Error{canonical_name(d) + ": no xbyak GEMM generator for this format and ISA level"};
  } catch (const std::exception& e) {
    return Error{instance_name(d) + ": code generation failed: " + e.what()};
  }
}

}  // namespace zenmoe::x64
