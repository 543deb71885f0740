// Q8_0 x Q8_0 GEMV for AVX2 (no AVX-512, no VNNI) over the row-block-16 Q8_0 layout of
// kernels/pack.h: a 64-byte chunk holds one activation dword's worth of 4 codes for each of
// the 16 rows, processed as two ymm halves (rows 0-7, 8-15), lane = row.
// vpmaddubsw needs one unsigned operand and would saturate on the biased codes (255 * 127 * 2),
// so the codes are unbiased (xor 0x80) and the sign moves to the activation:
// |q| (vpabsb; -128 gives 128 as unsigned) times x * sign(q) (vpsignb), pairs summed by
// vpmaddubsw (at most 2 * 128 * 127 < 2^15: activations from the Q8_0 quantiser lie in
// [-127, 127]) and widened by vpmaddwd. Per block: acc += float(isum) * (d_w * d_x).
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ80Bytes = 34, kCodeBytes = 512;

class GemvQ80Avx2 : public JitKernelBase {
 public:
  explicit GemvQ80Avx2(const KernelDesc& d)
      : JitKernelBase(64 * 1024), d_(d), nb_(d.cols / 32), acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();

 private:
  // ymm0-2 are clobbered by write_rows: only temporaries live there.
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rPd = r14, rPx = r15;
  const Reg64 rScr = r8, rCnt = r10;
  const Ymm yV = ymm0, yA = ymm1, yS = ymm2, y80 = ymm3, yOnes = ymm4, yX = ymm5;
  const Ymm yI[2] = {ymm8, ymm9}, yAcc[2] = {ymm10, ymm11}, yD = ymm12, yDx = ymm13;

  int64_t dx_bytes() const { return (int64_t{nb_} * 4 + 63) / 64 * 64; }
  int64_t group_stride() const { return (int64_t{nb_} * (kCodeBytes + 32) + 63) / 64 * 64; }
  void broadcast_const(const Ymm& y, uint32_t v);
  void prep_dx();
  void block();

  KernelDesc d_;
  int nb_;
  bool acc_;
};

void GemvQ80Avx2::broadcast_const(const Ymm& y, uint32_t v) {
  mov(eax, v);
  vmovd(Xmm(y.getIdx()), eax);
  vpbroadcastd(y, Xmm(y.getIdx()));
}

void GemvQ80Avx2::generate() {
  enter_frame(dx_bytes() + 64);
  Label groups, done, blk;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_dx();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  broadcast_const(y80, 0x80808080);
  broadcast_const(yOnes, 0x00010001);
  L(groups);
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, qword[rArgs + kArgW]);
  lea(rPd, ptr[rPc + int64_t{nb_} * kCodeBytes]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  for (const Ymm& a : yAcc) vxorps(a, a, a);
  mov(rCnt, nb_);
  L(blk);
  block();
  dec(rCnt);
  jnz(blk, T_NEAR);
  vmovups(ptr[rsp + dx_bytes()], yAcc[0]);
  vmovups(ptr[rsp + dx_bytes() + 32], yAcc[1]);
  write_rows(rArgs, rGroup, kRows, ptr[rsp + dx_bytes()], acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

// d of every activation block as f32, once per call.
void GemvQ80Avx2::prep_dx() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  mov(rCnt, nb_);
  Label loop;
  L(loop);
  movzx(eax, word[rPx]);
  vmovd(xmm15, eax);
  vcvtph2ps(xmm15, xmm15);
  vmovss(dword[rScr], xmm15);
  add(rPx, kQ80Bytes);
  add(rScr, 4);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void GemvQ80Avx2::block() {
  for (const Ymm& i : yI) vpxor(i, i, i);
  for (int c = 0; c < 8; ++c) {
    vpbroadcastd(yX, ptr[rPx + 2 + 4 * c]);
    for (int h = 0; h < 2; ++h) {
      vpxor(yV, y80, ptr[rPc + 64 * c + 32 * h]);  // q = code ^ 0x80
      vpabsb(yA, yV);
      vpsignb(yS, yX, yV);
      vpmaddubsw(yA, yA, yS);
      vpmaddwd(yA, yA, yOnes);
      vpaddd(yI[h], yI[h], yA);
    }
  }
  if (d_.prefetch != 0) {
    for (int i = 0; i < kCodeBytes / 64; ++i) prefetcht0(ptr[rPc + d_.prefetch + 64 * i]);
    prefetcht0(ptr[rPd + (d_.prefetch / 16 + 63) / 64 * 64]);
  }
  vbroadcastss(yDx, ptr[rScr]);
  for (int h = 0; h < 2; ++h) {
    vcvtdq2ps(yI[h], yI[h]);
    vcvtph2ps(yD, ptr[rPd + 16 * h]);
    vmulps(yD, yD, yDx);
    vfmadd231ps(yAcc[h], yI[h], yD);
  }
  add(rPc, kCodeBytes);
  add(rPd, 32);
  add(rPx, kQ80Bytes);
  add(rScr, 4);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q80_avx2(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ80Avx2>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
