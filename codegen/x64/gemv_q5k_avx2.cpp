// Q5_K x Q8_K GEMV for AVX2 (no AVX-512, no VNNI) over the row-block-16 Q5_K layout of
// kernels/pack.h, the same 2880-byte super-block records the AVX-512 kernel reads. Each
// record is walked twice, once per ymm half (rows 0-7, then 8-15; the second pass hits L1),
// so one half's whole state fits the 16 ymm registers.
// Per sub-block: the first 20 codes are one mask per chunk, the last 12 come from the
// chunks' top bits (shifts, masks and vpor, as JitKernelBase::q5k_last_code); each code
// dword is dotted with the broadcast activation dword by vpmaddubsw (codes unsigned). Four
// code dwords' words sum in int16 (4 * 2 * 31 * 128 = 31744 < 2^15); vpmaddwd against
// (sc, sc) word pairs then applies the 6-bit scale and widens in one step. The mins meet
// the Q8_K bsum pairs by vpmaddwd of (m, m) against the broadcast (bsums[2s], bsums[2s + 1])
// dword, so nothing is prepared per call. The float tail is the AVX-512 kernel's, so both
// give the same bits.
#include <memory>

#include "codegen/x64/avx2_rows16.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ8KBytes = 292, kQ8KBsums = 260, kRecord = 2880;
constexpr int kSc = 2560, kMin = 2688, kD = 2816, kDmin = 2848;

// The byte masks of the pieces of the last three codes (GemvQ5KAvx2::last_code), 32 bytes each.
struct alignas(32) Masks {
  uint8_t m[7][32];
  Masks() {
    const uint8_t v[7] = {0x07, 0x18, 0x01, 0x0E, 0x10, 0x03, 0x1C};
    for (int i = 0; i < 7; ++i)
      for (uint8_t& b : m[i]) b = v[i];
  }
};
const Masks kMasks;

class GemvQ5KAvx2 : public Avx2Rows16Kernel {
 public:
  explicit GemvQ5KAvx2(const KernelDesc& d) : Avx2Rows16Kernel(d), S_(d.cols / 256) {}
  void generate() { emit_kernel(0, int64_t{S_} * kRecord); }

 private:
  const Ymm yC[5] = {ymm0, ymm1, ymm2, ymm3, ymm4};
  const Ymm yT = ymm5, yL = ymm6, yX = ymm7, yW0 = ymm8, yW1 = ymm9, yScA = ymm10, yIs = ymm11, yIm = ymm12;
  const Ymm yM1F = ymm13;
  const Reg64 rK = r14;  // the byte masks of last_code

  void group_body() override;
  void superblock();
  void half(int h);
  void subblock(int s, int h);
  void dot(const Ymm& sum, const Ymm& codes, int s, int m);
  void last_code(int k, const Ymm& dst);
  void mins_and_tail(int h);

  int S_;
};

void GemvQ5KAvx2::group_body() {
  broadcast_const(yM1F, 0x1F1F1F1F);
  mov(rK, reinterpret_cast<uintptr_t>(&kMasks));
  repeat(S_, [this] { superblock(); });
}

void GemvQ5KAvx2::superblock() {
  for (int h = 0; h < 2; ++h) half(h);
  add(rP, kRecord);
  add(rPx, kQ8KBytes);
}

void GemvQ5KAvx2::half(int h) {
  vpxor(yIs, yIs, yIs);
  for (int s = 0; s < 8; ++s) {
    prefetch_share(rP, d_.prefetch, kRecord / 64, 8 * h + s, 16);  // the record's lines, a share per step
    subblock(s, h);
  }
  mins_and_tail(h);
}

// Sub-block s, rows 8h .. 8h+7: codes 0-3 sum as words in yW0, codes 4-7 in yW1, then both
// meet the (sc, sc) pairs.
void GemvQ5KAvx2::subblock(int s, int h) {
  for (int m = 0; m < 5; ++m) vmovdqu(yC[m], ptr[rP + q5k_chunk_offset(s, m) + 32 * h]);
  for (int m = 0; m < 5; ++m) {
    vpand(yL, yC[m], yM1F);
    dot(m < 4 ? yW0 : yW1, yL, s, m);
  }
  for (int k = 0; k < 3; ++k) {
    last_code(k, yL);
    dot(yW1, yL, s, 5 + k);
  }
  byte_pairs(yScA, ptr[rP + kSc + 16 * s + 8 * h], yT);
  vpmaddwd(yW0, yW0, yScA);
  vpaddd(yIs, yIs, yW0);
  vpmaddwd(yW1, yW1, yScA);
  vpaddd(yIs, yIs, yW1);
}

// sum (words) = or += codes x activations 4m .. 4m+3 of sub-block s (the first dot of each
// sum sets it).
void GemvQ5KAvx2::dot(const Ymm& sum, const Ymm& codes, int s, int m) {
  vpbroadcastd(yX, ptr[rPx + 4 + 32 * s + 4 * m]);
  if (m == 0 || m == 4) {
    vpmaddubsw(sum, codes, yX);
  } else {
    vpmaddubsw(codes, codes, yX);
    vpaddw(sum, sum, codes);
  }
}

// Code k of the last three (see JitKernelBase::q5k_last_code): each piece shifted into
// place, masked and or'd. Clobbers yT.
void GemvQ5KAvx2::last_code(int k, const Ymm& dst) {
  struct Piece {
    int chunk, shift, mask;
  };
  static constexpr Piece kPieces[3][3] = {{{0, 5, 0}, {1, 2, 1}, {-1, 0, 0}},
                                          {{1, 7, 2}, {2, 4, 3}, {3, 1, 4}},
                                          {{3, 6, 5}, {4, 3, 6}, {-1, 0, 0}}};
  for (int i = 0; i < 3 && kPieces[k][i].chunk >= 0; ++i) {
    const Piece& p = kPieces[k][i];
    const Ymm& out = i == 0 ? dst : yT;
    vpsrlw(out, yC[p.chunk], p.shift);
    vpand(out, out, ptr[rK + 32 * p.mask]);
    if (i > 0) vpor(dst, dst, yT);
  }
}

// sum_s m_s * (bsums[2s] + bsums[2s + 1]), then acc += (d * d8) * isum - (dmin * d8) * imin.
void GemvQ5KAvx2::mins_and_tail(int h) {
  vpxor(yIm, yIm, yIm);
  for (int s = 0; s < 8; ++s) {
    byte_pairs(yScA, ptr[rP + kMin + 16 * s + 8 * h], yT);
    vpbroadcastd(yX, ptr[rPx + kQ8KBsums + 4 * s]);
    vpmaddwd(yScA, yScA, yX);
    vpaddd(yIm, yIm, yScA);
  }
  vbroadcastss(yX, ptr[rPx]);
  vcvtph2ps(yT, ptr[rP + kD + 16 * h]);
  vmulps(yT, yT, yX);
  vcvtph2ps(yL, ptr[rP + kDmin + 16 * h]);
  vmulps(yL, yL, yX);
  vcvtdq2ps(yIs, yIs);
  vcvtdq2ps(yIm, yIm);
  vmulps(yIm, yIm, yL);
  vfmsub231ps(yIm, yIs, yT);
  vaddps(yAcc[h], yAcc[h], yIm);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q5k_avx2(const KernelDesc& d) {
  return finish_kernel(std::make_unique<GemvQ5KAvx2>(d));
}

}  // namespace zenmoe::x64
