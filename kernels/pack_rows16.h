// Packed layouts where the 16 rows of a group are the 16 lanes of a vector (row_block 16):
// Q8_0, Q4_0 and the plain float formats. Internal to kernels/pack.cpp; the layouts are
// documented in kernels/pack.h.
#pragma once

#include <cstdint>

#include "kernels/pack.h"

namespace zenmoe::pack_detail {

inline constexpr int kRows16 = 16;

bool rows16_format(GgmlType f);
int64_t rows16_group_bytes(GgmlType f, int64_t cols);  // before rounding up to 64
void rows16_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst);
// Row i (0..15) of a packed group against one activation row in the format's vec_dot_type.
float rows16_dot(const PackLayout& L, const uint8_t* group, int64_t i, const void* x);

}  // namespace zenmoe::pack_detail
