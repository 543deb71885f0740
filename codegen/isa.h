// The ISA model: the one place that asks the CPU what it can do (CPUID + XGETBV).
// Every other file asks this one. A user cap (ZENMOE_ISA or a --isa flag) is folded in by
// the caller through resolve_target(); generators only ever see the resulting Target inside
// a kernel descriptor and never read the environment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::isa {

// Ordered instruction-set levels; each includes everything below it.
//   scalar      plain C++ (the packed-layout reference), always available
//   avx2        AVX2 + FMA + F16C + BMI1/2 (+ OS YMM state)
//   avx512      AVX-512 F/BW/VL/DQ (+ OS ZMM and opmask state)
//   avx512vnni  + AVX512_VNNI (vpdpbusd)
//   avx512bf16  + AVX512_BF16 (vdpbf16ps)
//   amx         + AMX-TILE and AMX-BF16 with the OS keeping tile state and granting this
//                 process its use (Intel Sapphire Rapids and later): the decode attention's
//                 products on the tile unit (runtime/attn_amx.h). No generated kernel emits AMX,
//                 so kernel descriptors stop at avx512bf16 (kernel_level).
enum class IsaLevel : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Bf16 = 4, kAmx = 5 };
inline constexpr int kIsaLevelCount = 6;
// The level generated kernels of a target at `level` are made for: the highest any generator
// emits, avx512bf16, or `level` when below it.
inline IsaLevel kernel_level(IsaLevel level) { return level > IsaLevel::kAvx512Bf16 ? IsaLevel::kAvx512Bf16 : level; }

// Micro-architecture tuning. Zen 4 executes 512-bit ops as two 256-bit halves, Zen 5 has a
// full 512-bit datapath; anything else gets generic choices.
enum class Tuning : uint8_t { kGeneric = 0, kZen4 = 1, kZen5 = 2 };
inline constexpr int kTuningCount = 3;

// Raw feature bits of the running CPU (only what zenmoe's generators may use).
struct CpuFeatures {
  char vendor[13] = {};
  int family = 0;  // display family (base + extended)
  int model = 0;   // display model (with extended model)
  bool os_ymm = false, os_zmm = false;  // XCR0 says the OS saves YMM / ZMM+opmask state
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi1 = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512vbmi = false, avx512bf16 = false, gfni = false;
  bool amx_tile = false, amx_bf16 = false;
  // XCR0 enables tile configuration and data state and the OS granted this process the tile
  // data (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once when the features are read).
  bool os_amx = false;
};

// Tuning hints that generators and default descriptors use.
struct TuningHints {
  Tuning tuning = Tuning::kGeneric;
  bool full_width_512 = false;     // 512-bit ops at full rate (Zen 5) rather than double-pumped
  int prefetch_distance = 0;       // bytes ahead of the weight stream for software prefetch
};

// What a kernel may be generated for: an ISA level and a tuning, and whether the CPU has GFNI
// (Galois-field affine byte transforms, outside the level order: Intel Ice Lake and later,
// AMD Zen 4 and later), which some AVX-512 VNNI kernels use when it does (gfni_kernel,
// codegen/kernel_desc.h).
struct Target {
  IsaLevel level = IsaLevel::kScalar;
  Tuning tuning = Tuning::kGeneric;
  bool gfni = false;
};

const CpuFeatures& host_features();  // CPUID once, cached
IsaLevel host_level();               // highest level the host runs (no user cap)
Tuning host_tuning();                // from vendor / family / model
bool host_supports(IsaLevel level);
// Whether a CPU with features `f` runs kernels of `level` (plan files check a recorded CPU).
bool supports(const CpuFeatures& f, IsaLevel level);

// Zen generation from CPUID vendor, family and model: family 0x19 with AVX-512 → Zen 4,
// family 0x1A → Zen 5, anything else → generic.
Tuning tuning_for(const CpuFeatures& f);
TuningHints tuning_hints(Tuning t);

const char* level_name(IsaLevel level);    // "scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx"
const char* tuning_name(Tuning t);         // "generic", "zen4", "zen5"
Expected<IsaLevel> parse_level(std::string_view name);
Expected<Tuning> parse_tuning(std::string_view name);

// The target kernels are generated for: the host's level capped by `cap` (a level name from
// a --isa flag; when empty, the ZENMOE_ISA environment variable; when that is unset too, no
// cap), with GFNI when the host has it. A cap above the host is clamped to the host, never
// raised. Error on an unknown name.
Expected<Target> resolve_target(std::string_view cap);

// Every level the host can run, lowest first (tests iterate over these).
std::vector<IsaLevel> host_levels();
std::string describe_host();  // one line: vendor, family/model, level, tuning

}  // namespace zenmoe::isa
