// ISA model, kernel descriptors (hash, names, validation) and the kernel registry.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "codegen/isa.h"
#include "codegen/kernel_desc.h"
#include "codegen/registry.h"

namespace zenmoe {
namespace {

using isa::IsaLevel;
using isa::Tuning;

TEST(JitIsa, LevelsAreOrderedAndNamed) {
  for (int i = 0; i < isa::kIsaLevelCount; ++i) {
    const auto l = static_cast<IsaLevel>(i);
    Expected<IsaLevel> back = isa::parse_level(isa::level_name(l));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, l);
  }
  EXPECT_FALSE(isa::parse_level("avx9000").has_value());
  EXPECT_NE(isa::parse_level("sse").error().find("avx512vnni"), std::string::npos);
  EXPECT_TRUE(isa::host_supports(IsaLevel::kScalar));
  // host_levels() is a prefix of the ordered levels ending at host_level().
  const auto levels = isa::host_levels();
  ASSERT_FALSE(levels.empty());
  for (size_t i = 0; i < levels.size(); ++i) EXPECT_EQ(static_cast<int>(levels[i]), static_cast<int>(i));
  EXPECT_EQ(levels.back(), isa::host_level());
}

TEST(JitIsa, HostFeaturesAreConsistent) {
  const isa::CpuFeatures& f = isa::host_features();
  if (isa::host_supports(IsaLevel::kAvx512Vnni)) {
    EXPECT_TRUE(f.avx512vnni && f.os_zmm);
  }
  if (isa::host_supports(IsaLevel::kAvx512Bf16)) {
    EXPECT_TRUE(f.avx512bf16);
  }
  if (!f.avx512bf16) {
    EXPECT_LT(static_cast<int>(isa::host_level()), static_cast<int>(IsaLevel::kAvx512Bf16));
  }
  EXPECT_FALSE(isa::describe_host().empty());
}

TEST(JitIsa, ZenGenerationFromFamily) {
  isa::CpuFeatures f;
  std::strcpy(f.vendor, "AuthenticAMD");
  f.family = 0x1A;
  EXPECT_EQ(isa::tuning_for(f), Tuning::kZen5);
  f.family = 0x19;
  f.avx512f = true;
  EXPECT_EQ(isa::tuning_for(f), Tuning::kZen4);
  f.avx512f = false;  // Zen 3
  EXPECT_EQ(isa::tuning_for(f), Tuning::kGeneric);
  std::strcpy(f.vendor, "GenuineIntel");
  f.family = 6;
  EXPECT_EQ(isa::tuning_for(f), Tuning::kGeneric);
  EXPECT_TRUE(isa::tuning_hints(Tuning::kZen5).full_width_512);
  EXPECT_FALSE(isa::tuning_hints(Tuning::kZen4).full_width_512);
}

TEST(JitIsa, UserCapFromFlagAndEnvironment) {
  Expected<isa::Target> t = isa::resolve_target("scalar");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->level, IsaLevel::kScalar);
  // A cap above the host never raises the level.
  t = isa::resolve_target(isa::level_name(static_cast<IsaLevel>(isa::kIsaLevelCount - 1)));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->level, isa::host_level());
  EXPECT_FALSE(isa::resolve_target("bogus").has_value());

  ::setenv("ZENMOE_ISA", "scalar", 1);
  t = isa::resolve_target("");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->level, IsaLevel::kScalar);
  // The flag wins over the environment.
  t = isa::resolve_target(isa::level_name(isa::host_level()));
  EXPECT_EQ(t->level, isa::host_level());
  ::setenv("ZENMOE_ISA", "nonsense", 1);
  t = isa::resolve_target("");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().find("ZENMOE_ISA"), std::string::npos);
  ::unsetenv("ZENMOE_ISA");
  t = isa::resolve_target("");
  EXPECT_EQ(t->level, isa::host_level());
  // GFNI is the host's, whatever the level cap.
  EXPECT_EQ(t->gfni, isa::host_features().gfni);
  EXPECT_EQ(isa::resolve_target("scalar")->gfni, isa::host_features().gfni);
}

// GFNI (Target::gfni) reaches only the Q5_0 kernels and the Q5_K GEMV from AVX-512 VNNI up;
// elsewhere the flag is refused, and a host without GFNI never generates a kernel that has it.
TEST(JitDesc, GfniOnlyWhereAKernelUsesIt) {
  for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Vnni,
                         IsaLevel::kAvx512Bf16, IsaLevel::kAmx})
    for (GgmlType w : {GgmlType::Q5_0, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K,
                       GgmlType::F16}) {
      SCOPED_TRACE(std::string(isa::level_name(level)) + " " + type_name(w));
      const bool vnni = level >= IsaLevel::kAvx512Vnni;
      const bool gemv = vnni && (w == GgmlType::Q5_0 || w == GgmlType::Q5_K);
      const bool gemm = vnni && w == GgmlType::Q5_0;
      EXPECT_EQ(gfni_kernel(w, isa::kernel_level(level), KernelOp::kGemvAccumulate), gemv);
      EXPECT_EQ(gfni_kernel(w, isa::kernel_level(level), KernelOp::kGemmAccumulate), gemm);
      EXPECT_FALSE(default_gemv_desc(w, 2048, {level, Tuning::kZen5, false}).gfni);
      const KernelDesc g = default_gemv_desc(w, 2048, {level, Tuning::kZen5, true});
      EXPECT_EQ(g.gfni, gemv);
      const KernelDesc gg = default_gemm_desc(w, 2048, {level, Tuning::kZen5, true});
      EXPECT_EQ(gg.gfni, gemm);
      EXPECT_TRUE(validate(g).is_ok()) << validate(g).message();
      EXPECT_TRUE(validate(gg).is_ok()) << validate(gg).message();
      EXPECT_EQ(instance_name(g).find("_gfni") != std::string::npos, gemv) << instance_name(g);
      KernelDesc forced = g;
      forced.gfni = true;
      EXPECT_EQ(validate(forced).is_ok(), gemv) << validate(forced).message();
      forced = gg;
      forced.gfni = true;
      EXPECT_EQ(validate(forced).is_ok(), gemm) << validate(forced).message();
    }
  if (!isa::host_features().gfni && isa::host_supports(IsaLevel::kAvx512Vnni)) {
    Registry reg;
    auto k = reg.get(default_gemv_desc(GgmlType::Q5_0, 2048, {IsaLevel::kAvx512Vnni, Tuning::kGeneric, true}));
    ASSERT_FALSE(k.has_value());
    EXPECT_NE(k.error().find("needs GFNI"), std::string::npos) << k.error();
  }
}

KernelDesc base_desc() {
  return default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen5});
}

TEST(JitDesc, CanonicalName) {
  EXPECT_EQ(canonical_name(base_desc()), "gemv_q4k_q8k_f32_8r__avx512vnni_zen5");
  EXPECT_EQ(instance_name(base_desc()), "gemv_q4k_q8k_f32_8r__avx512vnni_zen5_k7168_pf3072_nta_s2_v1");
  KernelDesc d = base_desc();
  d.op = KernelOp::kGemvAccumulate;
  d.row_block = 4;
  d.isa = IsaLevel::kAvx2;
  d.tuning = Tuning::kZen4;
  EXPECT_EQ(canonical_name(d), "gemvacc_q4k_q8k_f32_4r__avx2_zen4");
}

// The prefetch defaults each tuning measured best: one line per KiB 16 KiB ahead for the
// row-per-lane GEMVs on Zen (but Q5_0 on Zen 5), every line 4 KiB ahead on other CPUs; Q4_K
// 3072 bytes ahead on Zen 5, 1024 on Zen 4, 4096 elsewhere; Q5_K 2048 on Zen 4; the
// multi-stream GEMVs 2 streams on Zen 5 and Q4_K and Q5_K on Zen 4, 4 elsewhere.
TEST(JitDesc, PrefetchDefaultsPerTuning) {
  auto desc = [](GgmlType w, Tuning t) { return default_gemv_desc(w, 7168, {IsaLevel::kAvx512Bf16, t}); };
  for (Tuning t : {Tuning::kZen4, Tuning::kZen5, Tuning::kGeneric}) {
    SCOPED_TRACE(isa::tuning_name(t));
    const KernelDesc q8 = desc(GgmlType::Q8_0, t), q4 = desc(GgmlType::Q4_0, t), q4k = desc(GgmlType::Q4_K, t);
    const bool generic = t == Tuning::kGeneric;
    EXPECT_EQ(q8.prefetch_stride, generic ? 0 : 1024);
    EXPECT_EQ(q8.prefetch, generic ? 4096 : 16384);
    EXPECT_EQ(q4.prefetch_stride, q8.prefetch_stride);
    EXPECT_EQ(q4.prefetch, q8.prefetch);
    // Q5_0 prefetches every line 4 KiB ahead on Zen 5, as every row-per-lane GEMV does on the
    // generic tuning; on Zen 4 it keeps one line per KiB 16 KiB ahead.
    const KernelDesc q5 = desc(GgmlType::Q5_0, t);
    EXPECT_EQ(q5.prefetch_stride, t == Tuning::kZen4 ? 1024 : 0);
    EXPECT_EQ(q5.prefetch, t == Tuning::kZen4 ? 16384 : 4096);
    EXPECT_EQ(q4k.prefetch_stride, 0);
    EXPECT_EQ(q4k.prefetch, t == Tuning::kZen5 ? 3072 : t == Tuning::kZen4 ? 1024 : 4096);
    EXPECT_EQ(q4k.streams, t == Tuning::kGeneric ? 4 : 2);
    const KernelDesc q5k = desc(GgmlType::Q5_K, t);
    EXPECT_EQ(q5k.prefetch, t == Tuning::kZen4 ? 2048 : 4096);
    EXPECT_EQ(q5k.streams, q4k.streams);
    EXPECT_EQ(q8.streams, t == Tuning::kZen5 ? 2 : 4);
    EXPECT_EQ(desc(GgmlType::F16, t).streams, q8.streams);
    const KernelDesc gate_up = default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx512Bf16, t}, KernelOp::kGateUpSwiglu);
    EXPECT_EQ(gate_up.streams, q4k.streams);
    EXPECT_EQ(gate_up.prefetch, q4k.prefetch);
  }
  // Below AVX-512 (the AVX2 kernels) Zen 5 and Zen 4 keep the base distance and 4 streams for Q4_K.
  for (Tuning t : {Tuning::kZen4, Tuning::kZen5}) {
    const KernelDesc avx2 = default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx2, t});
    EXPECT_EQ(avx2.prefetch, 4096);
    EXPECT_EQ(avx2.streams, 4);
  }
  // prefetchnta for every prefetching GEMV on Zen 5 and for Q4_K and Q5_K on Zen 4 from AVX-512
  // up, prefetcht0 elsewhere; never for a kernel without software prefetch (the GEMMs, the plain
  // formats below AVX-512).
  for (Tuning t : {Tuning::kZen4, Tuning::kZen5, Tuning::kGeneric})
    for (IsaLevel level : {IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAvx512Bf16})
      for (GgmlType w : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0,
                         GgmlType::Q5_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
        SCOPED_TRACE(std::string(isa::tuning_name(t)) + " " + isa::level_name(level) + " " + type_name(w));
        const KernelDesc g = default_gemv_desc(w, 7168, {level, t});
        const bool kquant = w == GgmlType::Q4_K || w == GgmlType::Q5_K;
        const bool nta = (t == Tuning::kZen5 || (t == Tuning::kZen4 && kquant)) && level >= IsaLevel::kAvx512 &&
                         g.prefetch > 0;
        EXPECT_EQ(g.prefetch_hint, nta ? PrefetchHint::kNta : PrefetchHint::kT0);
        EXPECT_TRUE(validate(g).is_ok()) << validate(g).message();
        EXPECT_EQ(default_gemm_desc(w, 7168, {level, t}).prefetch_hint, PrefetchHint::kT0);
      }
  const KernelDesc plain_avx2 = default_gemv_desc(GgmlType::F16, 7168, {IsaLevel::kAvx2, Tuning::kZen5});
  EXPECT_EQ(plain_avx2.prefetch, 0);
  EXPECT_EQ(plain_avx2.prefetch_hint, PrefetchHint::kT0);
}

// Changing any single field must change the key (hash and equality).
TEST(JitDesc, EveryFieldChangesTheKey) {
  const KernelDesc b = base_desc();
  std::vector<KernelDesc> variants;
  auto vary = [&](auto mutate) {
    KernelDesc d = b;
    mutate(d);
    variants.push_back(d);
  };
  vary([](KernelDesc& d) { d.op = KernelOp::kGemvAccumulate; });
  vary([](KernelDesc& d) { d.out = static_cast<OutType>(1); });
  vary([](KernelDesc& d) { d.isa = IsaLevel::kAvx512; });
  vary([](KernelDesc& d) { d.tuning = Tuning::kZen4; });
  vary([](KernelDesc& d) { d.weight = GgmlType::Q5_K; });
  vary([](KernelDesc& d) { d.act = GgmlType::Q8_0; });
  vary([](KernelDesc& d) { d.cols = 7168 + 256; });
  vary([](KernelDesc& d) { d.prefetch = 512; });
  vary([](KernelDesc& d) { d.row_block = 4; });
  vary([](KernelDesc& d) { d.version = kGeneratorVersion + 1; });
  vary([](KernelDesc& d) { d.prefetch_stride = 1024; });
  vary([](KernelDesc& d) { d.streams = 4; });
  vary([](KernelDesc& d) { d.prefetch_hint = PrefetchHint::kT0; });
  vary([](KernelDesc& d) { d.gfni = true; });
  // Every byte of the struct belongs to a field above (no padding is asserted in the header);
  // check the list covers them all by flipping each byte too.
  for (size_t i = 0; i < sizeof(KernelDesc); ++i) {
    KernelDesc d = b;
    unsigned char raw[sizeof(KernelDesc)];
    std::memcpy(raw, &d, sizeof raw);
    raw[i] ^= 0x01;
    std::memcpy(&d, raw, sizeof raw);
    variants.push_back(d);
  }
  std::set<uint64_t> hashes = {desc_hash(b)};
  std::set<std::string> names = {instance_name(b)};
  for (const KernelDesc& d : variants) {
    EXPECT_NE(d, b);
    EXPECT_NE(desc_hash(d), desc_hash(b));
  }
  for (size_t i = 0; i < 14; ++i) names.insert(instance_name(variants[i]));
  EXPECT_EQ(names.size(), 15u) << "instance names must be unique per descriptor field";
}

TEST(JitDesc, Validation) {
  EXPECT_TRUE(validate(base_desc()).is_ok());
  KernelDesc d = base_desc();
  d.cols = 7168 + 32;
  EXPECT_NE(validate(d).message().find("multiple of 256"), std::string::npos);
  d = base_desc();
  d.act = GgmlType::Q8_0;
  EXPECT_NE(validate(d).message().find("dotted with q8_K"), std::string::npos);
  d = base_desc();
  d.row_block = 3;
  EXPECT_FALSE(validate(d).is_ok());
  d = default_gemv_desc(GgmlType::Q5_0, 2048, {IsaLevel::kAvx512Vnni, Tuning::kZen5, true});
  ASSERT_EQ(d.gfni, 1);
  d.gfni = 2;  // plan files carry descriptors as raw bytes
  EXPECT_NE(validate(d).message().find("GFNI flag 2 is not 0 or 1"), std::string::npos) << validate(d).message();
  d = base_desc();
  d.weight = GgmlType::IQ2_XS;
  EXPECT_FALSE(validate(d).is_ok());
  d = base_desc();
  d.prefetch = 100;
  EXPECT_FALSE(validate(d).is_ok());
  // Prefetch stride: a power of two in 64..4096, only with a distance, above 64 only where a
  // kernel implements it (the AVX-512 row-per-lane GEMV; base_desc is Q4_K).
  d = base_desc();
  d.prefetch_stride = 64;
  EXPECT_TRUE(validate(d).is_ok());
  d.prefetch_stride = 1024;
  EXPECT_NE(validate(d).message().find("row-per-lane"), std::string::npos) << validate(d).message();
  d = default_gemv_desc(GgmlType::BF16, 7168, {IsaLevel::kAvx512, Tuning::kZen4});
  EXPECT_EQ(d.prefetch_stride, 1024);
  EXPECT_EQ(d.prefetch, 16384);
  EXPECT_TRUE(validate(d).is_ok());
  EXPECT_EQ(instance_name(d), "gemv_bf16_bf16_f32_16r__avx512_zen4_k7168_pf16384_ps1024_s4_v1");
  for (int bad : {32, 96, 8192}) {
    d.prefetch_stride = static_cast<uint16_t>(bad);
    EXPECT_NE(validate(d).message().find("power of two"), std::string::npos) << bad;
  }
  d.prefetch_stride = 1024;
  d.prefetch = 0;
  EXPECT_NE(validate(d).message().find("without a prefetch distance"), std::string::npos);
  // Prefetch hint: prefetcht0 or prefetchnta, the latter only with a distance.
  d = base_desc();
  d.prefetch_hint = PrefetchHint::kNta;
  EXPECT_TRUE(validate(d).is_ok());
  EXPECT_EQ(instance_name(d), "gemv_q4k_q8k_f32_8r__avx512vnni_zen5_k7168_pf3072_nta_s2_v1");
  d.prefetch = 0;
  EXPECT_NE(validate(d).message().find("prefetchnta without a prefetch distance"), std::string::npos);
  d = base_desc();
  d.prefetch_hint = static_cast<PrefetchHint>(2);
  EXPECT_NE(validate(d).message().find("prefetch hint 2"), std::string::npos) << validate(d).message();
  // Without AVX-512 the plain formats keep no software prefetch and Q8_0 every line.
  d = default_gemv_desc(GgmlType::BF16, 7168, {IsaLevel::kAvx2, Tuning::kZen4});
  EXPECT_EQ(d.prefetch, 0);
  EXPECT_EQ(d.prefetch_stride, 0);
  d = default_gemv_desc(GgmlType::Q8_0, 7168, {IsaLevel::kAvx512, Tuning::kZen4});
  EXPECT_EQ(d.prefetch_stride, 0);
  EXPECT_TRUE(validate(d).is_ok());
  d = default_gemm_desc(GgmlType::Q8_0, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4});
  EXPECT_EQ(d.prefetch_stride, 0);
  EXPECT_TRUE(validate(d).is_ok());
  // Streams: 1, 2 or 4; more than one only for the Q4_K GEMV and gate+up kernels (AVX2 and up),
  // the AVX-512 VNNI Q8_0, Q4_0 and Q5_K GEMVs and the AVX-512 plain-format GEMVs.
  d = base_desc();
  EXPECT_EQ(d.streams, 2);  // Zen 5's Q4_K (PrefetchDefaultsPerTuning)
  for (int ns : {1, 4}) {
    d.streams = static_cast<uint8_t>(ns);
    EXPECT_TRUE(validate(d).is_ok()) << ns;
  }
  for (int bad : {0, 3, 8}) {
    d.streams = static_cast<uint8_t>(bad);
    EXPECT_NE(validate(d).message().find("is not 1, 2 or 4"), std::string::npos) << bad;
  }
  // Zen 4 streams Q4_K and Q5_K 2 at a time from AVX-512 up, the other formats 4.
  EXPECT_EQ(default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx512, Tuning::kZen4},
                              KernelOp::kGateUpSwiglu).streams, 2);
  EXPECT_EQ(default_gemv_desc(GgmlType::Q8_0, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4}).streams, 4);
  EXPECT_EQ(default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx2, Tuning::kZen4}).streams, 4);
  EXPECT_EQ(default_gemv_desc(GgmlType::Q4_0, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4},
                              KernelOp::kGemvAccumulate).streams, 4);
  EXPECT_EQ(default_gemv_desc(GgmlType::Q5_K, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4}).streams, 2);
  EXPECT_EQ(default_gemv_desc(GgmlType::Q5_K, 7168, {IsaLevel::kAvx512Vnni, Tuning::kGeneric}).streams, 4);
  EXPECT_EQ(default_gemv_desc(GgmlType::F32, 2048, {IsaLevel::kAvx512, Tuning::kZen4}).streams, 4);
  EXPECT_EQ(default_gemv_desc(GgmlType::BF16, 7168, {IsaLevel::kAvx512Bf16, Tuning::kZen4}).streams, 4);
  for (KernelDesc one : {default_gemm_desc(GgmlType::Q4_K, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4}),
                         default_gemv_desc(GgmlType::Q4_K, 7168, {IsaLevel::kScalar, Tuning::kZen4}),
                         default_gemv_desc(GgmlType::Q6_K, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4}),
                         default_gemv_desc(GgmlType::Q8_0, 7168, {IsaLevel::kAvx512, Tuning::kZen4}),
                         default_gemv_desc(GgmlType::BF16, 7168, {IsaLevel::kAvx2, Tuning::kZen4}),
                         default_gemv_desc(GgmlType::Q5_K, 7168, {IsaLevel::kAvx512, Tuning::kZen4}),
                         default_gemm_desc(GgmlType::Q8_0, 7168, {IsaLevel::kAvx512Vnni, Tuning::kZen4})}) {
    EXPECT_EQ(one.streams, 1) << canonical_name(one);
    one.streams = 2;
    EXPECT_NE(validate(one).message().find("stream several row groups"), std::string::npos) << canonical_name(one);
  }
}

TEST(JitRegistry, GeneratesOncePerKeyAcrossThreads) {
  Registry reg;
  KernelDesc d = default_gemv_desc(GgmlType::Q4_K, 512, {isa::host_level(), isa::host_tuning()});
  std::vector<std::thread> threads;
  std::vector<const Kernel*> got(8, nullptr);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Expected<std::shared_ptr<const Kernel>> k = reg.get(d);
      if (k) got[t] = k->get();
    });
  for (auto& th : threads) th.join();
  for (const Kernel* k : got) EXPECT_EQ(k, got[0]);
  ASSERT_NE(got[0], nullptr);
  EXPECT_EQ(reg.generated(), 1);
  EXPECT_EQ(got[0]->name(), instance_name(d));
  d.cols = 1024;
  ASSERT_TRUE(reg.get(d).has_value());
  EXPECT_EQ(reg.generated(), 2);
}

TEST(JitRegistry, RefusesIsaAboveHostAndBadDescriptors) {
  Registry reg;
  if (!isa::host_supports(IsaLevel::kAvx512Bf16)) {
    KernelDesc d = default_gemv_desc(GgmlType::Q4_K, 512, {IsaLevel::kAvx512Bf16, Tuning::kGeneric});
    Expected<std::shared_ptr<const Kernel>> k = reg.get(d);
    ASSERT_FALSE(k.has_value());
    EXPECT_NE(k.error().find("needs avx512bf16"), std::string::npos) << k.error();
  }
  KernelDesc bad = default_gemv_desc(GgmlType::Q4_K, 300, {IsaLevel::kScalar, Tuning::kGeneric});
  EXPECT_FALSE(reg.get(bad).has_value());
  EXPECT_FALSE(reg.get(bad).has_value());  // the failure is cached too
  EXPECT_EQ(reg.generated(), isa::host_supports(IsaLevel::kAvx512Bf16) ? 1 : 2);
}

TEST(JitRegistry, DumpWritesRawMachineCode) {
  Registry reg;
  const IsaLevel top = implemented_levels(GgmlType::Q4_K).back();
  const IsaLevel lvl = isa::host_supports(top) ? top : isa::host_level();
  KernelDesc d = default_gemv_desc(GgmlType::Q4_K, 256, {lvl, Tuning::kGeneric});
  Expected<std::shared_ptr<const Kernel>> k = reg.get(d);
  ASSERT_TRUE(k.has_value()) << k.error();
  const std::string dir = (std::filesystem::temp_directory_path() / ("zenmoe_dump_" + std::to_string(::getpid()))).string();
  Expected<int> n = reg.dump(dir);
  ASSERT_TRUE(n.has_value()) << n.error();
  if ((*k)->code() != nullptr) {
    EXPECT_EQ(*n, 1);
    const std::string path = dir + "/" + instance_name(d) + ".bin";
    ASSERT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(std::filesystem::file_size(path), (*k)->code_size());
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    const int first = std::fgetc(f);
    std::fclose(f);
    EXPECT_EQ(first, 0x55);  // push rbp
  }
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(reg.dump("/proc/zenmoe_no_such_dir/x").has_value());
}

}  // namespace
}  // namespace zenmoe
