// The epilogue of the fused gate+up kernels: h = silu(gate) * up over 256 outputs, quantised
// to one BlockQ8_K. The scalar model (swiglu_approx + the reference Q8_K quantiser, in
// generators.cpp) and the AVX-512 emitter below compute the same bits: the generated code
// performs exactly the model's float operations, lane by lane.
#pragma once

#include "kernels/status.h"

namespace Xbyak {
class CodeGenerator;
class Reg64;
}  // namespace Xbyak

namespace zenmoe::x64 {

// silu(g) * u with exp(-g) from a Cody-Waite reduction and a degree-7 polynomial scaled by
// 2^n (vscalefps / ldexp), every step a correctly rounded IEEE operation. Within a few ulp of
// (g / (1 + std::exp(-g))) * u; the same value in the generated code and here.
float swiglu_approx(float gate, float up);

// Emits the epilogue: reads 512 floats at [gu] (gate r at 2r, up r at 2r + 1; 64-byte
// aligned), overwrites the first 256 with h, and writes one BlockQ8_K at [out] bit-identical
// to the reference Q8_K quantiser (spec §2.9) applied to h. Clobbers rax, rcx, r11,
// zmm0-zmm31 and k1.
void emit_swiglu_quantize_q8k(Xbyak::CodeGenerator& g, const Xbyak::Reg64& gu, const Xbyak::Reg64& out);

// The emitted epilogue on its own, as a function (generated once): `gu` as above
// (overwritten), one BlockQ8_K to `out`. Error if the host lacks AVX-512.
using SwigluQ8KFn = void (*)(float* gu, void* out);
Expected<SwigluQ8KFn> generated_swiglu_quantize_q8k();

// Runs the emitted epilogue on its own (generated once into a small function), for tests:
// `gu` as above (overwritten), one BlockQ8_K to `out`. Error if the host lacks AVX-512.
Status run_generated_swiglu_quantize_q8k(float* gu, void* out);

}  // namespace zenmoe::x64
