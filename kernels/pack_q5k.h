// Q5_K packed layout (row block 16, one row per 32-bit lane). Internal to kernels/pack.cpp;
// documented in kernels/pack.h.
#pragma once

#include <cstdint>

#include "kernels/pack.h"

namespace zenmoe::pack_detail {

inline constexpr int64_t kQ5KSuperBlockBytes = 2880;  // one super-block of 16 rows, 45 lines

int64_t q5k_group_bytes(int64_t cols);  // already a multiple of 64
void q5k_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst);
float q5k_dot(const PackLayout& L, const uint8_t* group, int64_t i, const BlockQ8_K* x);

}  // namespace zenmoe::pack_detail
