// Q8_0 x Q8_0 and Q5_0 x Q8_0 GEMM for AVX-512 VNNI (prefill), over the row-block-16 layouts
// of kernels/pack.h shared with the GEMV: the 16 rows of a group are the 16 dword lanes, codes
// stored unsigned (Q8_0 biased, q + 128; Q5_0 the 5-bit code, weight = code - 16) so vpdpbusd
// takes them as they are. A Q5_0 block's 8 code vectors are built from its 4 nibble chunks
// and fifth bits as the GEMV builds them (a shift, a mask and a vpternlogd each, or with GFNI
// an affine transform and the vpternlogd, its matrices read from a table after the code), once
// for all N tokens.
//
// Token tiles of N = 10: per block of 32 and token, the tile's activations are copied once
// into scratch (48 bytes: the 32 int8 codes, -128 * sum(codes) as int32, d_x as f32), so
// every activation dword is an embedded-broadcast operand at a fixed offset. Per block the 8
// code chunks and d_w are loaded once and serve all N tokens:
//   I = -bias * sum(x) + sum of 8 vpdpbusd     (exactly the reference's integer dot;
//                                                bias 128 for Q8_0, 16 for Q5_0)
//   acc += float(I) * (d_w * d_x)                (lane = row: no horizontal reduction)
// Ten independent int32 chains cover the vpdpbusd latency at two per cycle.
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

constexpr int kTokens = 10, kActBytes = 48, kActBias = 32, kActD = 36, kQ80Bytes = 34;

class GemmQ80 : public JitGemmBase {
 public:
  explicit GemmQ80(const KernelDesc& d)
      : JitGemmBase(d, kTokens, int64_t{d.cols / 32} * kTokens * kActBytes, 0, kBlockGroups), nb_(d.cols / 32),
        q5_(d.weight == GgmlType::Q5_0), rec_(static_cast<int>(rows16_record_bytes(d.weight))) {}
  void generate() {
    emit();
    if (d_.gfni) {
      align(8);
      L(gfni_table_);
      for (uint64_t m : kQ5_0Gfni) dq(m);
    }
  }

 private:
  const Reg64 rPc = r13, rPa = r15, rCnt = r10;
  const Zmm zDw = zmm8, zT = zmm9;
  const Zmm zM0F = zmm10, zM10 = zmm11;  // Q5_0: the nibble mask and the fifth bit's place
  Zmm code(int c) const { return Zmm(c); }        // zmm0 .. zmm7
  Zmm acc(int t) const { return Zmm(12 + t); }    // zmm12 .. zmm21
  Zmm isum(int t) const { return Zmm(22 + t); }   // zmm22 .. zmm31

  // One record per block: codes (Q5_0: and fifth bits) and the 16 rows' d, ordered by the
  // block's parity (kernels/pack.h).
  int64_t group_stride() const { return (int64_t{nb_} * rec_ + 63) / 64 * 64; }
  void prep() override;
  void body(int m) override;
  void block(int m, int parity);
  void q5_codes(int64_t codes);

  int nb_;
  bool q5_;
  int rec_;
  Label gfni_table_;  // desc.gfni: kQ5_0Gfni
};

void GemmQ80::prep() {
  // rdx = source block, rax = scratch slot; r9 counts tokens, rCnt blocks.
  mov(ecx, 0x80808080);
  vpbroadcastd(ymm2, ecx);
  vpxord(ymm3, ymm3, ymm3);
  mov(r8, slot_t0());
  mov(rPa, slot_act());
  mov(r9, slot_m());
  Label tok, blk;
  L(tok);
  x_row(rdx, r8);
  mov(rax, rPa);
  mov(rCnt, nb_);
  L(blk);
  vmovdqu(ymm0, ptr[rdx + 2]);
  vmovdqu(ptr[rax], ymm0);
  // sum(q + 128) with vpsadbw, then -128 * sum(q) = 128 * (32 * 128 - sum(q + 128)), or
  // -16 * sum(q) for Q5_0.
  vpxor(ymm0, ymm0, ymm2);
  vpsadbw(ymm0, ymm0, ymm3);
  vextracti128(xmm1, ymm0, 1);
  vpaddq(xmm0, xmm0, xmm1);
  vpshufd(xmm1, xmm0, 0x4E);
  vpaddq(xmm0, xmm0, xmm1);
  vmovd(ecx, xmm0);
  neg(ecx);
  add(ecx, 32 * 128);
  shl(ecx, q5_ ? 4 : 7);
  mov(dword[rax + kActBias], ecx);
  movzx(ecx, word[rdx]);
  vmovd(xmm0, ecx);
  vcvtph2ps(xmm0, xmm0);
  vmovss(dword[rax + kActD], xmm0);
  add(rdx, kQ80Bytes);
  add(rax, kTokens * kActBytes);
  dec(rCnt);
  jnz(blk, T_NEAR);
  inc(r8);
  add(rPa, kActBytes);
  dec(r9);
  jnz(tok, T_NEAR);
}

void GemmQ80::body(int m) {
  Label groups, blk;
  L(groups);
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, qword[rArgs + 0]);
  mov(rPa, slot_act());
  for (int t = 0; t < m; ++t) vpxord(acc(t), acc(t), acc(t));
  if (q5_) {
    mov(eax, 0x0F0F0F0F);
    vpbroadcastd(zM0F, eax);
    mov(eax, 0x10101010);
    vpbroadcastd(zM10, eax);
  }
  // Two blocks an iteration (an even one, then an odd one), an odd count's last after.
  const auto step = [&](int parity) {
    block(m, parity);
    add(rPc, rec_);
    add(rPa, kTokens * kActBytes);
  };
  if (nb_ >= 2) {
    mov(rCnt, nb_ / 2);
    L(blk);
    step(0);
    step(1);
    dec(rCnt);
    jnz(blk, T_NEAR);
  }
  if (nb_ % 2 != 0) step(0);
  Zmm accs[kTokens];
  for (int t = 0; t < kTokens; ++t) accs[t] = acc(t);
  store_lanes(m, accs, zT);
  inc(rGroup);
  cmp(rGroup, slot_rb_end());
  jb(groups, T_NEAR);
}

// Q5_0: code(c) = chunk c's low nibbles and code(4 + c) its high nibbles, each with its fifth
// bit (bit c, resp. 4 + c, of the fifth-bit bytes) in bit 4; zDw holds the fifth bits.
void GemmQ80::q5_codes(int64_t codes) {
  vmovdqu32(zDw, ptr[rPc + codes + kQ5_0FifthBits]);
  for (int c = 0; c < 4; ++c) {
    vmovdqu32(code(c), ptr[rPc + codes + q5_0_chunk_offset(c)]);
    if (d_.gfni) {
      q5_0_codes_gfni(code(c), code(4 + c), zDw, zT, zM0F, ptr_b[rip + gfni_table_ + 8 * c],
                      ptr_b[rip + gfni_table_ + 8 * (4 + c)]);
    } else {
      q5_0_codes(code(c), code(4 + c), zDw, zT, zM0F, zM10, c);
    }
  }
}

void GemmQ80::block(int m, int parity) {
  const int64_t codes = rows16_codes_in_record(parity);
  if (q5_) {
    q5_codes(codes);
  } else {
    for (int c = 0; c < 8; ++c) vmovdqu32(code(c), ptr[rPc + codes + 64 * c]);
  }
  vcvtph2ps(zDw, ptr[rPc + rows16_d_in_record(d_.weight, parity)]);
  // The int32 sums start at the bias term (a broadcast load, no ALU work).
  for (int t = 0; t < m; ++t) vpbroadcastd(isum(t), ptr[rPa + kActBytes * t + kActBias]);
  for (int c = 0; c < 8; ++c)
    for (int t = 0; t < m; ++t) vpdpbusd(isum(t), code(c), ptr_b[rPa + kActBytes * t + 4 * c]);
  for (int t = 0; t < m; ++t) {
    vcvtdq2ps(isum(t), isum(t));
    vmulps(zT, zDw, ptr_b[rPa + kActBytes * t + kActD]);
    vfmadd231ps(acc(t), isum(t), zT);
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q80_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ80>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
