// F16 rows of the MLA latent cache: the conversions from F32 when a batch's rows are stored,
// and back to F32 for the SGEMM paths (the prompt-sized batches), a row at a time.
#pragma once

#include <cstdint>

#include "kernels/ref/fp16.h"

namespace zenmoe {

// avx512: the caller checked the ISA model allows AVX-512 F (vcvtps2ph with round to nearest
// even, vcvtph2ps: 16 elements an instruction); without it the reference conversions run.
// The bits are those of ref::fp32_to_fp16 and ref::fp16_to_fp32 either way, except that
// vcvtph2ps quiets a signalling NaN (the cache only holds what kv_f16_round_row wrote, and
// that never makes one).
void kv_f16_round_row(const float* x, f16_t* dst, int64_t n, bool avx512);
void kv_f16_widen_row(const f16_t* src, float* dst, int64_t n, bool avx512);

}  // namespace zenmoe
