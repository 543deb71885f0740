// Q6_K x Q8_K GEMV for AVX2 over the row-block-16 Q6_K layout of kernels/pack.h, the scheme
// of the AVX-512 kernel at half width: each 64-byte chunk is two ymm halves (rows 0-7 and
// 8-15), lane = row. The 6-bit codes (0..63) are rebuilt with shifts, masks and vpor and
// dotted with the broadcast activation dword by vpmaddubsw (codes unsigned; 2 * 63 * 127 <
// 2^15, no saturation) and vpmaddwd. The bias 32 is removed per sub-block with 32 * bsums
// (once per call), the int8 scale applied with vpmulld, and each super-block's int32 sum
// FMA'd with d_w * d_y. Constant masks are memory operands: 16 ymm registers hold the rest.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292, kQ8KBsums = 260;

struct alignas(32) Masks {
  uint32_t m0f[8], m30[8], ones[8];
  Masks() {
    for (int i = 0; i < 8; ++i) {
      m0f[i] = 0x0F0F0F0F;
      m30[i] = 0x30303030;
      ones[i] = 0x00010001;
    }
  }
};
const Masks kMasks;

class GemvQ6KAvx2 : public JitKernelBase {
 public:
  explicit GemvQ6KAvx2(const KernelDesc& d)
      : JitKernelBase(64 * 1024), d_(d), S_(d.cols / 256), acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();

 private:
  // ymm0-2 are clobbered by write_rows: only temporaries live there.
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPlo = r13, rPsc = r15;
  const Reg64 rPd = r9, rPx = r8, rScr = rsi, rCnt = r10, rK = r11;
  const Ymm yV = ymm0, yH = ymm1, yA = ymm2, yB = ymm3, yT = ymm4, yXa = ymm5, yXb = ymm6;
  const Ymm yI0[2] = {ymm7, ymm8}, yI1[2] = {ymm9, ymm10}, ySb[2] = {ymm11, ymm12}, yAcc[2] = {ymm13, ymm14};
  const Ymm yS = ymm15;

  int64_t group_stride() const { return int64_t{S_} * 3392; }
  int64_t bias_bytes() const { return int64_t{S_} * 64; }
  Address mask(int off) { return ptr[rK + off]; }
  void prep_bsums();
  void superblock();
  void subblock_pair(int s);
  void apply_scale(const Ymm& acc, int s, int h);

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
  lea(rPsc, ptr[rPlo + 3072]);
  lea(rPd, ptr[rPlo + 3328]);
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
  // One sequential stream: the record's 53 lines a fixed distance ahead, a share per pair.
  for (int s = 0; s < 8; ++s) {
    prefetch_share(rPlo, d_.prefetch, 3392 / 64, s, 8);
    subblock_pair(s);
  }
  vbroadcastss(yXa, ptr[rPx]);
  for (int h = 0; h < 2; ++h) {
    vcvtdq2ps(ySb[h], ySb[h]);
    vcvtph2ps(yT, ptr[rPd + 16 * h]);
    vmulps(yT, yT, yXa);
    vfmadd231ps(yAcc[h], ySb[h], yT);
  }
  add(rPlo, 3392);
  add(rPsc, 3392);
  add(rPd, 3392);
  add(rPx, kQ8KBytes);
  add(rScr, 64);
}

// Sub-blocks s and s + 8 (low nibbles of chunks 4s + j; top bits at bit pairs s/4 and
// 2 + s/4 of the high-bit chunks 4(s%4) + j), both row halves.
void GemvQ6KAvx2::subblock_pair(int s) {
  const int k = s / 4;
  for (int h = 0; h < 2; ++h) {
    vpxor(yI0[h], yI0[h], yI0[h]);
    vpxor(yI1[h], yI1[h], yI1[h]);
  }
  for (int j = 0; j < 4; ++j) {
    vpbroadcastd(yXa, ptr[rPx + 4 + 16 * s + 4 * j]);
    vpbroadcastd(yXb, ptr[rPx + 4 + 16 * (s + 8) + 4 * j]);
    for (int h = 0; h < 2; ++h) {
      vmovdqu(yV, ptr[rPlo + q6k_nibble_offset(s, j) + 32 * h]);
      vmovdqu(yH, ptr[rPlo + q6k_high_offset(s % 4, j) + 32 * h]);
      vpsllw(yA, yH, k == 0 ? 4 : 2);
      vpand(yA, yA, mask(offsetof(Masks, m30)));
      vpand(yT, yV, mask(offsetof(Masks, m0f)));
      vpor(yA, yA, yT);
      vpmaddubsw(yA, yA, yXa);
      vpmaddwd(yA, yA, mask(offsetof(Masks, ones)));
      vpaddd(yI0[h], yI0[h], yA);
      if (k == 0) {
        vpand(yB, yH, mask(offsetof(Masks, m30)));
      } else {
        vpsrlw(yB, yH, 2);
        vpand(yB, yB, mask(offsetof(Masks, m30)));
      }
      vpsrlw(yT, yV, 4);
      vpand(yT, yT, mask(offsetof(Masks, m0f)));
      vpor(yB, yB, yT);
      vpmaddubsw(yB, yB, yXb);
      vpmaddwd(yB, yB, mask(offsetof(Masks, ones)));
      vpaddd(yI1[h], yI1[h], yB);
    }
  }
  for (int h = 0; h < 2; ++h) {
    apply_scale(yI0[h], s, h);
    apply_scale(yI1[h], s + 8, h);
  }
}

void GemvQ6KAvx2::apply_scale(const Ymm& acc, int s, int h) {
  vpbroadcastd(yS, ptr[rScr + 4 * s]);
  vpsubd(acc, acc, yS);
  vpmovsxbd(yS, ptr[rPsc + 16 * s + 8 * h]);
  vpmulld(acc, acc, yS);
  vpaddd(ySb[h], ySb[h], acc);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx2(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ6KAvx2>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
