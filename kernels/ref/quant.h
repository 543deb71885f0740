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

}  // namespace zenmoe::ref
