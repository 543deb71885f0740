// AVX-512 epilogue of the fused gate+up kernels (see swiglu_q8k.h) and its scalar model.
// Q8_K (spec §2.9): amax = the first element of largest magnitude, iscale = -127 / max,
// q = min(nearest_int(iscale * h), 127) with the 1.5 * 2^23 rounding trick, d = 1 / iscale,
// bsums = sums of 16 codes; a block of zeros when amax is 0.
#include "codegen/x64/swiglu_q8k.h"

#include <xbyak/xbyak.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/isa.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;
using namespace Xbyak::util;

// Polynomial of exp on [-ln2/2, ln2/2]: Taylor coefficients 1/k!, k = 7 down to 0.
constexpr float kExpPoly[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// exp(-g) is evaluated at t = clamp(-g, -100, 100): beyond, 1 + exp(-g) is 1 or +inf in
// float either way (exp(100) overflows after scaling, exp(-100) vanishes against 1).
constexpr float kClamp = 100.0f;

struct alignas(64) Consts {
  int32_t even[16], odd[16];  // deinterleave gate (even) / up (odd) of two vectors
  int64_t even_q[8];          // qwords 0, 2, ..., 14 of two vectors
  float poly[8];
  float log2e = kLog2e, ln2_hi = kLn2Hi, ln2_lo = kLn2Lo, lo = -kClamp, hi = kClamp, one = 1.0f;
  float minus127 = -127.0f, magic = 12582912.0f;
  int32_t sign = static_cast<int32_t>(0x80000000), abs_mask = 0x7FFFFFFF, mant = 0x007FFFFF, half = 0x00400000, q127 = 127, x80 = static_cast<int32_t>(0x80808080);
  int64_t bias2048 = 2048;
  Consts() {
    for (int i = 0; i < 16; ++i) {
      even[i] = 2 * i;
      odd[i] = 2 * i + 1;
    }
    for (int i = 0; i < 8; ++i) {
      even_q[i] = 2 * i;
      poly[i] = kExpPoly[i];
    }
  }
};
const Consts kC;

#define OFF(field) static_cast<int>(offsetof(Consts, field))

class Emitter {
 public:
  Emitter(CodeGenerator& g, const Reg64& gu, const Reg64& out) : g_(g), gu_(gu), out_(out) {}
  void emit();

 private:
  Address c(int off) { return g_.ptr_b[rax + off]; }
  void swiglu(int i);
  void horizontal_max();
  void find_max_and_scales(Label& zero);
  void quantise();
  void bsums();
  void zero_block();

  CodeGenerator& g_;
  Reg64 gu_, out_;
  const Zmm zA = zmm0, zB = zmm1, zG = zmm2, zU = zmm3, zT = zmm4, zN = zmm5, zR = zmm6, zP = zmm7;
  const Zmm zAmax = zmm8, zIs = zmm9, zAbs = zmm10, zTmp = zmm11;
};

void Emitter::emit() {
  Label zero, end;
  g_.mov(rax, reinterpret_cast<uintptr_t>(&kC));
  g_.vpxord(zAmax, zAmax, zAmax);
  for (int i = 0; i < 16; ++i) swiglu(i);
  horizontal_max();
  find_max_and_scales(zero);
  quantise();
  bsums();
  g_.jmp(end, CodeGenerator::T_NEAR);
  g_.L(zero);
  zero_block();
  g_.L(end);
}

// h for outputs 16i .. 16i+15, stored over gu[16i ..] (already read), and the running
// max of |h| (vmaxps returns its second operand for a NaN first one, as `ax > amax` skips it).
void Emitter::swiglu(int i) {
  g_.vmovaps(zA, g_.ptr[gu_ + 128 * i]);
  g_.vmovaps(zB, g_.ptr[gu_ + 128 * i + 64]);
  g_.vmovdqa32(zG, g_.ptr[rax + OFF(even)]);
  g_.vpermi2ps(zG, zA, zB);
  g_.vmovdqa32(zU, g_.ptr[rax + OFF(odd)]);
  g_.vpermi2ps(zU, zA, zB);
  // t = clamp(-g); n = nearest(t * log2e); r = t - n ln2 (two steps); p(r); e = p * 2^n.
  g_.vxorps(zT, zG, c(OFF(sign)));
  g_.vmaxps(zT, zT, c(OFF(lo)));
  g_.vminps(zT, zT, c(OFF(hi)));
  g_.vmulps(zN, zT, c(OFF(log2e)));
  g_.vrndscaleps(zN, zN, 0x08);  // round to nearest even, no precision exception
  g_.vmovaps(zR, zT);
  g_.vfnmadd231ps(zR, zN, c(OFF(ln2_hi)));
  g_.vfnmadd231ps(zR, zN, c(OFF(ln2_lo)));
  g_.vbroadcastss(zP, g_.ptr[rax + OFF(poly)]);
  for (int k = 1; k < 8; ++k) g_.vfmadd213ps(zP, zR, c(OFF(poly) + 4 * k));  // p = p * r + c_k
  g_.vscalefps(zP, zP, zN);
  g_.vaddps(zP, zP, c(OFF(one)));
  g_.vdivps(zG, zG, zP);
  g_.vmulps(zG, zG, zU);
  g_.vmovaps(g_.ptr[gu_ + 64 * i], zG);
  g_.vandps(zAbs, zG, c(OFF(abs_mask)));
  g_.vmaxps(zAmax, zAbs, zAmax);
}

void Emitter::horizontal_max() {
  g_.vshuff32x4(zTmp, zAmax, zAmax, 0x4E);
  g_.vmaxps(zAmax, zAmax, zTmp);
  g_.vshuff32x4(zTmp, zAmax, zAmax, 0xB1);
  g_.vmaxps(zAmax, zAmax, zTmp);
  g_.vpermilps(zTmp, zAmax, 0x4E);
  g_.vmaxps(zAmax, zAmax, zTmp);
  g_.vpermilps(zTmp, zAmax, 0xB1);
  g_.vmaxps(zAmax, zAmax, zTmp);  // every lane holds amax
}

// max = the first h with |h| == amax; iscale = -127 / max broadcast; d = 1 / iscale stored.
void Emitter::find_max_and_scales(Label& zero) {
  Label scan, found;
  g_.vxorps(xmm12, xmm12, xmm12);
  g_.vucomiss(Xmm(zAmax.getIdx()), xmm12);
  g_.je(zero, CodeGenerator::T_NEAR);  // amax == 0 (a NaN amax cannot occur: NaNs are skipped)
  g_.xor_(ecx, ecx);
  g_.L(scan);
  g_.vmovups(zAbs, g_.ptr[gu_ + rcx * 4]);
  g_.vandps(zAbs, zAbs, c(OFF(abs_mask)));
  g_.vcmpeqps(k1, zAbs, zAmax);
  g_.kmovw(r11d, k1);
  g_.test(r11d, r11d);
  g_.jnz(found);
  g_.add(ecx, 16);
  g_.jmp(scan);
  g_.L(found);
  g_.tzcnt(r11d, r11d);
  g_.add(ecx, r11d);
  g_.vmovss(xmm12, g_.dword[gu_ + rcx * 4]);
  g_.vmovss(xmm13, g_.dword[rax + OFF(minus127)]);
  g_.vdivss(xmm13, xmm13, xmm12);
  g_.vbroadcastss(zIs, xmm13);
  g_.vmovss(xmm14, g_.dword[rax + OFF(one)]);
  g_.vdivss(xmm14, xmm14, xmm13);
  g_.vmovss(g_.dword[out_], xmm14);
}

void Emitter::quantise() {
  for (int i = 0; i < 16; ++i) {
    g_.vmulps(zT, zIs, g_.ptr[gu_ + 64 * i]);
    g_.vaddps(zT, zT, c(OFF(magic)));
    g_.vpandd(zT, zT, c(OFF(mant)));
    g_.vpsubd(zT, zT, c(OFF(half)));
    g_.vpminsd(zT, zT, c(OFF(q127)));
    g_.vpmovdb(g_.ptr[out_ + 4 + 16 * i], zT);
  }
}

// Sums of 16 codes: vpsadbw of the codes biased to unsigned (+128) gives sums of 8 per qword;
// adjacent qwords are added, the even ones gathered, and the bias 16 * 128 removed.
void Emitter::bsums() {
  const Zmm zS[4] = {zmm12, zmm13, zmm14, zmm15};
  g_.vpxord(zmm16, zmm16, zmm16);
  for (int k = 0; k < 4; ++k) {
    g_.vmovdqu8(zS[k], g_.ptr[out_ + 4 + 64 * k]);
    g_.vpxord(zS[k], zS[k], c(OFF(x80)));
    g_.vpsadbw(zS[k], zS[k], zmm16);
    g_.vpsrldq(zT, zS[k], 8);
    g_.vpaddq(zS[k], zS[k], zT);
  }
  for (int h = 0; h < 2; ++h) {
    g_.vmovdqa64(zT, g_.ptr[rax + OFF(even_q)]);
    g_.vpermi2q(zT, zS[2 * h], zS[2 * h + 1]);
    g_.vpsubq(zT, zT, g_.ptr_b[rax + OFF(bias2048)]);
    g_.vpmovqw(g_.ptr[out_ + 260 + 16 * h], zT);
  }
}

void Emitter::zero_block() {
  g_.vpxord(zT, zT, zT);
  for (int k = 0; k < 4; ++k) g_.vmovdqu32(g_.ptr[out_ + 64 * k], zT);
  g_.vmovdqu32(g_.ptr[out_ + 256], Ymm(zT.getIdx()));
  g_.mov(g_.dword[out_ + 288], 0);
}

#undef OFF

}  // namespace

float swiglu_approx(float gate, float up) {
  float t = -gate;
  t = std::fmax(t, -kClamp);  // NaN-free inputs: max/min as vmaxps/vminps
  t = std::fmin(t, kClamp);
  const float n = std::nearbyint(t * kLog2e);
  float r = std::fma(-n, kLn2Hi, t);
  r = std::fma(-n, kLn2Lo, r);
  float p = kExpPoly[0];
  for (int k = 1; k < 8; ++k) p = std::fma(p, r, kExpPoly[k]);
  const float e = std::ldexp(p, static_cast<int>(n));
  return (gate / (e + 1.0f)) * up;
}

void emit_swiglu_quantize_q8k(CodeGenerator& g, const Reg64& gu, const Reg64& out) {
  Emitter(g, gu, out).emit();
}

namespace {

// void fn(float* gu, void* out): the epilogue between a SysV entry and return (it clobbers
// only caller-saved registers).
struct StandaloneEpilogue : CodeGenerator {
  StandaloneEpilogue() : CodeGenerator(16 * 1024, DontSetProtectRWE) {
    emit_swiglu_quantize_q8k(*this, rdi, rsi);
    vzeroupper();
    ret();
  }
};

}  // namespace

Expected<SwigluQ8KFn> generated_swiglu_quantize_q8k() {
  if (!isa::host_supports(isa::IsaLevel::kAvx512)) return Error{"SwiGLU epilogue: the host has no AVX-512"};
  static const std::unique_ptr<StandaloneEpilogue> code = []() -> std::unique_ptr<StandaloneEpilogue> {
    try {
      auto c = std::make_unique<StandaloneEpilogue>();
      if (!c->setProtectModeRE(false)) return nullptr;
      return c;
    } catch (const Xbyak::Error&) {
      return nullptr;
    }
  }();
  if (!code) return Error{"SwiGLU epilogue: code generation failed"};
  return code->getCode<SwigluQ8KFn>();
}

Status run_generated_swiglu_quantize_q8k(float* gu, void* out) {
  Expected<SwigluQ8KFn> fn = generated_swiglu_quantize_q8k();
  if (!fn) return Error{fn.error()};
  (*fn)(gu, out);
  return Status::ok();
}

}  // namespace zenmoe::x64
