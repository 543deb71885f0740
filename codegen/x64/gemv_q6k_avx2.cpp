// Q6_K x Q8_K GEMV for AVX2 over the row-block-16 Q6_K layout of kernels/pack.h, the scheme
// of the AVX-512 kernel at half width: each 64-byte chunk is two ymm halves (rows 0-7 and
// 8-15), lane = row. A sub-block's first 12 codes (0..63) are one mask per chunk, its last 4
// come from the chunks' top bits (shifts, masks, vpor); each is dotted with the broadcast
// activation dword by vpmaddubsw (codes unsigned; 2 * 63 * 127 < 2^15, and two such sums
// added as words still fit) and vpmaddwd. The bias 32 is removed per sub-block with
// 32 * bsums (once per call), the int8 scale applied with vpmulld, and each super-block's
// int32 sum FMA'd with d_w * d_y. Constant masks are memory operands: 16 ymm registers hold
// the rest.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292, kQ8KBsums = 260;

struct alignas(32) Masks {
  uint32_t m3f[8], m03[8], m0c[8], m30[8], ones[8];
  Masks() {
    for (int i = 0; i < 8; ++i) {
      m3f[i] = 0x3F3F3F3F;
      m03[i] = 0x03030303;
      m0c[i] = 0x0C0C0C0C;
      m30[i] = 0x30303030;
      ones[i] = 0x00010001;
    }
  }
};
const Masks kMasks;

class GemvQ6KAvx2 : public JitKernelBase {
 public:
  explicit GemvQ6KAvx2(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d), S_(d.cols / 256), acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();

 private:
  // ymm0-2 are clobbered by write_rows: only temporaries live there.
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPlo = r13;
  const Reg64 rPd = r9, rPx = r8, rScr = rsi, rCnt = r10, rK = r11;
  const Ymm yT = ymm0, yU = ymm1, yW = ymm2, yD = ymm3, yX = ymm4, yCa = ymm5, yCb = ymm6, yCc = ymm7;
  const Ymm ySb[2] = {ymm11, ymm12}, yAcc[2] = {ymm13, ymm14};
  const Ymm yS = ymm15;

  int64_t group_stride() const { return int64_t{S_} * 3392; }
  int64_t bias_bytes() const { return int64_t{S_} * 64; }
  Address mask(int off) { return ptr[rK + off]; }
  void prep_bsums();
  void superblock();
  void subblock(int s, int h);
  void dot_codes(const Ymm& codes, int s, int j);

  KernelDesc d_;
  int S_;
  bool acc_;
};

void GemvQ6KAvx2::generate() {
  enter_frame(bias_bytes() + 64);
  Label groups, done, sb;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_bsums();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  L(groups);
  mov(rK, reinterpret_cast<uintptr_t>(&kMasks));
  mov(rPlo, rGroup);
  imul(rPlo, rPlo, static_cast<int>(group_stride()));
  add(rPlo, qword[rArgs + kArgW]);
  lea(rPd, ptr[rPlo + kQ6KDOffset]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  for (const Ymm& a : yAcc) vxorps(a, a, a);
  mov(rCnt, S_);
  L(sb);
  superblock();
  dec(rCnt);
  jnz(sb, T_NEAR);
  vmovups(ptr[rsp + bias_bytes()], yAcc[0]);
  vmovups(ptr[rsp + bias_bytes() + 32], yAcc[1]);
  write_rows(rArgs, rGroup, kRows, ptr[rsp + bias_bytes()], acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

// 32 * bsums[s] as int32, 16 per super-block (the bias of the 6-bit codes).
void GemvQ6KAvx2::prep_bsums() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  mov(rCnt, S_);
  Label loop;
  L(loop);
  for (int h = 0; h < 2; ++h) {
    vpmovsxwd(yT, ptr[rPx + kQ8KBsums + 16 * h]);
    vpslld(yT, yT, 5);
    vmovdqu(ptr[rScr + 32 * h], yT);
  }
  add(rPx, kQ8KBytes);
  add(rScr, 64);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void GemvQ6KAvx2::superblock() {
  for (const Ymm& s : ySb) vpxor(s, s, s);
  // One sequential stream: the record's 53 lines a fixed distance ahead, a share per
  // sub-block.
  for (int s = 0; s < 16; ++s) {
    prefetch_share(rPlo, d_.prefetch, 3392 / 64, s, 16);
    for (int h = 0; h < 2; ++h) subblock(s, h);
  }
  vbroadcastss(yX, ptr[rPx]);
  for (int h = 0; h < 2; ++h) {
    vcvtdq2ps(ySb[h], ySb[h]);
    vcvtph2ps(yT, ptr[rPd + 16 * h]);
    vmulps(yT, yT, yX);
    vfmadd231ps(yAcc[h], ySb[h], yT);
  }
  add(rPlo, 3392);
  add(rPd, 3392);
  add(rPx, kQ8KBytes);
  add(rScr, 64);
}

// Sub-block s, rows 8h .. 8h+7: yT = its int32 dot, bias and scale applied, added to ySb[h].
void GemvQ6KAvx2::subblock(int s, int h) {
  const Ymm chunk[3] = {yCa, yCb, yCc};
  for (int m = 0; m < 3; ++m) vmovdqu(chunk[m], ptr[rPlo + q6k_chunk_offset(s, m) + 32 * h]);
  // Words: codes 0 and 1, then 2 and 3, each pair's two vpmaddubsw sums added (|sum| < 2^15).
  vpand(yT, yCa, mask(offsetof(Masks, m3f)));
  dot_codes(yT, s, 0);
  vpand(yU, yCb, mask(offsetof(Masks, m3f)));
  dot_codes(yU, s, 1);
  vpaddw(yT, yT, yU);
  vpmaddwd(yT, yT, mask(offsetof(Masks, ones)));
  vpand(yU, yCc, mask(offsetof(Masks, m3f)));
  dot_codes(yU, s, 2);
  vpsrlw(yD, yCa, 6);
  vpand(yD, yD, mask(offsetof(Masks, m03)));
  vpsrlw(yW, yCb, 4);
  vpand(yW, yW, mask(offsetof(Masks, m0c)));
  vpor(yD, yD, yW);
  vpsrlw(yW, yCc, 2);
  vpand(yW, yW, mask(offsetof(Masks, m30)));
  vpor(yD, yD, yW);
  dot_codes(yD, s, 3);
  vpaddw(yU, yU, yD);
  vpmaddwd(yU, yU, mask(offsetof(Masks, ones)));
  vpaddd(yT, yT, yU);
  vpbroadcastd(yS, ptr[rScr + 4 * s]);
  vpsubd(yT, yT, yS);
  vpmovsxbd(yS, ptr[rPlo + q6k_scale_offset(s) + 8 * h]);
  vpmulld(yT, yT, yS);
  vpaddd(ySb[h], ySb[h], yT);
}

// codes = the word sums of codes x activations 4j .. 4j+3 of sub-block s (vpmaddubsw).
void GemvQ6KAvx2::dot_codes(const Ymm& codes, int s, int j) {
  vpbroadcastd(yX, ptr[rPx + 4 + 16 * s + 4 * j]);
  vpmaddubsw(codes, codes, yX);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx2(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ6KAvx2>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
