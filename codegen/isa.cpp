// CPUID / XGETBV live here and nowhere else.
#include "codegen/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>
#include <cstring>

namespace zenmoe::isa {
namespace {

struct Regs { unsigned a = 0, b = 0, c = 0, d = 0; };

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

// Linux keeps AMX tile data off until a process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM
// for XFEATURE_XTILEDATA); kernels older than 5.16 refuse the request and the level is off.
bool request_tile_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuFeatures read_features() {
  CpuFeatures f;
  const Regs r0 = cpuid(0, 0);
  const unsigned max_leaf = r0.a;
  std::memcpy(f.vendor + 0, &r0.b, 4);
  std::memcpy(f.vendor + 4, &r0.d, 4);
  std::memcpy(f.vendor + 8, &r0.c, 4);
  const Regs r1 = cpuid(1, 0);
  const int base_family = (r1.a >> 8) & 0xF, ext_family = (r1.a >> 20) & 0xFF;
  const int base_model = (r1.a >> 4) & 0xF, ext_model = (r1.a >> 16) & 0xF;
  f.family = base_family == 0xF ? base_family + ext_family : base_family;
  f.model = (base_family == 0xF || base_family == 0x6) ? (ext_model << 4) | base_model : base_model;
  f.sse42 = bit(r1.c, 20);
  f.fma = bit(r1.c, 12);
  f.f16c = bit(r1.c, 29);
  f.avx = bit(r1.c, 28);
  const bool osxsave = bit(r1.c, 27);
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    f.os_ymm = (xcr0 & 0x6) == 0x6;      // SSE + AVX state
    f.os_zmm = (xcr0 & 0xE6) == 0xE6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  }
  if (max_leaf >= 7) {
    const Regs r7 = cpuid(7, 0);
    f.avx2 = bit(r7.b, 5);
    f.bmi1 = bit(r7.b, 3);
    f.bmi2 = bit(r7.b, 8);
    f.avx512f = bit(r7.b, 16);
    f.avx512dq = bit(r7.b, 17);
    f.avx512bw = bit(r7.b, 30);
    f.avx512vl = bit(r7.b, 31);
    f.avx512vbmi = bit(r7.c, 1);
    f.gfni = bit(r7.c, 8);
    f.avx512vnni = bit(r7.c, 11);
    if (r7.a >= 1) f.avx512bf16 = bit(cpuid(7, 1).a, 5);
    f.amx_bf16 = bit(r7.d, 22);
    f.amx_tile = bit(r7.d, 24);
  }
  f.os_amx = f.amx_tile && osxsave && (xgetbv0() & 0x60000) == 0x60000 && request_tile_permission();
  return f;
}

bool level_supported(const CpuFeatures& f, IsaLevel level) {
  const bool avx2 = f.avx && f.avx2 && f.fma && f.f16c && f.bmi1 && f.bmi2 && f.os_ymm;
  const bool avx512 = avx2 && f.os_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (level) {
    case IsaLevel::kScalar: return true;
    case IsaLevel::kAvx2: return avx2;
    case IsaLevel::kAvx512: return avx512;
    case IsaLevel::kAvx512Vnni: return avx512 && f.avx512vnni;
    case IsaLevel::kAvx512Bf16: return avx512 && f.avx512vnni && f.avx512bf16;
    case IsaLevel::kAmx: return avx512 && f.avx512vnni && f.avx512bf16 && f.amx_tile && f.amx_bf16 && f.os_amx;
  }
  return false;
}

constexpr const char* kLevelNames[kIsaLevelCount] = {"scalar", "avx2", "avx512", "avx512vnni",
                                                     "avx512bf16", "amx"};
constexpr const char* kTuningNames[kTuningCount] = {"generic", "zen4", "zen5"};

}  // namespace

const CpuFeatures& host_features() {
  static const CpuFeatures f = read_features();
  return f;
}

bool host_supports(IsaLevel level) { return level_supported(host_features(), level); }

bool supports(const CpuFeatures& f, IsaLevel level) { return level_supported(f, level); }

IsaLevel host_level() {
  IsaLevel best = IsaLevel::kScalar;
  for (int i = 0; i < kIsaLevelCount; ++i) {
    const auto l = static_cast<IsaLevel>(i);
    if (level_supported(host_features(), l)) best = l;
  }
  return best;
}

std::vector<IsaLevel> host_levels() {
  std::vector<IsaLevel> out;
  for (int i = 0; i < kIsaLevelCount; ++i) {
    const auto l = static_cast<IsaLevel>(i);
    if (level_supported(host_features(), l)) out.push_back(l);
  }
  return out;
}

Tuning tuning_for(const CpuFeatures& f) {
  if (std::strcmp(f.vendor, "AuthenticAMD") != 0) return Tuning::kGeneric;
  if (f.family == 0x1A) return Tuning::kZen5;
  // Family 0x19 is Zen 3 and Zen 4; only Zen 4 has AVX-512.
  if (f.family == 0x19 && f.avx512f) return Tuning::kZen4;
  return Tuning::kGeneric;
}

Tuning host_tuning() { return tuning_for(host_features()); }

TuningHints tuning_hints(Tuning t) {
  TuningHints h;
  h.tuning = t;
  h.full_width_512 = t == Tuning::kZen5;
  // The base distance ahead of the weight stream, measured on the development host (1-16 KiB
  // swept; codegen/kernel_desc.cpp scales it per format, and sets Q4_K's own on Zen 5 and
  // Q4_K's and Q5_K's on Zen 4, where they were measured). Every tuning starts from the same
  // distance; the descriptor carries it so a tuned value changes the kernel key.
  h.prefetch_distance = 4096;
  return h;
}

const char* level_name(IsaLevel level) {
  const int i = static_cast<int>(level);
  return i >= 0 && i < kIsaLevelCount ? kLevelNames[i] : "?";
}

const char* tuning_name(Tuning t) {
  const int i = static_cast<int>(t);
  return i >= 0 && i < kTuningCount ? kTuningNames[i] : "?";
}

Expected<IsaLevel> parse_level(std::string_view name) {
  for (int i = 0; i < kIsaLevelCount; ++i)
    if (name == kLevelNames[i]) return static_cast<IsaLevel>(i);
  return Error{"unknown ISA level '" + std::string(name) +
               "' (expected scalar, avx2, avx512, avx512vnni, avx512bf16 or amx)"};
}

Expected<Tuning> parse_tuning(std::string_view name) {
  for (int i = 0; i < kTuningCount; ++i)
    if (name == kTuningNames[i]) return static_cast<Tuning>(i);
  return Error{"unknown tuning '" + std::string(name) + "' (expected generic, zen4 or zen5)"};
}

Expected<Target> resolve_target(std::string_view cap) {
  Target t{host_level(), host_tuning(), host_features().gfni};
  std::string_view name = cap;
  const char* env = std::getenv("ZENMOE_ISA");
  if (name.empty() && env != nullptr && env[0] != '\0') name = env;
  if (name.empty()) return t;
  Expected<IsaLevel> lvl = parse_level(name);
  if (!lvl) {
    const std::string where = cap.empty() ? "ZENMOE_ISA: " : "--isa: ";
    return Error{where + lvl.error()};
  }
  if (static_cast<int>(*lvl) < static_cast<int>(t.level)) t.level = *lvl;
  return t;
}

std::string describe_host() {
  const CpuFeatures& f = host_features();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s family 0x%x model 0x%x: isa %s, tuning %s%s", f.vendor,
                f.family, f.model, level_name(host_level()), tuning_name(host_tuning()),
                f.avx512bf16 ? "" : " (no avx512_bf16)");
  return buf;
}

}  // namespace zenmoe::isa
