// Numerics of ggml's x86 CPU backend (AVX-512 build) that differ from the plain references
// in the last bits: the vectorised exp used by SwiGLU and softmax (a degree-5 polynomial after
// range reduction by ln 2, scaled by 2^n) and the float summation order of the quantised dot
// products. Last-bit differences matter because they decide rounding ties in the activation
// quantisation that follows, and a flipped code moves the logits of random-weight models
// far more than its size suggests. Integer parts are those of kernels/ref.
#pragma once

#include <cstdint>

#include "kernels/formats.h"

namespace zenmoe::refexec {

// exp(x) as ggml_v_expf computes it lane by lane (max error ~1.5 ulp vs the true exp).
float ggml_expf(float x);

// y = silu(gate) * up with ggml_v_silu: gate / (1 + ggml_expf(0 - gate)).
void swiglu_ggml(const float* gate, const float* up, float* y, int64_t n);

// ggml_soft_max_ext over one row of n entries (masking beyond the visible ones done by the
// caller via n): v = x*scale, max, e = ggml_expf(v - max), the sum of each group of 16
// reduced pairwise in f32 then accumulated in double, y = e * f32(1/sum).
void softmax_ggml(const float* x, float* y, int64_t n, float scale);

// q4_K · q8_K with ggml's AVX2 float order: 8 lanes of int32 sums (4 consecutive products
// each, times the sub-block scale), fma into 8 float lanes per block, mins on 4 lanes.
float dot_q4_K_x86(const void* w, const void* xq, int64_t n);

// Q4_0 / Q5_0 / Q8_0 · Q8_0 with the same 8-lane order (t picks the weight format).
float dot_q8_0_family_x86(GgmlType t, const void* w, const void* xq, int64_t n);

// F16 · F16 with ref::vec_dot_f16's arithmetic (bit-identical), through a conversion table.
float dot_f16_fast(const void* w, const void* x, int64_t n);

}  // namespace zenmoe::refexec
