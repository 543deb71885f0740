// F32 / F16 / BF16 GEMV for AVX2 + FMA + F16C over the row-block-16 plain layouts of
// kernels/pack.h (the bytes the AVX-512 kernel reads): per k, the 16 row values are two ymm
// halves and the activation x[k] one broadcast, acc += w * x. Four accumulators per half
// (k mod 4) hide the FMA latency and are summed as (a0 + a1) + (a2 + a3), the AVX-512
// kernel's order below AVX512_BF16, so both give the same bits. f16 / bf16 activations are
// widened to f32 once per call. BF16 weights come in column pairs per 32-bit lane: a 16-bit
// shift widens column 2j and a mask column 2j+1 (exact, and needs no BF16 instructions).
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
    const int64_t group_bytes = pairs() ? (K_ + 1) / 2 * 64 : K_ * kRows * elem_bytes();
    emit_kernel(f32() ? 0 : K_ * 4, (group_bytes + 63) / 64 * 64);
  }

 private:
  // acc(u, h) = ymm(2u + h): k mod 4, row half.
  const Ymm yV = ymm8, yX = ymm9, yX2 = ymm10, yW = ymm11, yMask = ymm12;
  static Ymm acc(int u, int h) { return Ymm(2 * u + h); }
  bool f32() const { return fmt_ == GgmlType::F32; }
  bool pairs() const { return fmt_ == GgmlType::BF16; }
  int elem_bytes() const { return f32() ? 4 : 2; }
  const Reg64& act() const { return f32() ? rPx : rScr; }

  void prep() override;
  void widen_tail(int64_t n);
  void group_body() override;
  void step(int u, int k_off);
  void pair_step(int j_off, bool last_half);
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
  const int row_bytes = kRows * elem_bytes();  // per column; BF16 pairs take 64 bytes per two
  for (int u = 0; u < kUnroll; ++u)
    for (int h = 0; h < 2; ++h) vxorps(acc(u, h), acc(u, h), acc(u, h));
  if (pairs()) broadcast_const(yMask, 0xFFFF0000);
  if (K_ >= kUnroll) {
    repeat(K_ / kUnroll, [this, row_bytes] {
      if (pairs()) {
        pair_step(0, false);
        pair_step(1, false);
      } else {
        for (int u = 0; u < kUnroll; ++u) step(u, u);
      }
      if (d_.prefetch != 0)
        for (int i = 0; i < kUnroll * row_bytes / 64; ++i) prefetch_weights(ptr[rP + d_.prefetch + 64 * i]);
      add(rP, kUnroll * row_bytes);
      add(act(), kUnroll * 4);
    });
  }
  if (pairs()) {
    for (int j = 0; j < K_ % kUnroll / 2; ++j) pair_step(j, false);
    if (K_ % 2 != 0) pair_step(static_cast<int>(K_ % kUnroll / 2), true);
  } else {
    for (int u = 0; u < K_ % kUnroll; ++u) step(u, u);
  }
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

// BF16 column pair j_off past the loop pointers (which sit at a multiple of 4 columns):
// columns 2j and 2j+1 into the accumulators of their k mod 4. last_half: an odd K's last
// pair, whose high column is padding.
void GemvPlainAvx2::pair_step(int j_off, bool last_half) {
  vbroadcastss(yX, ptr[act() + 8 * j_off]);
  if (!last_half) vbroadcastss(yX2, ptr[act() + 8 * j_off + 4]);
  for (int h = 0; h < 2; ++h) {
    vmovdqu(yV, ptr[rP + 64 * j_off + 32 * h]);
    vpslld(yW, yV, 16);
    vfmadd231ps(acc(2 * j_off % kUnroll, h), yW, yX);
    if (last_half) continue;
    vpand(yV, yV, yMask);
    vfmadd231ps(acc((2 * j_off + 1) % kUnroll, h), yV, yX2);
  }
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_plain_avx2(const KernelDesc& d) {
  return finish_kernel(std::make_unique<GemvPlainAvx2>(d));
}

}  // namespace zenmoe::x64
