// Q4_K x Q8_K GEMV for AVX2 (no AVX-512), over the same packed layout as the AVX-512
// kernel (kernels/pack.h). A 64-byte chunk of a row pair is processed as two 32-byte halves
// (sub-blocks 0-3 and 4-7); each 32-bit lane still belongs to one (row, sub-block), so the
// scheme is the AVX-512 one at half width: vpmaddubsw + vpmaddwd stand in for vpdpbusd,
// activations are read from the permuted copy in memory (16 ymm registers are too few to
// keep them), and at most 8 rows (4 pairs) are blocked.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ8KBytes = 292, kQ8KBsums = 260, kScratchPerSb = 512;

class GemvQ4KAvx2 : public JitKernelBase {
 public:
  explicit GemvQ4KAvx2(const KernelDesc& d)
      : JitKernelBase(64 * 1024), d_(d), R_(d.row_block), P_(d.row_block / 2), S_(d.cols / 256),
        acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();

 private:
  // Registers, named once. ymm0-2 are clobbered by write_rows: only temporaries live there.
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rPs = r14, rPd = r15;
  const Reg64 rPx = r8, rPw = r9, rCnt = r10, rW = rsi;
  const Ymm yV = ymm0, yLo = ymm1, yHi = ymm2, yT = ymm3, yI = ymm4, yS = ymm5, yD = ymm6;
  const Ymm yM0F = ymm7, yOnes = ymm8, yBS[2] = {ymm9, ymm10}, yDY = ymm11;
  const Ymm yAcc[4] = {ymm12, ymm13, ymm14, ymm15};

  int64_t scratch_bytes() const { return int64_t{S_} * kScratchPerSb; }
  void constants();
  void prep_activations();
  void superblock();
  void half_pair(int p, int h);
  void reduce_pair(int p);

  KernelDesc d_;
  int R_, P_, S_;
  bool acc_;
};

void GemvQ4KAvx2::constants() {
  mov(eax, 0x0F0F0F0F);
  vmovd(Xmm(yM0F.getIdx()), eax);
  vpbroadcastd(yM0F, Xmm(yM0F.getIdx()));
  mov(eax, 0x00010001);
  vmovd(Xmm(yOnes.getIdx()), eax);
  vpbroadcastd(yOnes, Xmm(yOnes.getIdx()));
}

void GemvQ4KAvx2::generate() {
  enter_frame(scratch_bytes() + 128);
  Label groups, done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_activations();
  group_bounds(rArgs, R_, rGroup, rGroupEnd);
  mov(rW, qword[rArgs + kArgW]);
  constants();
  const int64_t group_stride = (d_.cols / 256 * int64_t{R_} * 148 + 63) / 64 * 64;
  L(groups);
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride));
  add(rPc, rW);
  lea(rPs, ptr[rPc + R_ * 128]);  // super-block records: codes, scales, d
  lea(rPd, ptr[rPc + R_ * 144]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rPw, rsp);
  for (int p = 0; p < P_; ++p) vxorps(yAcc[p], yAcc[p], yAcc[p]);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock();
  add(rPc, R_ * 148);
  add(rPs, R_ * 148);
  add(rPd, R_ * 148);
  add(rPx, kQ8KBytes);
  add(rPw, kScratchPerSb);
  dec(rCnt);
  jnz(sb, T_NEAR);
  for (int p = 0; p < P_; ++p) reduce_pair(p);
  write_rows(rArgs, rGroup, R_, ptr[rsp + scratch_bytes()], acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

// W[j] lane l (16 lanes, 64 bytes) = dword 8*(l/2) + j of the super-block's qs.
void GemvQ4KAvx2::prep_activations() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rPw, rsp);
  mov(rCnt, S_);
  Label loop;
  L(loop);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 16; ++l) {
      mov(eax, dword[rPx + 4 + 4 * (8 * (l / 2) + j)]);
      mov(dword[rPw + 64 * j + 4 * l], eax);
    }
  add(rPx, kQ8KBytes);
  add(rPw, kScratchPerSb);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void GemvQ4KAvx2::superblock() {
  for (int h = 0; h < 2; ++h) {
    vpmovsxwd(yBS[h], ptr[rPx + kQ8KBsums + 16 * h]);
    vpshufd(yT, yBS[h], 0xB1);
    vpaddd(yBS[h], yBS[h], yT);
  }
  vbroadcastss(yDY, ptr[rPx]);
  // One sequential stream: the record's lines a fixed distance ahead, a share per half pair.
  for (int p = 0; p < P_; ++p)
    for (int h = 0; h < 2; ++h) {
      prefetch_share(rPc, d_.prefetch, (R_ * 148 + 63) / 64, 2 * p + h, 2 * P_);
      half_pair(p, h);
    }
}

void GemvQ4KAvx2::half_pair(int p, int h) {
  vpxor(yI, yI, yI);
  for (int c = 0; c < 4; ++c) {
    vmovdqu(yV, ptr[rPc + p * 256 + 64 * c + 32 * h]);
    vpand(yLo, yV, yM0F);
    vpsrlw(yHi, yV, 4);
    vpand(yHi, yHi, yM0F);
    vpmaddubsw(yLo, yLo, ptr[rPw + 64 * c + 32 * h]);
    vpmaddwd(yLo, yLo, yOnes);
    vpaddd(yI, yI, yLo);
    vpmaddubsw(yHi, yHi, ptr[rPw + 64 * (c + 4) + 32 * h]);
    vpmaddwd(yHi, yHi, yOnes);
    vpaddd(yI, yI, yHi);
  }
  vpmovzxbd(yS, ptr[rPs + 32 * p + 8 * h]);
  vpmulld(yI, yI, yS);
  vpbroadcastd(Xmm(yD.getIdx()), ptr[rPd + 4 * p]);
  vcvtph2ps(yD, Xmm(yD.getIdx()));
  vmulps(yD, yD, yDY);
  vcvtdq2ps(yI, yI);
  vfmadd231ps(yAcc[p], yI, yD);
  vpmovzxbd(yS, ptr[rPs + 32 * p + 16 + 8 * h]);
  vpmulld(yS, yS, yBS[h]);
  vpbroadcastd(Xmm(yD.getIdx()), ptr[rPd + 2 * R_ + 4 * p]);
  vcvtph2ps(yD, Xmm(yD.getIdx()));
  vmulps(yD, yD, yDY);
  vcvtdq2ps(yS, yS);
  vfnmadd231ps(yAcc[p], yS, yD);
}

void GemvQ4KAvx2::reduce_pair(int p) {
  // Even lanes are row 2p, odd lanes row 2p+1: fold to lanes 0 and 1.
  const Xmm a(yAcc[p].getIdx()), t(yT.getIdx());
  vextractf128(t, yAcc[p], 1);
  vaddps(a, a, t);
  vpermilps(t, a, 0x4E);
  vaddps(a, a, t);
  vmovlps(ptr[rsp + scratch_bytes() + 8 * p], a);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_avx2(const KernelDesc& d) {
  if (d.row_block > 8)
    return Error{canonical_name(d) + ": the AVX2 kernel blocks at most 8 rows (16 ymm registers)"};
  auto k = std::make_unique<GemvQ4KAvx2>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
