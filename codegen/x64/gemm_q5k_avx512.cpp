// Q5_K x Q8_K GEMM for AVX-512 VNNI (prefill). The packed Q5_K layout (kernels/pack.h) is
// already one row per 32-bit lane, so a row block's transcode into the records of
// gemm_kquant_rows.h only masks each sub-block's first 20 codes out of its chunks, rebuilds
// the last 12 from the chunks' top bits (JitKernelBase::q5k_last_code), and turns the 6-bit
// scales and mins into d * sc and dmin * m.
#include <memory>

#include "codegen/x64/gemm_kquant_rows.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

// Offsets inside a packed super-block record (kernels/pack.h).
constexpr int kRecord = 2880, kScales = 2560, kMins = 2688, kD = 2816, kDmin = 2848;

class GemmQ5K : public GemmKQuantRows {
 public:
  explicit GemmQ5K(const KernelDesc& d) : GemmKQuantRows(d) {}

 private:
  const Zmm zC[5] = {zmm16, zmm17, zmm18, zmm19, zmm20};
  const Zmm zMask[5] = {zmm24, zmm25, zmm26, zmm27, zmm28};  // 0x01, 0x03, 0x07, 0x0F, 0x1F per byte
  void setup() override;
  void transcode() override;
  void advance() override { add(r9, kRecord); }
};

// r9 = the group's first super-block record.
void GemmQ5K::setup() {
  mov(r9, slot_rb());
  imul(r9, r9, S_ * kRecord);
  add(r9, qword[rArgs + 0]);
  for (int j = 0; j < 5; ++j) {
    mov(eax, 0x01010101u * ((2u << j) - 1));
    vpbroadcastd(zMask[j], eax);
  }
}

void GemmQ5K::transcode() {
  const Operand* chunks[5] = {&zC[0], &zC[1], &zC[2], &zC[3], &zC[4]};
  for (int s = 0; s < 8; ++s) {
    for (int m = 0; m < 5; ++m) {
      vmovdqa32(zC[m], ptr[r9 + q5k_chunk_offset(s, m)]);
      vpandd(zmm0, zC[m], zMask[4]);
      vmovdqa32(ptr[rW + s * kWRec + 64 * m], zmm0);
    }
    for (int k = 0; k < 3; ++k) {
      q5k_last_code(k, zmm0, chunks, zmm1, zMask);
      vmovdqa32(ptr[rW + s * kWRec + 64 * (5 + k)], zmm0);
    }
  }
  vcvtph2ps(zmm3, ptr[r9 + kD]);
  vcvtph2ps(zmm4, ptr[r9 + kDmin]);
  for (int s = 0; s < 8; ++s) {
    vpmovzxbd(zmm0, ptr[r9 + kScales + 16 * s]);
    vcvtdq2ps(zmm0, zmm0);
    vmulps(zmm0, zmm0, zmm3);
    vmovaps(ptr[rW + s * kWRec + kWDsc], zmm0);
    vpmovzxbd(zmm1, ptr[r9 + kMins + 16 * s]);
    vcvtdq2ps(zmm1, zmm1);
    vmulps(zmm1, zmm1, zmm4);
    vmovaps(ptr[rW + s * kWRec + kWDmm], zmm1);
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemm_q5k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemmQ5K>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal_gemm());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
