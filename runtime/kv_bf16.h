// BF16 rows of the MLA latent cache. The cache keeps a row per position as `width` bf16
// values. Attention widens them to F32 a tile at a time (the generated GlueOp::kAttnDecode), token by token for
// prompts too; targets without AVX-512 keep an F32 copy of the rows for SGEMM.
#pragma once

#include <cstdint>

#include "kernels/ref/fp16.h"

namespace zenmoe {

// Rounds n floats to bf16 (round to nearest even, as ref::fp32_to_bf16). avx512: the caller
// checked the ISA model allows AVX-512 F/BW/VL (the rounding is integer arithmetic, no BF16
// instructions); the bits are identical either way.
void kv_bf16_round_row(const float* x, bf16_t* dst, int64_t n, bool avx512);

}  // namespace zenmoe
