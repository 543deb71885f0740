// GEMV for the row-block-16 layouts of kernels/pack.h (Q8_0, Q4_0, Q5_0, F32, F16, BF16): the 16
// rows of a group are the 16 lanes of a zmm register, so no horizontal reduction is ever
// needed and each activation element (or dword of 4 int8) is a broadcast memory operand.
//   Q8_0 / Q4_0 / Q5_0 x Q8_0: vpdpbusd of the unsigned packed codes (q + 128, resp. the 4-bit
//     or 5-bit code) with the broadcast activation dword; the bias times sum(x) is subtracted
//     per block (precomputed once per call), then acc += float(isum) * (d_w * d_x), lane = row.
//     Q5_0 puts each chunk's fifth bits into bit 4 of its codes' bytes: a shift, a mask and a
//     vpternlogd per half chunk, or with GFNI (desc.gfni) one affine transform and the
//     vpternlogd, from 7 vector operations per chunk to 5 (L2-resident at 1 thread, Kimi expert
//     shapes: 91 -> 105 GB/s at 7168 -> 2048, 94 -> 111 at 2048 -> 7168).
//   F32 / F16: acc += w[k][rows] * x[k], four accumulators (k mod 4) for FMA latency; f16
//     activations are widened to f32 once per call.
//   BF16 (column pairs, one 64-byte load per pair): with AVX512_BF16 one vdpbf16ps per pair
//     against the broadcast activation pair, accumulator j mod 4 for pair j. Below that level
//     the pair's columns are widened in place, column 2j by a 16-bit shift and 2j+1 by a mask
//     (both exact), into the accumulators k mod 4 of the F32 / F16 order against activations
//     widened once per call: half the widening instructions of a column-major layout, and the
//     AVX2 kernel's order, so both give the same bits.
// Software prefetch: `prefetch` bytes ahead, one line per `prefetch_stride` bytes of the weight
// stream (every line when 0); the loop is unrolled to one stride, so the stride costs one
// prefetch instruction per iteration and leaves the summation order as it was.
// With desc.streams = 2 or 4: that many groups side by side, a block (Q8_0 / Q4_0) or a k step
// (plain formats) of each in turn (JitKernelBase::stream_groups), each with its own
// prefetches and accumulators.
#include <algorithm>
#include <memory>

#include "codegen/x64/avx2_rows16.h"
#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kUnroll = 4;

class GemvRows16 : public JitKernelBase {
 public:
  explicit GemvRows16(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d),
        fmt_(d.weight), acc_(d.op == KernelOp::kGemvAccumulate), ns_(d.streams) {}
  void generate();

 private:
  // Quantised formats with desc.streams > 1: group t of the side-by-side streams starts at
  // rPc + t * rD (rPc2 = rPc + 2 * rD), its sum in zAcc[t].
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rPx = r15, rD = r14, rPc2 = r9;
  const Reg64 rScr = r8, rCnt = r10, rW = rsi;
  const Zmm zAcc[kUnroll] = {zmm0, zmm1, zmm2, zmm3};
  // Plain formats: stream t's kUnroll accumulators (stream 0's are zAcc).
  static Zmm plain_acc(int t, int u) { return Zmm(t == 0 ? u : 13 + kUnroll * (t - 1) + u); }
  const Zmm zV = zmm4, zLo = zmm5, zHi = zmm6, zI = zmm7, zI2 = zmm8, zD = zmm9, zT = zmm10;
  const Zmm zM0F = zmm11, zMF0 = zmm12;
  const Zmm zHiMask = zmm7;  // BF16 below AVX512_BF16: 0xFFFF0000 per lane (zI is a quant register)
  // Q5_0 with GFNI: the matrices kQ5_0Gfni (the plain formats' zmm13.. are unused).
  const Zmm zGfni[8] = {zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23};

  bool quant() const { return is_block32_format(fmt_); }
  int64_t nblocks() const { return d_.cols / 32; }
  int code_bytes() const { return static_cast<int>(rows16_code_bytes(fmt_)); }
  int record_bytes() const { return static_cast<int>(rows16_record_bytes(fmt_)); }
  int elem_bytes() const { return fmt_ == GgmlType::F32 ? 4 : 2; }
  bool pairs() const { return fmt_ == GgmlType::BF16; }
  // BF16 pairs by vdpbf16ps straight from the bf16 activation row (AVX512_BF16).
  bool dot_pairs() const { return pairs() && d_.isa >= isa::IsaLevel::kAvx512Bf16; }
  // Bytes of one k step of a plain group: a column, or for BF16 a column pair.
  int step_bytes() const { return pairs() ? 64 : kRows * elem_bytes(); }
  // k steps of a plain group: columns, or BF16 column pairs (an odd K's last one half used).
  int64_t plain_steps() const { return pairs() ? (d_.cols + 1) / 2 : d_.cols; }
  int64_t scratch_bytes() const;
  int64_t group_stride() const;
  void prep_quant();
  void prep_plain();
  void quant_block(int t, int parity);
  void quant_step(int ns, int parity);
  void quant_loop(int ns);
  Address rec(int t, int64_t off) const;
  int stride() const { return d_.prefetch == 0 ? 0 : std::max<int>(64, d_.prefetch_stride); }
  void plain_step(int t, int k_off);
  void pair_step(int t, int j_off, bool last_half);
  void plain_loop(int ns);
  void store_group(int t, const Reg64& g);

  KernelDesc d_;
  GgmlType fmt_;
  bool acc_;
  int ns_;
};

int64_t GemvRows16::scratch_bytes() const {
  if (quant()) return (nblocks() * 8 + 63) / 64 * 64;
  if (fmt_ == GgmlType::F32 || dot_pairs()) return 64;
  return (int64_t{d_.cols} * 4 + 63) / 64 * 64;
}

int64_t GemvRows16::group_stride() const {
  const int64_t raw = quant() ? nblocks() * record_bytes() : plain_steps() * step_bytes();
  return (raw + 63) / 64 * 64;
}

void GemvRows16::generate() {
  const int64_t slot = scratch_bytes();
  enter_frame(slot + 64);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  if (quant()) prep_quant(); else prep_plain();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  mov(rW, qword[rArgs + kArgW]);
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, fmt_ == GgmlType::Q5_0 ? 0x10101010 : 0xF0F0F0F0);  // Q5_0: the fifth bit's place
  vpbroadcastd(zMF0, eax);
  if (d_.gfni) load_gfni_matrices(kQ5_0Gfni, 8, zGfni);
  auto body = [&](int ns) {
    mov(rPc, rGroup);
    imul(rPc, rPc, static_cast<int>(group_stride()));
    add(rPc, rW);
    if (ns > 2) lea(rPc2, ptr[rPc + rD * 2]);
    mov(rPx, qword[rArgs + kArgX]);
    mov(rScr, rsp);
    if (quant()) {
      for (const Zmm& a : zAcc) vpxord(a, a, a);
      quant_loop(ns);
    } else {
      for (int t = 0; t < ns; ++t)
        for (int u = 0; u < kUnroll; ++u) vpxord(plain_acc(t, u), plain_acc(t, u), plain_acc(t, u));
      plain_loop(ns);
    }
  };
  stream_groups(ns_, group_stride(), rGroup, rGroupEnd, rD, rdx, slot, body, [&](int t, const Reg64& g) {
    if (quant()) {
      store_lanes16(rArgs, g, zAcc[t], zT, acc_);
    } else {
      store_group(t, g);
    }
  });
  L(done);
  leave_frame();
}

Address GemvRows16::rec(int t, int64_t off) const { return stream_addr(rPc, rPc2, rD, t, off); }

// Per Q8_0 activation block: bias * sum(q) as int32 and d as f32 (8 bytes of scratch).
void GemvRows16::prep_quant() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  emit_q80_sums(*this, rPx, rScr, rCnt, nblocks(), fmt_ == GgmlType::Q8_0 ? 128 : fmt_ == GgmlType::Q5_0 ? 16 : 8);
}

// f16 / bf16 activations widened to f32 in scratch (F32 is used in place). BF16 by
// vdpbf16ps reads the row in place; an odd K's last column is copied to scratch as the pair
// (x[K-1], 0) so that no load reaches past the row.
void GemvRows16::prep_plain() {
  if (fmt_ == GgmlType::F32) return;
  mov(rPx, qword[rArgs + kArgX]);
  if (dot_pairs()) {
    if (d_.cols % 2 != 0) {
      movzx(eax, word[rPx + 2 * (d_.cols - 1)]);
      mov(dword[rsp], eax);
    }
    return;
  }
  if (pairs()) {
    mov(eax, 0xFFFF0000);
    vpbroadcastd(zHiMask, eax);
  }
  const int64_t full = d_.cols / 16;
  for (int64_t i = 0; i < full; ++i) {
    if (fmt_ == GgmlType::F16) {
      vcvtph2ps(zV, ptr[rPx + 32 * i]);
    } else {
      vpmovzxwd(zV, ptr[rPx + 32 * i]);
      vpslld(zV, zV, 16);
    }
    vmovaps(ptr[rsp + 64 * i], zV);
  }
  for (int64_t k = full * 16; k < d_.cols; ++k) {
    movzx(eax, word[rPx + 2 * k]);
    if (fmt_ == GgmlType::F16) {
      vmovd(xmm15, eax);
      vcvtph2ps(xmm15, xmm15);
      vmovss(dword[rsp + 4 * k], xmm15);
    } else {
      shl(eax, 16);
      mov(dword[rsp + 4 * k], eax);
    }
  }
}

// The block of stream t at the loop pointers; `parity` is its index's (the order of its
// record, kernels/pack.h).
void GemvRows16::quant_block(int t, int parity) {
  vpxord(zI, zI, zI);
  vpxord(zI2, zI2, zI2);
  // Every line prefetched (stride 64): the record's lines spread over its chunks.
  const int every = stride() == 64 ? d_.prefetch : 0;
  const int lines = (record_bytes() + 63) / 64;
  const auto at = [&](int64_t off) { return rec(t, off); };
  const int64_t codes = rows16_codes_in_record(parity);
  if (fmt_ == GgmlType::Q8_0) {
    for (int c = 0; c < 8; ++c) {
      prefetch_share(at, every, lines, c, 8);
      vmovdqu32(zV, rec(t, codes + 64 * c));
      vpdpbusd(c % 2 ? zI2 : zI, zV, ptr_b[rPx + 2 + 4 * c]);
    }
  } else if (fmt_ == GgmlType::Q5_0) {
    // Low nibble | fifth bit (bit c of the fifth-bit bytes moved to bit 4), and the same for the
    // high nibble (bit 4 + c); zD holds the fifth bits until d is loaded.
    vmovdqu32(zD, rec(t, codes + kQ5_0FifthBits));
    for (int c = 0; c < 4; ++c) {
      prefetch_share(at, every, lines, c, 4);
      vmovdqu32(zV, rec(t, codes + q5_0_chunk_offset(c)));
      if (d_.gfni) {
        q5_0_codes_gfni(zV, zHi, zD, zT, zM0F, zGfni[c], zGfni[4 + c]);
      } else {
        q5_0_codes(zV, zHi, zD, zT, zM0F, zMF0, c);
      }
      vpdpbusd(zI, zV, ptr_b[rPx + 2 + 4 * c]);
      vpdpbusd(zI2, zHi, ptr_b[rPx + 2 + 16 + 4 * c]);
    }
  } else {
    // High nibbles masked in place (16x the code), shifted back once per block.
    for (int c = 0; c < 4; ++c) {
      prefetch_share(at, every, lines, c, 4);
      vmovdqu32(zV, rec(t, codes + 64 * c));
      vpandd(zLo, zV, zM0F);
      vpdpbusd(zI, zLo, ptr_b[rPx + 2 + 4 * c]);
      vpandd(zHi, zV, zMF0);
      vpdpbusd(zI2, zHi, ptr_b[rPx + 2 + 16 + 4 * c]);
    }
    vpsrad(zI2, zI2, 4);
  }
  vpaddd(zI, zI, zI2);
  vpsubd(zI, zI, ptr_b[rScr]);
  vcvtdq2ps(zI, zI);
  vcvtph2ps(zD, rec(t, rows16_d_in_record(fmt_, parity)));
  vmulps(zD, zD, ptr_b[rScr + 4]);
  vfmadd231ps(zAcc[t], zI, zD);
}

// One block of each of the ns groups, then every pointer on to the next block.
void GemvRows16::quant_step(int ns, int parity) {
  for (int t = 0; t < ns; ++t) quant_block(t, parity);
  add(rPc, record_bytes());
  if (ns > 2) add(rPc2, record_bytes());
  add(rPx, 34);
  add(rScr, 8);
}

// The block records of one row group, a single stream. Every line prefetched: two blocks
// per iteration, the prefetches inside quant_block. A larger stride: the even number of
// blocks nearest one stride per iteration, one prefetched line each, the rest unrolled after
// the loop. An even count per iteration keeps each block's parity fixed in the code.
void GemvRows16::quant_loop(int ns) {
  const int s = stride();
  const int per = s > 64 ? std::max(1, (s + record_bytes()) / (2 * record_bytes())) * 2 : 2;
  const int64_t iters = nblocks() / per, tail = nblocks() % per;
  if (iters > 0) {
    Label blk;
    mov(rCnt, iters);
    L(blk);
    if (s > 64)
      for (int t = 0; t < ns; ++t) prefetch_weights(rec(t, d_.prefetch));
    for (int b = 0; b < per; ++b) quant_step(ns, b % 2);
    dec(rCnt);
    jnz(blk, T_NEAR);
  }
  for (int64_t b = 0; b < tail; ++b) quant_step(ns, static_cast<int>(b % 2));
}

// One k step of stream t (k_off steps past the loop pointers, which start each iteration at
// a multiple of kUnroll columns): a column into accumulator k_off mod 4, or a BF16 pair.
void GemvRows16::plain_step(int t, int k_off) {
  if (pairs()) return pair_step(t, k_off, false);
  const Zmm acc = plain_acc(t, k_off % kUnroll);
  if (fmt_ == GgmlType::F32) {
    vmovups(zV, rec(t, int64_t{k_off} * 64));
    vfmadd231ps(acc, zV, ptr_b[rPx + 4 * k_off]);
  } else {
    if (fmt_ == GgmlType::F16) {
      vcvtph2ps(zV, rec(t, int64_t{k_off} * 32));
    } else {
      vpmovzxwd(zV, rec(t, int64_t{k_off} * 32));
      vpslld(zV, zV, 16);
    }
    vfmadd231ps(acc, zV, ptr_b[rScr + 4 * k_off]);
  }
}

// Column pair j_off of stream t (loop pointers at an even pair, a multiple of 4 columns).
// last_half: an odd K's last pair, whose high column is padding.
void GemvRows16::pair_step(int t, int j_off, bool last_half) {
  const Address w = rec(t, int64_t{j_off} * 64);
  if (dot_pairs()) {
    vmovdqu32(zV, w);
    // Pairs come from the activation row (rPx), an odd K's last one from scratch.
    vdpbf16ps(plain_acc(t, j_off % kUnroll), zV, last_half ? ptr_b[rsp] : ptr_b[rPx + 4 * j_off]);
    return;
  }
  vpslld(zV, w, 16);
  vfmadd231ps(plain_acc(t, (2 * j_off) % kUnroll), zV, ptr_b[rScr + 8 * j_off]);
  if (last_half) return;
  vpandd(zLo, zHiMask, w);
  vfmadd231ps(plain_acc(t, (2 * j_off + 1) % kUnroll), zLo, ptr_b[rScr + 8 * j_off + 4]);
}

// kUnroll k steps per iteration, or more so an iteration covers one prefetch stride; one
// line prefetched per stride, the leftover k steps unrolled after the loop. With ns streams,
// each k step is taken for every stream in turn, each into its own accumulators.
void GemvRows16::plain_loop(int ns) {
  const int row_bytes = step_bytes();
  const int s = stride();
  const int body = std::max(s, kUnroll * row_bytes);
  const int steps = body / row_bytes;  // BF16: an even count, so every iteration starts at k % 4 == 0
  const bool odd = pairs() && d_.cols % 2 != 0;
  const int64_t full = plain_steps() - (odd ? 1 : 0);
  const int64_t iters = full / steps, tail = full % steps;
  const Reg64& rAct = fmt_ == GgmlType::F32 || dot_pairs() ? rPx : rScr;
  // Activation bytes per step: an f32 column, an f32 column pair, or a bf16 pair.
  const int act_step = pairs() && !dot_pairs() ? 8 : 4;
  if (iters > 0) {
    Label loop;
    mov(rCnt, iters);
    L(loop);
    for (int u = 0; u < steps; ++u)
      for (int t = 0; t < ns; ++t) plain_step(t, u);
    if (s != 0)
      for (int t = 0; t < ns; ++t)
        for (int i = 0; i < body / s; ++i) prefetch_weights(rec(t, int64_t{d_.prefetch} + int64_t{s} * i));
    add(rPc, body);
    if (ns > 2) add(rPc2, body);
    add(rAct, steps * act_step);
    dec(rCnt);
    jnz(loop, T_NEAR);
  }
  for (int u = 0; u < tail; ++u)
    for (int t = 0; t < ns; ++t) plain_step(t, u);
  if (odd)
    for (int t = 0; t < ns; ++t) pair_step(t, static_cast<int>(tail), true);
}

// Stream t's accumulators summed (the same order for every stream count); lanes are the
// group's rows: mask to [r0, r1) and store (or accumulate) directly.
void GemvRows16::store_group(int t, const Reg64& g) {
  vaddps(plain_acc(t, 0), plain_acc(t, 0), plain_acc(t, 1));
  vaddps(plain_acc(t, 2), plain_acc(t, 2), plain_acc(t, 3));
  vaddps(plain_acc(t, 0), plain_acc(t, 0), plain_acc(t, 2));
  store_lanes16(rArgs, g, plain_acc(t, 0), zT, acc_);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_rows16_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemvRows16>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
