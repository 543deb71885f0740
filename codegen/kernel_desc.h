// A kernel descriptor is the only input to code generation (design.md §3.1): a small,
// trivially copyable struct whose every field is part of the cache key. Environment and
// flags are folded in before a descriptor is made, never read by a generator.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "codegen/isa.h"
#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe {

enum class KernelOp : uint8_t {
  kGemv = 0,             // y[r] = dot(W row r, x)                      for r in [r0, r1)
  kGemvAccumulate = 1,   // y[r] += alpha * dot(W row r, x)  (MoE down projection)
  // Fused expert gate + up: over gate/up rows packed interleaved (pack_gate_up), computes
  // h[r] = silu(gate r . x) * (up r . x) and writes h quantised to Q8_K (the down
  // projection's activation) for r in [r0, r1), both multiples of 256.
  kGateUpSwiglu = 2,
  // Prefill GEMM over n activation rows x_t (GemmCall, Kernel::gemm), same packed layout as
  // the GEMV of the same format and row block:
  kGemm = 3,             // y_t[r] = dot(W row r, x_t)                  for r in [r0, r1), t < n
  kGemmAccumulate = 4,   // y_t[r] += alpha_t * dot(W row r, x_t)
};
inline constexpr int kKernelOpCount = 5;
inline bool is_gemm(KernelOp op) { return op == KernelOp::kGemm || op == KernelOp::kGemmAccumulate; }
// Blocks of 32 weights with one f16 scale (Q8_0, Q4_0, Q5_0): dotted with Q8_0 activations, from
// AVX-512 VNNI up by the row-per-lane kernels.
inline bool is_block32_format(GgmlType w) { return w == GgmlType::Q8_0 || w == GgmlType::Q4_0 || w == GgmlType::Q5_0; }
// Plain numbers (F32, F16, BF16).
inline bool is_plain_format(GgmlType w) { return w == GgmlType::F32 || w == GgmlType::F16 || w == GgmlType::BF16; }
// Largest K of a GEMM kernel: the generated code keeps one token tile's permuted activations
// (30 * K bytes for Q4_K) on the stack.
inline constexpr int32_t kGemmMaxCols = 24576;

enum class OutType : uint8_t { kF32 = 0, kQ8K = 1 };

// The instruction a GEMV kernel prefetches its weight stream with: prefetcht0, or prefetchnta
// (non-temporal: the lines are not expected to be read again soon) for weights streamed once
// per token.
enum class PrefetchHint : uint8_t { kT0 = 0, kNta = 1 };

// Bumped whenever a generator changes the code it emits for the same descriptor, so cached
// or dumped kernels of an older generator never alias a newer one.
inline constexpr uint8_t kGeneratorVersion = 1;

struct KernelDesc {
  KernelOp op = KernelOp::kGemv;
  OutType out = OutType::kF32;
  isa::IsaLevel isa = isa::IsaLevel::kScalar;
  isa::Tuning tuning = isa::Tuning::kGeneric;
  GgmlType weight = GgmlType::Q4_K;   // weight format (packed by kernels/pack.h)
  GgmlType act = GgmlType::Q8_K;      // activation format (spec §2.12 vec_dot_type)
  int32_t cols = 0;                   // K, a multiple of the weight block
  int32_t prefetch = 0;               // software prefetch distance in bytes, 0 = none
  uint16_t row_block = 8;             // rows computed together (register blocking, packing)
  uint8_t version = kGeneratorVersion;
  // The target has GFNI and the kernel uses it (gfni_kernel): bits are moved inside each byte
  // by affine transforms instead of shifts and masks (Q5_0's fifth bits, the last codes of a
  // Q5_K sub-block). 0 or 1; a byte rather than a bool, as plan files carry descriptors as raw
  // bytes and any byte value must be readable before validate() refuses it.
  uint8_t gfni = 0;
  // Bytes of weight stream per software-prefetched line; 0 = every line (same as 64).
  // Larger strides (a power of two up to 4096) exist for the AVX-512 row-per-lane kernels.
  uint16_t prefetch_stride = 0;
  // Row groups the kernel streams side by side, one block of each in turn: 1, 2 or 4 (more
  // than 1 only for the Q4_K GEMV and gate+up from AVX2 up, the AVX-512 VNNI Q8_0, Q4_0 and
  // Q5_K GEMVs and the AVX-512 F32, F16 and BF16 GEMVs). A core reads DRAM faster from several
  // sequential streams than from one.
  uint8_t streams = 1;
  PrefetchHint prefetch_hint = PrefetchHint::kT0;  // kT0 when there is no software prefetch
};
static_assert(std::is_trivially_copyable_v<KernelDesc>);
static_assert(std::has_unique_object_representations_v<KernelDesc>,
              "KernelDesc must have no padding: its bytes are the cache key");
static_assert(sizeof(KernelDesc) == 28);

bool operator==(const KernelDesc& a, const KernelDesc& b);
inline bool operator!=(const KernelDesc& a, const KernelDesc& b) { return !(a == b); }

// FNV-1a over every byte of the descriptor.
uint64_t desc_hash(const KernelDesc& d);
struct KernelDescHash {
  size_t operator()(const KernelDesc& d) const { return static_cast<size_t>(desc_hash(d)); }
};

// XNNPACK-style canonical name, e.g. "gemv_q4k_q8k_f32_8r__avx512vnni_zen5".
std::string canonical_name(const KernelDesc& d);
// The canonical name plus the fields it leaves out (K, prefetch distance and stride, streams,
// version, GFNI): unique per descriptor, used for dump files and logs, e.g.
// "gemv_q4k_q8k_f32_8r__avx512vnni_zen5_k7168_pf512_v1" (a stride other than every line adds
// "_ps1024" after the distance, prefetchnta "_nta", more than one stream "_s4", GFNI "_gfni").
std::string instance_name(const KernelDesc& d);
// Whether the kernel of this weight format, level and op uses GFNI where the target has it:
// from AVX-512 VNNI up, Q5_0 (GEMV and GEMM) and the Q5_K GEMV (its GEMM rebuilds the codes
// once per row block for all tokens). The Q6_K GEMV streamed 8-11 % slower from L2 with its
// last codes built that way (4 operations instead of 6; bench kernels --formats q6_K --regimes
// l2 -t 1, Kimi and bench expert shapes, two rounds in turn), so it keeps its shifts.
bool gfni_kernel(GgmlType weight, isa::IsaLevel level, KernelOp op);
// Short name of a format inside kernel names: "q4k", "q8k", "q80", "f16", "bf16", ...
const char* format_short_name(GgmlType t);

// Checks everything a generator relies on (supported format pair, K a multiple of the
// block, row block legal for the format, prefetch fields consistent). Does not check the host ISA.
Status validate(const KernelDesc& d);

// Software prefetch of a GEMV kernel for this weight format on `target`: the distance in
// bytes ahead of the weight stream (0 = none) and the bytes per prefetched line (0 = every line).
int prefetch_distance(GgmlType weight, isa::Target target);
int prefetch_stride(GgmlType weight, isa::Target target);
// The prefetch instruction of a prefetching GEMV kernel of this weight format on `target`.
PrefetchHint prefetch_hint(GgmlType weight, isa::Target target);
// Row groups a GEMV kernel of this format and op streams side by side on `target`.
int gemv_streams(GgmlType weight, KernelOp op, isa::Target target);

// The descriptor zenmoe uses for a GEMV of this weight format and K on `target`: the
// activation format from spec §2.12, row block and prefetch distance from the tuning.
KernelDesc default_gemv_desc(GgmlType weight, int32_t cols, isa::Target target,
                             KernelOp op = KernelOp::kGemv);
// The GEMM descriptor matching default_gemv_desc (same row block, hence the same packed
// weights); op is kGemm or kGemmAccumulate. GEMM kernels are compute-bound and use no
// software prefetch (prefetch = 0).
KernelDesc default_gemm_desc(GgmlType weight, int32_t cols, isa::Target target,
                             KernelOp op = KernelOp::kGemm);

}  // namespace zenmoe
