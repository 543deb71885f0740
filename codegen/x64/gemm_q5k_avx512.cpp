// Q5_K x Q8_K GEMM for AVX-512 VNNI (prefill). The packed Q5_K layout (kernels/pack.h) is
// already one row per 32-bit lane, so a row block's transcode into the records of
// gemm_kquant_rows.h only joins each code's low nibble and fifth bit into a byte and turns
// the 6-bit scales and mins into d * sc and dmin * m.
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
  const Zmm zM0F = zmm24, zM10 = zmm25;
  Zmm fifth(int j) const { return Zmm(16 + j); }
  void setup() override;
  void transcode() override;
  void advance() override { add(r9, kRecord); }
  void join(const Zmm& nib, int j, int s);
};

// r9 = the group's first super-block record.
void GemmQ5K::setup() {
  mov(r9, slot_rb());
  imul(r9, r9, S_ * kRecord);
  add(r9, qword[rArgs + 0]);
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, 0x10101010);
  vpbroadcastd(zM10, eax);
}

// Record chunk j of sub-block s: the nibbles in `nib` (bits 0-3, clobbered) with bit s of
// the fifth-bit chunk j moved to bit 4. Word shifts of at most 4 keep every bit in its byte.
void GemmQ5K::join(const Zmm& nib, int j, int s) {
  if (s < 4) vpsllw(zmm2, fifth(j), static_cast<uint8_t>(4 - s));
  else if (s > 4) vpsrlw(zmm2, fifth(j), static_cast<uint8_t>(s - 4));
  vpandd(zmm2, s == 4 ? fifth(j) : zmm2, zM10);
  vpandd(nib, nib, zM0F);
  vpord(nib, nib, zmm2);
  vmovdqa32(ptr[rW + s * kWRec + 64 * j], nib);
}

void GemmQ5K::transcode() {
  for (int j = 0; j < 8; ++j) vmovdqa32(fifth(j), ptr[r9 + q5k_fifth_offset(j)]);
  for (int s = 0; s < 4; ++s)
    for (int j = 0; j < 8; ++j) {
      vmovdqa32(zmm0, ptr[r9 + q5k_nibble_offset(s, j)]);
      vpsrlw(zmm1, zmm0, 4);
      join(zmm0, j, s);
      join(zmm1, j, s + 4);
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
