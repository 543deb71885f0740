// Q5_K x Q8_K GEMV for AVX2 (no AVX-512, no VNNI) over the row-block-16 Q5_K layout of
// kernels/pack.h, the same 2880-byte super-block records the AVX-512 kernel reads. Each
// record is walked twice, once per ymm half (rows 0-7, then 8-15; the second pass hits L1),
// so one half's whole state fits the 16 ymm registers.
// Per sub-block pair (s, s + 4) and fifth-bit chunk j: the 5-bit codes are rebuilt from the
// low-nibble chunk 8s + j and bit s / s + 4 of the fifth-bit chunk, and dotted with the
// broadcast activation dword by vpmaddubsw (codes unsigned). Four chunks' words sum in int16
// (4 * 2 * 31 * 128 = 31744 < 2^15); vpmaddwd against (sc, sc) word pairs then applies the
// 6-bit scale and widens in one step. The mins meet the Q8_K bsum pairs by vpmaddwd of
// (m, m) against the broadcast (bsums[2s], bsums[2s + 1]) dword, so nothing is prepared per
// call. The float tail is the AVX-512 kernel's, so both give the same bits.
#include <memory>

#include "codegen/x64/avx2_rows16.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ8KBytes = 292, kQ8KBsums = 260, kRecord = 2880;
constexpr int kSc = 2560, kMin = 2688, kD = 2816, kDmin = 2848;

class GemvQ5KAvx2 : public Avx2Rows16Kernel {
 public:
  explicit GemvQ5KAvx2(const KernelDesc& d) : Avx2Rows16Kernel(d), S_(d.cols / 256) {}
  void generate() { emit_kernel(0, int64_t{S_} * kRecord); }

 private:
  const Ymm yV = ymm0, yH = ymm1, yL = ymm2, yT = ymm3, yX = ymm4, yM0F = ymm5, yM10 = ymm6;
  const Ymm yW0 = ymm7, yW1 = ymm8, yScA = ymm9, yScB = ymm10, yIs = ymm11, yIm = ymm12;

  void group_body() override;
  void superblock();
  void half(int h);
  void chunk(int s, int j, int h);
  void mins_and_tail(int h);

  int S_;
};

void GemvQ5KAvx2::group_body() {
  broadcast_const(yM0F, 0x0F0F0F0F);
  broadcast_const(yM10, 0x10101010);
  repeat(S_, [this] { superblock(); });
}

void GemvQ5KAvx2::superblock() {
  for (int h = 0; h < 2; ++h) half(h);
  add(rP, kRecord);
  add(rPx, kQ8KBytes);
}

void GemvQ5KAvx2::half(int h) {
  vpxor(yIs, yIs, yIs);
  for (int s = 0; s < 4; ++s) {
    prefetch_share(rP, d_.prefetch, kRecord / 64, 4 * h + s, 8);  // the record's lines, a share per step
    byte_pairs(yScA, ptr[rP + kSc + 16 * s + 8 * h], yT);
    byte_pairs(yScB, ptr[rP + kSc + 16 * (s + 4) + 8 * h], yT);
    for (int j0 = 0; j0 < 8; j0 += 4) {
      vpxor(yW0, yW0, yW0);
      vpxor(yW1, yW1, yW1);
      for (int j = j0; j < j0 + 4; ++j) chunk(s, j, h);
      vpmaddwd(yW0, yW0, yScA);
      vpaddd(yIs, yIs, yW0);
      vpmaddwd(yW1, yW1, yScB);
      vpaddd(yIs, yIs, yW1);
    }
  }
  mins_and_tail(h);
}

// Codes of weights 32s + 4j + t (into yW0) and 32(s + 4) + 4j + t (into yW1), half h.
void GemvQ5KAvx2::chunk(int s, int j, int h) {
  vmovdqu(yV, ptr[rP + q5k_nibble_offset(s, j) + 32 * h]);
  vmovdqu(yH, ptr[rP + q5k_fifth_offset(j) + 32 * h]);
  // Sub-block s: bit s of the fifth-bit byte up to bit 4 (word shifts keep each byte's own
  // bit there; the mask drops what crossed from the neighbour byte).
  vpand(yL, yV, yM0F);
  vpsllw(yT, yH, 4 - s);
  vpand(yT, yT, yM10);
  vpor(yL, yL, yT);
  vpbroadcastd(yX, ptr[rPx + 4 + 32 * s + 4 * j]);
  vpmaddubsw(yL, yL, yX);
  vpaddw(yW0, yW0, yL);
  // Sub-block s + 4: high nibble down to bits 0-3, bit s + 4 down to bit 4.
  vpsrlw(yV, yV, 4);
  vpand(yV, yV, yM0F);
  if (s == 0) {
    vpand(yT, yH, yM10);
  } else {
    vpsrlw(yT, yH, s);
    vpand(yT, yT, yM10);
  }
  vpor(yV, yV, yT);
  vpbroadcastd(yX, ptr[rPx + 4 + 32 * (s + 4) + 4 * j]);
  vpmaddubsw(yV, yV, yX);
  vpaddw(yW1, yW1, yV);
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
