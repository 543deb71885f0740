// ggml tensor types: ids, block geometry, block structs and the traits table.
// The byte layouts follow the GGUF / ggml quant formats (spec §1.8, §2).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zenmoe {

// ggml type ids as stored in GGUF tensor infos. Ids 4, 5, 31-33, 36-38 were removed.
enum class GgmlType : int32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};
inline constexpr int32_t kGgmlTypeCount = 43;

// Geometry of any known ggml type (also the ones zenmoe cannot compute with), so the GGUF
// reader can size and validate every tensor.
struct TypeGeometry {
  const char* name;      // ggml's name, e.g. "q4_K"
  int64_t block_elems;   // elements per block (1 for plain types)
  int64_t block_bytes;   // bytes per block
};

// nullptr for ids that are out of range or removed.
const TypeGeometry* type_geometry(int32_t id);
inline const TypeGeometry* type_geometry(GgmlType t) { return type_geometry(static_cast<int32_t>(t)); }
const char* type_name(GgmlType t);  // "?" when unknown
// Parses ggml's lower-case-ish names ("q4_K", "f16", "bf16", ...); returns false if unknown.
bool type_from_name(const char* name, GgmlType* out);

inline constexpr int kQK_K = 256;   // K-quant super-block
inline constexpr int kQK = 32;      // legacy quant block

using f16_t = uint16_t;   // IEEE binary16 bits
using bf16_t = uint16_t;  // upper half of an IEEE binary32

#pragma pack(push, 1)
struct BlockQ4_0 { f16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { f16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { f16_t d; int8_t qs[kQK]; };
struct BlockQ4_K { f16_t d; f16_t dmin; uint8_t scales[12]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { f16_t d; f16_t dmin; uint8_t scales[12]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; f16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };
struct BlockIQ4_XS { f16_t d; uint16_t scales_h; uint8_t scales_l[kQK_K / 64]; uint8_t qs[kQK_K / 2]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_XS) == 136);

// Reference numerics of a format zenmoe computes with. All functions work on whole rows;
// n must be a multiple of block_elems.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of one weight row (this format) with one activation row already converted to
// vec_dot_type; n elements.
using VecDotFn = float (*)(const void* w, const void* x, int64_t n);

struct FormatTraits {
  GgmlType type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  GgmlType vec_dot_type;  // activation format for dot products (spec §2.12)
  ToFloatFn to_float;     // reference dequantisation
  FromFloatFn from_float; // reference quantisation (nullptr if zenmoe does not quantise to it)
  VecDotFn vec_dot;       // reference dot with vec_dot_type (nullptr for activation-only formats)
};

// nullptr when zenmoe has no reference numerics for the type.
const FormatTraits* format_traits(GgmlType t);

// Bytes of a row of n elements; -1 if n is not a multiple of the block or the type is unknown.
int64_t row_bytes(GgmlType t, int64_t n);

}  // namespace zenmoe
