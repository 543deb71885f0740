// F32 / F16 / BF16 GEMV for AVX2 + FMA + F16C over the row-block-16 plain layout of
// kernels/pack.h ([K][16 rows] elements, the bytes the AVX-512 kernel reads): per k, the
// 16 row values are two ymm halves and the activation x[k] one broadcast, acc += w * x.
// Four accumulators per half (k mod 4) hide the FMA latency and are summed as
// (a0 + a1) + (a2 + a3), the AVX-512 kernel's order, so both give the same bits. f16 / bf16
// activations are widened to f32 once per call; bf16 weights by a 16-bit shift (exact, and
// needs no BF16 instructions).
#include <memory>

#include "codegen/x64/avx2_rows16.h"
#include "codegen/x64/generators.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kUnroll = 4;

class GemvPlainAvx2 : public Avx2Rows16Kernel {
 public:
  explicit GemvPlainAvx2(const KernelDesc& d) : Avx2Rows16Kernel(d), fmt_(d.weight), K_(d.cols) {}
  void generate() {
    emit_kernel(f32() ? 0 : K_ * 4, (K_ * kRows * elem_bytes() + 63) / 64 * 64);
  }

 private:
  // acc(u, h) = ymm(2u + h): k mod 4, row half.
  const Ymm yV = ymm8, yX = ymm9;
  static Ymm acc(int u, int h) { return Ymm(2 * u + h); }
  bool f32() const { return fmt_ == GgmlType::F32; }
  int elem_bytes() const { return f32() ? 4 : 2; }
  const Reg64& act() const { return f32() ? rPx : rScr; }

  void prep() override;
  void widen_tail(int64_t n);
  void group_body() override;
  void step(int u, int k_off);
  void load_weights(const Ymm& dst, const Address& src);

  GgmlType fmt_;
  int64_t K_;
};

// Half-precision weights (or activations) at `src` to 8 f32 lanes.
void GemvPlainAvx2::load_weights(const Ymm& dst, const Address& src) {
  if (fmt_ == GgmlType::F16) {
    vcvtph2ps(dst, src);
  } else {
    vpmovzxwd(dst, src);
    vpslld(dst, dst, 16);
  }
}

// f16 / bf16 activations widened to f32 at rsp (F32 is used in place).
void GemvPlainAvx2::prep() {
  if (f32()) return;
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  if (K_ >= 8) {
    repeat(K_ / 8, [this] {
      load_weights(yV, ptr[rPx]);
      vmovaps(ptr[rScr], yV);
      add(rPx, 16);
      add(rScr, 32);
    });
  }
  widen_tail(K_ % 8);
}

void GemvPlainAvx2::widen_tail(int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    movzx(eax, word[rPx + 2 * k]);
    if (fmt_ == GgmlType::F16) {
      vmovd(xmm15, eax);
      vcvtph2ps(xmm15, xmm15);
      vmovss(dword[rScr + 4 * k], xmm15);
    } else {
      shl(eax, 16);
      mov(dword[rScr + 4 * k], eax);
    }
  }
}

void GemvPlainAvx2::group_body() {
  const int row_bytes = kRows * elem_bytes();
  for (int u = 0; u < kUnroll; ++u)
    for (int h = 0; h < 2; ++h) vxorps(acc(u, h), acc(u, h), acc(u, h));
  if (K_ >= kUnroll) {
    repeat(K_ / kUnroll, [this, row_bytes] {
      for (int u = 0; u < kUnroll; ++u) step(u, u);
      if (d_.prefetch != 0)
        for (int i = 0; i < kUnroll * row_bytes / 64; ++i) prefetcht0(ptr[rP + d_.prefetch + 64 * i]);
      add(rP, kUnroll * row_bytes);
      add(act(), kUnroll * 4);
    });
  }
  for (int u = 0; u < K_ % kUnroll; ++u) step(u, u);
  for (int h = 0; h < 2; ++h) {
    vaddps(acc(0, h), acc(0, h), acc(1, h));
    vaddps(acc(2, h), acc(2, h), acc(3, h));
    vaddps(yAcc[h], acc(0, h), acc(2, h));
  }
}

// x[k] times the 16 row values of column k (k_off elements past the loop pointers).
void GemvPlainAvx2::step(int u, int k_off) {
  vbroadcastss(yX, ptr[act() + 4 * k_off]);
  for (int h = 0; h < 2; ++h) {
    if (f32()) {
      vfmadd231ps(acc(u, h), yX, ptr[rP + 64 * k_off + 32 * h]);
    } else {
      load_weights(yV, ptr[rP + 32 * k_off + 16 * h]);
      vfmadd231ps(acc(u, h), yV, yX);
    }
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_plain_avx2(const KernelDesc& d) {
  return finish_kernel(std::make_unique<GemvPlainAvx2>(d));
}

}  // namespace zenmoe::x64
