#include "codegen/x64/gemm_kquant_rows.h"

namespace zenmoe::x64 {

using namespace Xbyak;
using namespace Xbyak::util;

namespace {

constexpr int kTokens = 9, kMaxTiles = 10, kQ8KBytes = 292, kQ8KBsums = 260;
constexpr int kRec = 40, kRecBsum = 32, kRecD = 36;  // activation record per sub-block and token

const Zmm zCode[2] = {zmm0, zmm1};
const Zmm zDsc = zmm2, zDmm = zmm3, zT = zmm4;
Zmm acc(int t) { return Zmm(5 + t); }    // zmm5 .. zmm13
Zmm sb(int t) { return Zmm(14 + t); }    // zmm14 .. zmm22: the super-block's sum before d_x
Zmm isum(int t) { return Zmm(23 + t); }  // zmm23 .. zmm31

}  // namespace

GemmKQuantRows::GemmKQuantRows(const KernelDesc& d)
    : JitGemmBase(d, kTokens, int64_t{d.cols / 32} * kTokens * kRec, kWBase + int64_t{d.cols / 32} * kWRec, 1,
                  kMaxTiles, 16),
      S_(d.cols / 256) {}

// Token by token: per super-block, eight 40-byte records (one per sub-block), N records apart.
void GemmKQuantRows::prep() {
  mov(r8, slot_t0());
  mov(rPa, slot_act());
  mov(r9, slot_m());
  Label tok, sbl;
  L(tok);
  x_row(rdx, r8);
  mov(rax, rPa);
  mov(rCnt, S_);
  L(sbl);
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
  jnz(sbl, T_NEAR);
  inc(r8);
  add(rPa, kRec);
  dec(r9);
  jnz(tok, T_NEAR);
}

void GemmKQuantRows::row_block_prep() {
  setup();
  lea(rW, scr(kWBase));
  mov(rSb, S_);
  Label sbl;
  L(sbl);
  transcode();
  advance();
  add(rW, 8 * kWRec);
  dec(rSb);
  jnz(sbl, T_NEAR);
}

// The 16 rows of group rGroup for the tile's m tokens: per super-block, the sub-blocks' terms
// are summed before d_x is applied once.
void GemmKQuantRows::body(int m) {
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

}  // namespace zenmoe::x64
