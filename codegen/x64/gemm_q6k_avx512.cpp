// Q6_K x Q8_K GEMM for AVX-512 VNNI (prefill), over the row-block-16 Q6_K layout of
// kernels/pack.h shared with the GEMV: the 16 rows of a group are the 16 dword lanes.
//
// Token tiles of N = 8: per super-block and token the tile's activations are copied once into
// scratch (384 bytes: the 256 int8 codes, -32 * bsums[s] as 16 int32, d_x), so every
// activation dword is an embedded-broadcast operand at a fixed offset. Per super-block and
// sub-block s (16 weights), the 6-bit codes (q + 32, 0..63) of its 4 dwords per row are
// rebuilt once (a mask each for the first 12, JitKernelBase::q6k_last_codes for the last 4)
// and serve all N tokens:
//   I = -32 * bsum_s + sum of 4 vpdpbusd            (the exact integer sub-block dot)
//   sb += float(I) * (sc_s * d_w)                    (sc * d is exact in f32)
//   acc += sb * d_x                                  (once per super-block)
// Lane = row: no horizontal reduction.
#include <memory>

#include "codegen/x64/gemm_jit.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

// Row groups of 16 per row block: the block's weights are reused by every tile of a token
// block (kernels/x64/gemm_jit.h).
constexpr int kBlockGroups = 2;

constexpr int kTokens = 8, kQ8KBytes = 292, kQ8KBsums = 260;
constexpr int kActBytes = 384, kActBias = 256, kActD = 320;  // per super-block and token

class GemmQ6K : public JitGemmBase {
 public:
  explicit GemmQ6K(const KernelDesc& d)
      : JitGemmBase(d, kTokens, int64_t{d.cols / 256} * kTokens * kActBytes, 0, kBlockGroups), S_(d.cols / 256) {}
  void generate() { emit(); }

 private:
  const Reg64 rPlo = r13, rPd = r9, rPa = r8, rCnt = rsi;
  const Zmm zA = zmm0, zB = zmm1, zM0F = zmm2, zM3F = zmm3, zDw = zmm4, zScd = zmm5, zT = zmm6, zM03 = zmm7;
  Zmm acc(int t) const { return Zmm(8 + t); }    // zmm8 .. zmm15
  Zmm sb(int t) const { return Zmm(16 + t); }    // zmm16 .. zmm23
  Zmm isum(int t) const { return Zmm(24 + t); }  // zmm24 .. zmm31

  int64_t group_stride() const { return int64_t{S_} * 3392; }
  void prep() override;
  void body(int m) override;
  void superblock(int m);
  void code(int s, int j);

  int S_;
};

void GemmQ6K::prep() {
  mov(r11, slot_t0());
  mov(rPa, slot_act());
  mov(r9, slot_m());
  vpxord(zT, zT, zT);
  Label tok, blk;
  L(tok);
  x_row(rdx, r11);
  mov(rax, rPa);
  mov(r10, S_);
  L(blk);
  for (int i = 0; i < 4; ++i) {
    vmovdqu32(zA, ptr[rdx + 4 + 64 * i]);
    vmovdqa32(ptr[rax + 64 * i], zA);
  }
  vpmovsxwd(zA, ptr[rdx + kQ8KBsums]);
  vpslld(zA, zA, 5);
  vpsubd(zA, zT, zA);
  vmovdqa32(ptr[rax + kActBias], zA);
  vmovss(xmm1, dword[rdx]);
  vmovss(dword[rax + kActD], xmm1);
  add(rdx, kQ8KBytes);
  add(rax, kTokens * kActBytes);
  dec(r10);
  jnz(blk, T_NEAR);
  inc(r11);
  add(rPa, kActBytes);
  dec(r9);
  jnz(tok, T_NEAR);
}

void GemmQ6K::body(int m) {
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, 0x3F3F3F3F);
  vpbroadcastd(zM3F, eax);
  mov(eax, 0x03030303);
  vpbroadcastd(zM03, eax);
  Label groups, sbl;
  L(groups);
  mov(rPlo, rGroup);
  imul(rPlo, rPlo, static_cast<int>(group_stride()));
  add(rPlo, qword[rArgs + 0]);
  lea(rPd, ptr[rPlo + kQ6KDOffset]);
  mov(rPa, slot_act());
  for (int t = 0; t < m; ++t) vpxord(acc(t), acc(t), acc(t));
  mov(rCnt, S_);
  L(sbl);
  superblock(m);
  add(rPlo, 3392);
  add(rPd, 3392);
  add(rPa, kTokens * kActBytes);
  dec(rCnt);
  jnz(sbl, T_NEAR);
  Zmm accs[kTokens];
  for (int t = 0; t < kTokens; ++t) accs[t] = acc(t);
  store_lanes(m, accs, zT);
  inc(rGroup);
  cmp(rGroup, slot_rb_end());
  jb(groups, T_NEAR);
}

// zA = the 6-bit codes of weights 4j .. 4j+3 of sub-block s, one byte each.
void GemmQ6K::code(int s, int j) {
  const auto chunk = [&](int m) { return ptr[rPlo + q6k_chunk_offset(s, m)]; };
  if (j < 3) vpandd(zA, zM3F, chunk(j));
  else q6k_last_codes(zA, chunk(0), chunk(1), chunk(2), zB, zM03, zM0F, zM3F);
}

void GemmQ6K::superblock(int m) {
  vcvtph2ps(zDw, ptr[rPd]);
  for (int t = 0; t < m; ++t) vpxord(sb(t), sb(t), sb(t));
  for (int s = 0; s < 16; ++s) {
    for (int t = 0; t < m; ++t) vpbroadcastd(isum(t), ptr[rPa + kActBytes * t + kActBias + 4 * s]);
    for (int j = 0; j < 4; ++j) {
      code(s, j);
      for (int t = 0; t < m; ++t) vpdpbusd(isum(t), zA, ptr_b[rPa + kActBytes * t + 16 * s + 4 * j]);
    }
    vpmovsxbd(zScd, ptr[rPlo + q6k_scale_offset(s)]);
    vcvtdq2ps(zScd, zScd);
    vmulps(zScd, zScd, zDw);
    for (int t = 0; t < m; ++t) {
      vcvtdq2ps(isum(t), isum(t));
      vfmadd231ps(sb(t), isum(t), zScd);
    }
  }
  for (int t = 0; t < m; ++t) vfmadd231ps(acc(t), sb(t), ptr_b[rPa + kActBytes * t + kActD]);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q6k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ6K>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
