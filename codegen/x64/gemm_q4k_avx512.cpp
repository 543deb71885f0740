// Q4_K x Q8_K GEMM for AVX-512 VNNI (prefill), over the pair layout the GEMV streams
// (kernels/pack.h: lane l = 2s + h of a pair holds sub-block s of row h).
//
// In that layout every lane of a code vector belongs to another sub-block, so a GEMM over it
// would need a permuted 64-byte activation vector per vpdpbusd and a float epilogue per pair
// and super-block. Instead each row block of 16 rows is transcoded into the row-per-lane
// records of gemm_kquant_rows.h: the pair vectors become row vectors by an 8 x 8 transpose of
// 64-bit elements (a pair's lanes 2s and 2s + 1 are one qword).
#include <memory>

#include "codegen/x64/gemm_kquant_rows.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

// Row-block scratch: the 8 pairs' code, scale and d pointers, then d and dmin of the 16 rows.
constexpr int kTab = 0, kTabSc = 64, kTabD = 128, kTmpD = 192, kTmpDm = 224;

class GemmQ4K : public GemmKQuantRows {
 public:
  explicit GemmQ4K(const KernelDesc& d) : GemmKQuantRows(d), PR_(d.row_block), PG_(d.row_block / 2) {}

 private:
  int64_t group_stride() const { return (int64_t{S_} * PR_ * kQ4KPackedRowBytes + 63) / 64 * 64; }
  // Bytes from a pair of this row block to the same pair of the next one (16 rows on). The
  // transcode prefetches the next block's codes and scales as it reads this block's: they
  // arrive while the tokens pass over this block. Without it a GEMM over a few tokens per
  // expert was bound by the weight stream (prefill of 32-128 tokens 1.2-1.5x slower).
  int64_t next_block() const { return 16 / PR_ * group_stride(); }
  void setup() override;
  void transcode() override;
  void advance() override;
  void transcode_codes(int c);
  void transcode_scales();
  void transpose8(const Zmm* in, const Zmm* out);

  int PR_, PG_;
};

// Pointers to the codes, scales and d of the block's 8 pairs (pair P = 8 * group + p lives in
// packed group P / (R/2) at position P % (R/2)). Pairs past the requested rows are never
// stored; they read pair 0's bytes so that nothing beyond the weights is touched. Then the
// nibble mask and the super-block offsets r9 (codes), r10 (scales), r11 (d).
void GemmQ4K::setup() {
  for (int p = 0; p < 8; ++p) {
    mov(rax, slot_rb());
    shl(rax, 3);
    mov(r8, rax);
    add(rax, p);
    lea(rcx, ptr[rax * 2]);
    cmp(rcx, qword[rArgs + kGR1]);
    cmovae(rax, r8);
    xor_(edx, edx);
    mov(ecx, PG_);
    div(rcx);
    imul(rax, rax, static_cast<int>(group_stride()));
    add(rax, qword[rArgs + 0]);
    imul(rcx, rdx, 256);
    lea(r8, ptr[rax + rcx]);
    mov(scr(kTab + 8 * p), r8);
    imul(rcx, rdx, static_cast<int>(kQ4KPairScaleBytes));
    lea(r8, ptr[rax + rcx + q4k_scales_offset(PR_)]);  // super-block records: codes, scales, d
    mov(scr(kTabSc + 8 * p), r8);
    lea(r8, ptr[rax + rdx * 4 + q4k_d_offset(PR_)]);
    mov(scr(kTabD + 8 * p), r8);
  }
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zmm24, eax);
  xor_(r9d, r9d);
  xor_(r10d, r10d);
  xor_(r11d, r11d);
}

void GemmQ4K::transpose8(const Zmm* in, const Zmm* out) {
  for (int i = 0; i < 4; ++i) {
    vpunpcklqdq(out[2 * i], in[2 * i], in[2 * i + 1]);
    vpunpckhqdq(out[2 * i + 1], in[2 * i], in[2 * i + 1]);
  }
  // in[4e + 0/1]: lanes 0-1 / 2-3 of out[e] and out[2 + e]; in[4e + 2/3]: of out[4 + e], out[6 + e].
  for (int e = 0; e < 2; ++e) {
    vshufi64x2(in[4 * e], out[e], out[2 + e], 0x44);
    vshufi64x2(in[4 * e + 1], out[e], out[2 + e], 0xEE);
    vshufi64x2(in[4 * e + 2], out[4 + e], out[6 + e], 0x44);
    vshufi64x2(in[4 * e + 3], out[4 + e], out[6 + e], 0xEE);
  }
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 4; ++k)
      vshufi64x2(out[2 * k + e], in[4 * e + k / 2], in[4 * e + 2 + k / 2], k % 2 ? 0xDD : 0x88);
}

// Chunk c of the current super-block (r9 = its code offset): low nibbles are chunk c of each
// sub-block, high nibbles chunk c + 4.
void GemmQ4K::transcode_codes(int c) {
  Zmm v[8], l[8], t[8];
  for (int p = 0; p < 8; ++p) v[p] = Zmm(p), l[p] = Zmm(8 + p), t[p] = Zmm(16 + p);
  const Zmm mask = zmm24;
  for (int p = 0; p < 8; ++p) {
    mov(rax, scr(kTab + 8 * p));
    vmovdqu32(v[p], ptr[rax + r9 + 64 * c]);
    prefetcht0(ptr[rax + r9 + 64 * c + next_block()]);
  }
  for (int p = 0; p < 8; ++p) {
    vpandd(l[p], v[p], mask);
    vpsrlw(v[p], v[p], 4);
    vpandd(v[p], v[p], mask);
  }
  transpose8(l, t);
  for (int s = 0; s < 8; ++s) vmovdqa32(ptr[rW + s * kWRec + 64 * c], t[s]);
  transpose8(v, t);
  for (int s = 0; s < 8; ++s) vmovdqa32(ptr[rW + s * kWRec + 64 * (c + 4)], t[s]);
}

// d * sc and dmin * m of the current super-block (r10 = scale offset, r11 = d offset).
void GemmQ4K::transcode_scales() {
  Zmm v[8], l[8], t[8];
  for (int p = 0; p < 8; ++p) v[p] = Zmm(p), l[p] = Zmm(8 + p), t[p] = Zmm(16 + p);
  const Zmm zD = zmm25, zDm = zmm26, zShr = zmm27, zMask = zmm28;
  mov(rax, reinterpret_cast<uintptr_t>(q4k_scale_constants()));
  vmovdqa32(zShr, ptr[rax]);
  vpbroadcastd(zMask, dword[rax + 64]);
  // Scales and mins (kernels/pack.h): sc = a & 63, m = (a >> 6 | (word h >> 4s) << 2) & 63.
  for (int p = 0; p < 8; ++p) {
    mov(rax, scr(kTabSc + 8 * p));
    prefetcht0(ptr[rax + r10 + next_block()]);
    vpmovzxbd(l[p], ptr[rax + r10]);
    vpsrld(t[p], l[p], 6);
    vpandd(l[p], l[p], zMask);
    vcvtdq2ps(l[p], l[p]);
    vpbroadcastq(v[p], ptr[rax + r10 + 16]);
    vpsrlvd(v[p], v[p], zShr);
    vpslld(v[p], v[p], 2);
    vpternlogd(v[p], t[p], zMask, ternlog_imm([](int a, int b, int c) { return (a | b) & c; }));
    vcvtdq2ps(v[p], v[p]);
    mov(rax, scr(kTabD + 8 * p));
    mov(ecx, dword[rax + r11]);
    mov(scr(kTmpD + 4 * p), ecx);
    mov(ecx, dword[rax + r11 + 2 * PR_]);
    mov(scr(kTmpDm + 4 * p), ecx);
  }
  vcvtph2ps(zD, scr(kTmpD));
  vcvtph2ps(zDm, scr(kTmpDm));
  transpose8(l, t);
  for (int s = 0; s < 8; ++s) {
    vmulps(t[s], t[s], zD);
    vmovaps(ptr[rW + s * kWRec + kWDsc], t[s]);
  }
  transpose8(v, t);
  for (int s = 0; s < 8; ++s) {
    vmulps(t[s], t[s], zDm);
    vmovaps(ptr[rW + s * kWRec + kWDmm], t[s]);
  }
}

void GemmQ4K::transcode() {
  for (int c = 0; c < 4; ++c) transcode_codes(c);
  transcode_scales();
}

void GemmQ4K::advance() {
  add(r9, PR_ * kQ4KPackedRowBytes);
  add(r10, PR_ * kQ4KPackedRowBytes);
  add(r11, PR_ * kQ4KPackedRowBytes);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q4k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ4K>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
