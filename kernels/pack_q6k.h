// Q6_K packed layout (row block 16, one row per 32-bit lane). Internal to kernels/pack.cpp;
// documented in kernels/pack.h.
#pragma once

#include <cstdint>

#include "kernels/pack.h"

namespace zenmoe::pack_detail {

int64_t q6k_group_bytes(int64_t cols);  // before rounding up to 64
void q6k_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst);
float q6k_dot(const PackLayout& L, const uint8_t* group, int64_t i, const BlockQ8_K* x);

}  // namespace zenmoe::pack_detail
