// Q6_K x Q8_K for a few tokens at once (AVX-512 VNNI, row block 16), over the GEMV's layout
// (kernels/pack.h, lane = row): the Q6_K GEMV kernel hands it its GemmCalls of several tokens.
// Per sub-block the three chunks are loaded and their codes built once (the 6-bit codes and the
// last four from the top bits) with the sub-block's scales, then every token of the pass adds
// its four vpdpbusd (activation dwords broadcast from its own row), its code bias and the
// scale into its own sums. Per token these are the GEMV's operations in its order, so each
// token's outputs are bit for bit what the GEMV gives for it alone.
#include <memory>

#include "codegen/x64/few_tokens.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292, kRecord = 3392;
static_assert(kRecord % 64 == 0 && kQ6KDOffset < kRecord);

class FewTokensQ6K : public FewTokensKernel {
 public:
  explicit FewTokensQ6K(const KernelDesc& d) : FewTokensKernel(d, 96 * 1024), S_(d.cols / 256) {}

 private:
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPlo = r13, rRow = r14;
  const Reg64 rPd = r9, rCnt = r10, rScr = rsi;
  // Token t's activation row, advanced a super-block at a time (reloaded for every group).
  const Reg64 rX[kFewMaxTokens] = {r8, r15, rdx, rcx};
  static Zmm zAccF(int t) { return Zmm(t); }
  static Zmm zSb(int t) { return Zmm(4 + t); }
  static Zmm zI(int t) { return Zmm(8 + t); }
  const Zmm zCa = zmm12, zCb = zmm13, zCc = zmm14, zA = zmm15, zB = zmm16, zC = zmm17, zL = zmm18;
  const Zmm zT = zmm19, zS = zmm20, zD = zmm21, zM03 = zmm22, zM0F = zmm23, zM3F = zmm24, zDt = zmm25;

  int64_t group_stride() const { return int64_t{S_} * kRecord; }
  // Token t's code biases (-32 * bsums, 16 int32 a super-block) at rsp + bias_offset(t).
  int64_t bias_offset(int t) const { return int64_t{t} * S_ * 64; }
  void emit_pass(int m) override;
  void prep_biases(int m);
  void superblock(int m);
  void subblock(int m, int s);

  int S_;
};

void FewTokensQ6K::emit_pass(int m) {
  enter_frame(bias_offset(m) + 64);
  Label groups, done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_biases(m);
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  q6k_masks(zM03, zM0F, zM3F);
  L(groups);
  mov(rPlo, rGroup);
  imul(rPlo, rPlo, static_cast<int>(group_stride()));
  add(rPlo, qword[rArgs + kArgW]);
  lea(rPd, ptr[rPlo + kQ6KDOffset]);
  for (int t = 0; t < m; ++t) {
    mov(rX[t], qword[rArgs + kPX + 8 * t]);
    vpxord(zAccF(t), zAccF(t), zAccF(t));
  }
  mov(rScr, rsp);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock(m);
  dec(rCnt);
  jnz(sb, T_NEAR);
  group_row_bounds(rArgs, rGroup, kRows);
  mov(rRow, rax);
  lanes_mask_k2();
  for (int t = 0; t < m; ++t) store_token(t, rRow, zAccF(t), zT);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

void FewTokensQ6K::prep_biases(int m) {
  for (int t = 0; t < m; ++t) {
    mov(rax, qword[rArgs + kPX + 8 * t]);
    lea(rScr, ptr[rsp + bias_offset(t)]);
    q6k_code_biases(rax, rScr, rCnt, S_, zS, zT);
  }
}

void FewTokensQ6K::superblock(int m) {
  for (int t = 0; t < m; ++t) vpxord(zSb(t), zSb(t), zSb(t));
  for (int s = 0; s < 16; ++s) subblock(m, s);
  vcvtph2ps(zD, ptr[rPd]);
  for (int t = 0; t < m; ++t) {
    vcvtdq2ps(zSb(t), zSb(t));
    vmulps(zDt, zD, ptr_b[rX[t]]);
    vfmadd231ps(zAccF(t), zSb(t), zDt);
    add(rX[t], kQ8KBytes);
  }
  add(rPlo, kRecord);
  add(rPd, kRecord);
  add(rScr, 64);
}

void FewTokensQ6K::subblock(int m, int s) {
  prefetch_share(rPlo, d_.prefetch, kRecord / 64, s, 16);
  const Zmm chunk[3] = {zCa, zCb, zCc}, code[3] = {zA, zB, zC};
  for (int c = 0; c < 3; ++c) {
    vmovdqu32(chunk[c], ptr[rPlo + q6k_chunk_offset(s, c)]);
    vpandd(code[c], chunk[c], zM3F);
  }
  q6k_last_codes(zL, zCa, zCb, zCc, zT, zM03, zM0F, zM3F);
  vpmovsxbd(zS, ptr[rPlo + q6k_scale_offset(s)]);
  for (int t = 0; t < m; ++t) {
    vpbroadcastd(zI(t), ptr[rScr + bias_offset(t) + 4 * s]);
    for (int c = 0; c < 3; ++c) vpdpbusd(zI(t), code[c], ptr_b[rX[t] + 4 + 16 * s + 4 * c]);
    vpdpbusd(zI(t), zL, ptr_b[rX[t] + 4 + 16 * s + 12]);
    vpmulld(zI(t), zI(t), zS);
    vpaddd(zSb(t), zSb(t), zI(t));
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_few_avx512(const KernelDesc& d) {
  if (d.isa < isa::IsaLevel::kAvx512Vnni || d.row_block != kRows ||
      (d.op != KernelOp::kGemv && d.op != KernelOp::kGemvAccumulate))
    return Error{canonical_name(d) + ": the few-token Q6_K kernel needs AVX-512 VNNI, row block 16 and a plain GEMV op"};
  auto k = std::make_unique<FewTokensQ6K>(d);
  ZENMOE_RETURN_IF_ERROR(k->build());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
