// Q4_K x Q8_K GEMV for AVX2 (no AVX-512), over the same packed layout as the AVX-512
// kernel (kernels/pack.h). A 64-byte chunk of a row pair is processed as two 32-byte halves
// (sub-blocks 0-3 and 4-7); each 32-bit lane still belongs to one (row, sub-block), so the
// scheme is the AVX-512 one at half width: vpmaddubsw + vpmaddwd stand in for vpdpbusd,
// activations are read from the permuted copy in memory (16 ymm registers are too few to
// keep them), and at most 8 rows (4 pairs) are blocked.
// With desc.streams = 2 or 4, that many groups side by side, a super-block of each in turn
// (JitKernelBase::stream_groups), their accumulators on the stack.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ8KBytes = 292, kQ8KBsums = 260, kScratchPerSb = 512;

class GemvQ4KAvx2 : public JitKernelBase {
 public:
  explicit GemvQ4KAvx2(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d), R_(d.row_block), P_(d.row_block / 2), S_(d.cols / 256),
        acc_(d.op == KernelOp::kGemvAccumulate), ns_(d.streams) {}
  void generate();

 private:
  // Registers, named once. ymm0-2 are clobbered by write_rows: only temporaries live there.
  // Group s of the side-by-side streams starts at rPc + s * rD (rPc2 = rPc + 2 * rD).
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rD = r14, rPc2 = r15;
  const Reg64 rPx = r8, rPw = r9, rCnt = r10, rW = rsi;
  const Ymm yV = ymm0, yLo = ymm1, yHi = ymm2, yT = ymm3, yI = ymm4, yS = ymm5, yD = ymm6;
  const Ymm yM0F = ymm7, yOnes = ymm8, yBS[2] = {ymm9, ymm10}, yDY = ymm11;
  const Ymm yAcc[4] = {ymm12, ymm13, ymm14, ymm15};

  // Frame: the permuted activations, 64 bytes of row sums, the streams' accumulators (32
  // bytes per stream and pair, with more than one stream), two qwords for stream_groups, the
  // scale constants.
  int64_t scratch_bytes() const { return int64_t{S_} * kScratchPerSb; }
  int64_t group_stride() const { return (int64_t{S_} * R_ * kQ4KPackedRowBytes + 63) / 64 * 64; }
  int64_t acc_mem() const { return scratch_bytes() + 64; }
  int64_t slot() const { return acc_mem() + (ns_ > 1 ? 32 * ns_ * P_ : 0); }
  int64_t cst() const { return slot() + 64; }  // q4k_scale_constants(), 96 bytes
  void constants();
  void prep_activations();
  void group_body(int ns);
  void superblock(int ns);
  void half_pair(int s, int p, int h);
  void reduce_pair(int p);
  Address rec(int s, int64_t off) const;

  KernelDesc d_;
  int R_, P_, S_;
  bool acc_;
  int ns_;
};

void GemvQ4KAvx2::constants() {
  mov(eax, 0x0F0F0F0F);
  vmovd(Xmm(yM0F.getIdx()), eax);
  vpbroadcastd(yM0F, Xmm(yM0F.getIdx()));
  mov(eax, 0x00010001);
  vmovd(Xmm(yOnes.getIdx()), eax);
  vpbroadcastd(yOnes, Xmm(yOnes.getIdx()));
  mov(rax, reinterpret_cast<uintptr_t>(q4k_scale_constants()));
  for (int i = 0; i < 3; ++i) {
    vmovdqa(yT, ptr[rax + 32 * i]);
    vmovdqu(ptr[rsp + cst() + 32 * i], yT);
  }
}

void GemvQ4KAvx2::generate() {
  enter_frame(cst() + 128);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_activations();
  group_bounds(rArgs, R_, rGroup, rGroupEnd);
  mov(rW, qword[rArgs + kArgW]);
  constants();
  // rPw is free between groups (group_body sets it): it carries the group to write back.
  stream_groups(ns_, group_stride(), rGroup, rGroupEnd, rD, rPw, slot(), [&](int ns) { group_body(ns); },
                [&](int t, const Reg64& g) {
                  for (int p = 0; p < P_; ++p) {
                    if (ns_ > 1) vmovaps(yAcc[p], ptr[rsp + acc_mem() + 32 * (t * P_ + p)]);
                    reduce_pair(p);
                  }
                  write_rows(rArgs, g, R_, ptr[rsp + scratch_bytes()], acc_);
                });
  L(done);
  leave_frame();
}

Address GemvQ4KAvx2::rec(int s, int64_t off) const { return stream_addr(rPc, rPc2, rD, s, off); }

void GemvQ4KAvx2::group_body(int ns) {
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, rW);
  if (ns > 2) lea(rPc2, ptr[rPc + rD * 2]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rPw, rsp);
  for (int p = 0; p < P_; ++p) vxorps(yAcc[p], yAcc[p], yAcc[p]);
  if (ns_ > 1)
    for (int a = 0; a < ns * P_; ++a) vmovaps(ptr[rsp + acc_mem() + 32 * a], yAcc[0]);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock(ns);
  add(rPc, R_ * kQ4KPackedRowBytes);
  if (ns > 2) add(rPc2, R_ * kQ4KPackedRowBytes);
  add(rPx, kQ8KBytes);
  add(rPw, kScratchPerSb);
  dec(rCnt);
  jnz(sb, T_NEAR);
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

void GemvQ4KAvx2::superblock(int ns) {
  for (int h = 0; h < 2; ++h) {
    vpmovsxwd(yBS[h], ptr[rPx + kQ8KBsums + 16 * h]);
    vpshufd(yT, yBS[h], 0xB1);
    vpaddd(yBS[h], yBS[h], yT);
  }
  vbroadcastss(yDY, ptr[rPx]);
  // One sequential stream per group: the record's lines a fixed distance ahead, a share per
  // half pair.
  const int lines = static_cast<int>((R_ * kQ4KPackedRowBytes + 63) / 64), steps = 2 * P_;
  for (int s = 0; s < ns; ++s)
    for (int p = 0; p < P_; ++p)
      for (int h = 0; h < 2; ++h) {
        prefetch_share([&](int64_t off) { return rec(s, off); }, d_.prefetch, lines, 2 * p + h, steps);
        half_pair(s, p, h);
      }
}

void GemvQ4KAvx2::half_pair(int s, int p, int h) {
  // desc.streams 1: pair p's accumulator stays in yAcc[p]. More (also for the groups left
  // over and walked one at a time): it lives on the stack and passes through yAcc[0].
  const bool in_mem = ns_ > 1;
  const Ymm& acc = in_mem ? yAcc[0] : yAcc[p];
  const Address mem = ptr[rsp + acc_mem() + 32 * (s * P_ + p)];
  vpxor(yI, yI, yI);
  for (int c = 0; c < 4; ++c) {
    vmovdqu(yV, rec(s, p * 256 + 64 * c + 32 * h));
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
  // Scales and mins (kernels/pack.h): sc = a & 63, m = (a >> 6 | (word h >> 4s) << 2) & 63.
  const int64_t sc_at = q4k_scales_offset(R_) + kQ4KPairScaleBytes * p, d_at = q4k_d_offset(R_);
  vpmovzxbd(yS, rec(s, sc_at + 8 * h));
  vpsrld(yLo, yS, 6);
  vpand(yS, yS, ptr[rsp + cst() + 64]);
  vpmulld(yI, yI, yS);
  vpbroadcastd(Xmm(yD.getIdx()), rec(s, d_at + 4 * p));
  vcvtph2ps(yD, Xmm(yD.getIdx()));
  vmulps(yD, yD, yDY);
  vcvtdq2ps(yI, yI);
  if (in_mem) vmovaps(acc, mem);
  vfmadd231ps(acc, yI, yD);
  vpbroadcastq(yS, rec(s, sc_at + 16));
  vpsrlvd(yS, yS, ptr[rsp + cst() + 32 * h]);
  vpslld(yS, yS, 2);
  vpor(yS, yS, yLo);
  vpand(yS, yS, ptr[rsp + cst() + 64]);
  vpmaddwd(yS, yS, yBS[h]);  // m * bsum pair: both fit in 16 bits, the lanes' high words are 0 / sign
  vpbroadcastd(Xmm(yD.getIdx()), rec(s, d_at + 2 * R_ + 4 * p));
  vcvtph2ps(yD, Xmm(yD.getIdx()));
  vmulps(yD, yD, yDY);
  vcvtdq2ps(yS, yS);
  vfnmadd231ps(acc, yS, yD);
  if (in_mem) vmovaps(mem, acc);
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
