// Q4_K x Q8_K GEMM for AVX-512 VNNI (prefill), over the same packed layout as the GEMV
// (kernels/pack.h: row pairs, lane l = 2s + h holds sub-block s of row h of the pair).
//
// Token tiles of N = 12: the tile's activations are permuted once into scratch, per
// super-block and token 640 bytes: W[j] (j = 0..7, lane l = dword 8s + j of the Q8_K qs,
// matching the packed code lanes), then per lane (bsums[2s] + bsums[2s+1]) * d_x as floats,
// then d_x. Rows are taken in blocks of 32 and K in chunks of 2 super-blocks (see kChunk);
// a pair holds N float accumulators and N int32 sums; per super-block the pair's 8 code vectors
// (low and high nibbles of 4 chunks) and two per-lane float vectors d*sc and dmin*m are made
// once and reused by every token:
//   I = sum of 8 vpdpbusd (codes unsigned, activations signed; exact int32)
//   acc += float(I) * (d * sc) * d_x  -  (dmin * m) * (bsum * d_x)
// d * sc and dmin * m are exact in f32 (an 11-bit f16 mantissa times a 6-bit integer), and
// float(I) is exact (|I| < 2^16), so only the float products and sums round, as in the GEMV.
// A partial last tile runs a code path generated for its token count.
#include <memory>

#include "codegen/x64/gemm_jit.h"
#include "codegen/x64/generators.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kTokens = 12, kQ8KBytes = 292, kQ8KBsums = 260;
constexpr int kActBytes = 640, kActBsum = 512, kActD = 576;  // per super-block and token
// K is processed in chunks of kChunk super-blocks (the chunk's activations, 15 KB, stay in
// L1 while every row of a block of kBlockRows rows uses them); the unreduced accumulators of
// the block's pairs wait in a stack buffer between chunks.
constexpr int kChunk = 2, kBlockRows = 32;
constexpr int kAccBuf = kBlockRows / 2 * kTokens * 64;

// Permutation of a Q8_K super-block's 64 dwords into W[j] (as in the GEMV): lane l takes
// dword 8 * ((l / 2) % 4) + j of a two-register table; lanes 8-15 come from sub-blocks 4-7.
struct PrepIndex {
  alignas(64) int32_t idx[8][16];
  PrepIndex() {
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 16; ++l) idx[j][l] = 8 * ((l / 2) % 4) + j;
  }
};
const PrepIndex kPrepIndex;

class GemmQ4K : public JitGemmBase {
 public:
  explicit GemmQ4K(const KernelDesc& d)
      : JitGemmBase(d, kTokens, int64_t{d.cols / 256} * kTokens * kActBytes + kAccBuf, int64_t{kTokens} * d.row_block * 4,
                    kBlockRows / d.row_block > 0 ? kBlockRows / d.row_block : 1),
        S_(d.cols / 256), P_(d.row_block / 2),
        chunks_((S_ + kChunk - 1) / kChunk), last_(S_ - (chunks_ - 1) * kChunk) {}
  void generate() { emit(); }

 private:
  const Reg64 rPc = r13, rPs = r14, rPd = r15, rPa = r8, rCnt = r10, rAcc = rsi;
  // Chunk c uses zLo[c % 2] and zHi[c % 2]: two chunks in flight are enough.
  const Zmm zLo[2] = {zmm0, zmm2}, zHi[2] = {zmm1, zmm3};
  const Zmm zDsc = zmm4, zDmm = zmm5, zM0F = zmm6, zT = zmm7;
  Zmm acc(int t) const { return Zmm(8 + t); }    // zmm8 .. zmm19
  Zmm isum(int t) const { return Zmm(20 + t); }  // zmm20 .. zmm31

  int64_t group_stride() const { return (int64_t{S_} * R_ * 148 + 63) / 64 * 64; }
  int64_t acc_offset() const { return int64_t{S_} * kTokens * kActBytes; }
  // Loop state slot: the K chunk.
  Address slot_kc() { return slot(0); }
  void prep() override;
  void body(int m) override;
  void group(int m);
  void pair(int p, int m, const Label& first, const Label& last);
  void pair_step(int p, int m);
  void reduce(int p, int m);

  int S_, P_, chunks_, last_;
};

void GemmQ4K::prep() {
  const Zmm zX[4] = {zmm20, zmm21, zmm22, zmm23};
  const Zmm zIdx = zmm24, zT0 = zmm25, zT1 = zmm26, zB = zmm27;
  mov(eax, 0xFF00);
  kmovw(k1, eax);
  mov(rdx, reinterpret_cast<uintptr_t>(&kPrepIndex.idx[0][0]));
  tile_x(r11);
  mov(rPa, slot_act());
  mov(r9, slot_m());
  Label tok, sb;
  L(tok);
  mov(rcx, r11);
  mov(rax, rPa);
  mov(rCnt, S_);
  L(sb);
  for (int i = 0; i < 4; ++i) vmovdqu32(zX[i], ptr[rcx + 4 + 64 * i]);
  for (int j = 0; j < 8; ++j) {
    vmovdqa32(zT0, ptr[rdx + 64 * j]);
    vmovdqa32(zT1, zT0);
    vpermi2d(zT0, zX[0], zX[1]);
    vpermi2d(zT1, zX[2], zX[3]);
    vpblendmd(zIdx | k1, zT0, zT1);
    vmovdqa32(ptr[rax + 64 * j], zIdx);
  }
  // bsum pairs: lanes 2s and 2s + 1 both get bsums[2s] + bsums[2s+1], times d_x.
  vpmovsxwd(zB, ptr[rcx + kQ8KBsums]);
  vpshufd(zT0, zB, 0xB1);
  vpaddd(zB, zB, zT0);
  vcvtdq2ps(zB, zB);
  vmulps(zB, zB, ptr_b[rcx]);
  vmovaps(ptr[rax + kActBsum], zB);
  vmovss(xmm25, dword[rcx]);
  vmovss(dword[rax + kActD], xmm25);
  add(rcx, kQ8KBytes);
  add(rax, kTokens * kActBytes);
  dec(rCnt);
  jnz(sb, T_NEAR);
  add(r11, qword[rArgs + kGXStride]);
  add(rPa, kActBytes);
  dec(r9);
  jnz(tok, T_NEAR);
}

// The row block in K chunks; per chunk, every group and pair of the block.
void GemmQ4K::body(int m) {
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  Label chunks, groups;
  mov(slot_kc(), 0);
  L(chunks);
  mov(rGroup, slot_rb());
  L(groups);
  group(m);
  inc(rGroup);
  cmp(rGroup, slot_rb_end());
  jb(groups, T_NEAR);
  mov(rax, slot_kc());
  inc(rax);
  mov(slot_kc(), rax);
  cmp(rax, chunks_);
  jb(chunks, T_NEAR);
}

// One group in the current K chunk; after the last chunk, its rows are written.
void GemmQ4K::group(int m) {
  Label first, last, done;
  for (int p = 0; p < P_; ++p) pair(p, m, first, last);
  cmp(slot_kc(), chunks_ - 1);
  jne(done, T_NEAR);
  write_tbuf(m);
  L(done);
}

// Pair p of group rGroup over the super-blocks of chunk slot_kc().
void GemmQ4K::pair(int p, int m, const Label&, const Label&) {
  Label not_first, loaded, not_last, stored;
  // rAcc = the pair's accumulators in the block buffer.
  mov(rAcc, rGroup);
  sub(rAcc, slot_rb());
  imul(rAcc, rAcc, P_ * kTokens * 64);
  lea(rAcc, ptr[rsp + rAcc + acc_offset() + p * kTokens * 64]);
  // Chunk pointers: codes, scales, d of the group, activations of the tile.
  mov(rax, slot_kc());
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, qword[rArgs + 0]);
  imul(rcx, rax, kChunk * R_ * 16);
  lea(rPs, ptr[rPc + rcx + S_ * R_ * 128]);
  imul(rcx, rax, kChunk * R_ * 4);
  lea(rPd, ptr[rPc + rcx + S_ * R_ * 144]);
  imul(rcx, rax, kChunk * R_ * 128);
  add(rPc, rcx);
  imul(rcx, rax, kChunk * kTokens * kActBytes);
  mov(rPa, slot_act());
  add(rPa, rcx);
  mov(rCnt, kChunk);
  cmp(rax, chunks_ - 1);
  jne(not_last, T_NEAR);
  mov(rCnt, last_);
  L(not_last);
  test(rax, rax);
  jnz(not_first, T_NEAR);
  for (int t = 0; t < m; ++t) vpxord(acc(t), acc(t), acc(t));
  jmp(loaded, T_NEAR);
  L(not_first);
  for (int t = 0; t < m; ++t) vmovaps(acc(t), ptr[rAcc + 64 * t]);
  L(loaded);
  Label sb;
  L(sb);
  pair_step(p, m);
  add(rPc, R_ * 128);
  add(rPs, R_ * 16);
  add(rPd, R_ * 4);
  add(rPa, kTokens * kActBytes);
  dec(rCnt);
  jnz(sb, T_NEAR);
  Label keep;
  cmp(slot_kc(), chunks_ - 1);
  jne(keep, T_NEAR);
  reduce(p, m);
  jmp(stored, T_NEAR);
  L(keep);
  for (int t = 0; t < m; ++t) vmovaps(ptr[rAcc + 64 * t], acc(t));
  L(stored);
}

void GemmQ4K::pair_step(int p, int m) {
  // Per-lane d * sc and dmin * m of the pair (lanes alternate rows 2p, 2p + 1).
  vpmovzxbd(zDsc, ptr[rPs + 32 * p]);
  vcvtdq2ps(zDsc, zDsc);
  vpbroadcastd(Ymm(zT.getIdx()), ptr[rPd + 4 * p]);
  vcvtph2ps(zT, Ymm(zT.getIdx()));
  vmulps(zDsc, zDsc, zT);
  vpmovzxbd(zDmm, ptr[rPs + 32 * p + 16]);
  vcvtdq2ps(zDmm, zDmm);
  vpbroadcastd(Ymm(zT.getIdx()), ptr[rPd + 2 * R_ + 4 * p]);
  vcvtph2ps(zT, Ymm(zT.getIdx()));
  vmulps(zDmm, zDmm, zT);
  // The m tokens' int32 sums are independent chains, emitted interleaved (12 chains cover
  // the vpdpbusd latency at two per cycle).
  for (int t = 0; t < m; ++t) vpxord(isum(t), isum(t), isum(t));
  for (int c = 0; c < 4; ++c) {
    const Address code = ptr[rPc + p * 256 + 64 * c];
    const Zmm& lo = zLo[c % 2];
    const Zmm& hi = zHi[c % 2];
    vpandd(lo, zM0F, code);
    vpsrlw(hi, code, 4);
    vpandd(hi, hi, zM0F);
    for (int t = 0; t < m; ++t) vpdpbusd(isum(t), lo, ptr[rPa + t * kActBytes + 64 * c]);
    for (int t = 0; t < m; ++t) vpdpbusd(isum(t), hi, ptr[rPa + t * kActBytes + 64 * (c + 4)]);
  }
  for (int t = 0; t < m; ++t) {
    const Zmm I = isum(t);
    const int a = t * kActBytes;
    vcvtdq2ps(I, I);
    vmulps(I, I, zDsc);
    vfmadd231ps(acc(t), I, ptr_b[rPa + a + kActD]);
    vfnmadd231ps(acc(t), zDmm, ptr[rPa + a + kActBsum]);
  }
}

// Even lanes are row 2p, odd lanes row 2p + 1: fold to lanes 0 and 1, store to tbuf[t].
void GemmQ4K::reduce(int p, int m) {
  for (int t = 0; t < m; ++t) {
    const Zmm a = acc(t);
    vpermilps(zT, a, 0x4E);
    vaddps(a, a, zT);
    vshuff32x4(zT, a, a, 0x4E);
    vaddps(a, a, zT);
    vshuff32x4(zT, a, a, 0xB1);
    vaddps(a, a, zT);
    vmovlps(ptr[rsp + tbuf_offset() + 4 * R_ * t + 8 * p], Xmm(a.getIdx()));
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q4k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ4K>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
