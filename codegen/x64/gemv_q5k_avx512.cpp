// Q5_K x Q8_K GEMV for AVX-512 VNNI over the row-block-16 Q5_K layout of kernels/pack.h:
// the 16 rows of a group are the 16 dword lanes and each super-block is one contiguous
// 2880-byte record, so a group's weights are a single stream with one prefetch distance.
// With desc.streams = 2 or 4, that many groups are walked side by side (a super-block of each
// in turn, JitKernelBase::stream_groups), each summing in the same order as alone.
// Per super-block and sub-block: its five chunks give the first 20 codes with one mask each
// and the last 12 from their top bits (JitKernelBase::q5k_last_code, or with GFNI
// q5k_last_code_gfni: 29 vector operations per sub-block against 33, L2-resident at 1 thread
// 111-113 -> 116-118 GB/s at the Kimi and bench expert shapes); eight vpdpbusd (codes
// unsigned, activation dword broadcast) sum the sub-block, and its 6-bit scale is applied
// with vpmulld. The mins meet the bsum pairs (computed once per call) with vpmulld, and the
// two int32 sums are converted and FMA'd with d * d8 and dmin * d8: lane = row, no
// horizontal reduction.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292, kQ8KBsums = 260, kRecord = 2880;
constexpr int kSc = 2560, kMin = 2688, kD = 2816, kDmin = 2848;

class GemvQ5KAvx512 : public JitKernelBase {
 public:
  explicit GemvQ5KAvx512(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d),
        S_(d.cols / 256), acc_(d.op == KernelOp::kGemvAccumulate), ns_(d.streams) {}
  void generate();

 private:
  // Group s of the ns side by side (desc.streams) starts at rP + s * rD (rP2 = rP + 2 * rD).
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rP = r13, rPx = r8, rScr = rsi, rCnt = r10;
  const Reg64 rD = r14, rP2 = r15;
  const Zmm zC[5] = {zmm0, zmm1, zmm2, zmm3, zmm4};
  const Zmm zMask[5] = {zmm5, zmm6, zmm7, zmm8, zmm9};  // 0x01, 0x03, 0x07, 0x0F, 0x1F per byte
  const Zmm zCode = zmm10, zI = zmm12, zT = zmm11, zB = zmm13;
  const Zmm zS = zmm16, zM = zmm17, zIs = zmm18, zIm = zmm19, zD = zmm20, zDm = zmm21;
  const Zmm zAccF[4] = {zmm15, zmm22, zmm23, zmm24};
  // With GFNI (desc.gfni): the matrices kQ5KGfni and a second temporary.
  const Zmm zGfni[7] = {zmm25, zmm26, zmm27, zmm28, zmm29, zmm30, zmm31};
  const Zmm zT2 = zmm14;

  void prep_bsums();
  void group_body(int ns);
  void superblock(int ns);
  void subblock(int t, int s);
  void mins_and_tail(int t);
  Address rec(int t, int64_t off) const;

  KernelDesc d_;
  int S_;
  bool acc_;
  int ns_;
};

void GemvQ5KAvx512::generate() {
  const int64_t slot = (int64_t{S_} * 32 + 63) / 64 * 64;
  enter_frame(slot + 64);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_bsums();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  for (int j = 0; j < 5; ++j) {
    mov(eax, 0x01010101u * ((2u << j) - 1));
    vpbroadcastd(zMask[j], eax);
  }
  if (d_.gfni) load_gfni_matrices(kQ5KGfni, 7, zGfni);
  stream_groups(
      ns_, int64_t{S_} * kRecord, rGroup, rGroupEnd, rD, rdx, slot, [&](int ns) { group_body(ns); },
      [&](int s, const Reg64& g) { store_lanes16(rArgs, g, zAccF[s], zT, acc_); });
  L(done);
  leave_frame();
}

// ns row groups side by side (rGroup + s * rD / group stride): pointers, zeroed sums, the
// super-block loop.
void GemvQ5KAvx512::group_body(int ns) {
  mov(rP, rGroup);
  imul(rP, rP, S_ * kRecord);
  add(rP, qword[rArgs + kArgW]);
  if (ns > 2) lea(rP2, ptr[rP + rD * 2]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  for (int s = 0; s < ns; ++s) vpxord(zAccF[s], zAccF[s], zAccF[s]);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock(ns);
  dec(rCnt);
  jnz(sb, T_NEAR);
}

Address GemvQ5KAvx512::rec(int s, int64_t off) const { return stream_addr(rP, rP2, rD, s, off); }

// bsums[2s] + bsums[2s + 1] as int32, 8 per super-block (the activation sum each min meets).
void GemvQ5KAvx512::prep_bsums() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  mov(rCnt, S_);
  Label loop;
  L(loop);
  vpmovsxwd(zT, ptr[rPx + kQ8KBsums]);
  vpshufd(zB, zT, 0xB1);
  vpaddd(zT, zT, zB);
  vpmovqd(Ymm(zT.getIdx()), zT);  // the even lanes (one per pair) → 8 dwords
  vmovdqu32(ptr[rScr], Ymm(zT.getIdx()));
  add(rPx, kQ8KBytes);
  add(rScr, 32);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

// One super-block of each of the ns groups in turn, each group's float sum its own.
void GemvQ5KAvx512::superblock(int ns) {
  for (int t = 0; t < ns; ++t) {
    for (int s = 0; s < 8; ++s) {
      prefetch_share([&](int64_t off) { return rec(t, off); }, d_.prefetch, kRecord / 64, s, 8);
      subblock(t, s);
    }
    mins_and_tail(t);
  }
  add(rP, kRecord);
  if (ns > 2) add(rP2, kRecord);
  add(rPx, kQ8KBytes);
  add(rScr, 32);
}

// Sub-block s of group t: its integer dot, times its scale, into zIs.
void GemvQ5KAvx512::subblock(int t, int s) {
  for (int m = 0; m < 5; ++m) vmovdqu32(zC[m], rec(t, q5k_chunk_offset(s, m)));
  vpxord(zI, zI, zI);
  for (int m = 0; m < 5; ++m) {
    vpandd(zCode, zC[m], zMask[4]);
    vpdpbusd(zI, zCode, ptr_b[rPx + 4 + 32 * s + 4 * m]);
  }
  const Operand* chunks[5] = {&zC[0], &zC[1], &zC[2], &zC[3], &zC[4]};
  for (int k = 0; k < 3; ++k) {
    if (d_.gfni) q5k_last_code_gfni(k, zCode, zC, zT, zT2, zGfni);
    else q5k_last_code(k, zCode, chunks, zT, zMask);
    vpdpbusd(zI, zCode, ptr_b[rPx + 4 + 32 * s + 20 + 4 * k]);
  }
  vpmovzxbd(zS, rec(t, kSc + 16 * s));
  if (s == 0) {
    vpmulld(zIs, zI, zS);
  } else {
    vpmulld(zI, zI, zS);
    vpaddd(zIs, zIs, zI);
  }
}

void GemvQ5KAvx512::mins_and_tail(int t) {
  for (int s = 0; s < 8; ++s) {
    vpmovzxbd(zM, rec(t, kMin + 16 * s));
    if (s == 0) {
      vpmulld(zIm, zM, ptr_b[rScr]);
    } else {
      vpmulld(zM, zM, ptr_b[rScr + 4 * s]);
      vpaddd(zIm, zIm, zM);
    }
  }
  vcvtph2ps(zD, rec(t, kD));
  vmulps(zD, zD, ptr_b[rPx]);
  vcvtph2ps(zDm, rec(t, kDmin));
  vmulps(zDm, zDm, ptr_b[rPx]);
  vcvtdq2ps(zIs, zIs);
  vcvtdq2ps(zIm, zIm);
  // sum += (d * d8) * sumi - (dmin * d8) * sumi_min, as the packed reference.
  vmulps(zIm, zIm, zDm);
  vfmsub231ps(zIm, zIs, zD);
  vaddps(zAccF[t], zAccF[t], zIm);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q5k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ5KAvx512>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
