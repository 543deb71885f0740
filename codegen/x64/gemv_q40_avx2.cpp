// Q4_0 x Q8_0 GEMV for AVX2 (no AVX-512, no VNNI) over the row-block-16 Q4_0 layout of
// kernels/pack.h, the same bytes the AVX-512 VNNI kernel reads: each 64-byte chunk is two
// ymm halves (rows 0-7, 8-15), lane = row. The unbiased 4-bit codes (0..15) are the unsigned
// operand of vpmaddubsw against the broadcast activation dword: a word is at most
// 2 * 15 * 128 = 3840, so the block's eight products per half are summed in int16 without
// overflow (30720 < 2^15) and widened once by vpmaddwd. The bias 8 * sum(x) is subtracted
// per block (precomputed once per call), then acc += float(isum) * (d_w * d_x) as the
// AVX-512 kernel does, so both give the same bits.
#include <memory>

#include "codegen/x64/avx2_rows16.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ80Bytes = 34;
// One record per block: codes and the 16 rows' d, ordered by the block's parity
// (kernels/pack.h).
constexpr int kRec = static_cast<int>(rows16_record_bytes(GgmlType::Q4_0));

class GemvQ40Avx2 : public Avx2Rows16Kernel {
 public:
  explicit GemvQ40Avx2(const KernelDesc& d) : Avx2Rows16Kernel(d), nb_(d.cols / 32) {}
  void generate() { emit_kernel(int64_t{nb_} * 8, (int64_t{nb_} * kRec + 63) / 64 * 64); }

 private:
  const Ymm yV = ymm3, yL = ymm4, yXl = ymm5, yXh = ymm6, yM0F = ymm7, yOnes = ymm8;
  const Ymm yW[2] = {ymm9, ymm10}, yD = ymm11, yDx = ymm12, yB = ymm13;

  void prep() override;
  void group_body() override;
  void block(int parity);

  int nb_;
};

void GemvQ40Avx2::prep() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  emit_q80_sums(*this, rPx, rScr, rCnt, nb_, 8);
}

void GemvQ40Avx2::group_body() {
  broadcast_const(yM0F, 0x0F0F0F0F);
  broadcast_const(yOnes, 0x00010001);
  repeat_blocks(nb_, [this](int parity) { block(parity); });
}

void GemvQ40Avx2::block(int parity) {
  const int64_t codes = rows16_codes_in_record(parity), d = rows16_d_in_record(GgmlType::Q4_0, parity);
  for (const Ymm& w : yW) vpxor(w, w, w);
  for (int c = 0; c < 4; ++c) {
    prefetch_share(rP, d_.prefetch, (kRec + 63) / 64, c, 4);
    vpbroadcastd(yXl, ptr[rPx + 2 + 4 * c]);
    vpbroadcastd(yXh, ptr[rPx + 2 + 16 + 4 * c]);
    for (int h = 0; h < 2; ++h) {
      vmovdqu(yV, ptr[rP + codes + 64 * c + 32 * h]);
      vpand(yL, yV, yM0F);
      vpsrlw(yV, yV, 4);
      vpand(yV, yV, yM0F);
      vpmaddubsw(yL, yL, yXl);
      vpmaddubsw(yV, yV, yXh);
      vpaddw(yW[h], yW[h], yL);
      vpaddw(yW[h], yW[h], yV);
    }
  }
  vpbroadcastd(yB, ptr[rScr]);
  vbroadcastss(yDx, ptr[rScr + 4]);
  for (int h = 0; h < 2; ++h) {
    vpmaddwd(yW[h], yW[h], yOnes);
    vpsubd(yW[h], yW[h], yB);
    add_scaled_block(h, yW[h], ptr[rP + d + 16 * h], yDx, yD);
  }
  add(rP, kRec);
  add(rPx, kQ80Bytes);
  add(rScr, 8);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q40_avx2(const KernelDesc& d) {
  return finish_kernel(std::make_unique<GemvQ40Avx2>(d));
}

}  // namespace zenmoe::x64
