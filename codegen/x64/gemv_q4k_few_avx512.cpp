// Q4_K x Q8_K for a few tokens at once (AVX-512 VNNI, row block 8), over the GEMV's pair
// layout (kernels/pack.h): the GEMV kernel hands it its GemmCalls of several tokens (the
// runtime sends 2 to 11 tokens that way; more go to the GEMM, which transcodes each row block
// once for all its tokens).
//
// Passes of m = 1..4 tokens: each code vector of a row pair is loaded and split into nibbles
// once and then multiplied into every token's sums, and the scales and mins of the pair are
// unpacked once, so the weights stream from memory once per pass instead of once per token.
// Every token's activations are prepared once per call in the GEMV's form, already widened
// (W[j], lane 2s + h holding dword j of sub-block s; 512 bytes a super-block), with the bsum
// pairs beside them: the vpdpbusd take them straight from memory (L1 or L2).
// Per token the integer sums, scales, conversions and FMAs are the GEMV's own operations in
// its order, and the row sums are folded and stored as it folds and stores them: each token's
// outputs are bit for bit what the GEMV gives for it alone. (The high nibbles are shifted
// down before the product instead of masked in place, as the GEMV does with two sums per
// pair: the integer sum is the same.)
// Calls of more than 4 tokens run passes of 2 to 4 tokens (few_tokens.h), the rows of each
// pass after the first coming from cache when the caller tiles them (runtime/fast_matmul.cpp).
#include <algorithm>
#include <cstddef>
#include <memory>

#include "codegen/x64/few_tokens.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int R = 8, P = 4;  // rows per group, row pairs per group
constexpr int kQ8KBytes = 292;
// Per super-block and token: W[0..7] (512 bytes), then the 16 bsum-pair dwords.
constexpr int kTokBytes = 576, kTokBsums = 512;
// Row groups follow each other without padding: the record pointer runs on into the next.
static_assert(R * kQ4KPackedRowBytes % 64 == 0);

class FewTokensQ4K : public FewTokensKernel {
 public:
  explicit FewTokensQ4K(const KernelDesc& d) : FewTokensKernel(d, 96 * 1024), S_(d.cols / 256) {}

 private:
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rRow = r14;
  const Reg64 rPw = r8, rPx = r9, rCnt = r10, rW = rsi;
  // zmm0-15: the float sums of token t, pair p at zAcc(t, p).
  const Zmm zI[kFewMaxTokens] = {zmm16, zmm17, zmm18, zmm19};
  const Zmm zV = zmm20, zLo = zmm21, zHi = zmm22, zS = zmm23, zM = zmm24, zT = zmm25;
  const Zmm zDd = zmm26, zDm = zmm27, zM0F = zmm28, zT2 = zmm29, zT3 = zmm30;
  static Zmm zAcc(int t, int p) { return Zmm(t * P + p); }

  int64_t group_stride() const { return (int64_t{S_} * R * kQ4KPackedRowBytes + 63) / 64 * 64; }
  // Frame: m tokens' activations (super-block after super-block), the d floats of every token
  // (S each), then d and dmin times each token's d (64 bytes a token) and the scale constants.
  int64_t d_offset(int m) const { return int64_t{S_} * m * kTokBytes; }
  int64_t dsc_offset(int m) const { return d_offset(m) + (int64_t{S_} * m * 4 + 63) / 64 * 64; }
  int64_t cst_offset(int m) const { return dsc_offset(m) + 64 * m; }
  void emit_pass(int m) override;
  void prep(int m);
  void superblock(int m);
  void pair(int m, int p);
  void store(int m);

  int S_;
};

void FewTokensQ4K::emit_pass(int m) {
  enter_frame(cst_offset(m) + 128);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep(m);
  group_bounds(rArgs, R, rGroup, rGroupEnd);
  mov(rW, qword[rArgs + kArgW]);
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, 0x3333);
  kmovw(k3, eax);
  mov(rax, reinterpret_cast<uintptr_t>(q4k_scale_constants()));
  vmovdqa32(zT, ptr[rax]);
  vmovdqu32(ptr[rsp + cst_offset(m)], zT);
  vmovdqa32(Ymm(zT.getIdx()), ptr[rax + 64]);
  vmovdqu32(ptr[rsp + cst_offset(m) + 64], Ymm(zT.getIdx()));
  // The first lines of the stream, which the super-block loop's prefetches skip.
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, rW);
  for (int64_t off = 0; off < std::min<int64_t>(d_.prefetch, 8192); off += 64) prefetch_weights(ptr[rPc + off]);
  Label group;
  L(group);
  for (int t = 0; t < m; ++t)
    for (int p = 0; p < P; ++p) vpxord(zAcc(t, p), zAcc(t, p), zAcc(t, p));
  mov(rPw, rsp);
  lea(rPx, ptr[rsp + d_offset(m)]);
  mov(rCnt, S_);
  Label sb;
  L(sb);
  superblock(m);
  add(rPc, R * kQ4KPackedRowBytes);
  add(rPw, m * kTokBytes);
  add(rPx, 4);
  dec(rCnt);
  jnz(sb, T_NEAR);
  store(m);
  // Groups are contiguous: rPc is already at the next one.
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(group, T_NEAR);
  L(done);
  leave_frame();
}

// Each token's super-blocks: V[j] as the GEMV prepares them, widened into W[j]; the bsum
// pairs (lanes 2s and 2s + 1 both bsums[2s] + bsums[2s + 1]); d.
void FewTokensQ4K::prep(int m) {
  const Zmm zX[4] = {zmm0, zmm1, zmm2, zmm3}, zVr[4] = {zmm4, zmm5, zmm6, zmm7};
  const Zmm zWl = zmm8, zWh = zmm9, zT0 = zmm10, zT1 = zmm11;
  mov(eax, 0xF0F0);
  kmovw(k1, eax);
  mov(rax, reinterpret_cast<uintptr_t>(q8k_prep_index()));
  vmovdqa32(zWl, ptr[rax + offsetof(Q8KPrepIndex, widen)]);
  vmovdqa32(zWh, ptr[rax + offsetof(Q8KPrepIndex, widen_hi)]);
  for (int t = 0; t < m; ++t) {
    mov(rPx, qword[rArgs + kPX + 8 * t]);
    lea(rPw, ptr[rsp + t * kTokBytes]);
    lea(rdx, ptr[rsp + d_offset(m) + int64_t{t} * S_ * 4]);
    mov(rCnt, S_);
    Label loop;
    L(loop);
    q8k_transpose(rPx, rax, zX, zVr, zT0, zT1);
    for (int r = 0; r < 4; ++r) {
      vpermd(zT0, zWl, zVr[r]);
      vmovdqa32(ptr[rPw + 64 * (2 * r)], zT0);
      vpermd(zT0, zWh, zVr[r]);
      vmovdqa32(ptr[rPw + 64 * (2 * r + 1)], zT0);
    }
    q8k_bsum_pairs_and_d(rPx, ptr[rPw + kTokBsums], dword[rdx], zT0, zT1);
    add(rPx, kQ8KBytes);
    add(rPw, m * kTokBytes);
    add(rdx, 4);
    dec(rCnt);
    jnz(loop, T_NEAR);
  }
}

void FewTokensQ4K::superblock(int m) {
  // d of rows 0..7, then dmin of rows 0..7, times each token's d (as the GEMV's row block 8).
  vcvtph2ps(zT2, ptr[rPc + q4k_d_offset(R)]);
  for (int t = 0; t < m; ++t) {
    vbroadcastss(zT3, ptr[rPx + int64_t{t} * S_ * 4]);
    vmulps(zT, zT2, zT3);
    vmovaps(ptr[rsp + dsc_offset(m) + 64 * t], zT);
  }
  const int lines = static_cast<int>((R * kQ4KPackedRowBytes + 63) / 64);
  for (int p = 0; p < P; ++p) {
    prefetch_share(rPc, d_.prefetch, lines, p, P);
    pair(m, p);
  }
}

void FewTokensQ4K::pair(int m, int p) {
  for (int t = 0; t < m; ++t) vpxord(zI[t], zI[t], zI[t]);
  for (int c = 0; c < 4; ++c) {
    vmovdqu32(zV, ptr[rPc + p * 256 + 64 * c]);
    vpandd(zLo, zV, zM0F);
    vpsrlw(zHi, zV, 4);
    vpandd(zHi, zHi, zM0F);
    for (int t = 0; t < m; ++t) {
      vpdpbusd(zI[t], zLo, ptr[rPw + t * kTokBytes + 64 * c]);
      vpdpbusd(zI[t], zHi, ptr[rPw + t * kTokBytes + 64 * (c + 4)]);
    }
  }
  // Scales and mins (kernels/pack.h): sc = a & 63, m = (a >> 6 | (word h >> 4s) << 2) & 63.
  const int64_t sc_at = q4k_scales_offset(R) + kQ4KPairScaleBytes * p;
  const int64_t cst = cst_offset(m);
  vpmovzxbd(zS, ptr[rPc + sc_at]);
  vpsrld(zLo, zS, 6);
  vpandd(zS, zS, ptr_b[rsp + cst + 64]);
  vpbroadcastq(zM, ptr[rPc + sc_at + 16]);
  vpsrlvd(zM, zM, ptr[rsp + cst]);
  vpslld(zM, zM, 2);
  vpternlogd(zM, zLo, ptr_b[rsp + cst + 64], ternlog_imm([](int a, int b, int c) { return (a | b) & c; }));
  for (int t = 0; t < m; ++t) {
    vpmulld(zI[t], zI[t], zS);
    vpmaddwd(zT, zM, ptr[rPw + t * kTokBytes + kTokBsums]);
    vbroadcastsd(zDd, ptr[rsp + dsc_offset(m) + 64 * t + 8 * p]);
    vbroadcastsd(zDm, ptr[rsp + dsc_offset(m) + 64 * t + 32 + 8 * p]);
    vcvtdq2ps(zI[t], zI[t]);
    vcvtdq2ps(zT, zT);
    vfmadd231ps(zAcc(t, p), zI[t], zDd);
    vfnmadd231ps(zAcc(t, p), zT, zDm);
  }
}

// Each token's row sums into its y (y += alpha * sums when accumulating), rows inside
// [r0, r1) only, as the GEMV's store_lanes writes them.
void FewTokensQ4K::store(int m) {
  group_row_bounds(rArgs, rGroup, R);
  mov(rRow, rax);
  lanes_mask_k2();
  for (int t = 0; t < m; ++t) {
    const Zmm acc[P] = {zAcc(t, 0), zAcc(t, 1), zAcc(t, 2), zAcc(t, 3)};
    fold_four_pairs(acc, zV, {zLo, zHi, zS, zM, zT});
    store_token(t, rRow, zV, zT);
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_few_avx512(const KernelDesc& d) {
  if (d.isa < isa::IsaLevel::kAvx512Vnni || d.row_block != R ||
      (d.op != KernelOp::kGemv && d.op != KernelOp::kGemvAccumulate))
    return Error{canonical_name(d) + ": the few-token Q4_K kernel needs AVX-512 VNNI, row block 8 and a plain GEMV op"};
  auto k = std::make_unique<FewTokensQ4K>(d);
  ZENMOE_RETURN_IF_ERROR(k->build());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
