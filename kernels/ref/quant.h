// Scalar reference numerics of every format zenmoe computes with: dequantisation (in the
// spec's order of operations), quantisation (activation formats bit-exact with ggml's CPU
// backend, weight formats with ggml-style reference quantisers) and dot products of a weight
// row with an activation row in the weight's vec_dot_type (spec §2.12).
//
// Every function works on whole rows: n must be a multiple of the format's block size and the
// buffers must hold row_bytes(type, n) bytes. These are the definitions fast kernels are
// tested against, so they favour clarity over speed.
#pragma once

#include <cstdint>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe::ref {

// ---- Type-generic wrappers over format_traits() ---------------------------------------
// Checks that `t` has reference numerics (and a quantiser when `need_quantize`) and that n is
// a non-negative multiple of its block; the message names the type and the problem.
Status check_row(GgmlType t, int64_t n, bool need_quantize = false);
// Preconditions: check_row(t, n, true) is ok. With an unsupported type nothing is written.
void quantize_row(GgmlType t, const float* x, void* dst, int64_t n);
// Preconditions: check_row(t, n) is ok. With an unsupported type dst is filled with NaN.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Dot of a weight row (wtype) with an activation row already quantised to
// format_traits(wtype)->vec_dot_type. Returns NaN for a type without a vec_dot.
float vec_dot_row(GgmlType wtype, const void* w, const void* xq, int64_t n);
// Convenience: quantises the float activation row x to wtype's vec_dot_type, then dots.
// Returns NaN for a type without a vec_dot.
float vec_dot_row_f32(GgmlType wtype, const void* w, const float* x, int64_t n);

// ---- Plain types ------------------------------------------------------------------------
void to_float_f32(const void* src, float* dst, int64_t n);
void to_float_f16(const void* src, float* dst, int64_t n);
void to_float_bf16(const void* src, float* dst, int64_t n);
void from_float_f32(const float* src, void* dst, int64_t n);
void from_float_f16(const float* src, void* dst, int64_t n);   // round to nearest even
void from_float_bf16(const float* src, void* dst, int64_t n);  // ggml's RNE, NaN kept
// Products are exact in f32 for f16/bf16 inputs; the sum is accumulated in double as ggml's
// generic CPU code does, then rounded to float once.
float vec_dot_f32(const void* w, const void* x, int64_t n);
float vec_dot_f16(const void* w, const void* x, int64_t n);
float vec_dot_bf16(const void* w, const void* x, int64_t n);

// ---- Block formats (row functions; n a multiple of the block) ----------------------------
// Dequantisation in the spec's order of operations (bit-identical to ggml's to_float).
void to_float_q4_0(const void* src, float* dst, int64_t n);
void to_float_q5_0(const void* src, float* dst, int64_t n);
void to_float_q8_0(const void* src, float* dst, int64_t n);
void to_float_q4_K(const void* src, float* dst, int64_t n);
void to_float_q5_K(const void* src, float* dst, int64_t n);
void to_float_q6_K(const void* src, float* dst, int64_t n);
void to_float_q8_K(const void* src, float* dst, int64_t n);
void to_float_iq4_xs(const void* src, float* dst, int64_t n);
const int8_t* iq4nl_codebook();  // the 16 kvalues_iq4nl entries

// Activation quantisers, bit-exact with ggml's CPU backend.
// Q8_0 reference path: d = amax/127, q = roundf(x * (1/d)) (half away from zero).
void from_float_q8_0(const float* src, void* dst, int64_t n);
// Q8_0 as ggml's x86 AVX path computes it: id = 127/amax, round half to even. Differs from
// from_float_q8_0 by one code in rare ties; offered so fast kernels can match either.
void from_float_q8_0_x86(const float* src, void* dst, int64_t n);
// Q8_K: iscale = -127/max (signed max), nearest_int, d = 1/iscale, bsums per 16 (spec §2.9).
void from_float_q8_K(const float* src, void* dst, int64_t n);

// Weight quantisers (ggml's reference algorithms, no importance matrix).
void from_float_q4_0(const float* src, void* dst, int64_t n);
void from_float_q5_0(const float* src, void* dst, int64_t n);
void from_float_q4_K(const float* src, void* dst, int64_t n);
void from_float_q5_K(const float* src, void* dst, int64_t n);
void from_float_q6_K(const float* src, void* dst, int64_t n);

// Dot products: weight row x activation row in the weight's vec_dot_type
// (Q4_0/Q5_0/Q8_0 with Q8_0; Q4_K/Q5_K/Q6_K/IQ4_XS with Q8_K).
float vec_dot_q4_0(const void* w, const void* x, int64_t n);
float vec_dot_q5_0(const void* w, const void* x, int64_t n);
float vec_dot_q8_0(const void* w, const void* x, int64_t n);
float vec_dot_q4_K(const void* w, const void* x, int64_t n);
float vec_dot_q5_K(const void* w, const void* x, int64_t n);
float vec_dot_q6_K(const void* w, const void* x, int64_t n);
float vec_dot_iq4_xs(const void* w, const void* x, int64_t n);

}  // namespace zenmoe::ref
