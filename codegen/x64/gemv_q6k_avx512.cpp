// Q6_K x Q8_K GEMV for AVX-512 VNNI over the row-block-16 Q6_K layout of kernels/pack.h:
// the 16 rows of a group are the 16 dword lanes, so each activation dword is a broadcast
// memory operand and each sub-block's int8 scales are one vpmovsxbd.
// Per super-block and pair of sub-blocks (s, s+8): 4 low-nibble chunks hold both
// sub-blocks' low 4 bits, 4 high-bit chunks hold the top 2 bits of four sub-blocks; the
// 6-bit codes (0..63) are rebuilt with a shift, a mask and one vpternlogd, then dotted with
// vpdpbusd (codes unsigned). The bias 32 is removed per sub-block with 32 * sum(x) from the
// bsums (computed once per call), the scale applied with vpmulld, and the super-block's int32
// sum converted and FMA'd with d_w * d_y: lane = row, no horizontal reduction.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292, kQ8KBsums = 260;

class GemvQ6KAvx512 : public JitKernelBase {
 public:
  explicit GemvQ6KAvx512(const KernelDesc& d)
      : JitKernelBase(64 * 1024), d_(d), S_(d.cols / 256), acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();

 private:
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPlo = r13, rPsc = r15;
  const Reg64 rPd = r9, rPx = r8, rScr = rsi, rCnt = r10;
  const Zmm zAccF = zmm0, zSb = zmm1, zA0 = zmm2, zA1 = zmm3, zV = zmm4, zH = zmm5, zA = zmm6;
  const Zmm zB = zmm7, zT = zmm8, zS = zmm9, zD = zmm10, zM0F = zmm11, zM30 = zmm12;

  int64_t group_stride() const { return int64_t{S_} * 3392; }
  void prep_bsums();
  void superblock();
  void subblock_pair(int s);
  void apply_scale(const Zmm& acc, int s);

  KernelDesc d_;
  int S_;
  bool acc_;
};

void GemvQ6KAvx512::generate() {
  enter_frame(int64_t{S_} * 64 + 64);
  Label groups, done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_bsums();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, 0x30303030);
  vpbroadcastd(zM30, eax);
  L(groups);
  mov(rPlo, rGroup);
  imul(rPlo, rPlo, static_cast<int>(group_stride()));
  add(rPlo, qword[rArgs + kArgW]);
  lea(rPsc, ptr[rPlo + 3072]);
  lea(rPd, ptr[rPlo + 3328]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  vpxord(zAccF, zAccF, zAccF);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock();
  dec(rCnt);
  jnz(sb, T_NEAR);
  store_lanes16(rArgs, rGroup, zAccF, zT, acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

// 32 * bsums[s] as int32, 16 per super-block (the bias of the 6-bit codes).
void GemvQ6KAvx512::prep_bsums() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  mov(rCnt, S_);
  Label loop;
  L(loop);
  vpmovsxwd(zT, ptr[rPx + kQ8KBsums]);
  vpslld(zT, zT, 5);
  vmovdqa32(ptr[rScr], zT);
  add(rPx, kQ8KBytes);
  add(rScr, 64);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void GemvQ6KAvx512::superblock() {
  vpxord(zSb, zSb, zSb);
  for (int s = 0; s < 8; ++s) subblock_pair(s);
  vcvtdq2ps(zSb, zSb);
  vcvtph2ps(zD, ptr[rPd]);
  vmulps(zD, zD, ptr_b[rPx]);
  vfmadd231ps(zAccF, zSb, zD);
  add(rPlo, 3392);
  add(rPsc, 3392);
  add(rPd, 3392);
  add(rPx, kQ8KBytes);
  add(rScr, 64);
}

// Sub-blocks s and s + 8: their codes share the low-nibble chunks (4s + j); their top bits
// sit at bit pairs k = s/4 and k = 2 + s/4 of the high-bit chunks (4(s%4) + j).
void GemvQ6KAvx512::subblock_pair(int s) {
  constexpr uint8_t kOrAnd = 0xF8;  // vpternlogd: dst | (src2 & src3)
  const int k = s / 4;
  vpxord(zA0, zA0, zA0);
  vpxord(zA1, zA1, zA1);
  for (int j = 0; j < 4; ++j) {
    // One sequential stream: the record's 53 lines a fixed distance ahead, a share per step.
    prefetch_share(rPlo, d_.prefetch, 3392 / 64, 4 * s + j, 32);
    vmovdqu32(zV, ptr[rPlo + q6k_nibble_offset(s, j)]);
    vmovdqu32(zH, ptr[rPlo + q6k_high_offset(s % 4, j)]);
    vpsllw(zA, zH, k == 0 ? 4 : 2);
    vpandd(zA, zA, zM30);
    vpternlogd(zA, zV, zM0F, kOrAnd);
    vpsrlw(zB, zV, 4);
    if (k == 0) {
      vpandd(zT, zH, zM30);
    } else {
      vpsrlw(zT, zH, 2);
      vpandd(zT, zT, zM30);
    }
    vpternlogd(zT, zB, zM0F, kOrAnd);
    vpdpbusd(zA0, zA, ptr_b[rPx + 4 + 16 * s + 4 * j]);
    vpdpbusd(zA1, zT, ptr_b[rPx + 4 + 16 * (s + 8) + 4 * j]);
  }
  apply_scale(zA0, s);
  apply_scale(zA1, s + 8);
}

void GemvQ6KAvx512::apply_scale(const Zmm& acc, int s) {
  vpsubd(acc, acc, ptr_b[rScr + 4 * s]);
  vpmovsxbd(zS, ptr[rPsc + 16 * s]);
  vpmulld(acc, acc, zS);
  vpaddd(zSb, zSb, acc);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ6KAvx512>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
