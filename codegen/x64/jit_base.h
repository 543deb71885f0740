// Shared pieces of the xbyak GEMV generators: write-xor-execute code buffer, stack frame,
// row-group bounds and the write-back of a group's outputs into y[r0 .. r1).
#pragma once

#include <xbyak/xbyak.h>

#include <cstdint>
#include <functional>

#include "codegen/kernel.h"
#include "codegen/kernel_desc.h"
#include "kernels/status.h"

namespace zenmoe::x64 {

// The vgf2p8affineqb matrix that moves bits [from, from + n) of every byte to [to, to + n)
// and clears the others: result bit i is the parity of (matrix byte 7 - i) AND the source
// byte, so byte 7 - (to + j) holds bit from + j.
constexpr uint64_t gfni_move_bits(int from, int to, int n) {
  uint64_t m = 0;
  for (int j = 0; j < n; ++j) m |= uint64_t{1} << (8 * (7 - (to + j)) + from + j);
  return m;
}
// Q5_0: bit j of the fifth-bit bytes to bit 4 (j = c for chunk c's low nibbles, 4 + c for
// its high nibbles).
inline constexpr uint64_t kQ5_0Gfni[8] = {gfni_move_bits(0, 4, 1), gfni_move_bits(1, 4, 1), gfni_move_bits(2, 4, 1),
                                          gfni_move_bits(3, 4, 1), gfni_move_bits(4, 4, 1), gfni_move_bits(5, 4, 1),
                                          gfni_move_bits(6, 4, 1), gfni_move_bits(7, 4, 1)};
// Q5_K with GFNI: the pieces of the last three codes (q5k_last_code), in the order
// q5k_last_code_gfni reads them: code 0 from c0 and c1, code 1 from c1, c2 and c3, code 2
// from c3 and c4.
inline constexpr uint64_t kQ5KGfni[7] = {gfni_move_bits(5, 0, 3), gfni_move_bits(5, 3, 2), gfni_move_bits(7, 0, 1),
                                         gfni_move_bits(5, 1, 3), gfni_move_bits(5, 4, 1), gfni_move_bits(6, 0, 2),
                                         gfni_move_bits(5, 2, 3)};

// Q4_K x Q8_K (the pair layout of kernels/pack.h): the permutation tables that transpose one
// Q8_K super-block's 64 dwords into V[2m] (lanes 0-7) and V[2m+1] (lanes 8-15) of register m
// (idx[m]: lane l takes dword 8 * (l % 4) + 2m + l / 8 of a two-register table, lanes with
// l % 8 < 4 from sub-blocks 0-3, the others from 4-7, so lane s of V[j] holds dword j of
// sub-block s), and the widening of V[j] into W[j], lane l = 2s + h taking lane s of V[j]:
// widen[l] = l / 2 (V[j] alone), widen_hi[l] = 8 + l / 2 (V[2m+1] from register m).
struct Q8KPrepIndex {
  alignas(64) int32_t idx[4][16];
  alignas(64) int32_t widen[16];
  alignas(64) int32_t widen_hi[16];
};

// Machine code generated into a buffer that is writable while generating and only
// readable + executable afterwards (never both writable and executable).
class JitKernelBase : public Xbyak::CodeGenerator, public KernelCode {
 public:
  // `hint`: the instruction of the weight stream's software prefetches (prefetch_weights).
  explicit JitKernelBase(size_t max_bytes, PrefetchHint hint = PrefetchHint::kT0)
      : Xbyak::CodeGenerator(max_bytes, Xbyak::DontSetProtectRWE), nta_(hint == PrefetchHint::kNta) {}
  // Flips the buffer to read + execute. Call once, after the last instruction.
  Status seal();
  void run(const GemvCall& c) const override { fn_(&c); }
  const uint8_t* code() const override { return getCode(); }
  size_t code_size() const override { return getSize(); }

 protected:
  // Offsets of GemvCall fields (kernel.h pins them with static_asserts).
  static constexpr int kArgW = 0, kArgX = 8, kArgY = 16, kArgR0 = 24, kArgR1 = 32, kArgAlpha = 40,
                       kArgQ8Out = 48;

  // Pushes the callee-saved registers, points rbp at them and reserves `frame_bytes` of
  // 64-byte aligned stack at rsp, touching every page on the way down.
  void enter_frame(int64_t frame_bytes);
  void leave_frame();
  // group = r0 / R and group_end = ceil(r1 / R), from the call record in `args`.
  void group_bounds(const Xbyak::Reg64& args, int row_block, const Xbyak::Reg64& group,
                    const Xbyak::Reg64& group_end);
  // rax = group * rows (the group's first row); rcx, rdx = the bounds of the call's [r0, r1)
  // (read at args + kArgR0 / kArgR1) inside the group, clamped to [0, rows]. Clobbers r11.
  void group_row_bounds(const Xbyak::Reg64& args, const Xbyak::Reg64& group, int rows);
  // k2 = lanes [rcx, rdx) as group_row_bounds leaves them. Clobbers rdx and r11.
  void lanes_mask_k2();
  // Copies tmp[i] (floats at `tmp`) to y[group*R + i] for the rows of this group inside
  // [r0, r1); with `accumulate`, y += alpha * tmp. Clobbers rax, rcx, rdx, r11, xmm0, xmm1, xmm2.
  void write_rows(const Xbyak::Reg64& args, const Xbyak::Reg64& group, int row_block,
                  const Xbyak::Address& tmp_base, bool accumulate);
  // AVX-512 kernels with R = row_block (<= 16) rows per group: stores lane i of `acc` to
  // y[group*R + i] for the rows inside [r0, r1) with a k2 write mask (y += alpha * acc when
  // `accumulate`). Clobbers rax, rcx, rdx, r11, k2 and `tmp`.
  void store_lanes(const Xbyak::Reg64& args, const Xbyak::Reg64& group, int row_block, const Xbyak::Zmm& acc,
                   const Xbyak::Zmm& tmp, bool accumulate);
  // The vpternlogd immediate of the bitwise function f(dst, src2, src3) (each bit 0 or 1).
  template <typename F>
  static constexpr uint8_t ternlog_imm(F f) {
    uint8_t imm = 0;
    for (int i = 0; i < 8; ++i)
      if (f((i >> 2) & 1, (i >> 1) & 1, i & 1)) imm |= uint8_t(1u << i);
    return imm;
  }
  // Q5_0 (kernels/pack.h): chunk c of a record as code bytes with the fifth bit in bit 4, the
  // low nibbles' codes into `lo` (which holds the chunk) and the high nibbles' into `hi`, from
  // the record's fifth bits in `fifth`; m0f and m10 hold the bytes 0x0F and 0x10. Clobbers t.
  void q5_0_codes(const Xbyak::Zmm& lo, const Xbyak::Zmm& hi, const Xbyak::Zmm& fifth, const Xbyak::Zmm& t,
                  const Xbyak::Zmm& m0f, const Xbyak::Zmm& m10, int c) {
    constexpr uint8_t kOr = ternlog_imm([](int a, int b, int mask) { return (a & mask) | b; });
    vpsrlw(hi, lo, 4);
    vpslld(t, fifth, 4 - c);  // bit c of each byte to bit 4
    vpandd(t, t, m10);
    vpternlogd(lo, t, m0f, kOr);
    if (c > 0) {
      vpsrld(t, fifth, c);  // bit 4 + c to bit 4
      vpandd(t, t, m10);
    } else {
      vpandd(t, fifth, m10);
    }
    vpternlogd(hi, t, m0f, kOr);
  }
  // The same with GFNI (desc.gfni): each fifth bit put in place by one affine transform of the
  // fifth-bit bytes, `mat_lo` and `mat_hi` holding kQ5_0Gfni[c] and [4 + c] in every qword
  // (registers, or broadcast memory operands). m10 is not needed.
  void q5_0_codes_gfni(const Xbyak::Zmm& lo, const Xbyak::Zmm& hi, const Xbyak::Zmm& fifth, const Xbyak::Zmm& t,
                       const Xbyak::Zmm& m0f, const Xbyak::Operand& mat_lo, const Xbyak::Operand& mat_hi) {
    constexpr uint8_t kOr = ternlog_imm([](int a, int b, int mask) { return (a & mask) | b; });
    vpsrlw(hi, lo, 4);
    vgf2p8affineqb(t, fifth, mat_lo, 0);
    vpternlogd(lo, t, m0f, kOr);
    vgf2p8affineqb(t, fifth, mat_hi, 0);
    vpternlogd(hi, t, m0f, kOr);
  }
  // Code k of the last three, each piece moved into place by one affine transform (m[j] holds
  // kQ5KGfni[j] in every qword) and the pieces joined: 10 operations for the three codes
  // against 14. c are registers; dst, t and t2 differ from them and are clobbered.
  void q5k_last_code_gfni(int k, const Xbyak::Zmm& dst, const Xbyak::Zmm* c, const Xbyak::Zmm& t,
                          const Xbyak::Zmm& t2, const Xbyak::Zmm* m) {
    constexpr uint8_t kOr3 = ternlog_imm([](int x, int y, int z) { return x | y | z; });
    if (k == 0) {
      vgf2p8affineqb(dst, c[0], m[0], 0);
      vgf2p8affineqb(t, c[1], m[1], 0);
      vpord(dst, dst, t);
    } else if (k == 1) {
      vgf2p8affineqb(dst, c[1], m[2], 0);
      vgf2p8affineqb(t, c[2], m[3], 0);
      vgf2p8affineqb(t2, c[3], m[4], 0);
      vpternlogd(dst, t, t2, kOr3);
    } else {
      vgf2p8affineqb(dst, c[3], m[5], 0);
      vgf2p8affineqb(t, c[4], m[6], 0);
      vpord(dst, dst, t);
    }
  }
  // Broadcasts each of `mats` into the registers `dst` (one qword per matrix). Clobbers rax.
  void load_gfni_matrices(const uint64_t* mats, int n, const Xbyak::Zmm* dst) {
    for (int j = 0; j < n; ++j) {
      mov(rax, mats[j]);
      vpbroadcastq(dst[j], rax);
    }
  }
  // Q4_K (kernels/pack.h): 64 bytes, the dword right shift 4s of lane l = 2s + h that brings
  // the high bits of its min (bits 4s..4s+3 of the pair's 32-bit word h, broadcast as a
  // 64-bit pair of words) to the bottom of the lane; then 8 dwords of 63, the 6-bit mask.
  static const int32_t* q4k_scale_constants();
  // The tables of Q8KPrepIndex (above the class).
  static const Q8KPrepIndex* q8k_prep_index();
  // The transpose above for the super-block at x (its qs at x + 4): register m of `v` gets
  // V[2m] and V[2m+1]. `table` holds q8k_prep_index()->idx, k1 = 0xF0F0; xs (4) and t0, t1
  // are clobbered.
  void q8k_transpose(const Xbyak::Reg64& x, const Xbyak::Reg64& table, const Xbyak::Zmm* xs, const Xbyak::Zmm* v,
                     const Xbyak::Zmm& t0, const Xbyak::Zmm& t1) {
    using Xbyak::util::ptr;
    for (int i = 0; i < 4; ++i) vmovdqu32(xs[i], ptr[x + 4 + 64 * i]);
    for (int m = 0; m < 4; ++m) {
      vmovdqa32(t0, ptr[table + 64 * m]);
      vmovdqa32(t1, t0);
      vpermi2d(t0, xs[0], xs[1]);
      vpermi2d(t1, xs[2], xs[3]);
      vpblendmd(v[m] | Xbyak::util::k1, t0, t1);
    }
  }
  // After q8k_transpose: the super-block's bsum pairs (lanes 2s and 2s + 1 both bsums[2s] +
  // bsums[2s + 1], the bsums at x + 260) to `bsums`, and its d to `d`. t0, t1 are clobbered,
  // and r11.
  void q8k_bsum_pairs_and_d(const Xbyak::Reg64& x, const Xbyak::Address& bsums, const Xbyak::Address& d,
                            const Xbyak::Zmm& t0, const Xbyak::Zmm& t1) {
    using Xbyak::util::ptr;
    vpmovsxwd(t0, ptr[x + 260]);
    vpshufd(t1, t0, 0xB1);
    vpaddd(t0, t0, t1);
    vmovdqa32(bsums, t0);
    mov(Xbyak::util::r11d, dword[x]);
    mov(d, Xbyak::util::r11d);
  }
  // Q6_K: the byte masks 0x03, 0x0F and 0x3F in every byte (q6k_last_codes). Clobbers eax.
  void q6k_masks(const Xbyak::Zmm& m03, const Xbyak::Zmm& m0f, const Xbyak::Zmm& m3f) {
    using Xbyak::util::eax;
    mov(eax, 0x03030303);
    vpbroadcastd(m03, eax);
    mov(eax, 0x0F0F0F0F);
    vpbroadcastd(m0f, eax);
    mov(eax, 0x3F3F3F3F);
    vpbroadcastd(m3f, eax);
  }
  // Q6_K: -32 * bsums of every sub-block as int32, 16 a super-block, for the S super-blocks of
  // the Q8_K row at x, to 64-byte aligned out (the bias of the 6-bit codes). x, out and cnt are
  // advanced / clobbered, zero and t too.
  void q6k_code_biases(const Xbyak::Reg64& x, const Xbyak::Reg64& out, const Xbyak::Reg64& cnt, int S,
                       const Xbyak::Zmm& zero, const Xbyak::Zmm& t) {
    using Xbyak::util::ptr;
    mov(cnt, S);
    vpxord(zero, zero, zero);
    Xbyak::Label loop;
    L(loop);
    vpmovsxwd(t, ptr[x + 260]);
    vpslld(t, t, 5);
    vpsubd(t, zero, t);
    vmovdqa32(ptr[out], t);
    add(x, 292);
    add(out, 64);
    dec(cnt);
    jnz(loop, T_NEAR);
  }
  // Row block 8: four pair accumulators acc[0..3] (lane 2s + h: row 2p + h, sub-block s)
  // folded together into the eight row sums in lanes 0..7 of `out`, without a trip through
  // memory. k3 must hold 0x3333; t[0..4] are clobbered.
  void fold_four_pairs(const Xbyak::Zmm* acc, const Xbyak::Zmm& out, const Xbyak::Zmm (&t)[5]) {
    using Xbyak::util::k3;
    // Sum each accumulator's 128-bit quarters: quarter p of out holds pair p's (even, odd,
    // even, odd) partial sums.
    vshuff32x4(t[0], acc[0], acc[1], 0x44);
    vshuff32x4(t[1], acc[0], acc[1], 0xEE);
    vaddps(t[0], t[0], t[1]);
    vshuff32x4(t[2], acc[2], acc[3], 0x44);
    vshuff32x4(t[3], acc[2], acc[3], 0xEE);
    vaddps(t[2], t[2], t[3]);
    vshuff32x4(t[1], t[0], t[2], 0x88);
    vshuff32x4(t[3], t[0], t[2], 0xDD);
    vaddps(out, t[1], t[3]);
    // Fold the two 64-bit halves of each quarter, then pack lanes 0, 1 of every quarter.
    vpermilps(t[4], out, 0x4E);
    vaddps(out, out, t[4]);
    vcompressps(out | k3 | Xbyak::util::T_z, out);
  }
  // Q6_K (kernels/pack.h): the last four codes of a sub-block, one per byte (0..63), from the
  // top bits of its three chunks a, b, c (registers or memory):
  //   dst = a >> 6 | (b >> 4 & 0x0C) | (c >> 2 & 0x30)
  // with word shifts, two selects and a mask. m03, m0f, m3f hold those byte masks in every
  // byte. dst and t must differ from a, b, c; t is clobbered.
  void q6k_last_codes(const Xbyak::Zmm& dst, const Xbyak::Operand& a, const Xbyak::Operand& b,
                      const Xbyak::Operand& c, const Xbyak::Zmm& t, const Xbyak::Zmm& m03,
                      const Xbyak::Zmm& m0f, const Xbyak::Zmm& m3f) {
    constexpr uint8_t kSelect = ternlog_imm([](int x, int y, int m) { return m ? x : y; });
    vpsrlw(dst, a, 6);
    vpsrlw(t, b, 4);
    vpternlogd(dst, t, m03, kSelect);
    vpsrlw(t, c, 2);
    vpternlogd(dst, t, m0f, kSelect);
    vpandd(dst, dst, m3f);
  }
  // Q5_K (kernels/pack.h): code k (0..2) of a sub-block's last three, one per byte (0..31),
  // from the top bits of its five chunks c[0..4] (registers or memory):
  //   k = 0: c0 >> 5 (bits 0-2) | c1 >> 2 (bits 3-4)
  //   k = 1: c1 >> 7 (bit 0) | c2 >> 4 (bits 1-3) | c3 >> 1 (bit 4)
  //   k = 2: c3 >> 6 (bits 0-1) | c4 >> 3 (bits 2-4)
  // with word shifts, selects and a mask. m[j] holds the byte mask 2^(j+1) - 1 (0x01, 0x03,
  // 0x07, 0x0F, 0x1F) in every byte. dst and t must differ from the chunks; t is clobbered.
  void q5k_last_code(int k, const Xbyak::Zmm& dst, const Xbyak::Operand* const* c, const Xbyak::Zmm& t,
                     const Xbyak::Zmm* m) {
    constexpr uint8_t kSelect = ternlog_imm([](int x, int y, int mask) { return mask ? x : y; });
    if (k == 0) {
      vpsrlw(dst, *c[0], 5);
      vpsrlw(t, *c[1], 2);
      vpternlogd(dst, t, m[2], kSelect);
    } else if (k == 1) {
      vpsrlw(dst, *c[1], 7);
      vpsrlw(t, *c[2], 4);
      vpternlogd(dst, t, m[0], kSelect);
      vpsrlw(t, *c[3], 1);
      vpternlogd(dst, t, m[3], kSelect);
    } else {
      vpsrlw(dst, *c[3], 6);
      vpsrlw(t, *c[4], 3);
      vpternlogd(dst, t, m[1], kSelect);
    }
    vpandd(dst, dst, m[4]);
  }
  // Software prefetch of a streamed record, spread over the work on it: the kernel calls this
  // once per step t = 0 .. steps-1 of a record and it prefetches lines [t*lines/steps,
  // (t+1)*lines/steps) of the record `distance` bytes past `base`. Issued as one burst per
  // record the prefetches fill the core's miss buffers and stall it: Q5_K and Q6_K GEMVs
  // streamed 7-20 % faster from DRAM at one thread spread this way (AVX2: 23-31 %). Nothing
  // when `distance` is 0.
  void prefetch_share(const Xbyak::Reg64& base, int distance, int lines, int t, int steps) {
    prefetch_share([&](int64_t off) { return ptr[base + off]; }, distance, lines, t, steps);
  }
  // The same, for a record whose address `at(off)` gives (a side of stream_groups).
  template <typename At>
  void prefetch_share(const At& at, int distance, int lines, int t, int steps) {
    if (distance == 0) return;
    for (int i = t * lines / steps; i < (t + 1) * lines / steps; ++i) prefetch_weights(at(distance + 64 * int64_t{i}));
  }
  // One software prefetch of the weight stream: prefetchnta or prefetcht0 (descriptor's hint).
  void prefetch_weights(const Xbyak::Address& a) {
    if (nta_) prefetchnta(a);
    else prefetcht0(a);
  }
  // The thread's row groups [group, group_end) streamed `streams` at a time (1, 2 or 4): the
  // groups split into that many equal runs walked side by side; with 4, the rest (fewer than
  // 4) in two runs side by side where there are 2 or 3 of them; then what is left one at a
  // time. `body(ns)` emits the work on ns groups side by side: group
  // `group` and, for ns > 1, the groups `delta` bytes of packed weights apart (delta is set
  // here to the run length times `group_stride`). `finish(s, g)` emits the write-back of
  // side s, whose group index is in register g. Uses two qwords at rsp + slot; clobbers rax
  // and `g`. A run is at least one group, so a single group takes the one-at-a-time loop.
  // `start(ns)`, when given, runs once before the first group is read, ns being the sides of
  // the first walk (delta already set): `streams`, 2, or 1 for a range too short for 2.
  void stream_groups(int streams, int64_t group_stride, const Xbyak::Reg64& group,
                     const Xbyak::Reg64& group_end, const Xbyak::Reg64& delta, const Xbyak::Reg64& g,
                     int64_t slot, const std::function<void(int)>& body,
                     const std::function<void(int, const Xbyak::Reg64&)>& finish,
                     const std::function<void(int)>& start = {});
  // The address `off` bytes into side s (0..3) of the groups stream_groups walks: base +
  // s * delta, with base2 = base + 2 * delta kept by the kernel for sides 2 and 3.
  static Xbyak::Address stream_addr(const Xbyak::Reg64& base, const Xbyak::Reg64& base2, const Xbyak::Reg64& delta,
                                    int s, int64_t off) {
    using Xbyak::util::ptr;
    switch (s) {
      case 0: return ptr[base + off];
      case 1: return ptr[base + delta + off];
      case 2: return ptr[base2 + off];
      default: return ptr[base2 + delta + off];
    }
  }
  void store_lanes16(const Xbyak::Reg64& args, const Xbyak::Reg64& group, const Xbyak::Zmm& acc,
                     const Xbyak::Zmm& tmp, bool accumulate) {
    store_lanes(args, group, 16, acc, tmp, accumulate);
  }

 private:
  GemvFn fn_ = nullptr;
  bool nta_ = false;
};

}  // namespace zenmoe::x64
