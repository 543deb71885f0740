// Q4_K x Q8_K GEMM for AVX-512 VNNI (prefill), over the pair layout the GEMV streams
// (kernels/pack.h: lane l = 2s + h of a pair holds sub-block s of row h).
//
// In that layout every lane of a code vector belongs to another sub-block, so a GEMM over it
// needs a permuted 64-byte activation vector per vpdpbusd and a float epilogue per pair and
// super-block. Instead, once per row block of 16 rows (and token block), the block's weights
// are transcoded into a stack buffer with one row per 32-bit lane:
//   per sub-block u (K/32 of them), 640 bytes: codes [8 chunks j][16 rows][4 bytes] as bytes
//   0..15 (byte t of chunk j = code of weight 32s + 4j + t), then d * sc[16 rows] and
//   dmin * m[16 rows] as floats (exact: an 11-bit mantissa times a 6-bit integer).
// The pair vectors become row vectors by an 8 x 8 transpose of 64-bit elements (a pair's
// lanes 2s and 2s + 1 are one qword). The tile's activations are copied once per token into
// records of 40 bytes per sub-block: the 32 codes, bsum (of the two halves) and d_x, so every
// activation dword is an embedded-broadcast operand. Per sub-block j of a super-block and token:
//   I_j = sum of 8 vpdpbusd (codes unsigned, activations signed; exact int32)
//   s += float(I_j) * (d * sc_j)  -  (dmin * m_j) * bsum_j          (two FMAs)
// and acc += s * d_x once per super-block: the GEMV's products, grouped and rounded in another
// order. Token tiles of N = 9 (three accumulators each); a token block holds up to 10 tiles,
// so a transcoded row block serves up to 90 tokens.
#include <memory>

#include "codegen/x64/gemm_jit.h"
#include "codegen/x64/generators.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kTokens = 9, kMaxTiles = 10, kQ8KBytes = 292, kQ8KBsums = 260;
constexpr int kRec = 40, kRecBsum = 32, kRecD = 36;         // activation record per sub-block and token
constexpr int kWRec = 640, kWDsc = 512, kWDmm = 576;        // weight record per sub-block (16 rows)
constexpr int kTab = 0, kTabSc = 64, kTabD = 128, kTmpD = 192, kTmpDm = 224, kWBase = 256;  // row-block scratch

class GemmQ4K : public JitGemmBase {
 public:
  explicit GemmQ4K(const KernelDesc& d)
      : JitGemmBase(d, kTokens, int64_t{d.cols / 32} * kTokens * kRec, kWBase + int64_t{d.cols / 32} * kWRec, 1,
                    kMaxTiles, 16),
        S_(d.cols / 256), PR_(d.row_block), PG_(d.row_block / 2) {}
  void generate() { emit(); }

 private:
  const Reg64 rW = r13, rPa = r15, rCnt = r10;
  const Zmm zCode[2] = {zmm0, zmm1};
  const Zmm zDsc = zmm2, zDmm = zmm3, zT = zmm4;
  Zmm acc(int t) const { return Zmm(5 + t); }    // zmm5 .. zmm13
  Zmm sb(int t) const { return Zmm(14 + t); }    // zmm14 .. zmm22: the super-block's sum before d_x
  Zmm isum(int t) const { return Zmm(23 + t); }  // zmm23 .. zmm31

  int64_t group_stride() const { return (int64_t{S_} * PR_ * 148 + 63) / 64 * 64; }
  Address scr(int64_t off) { return ptr[rsp + tbuf_offset() + off]; }
  void prep() override;
  void row_block_prep() override;
  void pair_pointers();
  void transcode_codes(int c);
  void transcode_scales();
  void transpose8(const Zmm* in, const Zmm* out);
  void body(int m) override;

  int S_, PR_, PG_;
};

// Token by token: per super-block, eight 40-byte records (one per sub-block), N records apart.
void GemmQ4K::prep() {
  tile_x(r11);
  mov(rPa, slot_act());
  mov(r9, slot_m());
  Label tok, sb;
  L(tok);
  mov(rdx, r11);
  mov(rax, rPa);
  mov(rCnt, S_);
  L(sb);
  for (int s = 0; s < 8; ++s) {
    vmovdqu(ymm0, ptr[rdx + 4 + 32 * s]);
    vmovdqu(ptr[rax], ymm0);
    movsx(ecx, word[rdx + kQ8KBsums + 4 * s]);
    movsx(esi, word[rdx + kQ8KBsums + 4 * s + 2]);
    add(ecx, esi);
    vcvtsi2ss(xmm1, xmm1, ecx);
    vmovss(dword[rax + kRecBsum], xmm1);
    mov(ecx, dword[rdx]);
    mov(dword[rax + kRecD], ecx);
    add(rax, kTokens * kRec);
  }
  add(rdx, kQ8KBytes);
  dec(rCnt);
  jnz(sb, T_NEAR);
  add(r11, qword[rArgs + kGXStride]);
  add(rPa, kRec);
  dec(r9);
  jnz(tok, T_NEAR);
}

// Pointers to the codes, scales and d of the block's 8 pairs (pair P = 8 * group + p lives in
// packed group P / (R/2) at position P % (R/2)). Pairs past the requested rows are never
// stored; they read pair 0's bytes so that nothing beyond the weights is touched.
void GemmQ4K::pair_pointers() {
  for (int p = 0; p < 8; ++p) {
    Label ok;
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
    imul(rcx, rdx, 32);
    lea(r8, ptr[rax + rcx + S_ * PR_ * 128]);
    mov(scr(kTabSc + 8 * p), r8);
    lea(r8, ptr[rax + rdx * 4 + S_ * PR_ * 144]);
    mov(scr(kTabD + 8 * p), r8);
  }
}

// out[s] = qwords s of in[0..7] (in is clobbered): unpack within 128-bit lanes, then two
// rounds of 128-bit lane shuffles.
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
  const Zmm zD = zmm25, zDm = zmm26;
  for (int p = 0; p < 8; ++p) {
    mov(rax, scr(kTabSc + 8 * p));
    vpmovzxbd(l[p], ptr[rax + r10]);
    vcvtdq2ps(l[p], l[p]);
    vpmovzxbd(v[p], ptr[rax + r10 + 16]);
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

void GemmQ4K::row_block_prep() {
  pair_pointers();
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zmm24, eax);
  xor_(r9d, r9d);
  xor_(r10d, r10d);
  xor_(r11d, r11d);
  lea(rW, scr(kWBase));
  mov(r14, S_);
  Label sb;
  L(sb);
  for (int c = 0; c < 4; ++c) transcode_codes(c);
  transcode_scales();
  add(r9, PR_ * 128);
  add(r10, PR_ * 16);
  add(r11, PR_ * 4);
  add(rW, 8 * kWRec);
  dec(r14);
  jnz(sb, T_NEAR);
}

// The 16 rows of group rGroup for the tile's m tokens: per super-block, the sub-blocks' terms
// are summed before d_x is applied once.
void GemmQ4K::body(int m) {
  for (int t = 0; t < m; ++t) vpxord(acc(t), acc(t), acc(t));
  lea(rW, scr(kWBase));
  mov(rPa, slot_act());
  mov(r11, S_);
  Label super, sub;
  L(super);
  for (int t = 0; t < m; ++t) vpxord(sb(t), sb(t), sb(t));
  mov(rCnt, 8);
  L(sub);
  for (int t = 0; t < m; ++t) vpxord(isum(t), isum(t), isum(t));
  // Chunk-major: each code vector serves the m tokens' independent int32 chains in turn.
  for (int j = 0; j < 8; ++j) {
    const Zmm& code = zCode[j % 2];
    vmovdqa32(code, ptr[rW + 64 * j]);
    for (int t = 0; t < m; ++t) vpdpbusd(isum(t), code, ptr_b[rPa + kRec * t + 4 * j]);
  }
  vmovaps(zDsc, ptr[rW + kWDsc]);
  vmovaps(zDmm, ptr[rW + kWDmm]);
  for (int t = 0; t < m; ++t) {
    const Zmm I = isum(t);
    vcvtdq2ps(I, I);
    vfmadd231ps(sb(t), I, zDsc);
    vfnmadd231ps(sb(t), zDmm, ptr_b[rPa + kRec * t + kRecBsum]);
  }
  add(rW, kWRec);
  add(rPa, kTokens * kRec);
  dec(rCnt);
  jnz(sub, T_NEAR);
  for (int t = 0; t < m; ++t) vfmadd231ps(acc(t), sb(t), ptr_b[rPa - kTokens * kRec + kRec * t + kRecD]);
  dec(r11);
  jnz(super, T_NEAR);
  Zmm accs[kTokens];
  for (int t = 0; t < kTokens; ++t) accs[t] = acc(t);
  store_lanes(m, accs, zT);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q4k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ4K>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
