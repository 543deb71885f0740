// Q8_0 x Q8_0 GEMV for AVX2 (no AVX-512, no VNNI) over the row-block-16 Q8_0 layout of
// kernels/pack.h: a 64-byte chunk holds one activation dword's worth of 4 codes for each of
// the 16 rows, processed as two ymm halves (rows 0-7, 8-15), lane = row.
// vpmaddubsw needs one unsigned operand and would saturate on the biased codes (255 * 127 * 2),
// so the codes are unbiased (xor 0x80) and the sign moves to the activation:
// |q| (vpabsb; -128 gives 128 as unsigned) times x * sign(q) (vpsignb), pairs summed by
// vpmaddubsw (at most 2 * 128 * 127 < 2^15: activations from the Q8_0 quantiser lie in
// [-127, 127]) and widened by vpmaddwd. Per block: acc += float(isum) * (d_w * d_x).
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
constexpr int kRec = static_cast<int>(rows16_record_bytes(GgmlType::Q8_0));

class GemvQ80Avx2 : public Avx2Rows16Kernel {
 public:
  explicit GemvQ80Avx2(const KernelDesc& d) : Avx2Rows16Kernel(d), nb_(d.cols / 32) {}
  void generate() { emit_kernel(int64_t{nb_} * 4, (int64_t{nb_} * kRec + 63) / 64 * 64); }

 private:
  const Ymm yV = ymm0, yA = ymm1, yS = ymm2, y80 = ymm3, yOnes = ymm4, yX = ymm5;
  const Ymm yI[2] = {ymm8, ymm9}, yD = ymm12, yDx = ymm13;

  void prep() override;
  void group_body() override;
  void block(int parity);

  int nb_;
};

// d of every activation block as f32, once per call.
void GemvQ80Avx2::prep() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  repeat(nb_, [this] {
    movzx(eax, word[rPx]);
    vmovd(xmm15, eax);
    vcvtph2ps(xmm15, xmm15);
    vmovss(dword[rScr], xmm15);
    add(rPx, kQ80Bytes);
    add(rScr, 4);
  });
}

void GemvQ80Avx2::group_body() {
  broadcast_const(y80, 0x80808080);
  broadcast_const(yOnes, 0x00010001);
  repeat_blocks(nb_, [this](int parity) { block(parity); });
}

void GemvQ80Avx2::block(int parity) {
  const int64_t codes = rows16_codes_in_record(parity), d = rows16_d_in_record(GgmlType::Q8_0, parity);
  for (const Ymm& i : yI) vpxor(i, i, i);
  for (int c = 0; c < 8; ++c) {
    prefetch_share(rP, d_.prefetch, (kRec + 63) / 64, c, 8);
    vpbroadcastd(yX, ptr[rPx + 2 + 4 * c]);
    for (int h = 0; h < 2; ++h) {
      vpxor(yV, y80, ptr[rP + codes + 64 * c + 32 * h]);  // q = code ^ 0x80
      vpabsb(yA, yV);
      vpsignb(yS, yX, yV);
      vpmaddubsw(yA, yA, yS);
      vpmaddwd(yA, yA, yOnes);
      vpaddd(yI[h], yI[h], yA);
    }
  }
  vbroadcastss(yDx, ptr[rScr]);
  for (int h = 0; h < 2; ++h) add_scaled_block(h, yI[h], ptr[rP + d + 16 * h], yDx, yD);
  add(rP, kRec);
  add(rPx, kQ80Bytes);
  add(rScr, 4);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q80_avx2(const KernelDesc& d) {
  return finish_kernel(std::make_unique<GemvQ80Avx2>(d));
}

}  // namespace zenmoe::x64
