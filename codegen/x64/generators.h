// Entry points of the xbyak generators (internal to codegen/).
#pragma once

#include <memory>
#include <vector>

#include "codegen/kernel.h"
#include "kernels/status.h"

namespace zenmoe::x64 {

// Generates machine code for a validated descriptor whose ISA the host supports.
Expected<std::unique_ptr<KernelCode>> generate_gemv(const KernelDesc& d);

// Epilogue of the fused gate+up kernels, called from generated code once per 256 outputs:
// `gu` holds gate/up dot products interleaved (gate r at 2r, up r at 2r+1, r = 0..255);
// writes h = swiglu_approx(gate, up) (swiglu_q8k.h) quantised to one BlockQ8_K with the
// reference Q8_K quantiser (spec §2.9): the scalar model of the generated epilogue, bit for bit.
void swiglu_quantize_q8k(const float* gu, void* q8k_block);

// ISA levels (above scalar) that have a generator for this weight format.
std::vector<isa::IsaLevel> generated_levels(GgmlType weight);

// GEMM ops (KernelOp::kGemm, kGemmAccumulate): machine code for a validated descriptor
// whose ISA the host supports (codegen/x64/gemm_*.cpp), and the levels that have one.
Expected<std::unique_ptr<KernelCode>> generate_gemm(const KernelDesc& d);
std::vector<isa::IsaLevel> gemm_levels(GgmlType weight);

// Per-format generators (one file each).
// Q4_K, AVX-512 VNNI, row block 8, kGemv or kGemvAccumulate: GemmCalls in passes of up to 4
// tokens over the GEMV's packed layout, each token's outputs bit-identical to the GEMV's
// (gemv_q4k_few_avx512.cpp). The Q4_K GEMV and fused gate+up kernels of AVX-512 VNNI with
// row block 8 run their GemmCalls of several tokens through it.
Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_few_avx512(const KernelDesc& d);
// The same for Q6_K (AVX-512 VNNI, row block 16), run by the Q6_K GEMV kernel of such a
// descriptor (gemv_q6k_few_avx512.cpp).
Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_few_avx512(const KernelDesc& d);

}  // namespace zenmoe::x64
