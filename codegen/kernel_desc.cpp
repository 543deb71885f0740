#include "codegen/kernel_desc.h"

#include <cstring>

#include "kernels/hash.h"

namespace zenmoe {

bool operator==(const KernelDesc& a, const KernelDesc& b) {
  return std::memcmp(&a, &b, sizeof(KernelDesc)) == 0;
}

uint64_t desc_hash(const KernelDesc& d) { return fnv1a(&d, sizeof d); }

const char* format_short_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::BF16: return "bf16";
    case GgmlType::Q4_0: return "q40";
    case GgmlType::Q5_0: return "q50";
    case GgmlType::Q8_0: return "q80";
    case GgmlType::Q4_K: return "q4k";
    case GgmlType::Q5_K: return "q5k";
    case GgmlType::Q6_K: return "q6k";
    case GgmlType::Q8_K: return "q8k";
    default: return "unknown";
  }
}

namespace {

const char* op_name(KernelOp op) {
  switch (op) {
    case KernelOp::kGemv: return "gemv";
    case KernelOp::kGemvAccumulate: return "gemvacc";
    case KernelOp::kGateUpSwiglu: return "gateup";
    case KernelOp::kGemm: return "gemm";
    case KernelOp::kGemmAccumulate: return "gemmacc";
  }
  return "unknown";
}

const char* out_name(OutType o) {
  switch (o) {
    case OutType::kF32: return "f32";
    case OutType::kQ8K: return "q8k";
  }
  return "unknown";
}

// Activation format each weight format is dotted with on the CPU (spec §2.12).
bool activation_for(GgmlType w, GgmlType* act) {
  switch (w) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: *act = GgmlType::Q8_K; return true;
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: *act = GgmlType::Q8_0; return true;
    case GgmlType::F16: case GgmlType::BF16: case GgmlType::F32: *act = w; return true;
    default: return false;
  }
}

// The generators that honour a prefetch stride above 64: the AVX-512 row-per-lane GEMV
// (codegen/x64/gemv_rows16_avx512.cpp) for the plain formats, and for Q8_0 / Q4_0 / Q5_0 from
// VNNI up.
bool strided_prefetch_kernel(GgmlType weight, isa::IsaLevel level) {
  return (is_plain_format(weight) && level >= isa::IsaLevel::kAvx512) ||
         (is_block32_format(weight) && level >= isa::IsaLevel::kAvx512Vnni);
}
bool strided_prefetch_kernel(const KernelDesc& d) {
  return (d.op == KernelOp::kGemv || d.op == KernelOp::kGemvAccumulate) && strided_prefetch_kernel(d.weight, d.isa);
}

// The generators that walk several row groups side by side (JitKernelBase::stream_groups).
bool multi_stream_kernel(GgmlType weight, KernelOp op, isa::IsaLevel level) {
  if (is_gemm(op)) return false;
  return (weight == GgmlType::Q4_K && level >= isa::IsaLevel::kAvx2) ||
         ((is_block32_format(weight) || weight == GgmlType::Q5_K) && level >= isa::IsaLevel::kAvx512Vnni) ||
         (is_plain_format(weight) && level >= isa::IsaLevel::kAvx512);
}
bool multi_stream_kernel(const KernelDesc& d) { return multi_stream_kernel(d.weight, d.op, d.isa); }

// Zen 5 tuning at an AVX-512 level: 2 streams for the multi-stream GEMVs (gemv_streams) and
// Q4_K's own prefetch distance (prefetch_distance).
bool zen5_avx512(isa::Target target) {
  return target.tuning == isa::Tuning::kZen5 && target.level >= isa::IsaLevel::kAvx512;
}

// Zen 4 tuning at an AVX-512 level, for the K-quant GEMVs that stream super-block records (Q4_K
// and Q5_K): 2 streams, prefetchnta, and their own distances (gemv_streams, prefetch_hint,
// prefetch_distance).
bool zen4_kquant_stream(GgmlType weight, isa::Target target) {
  return target.tuning == isa::Tuning::kZen4 && target.level >= isa::IsaLevel::kAvx512 &&
         (weight == GgmlType::Q4_K || weight == GgmlType::Q5_K);
}

// The AVX-512 row-per-lane GEMVs that prefetch every line 4 KiB ahead instead of one line per
// KiB (see prefetch_stride): all of them on the generic tuning (CPUs other than Zen 4 / Zen 5),
// and Q5_0 on Zen 5.
bool every_line_prefetch(GgmlType weight, isa::Target target) {
  if (!strided_prefetch_kernel(weight, target.level)) return false;
  return target.tuning == isa::Tuning::kGeneric ||
         (weight == GgmlType::Q5_0 && target.tuning == isa::Tuning::kZen5);
}

}  // namespace

std::string canonical_name(const KernelDesc& d) {
  std::string s = op_name(d.op);
  s += '_';
  s += format_short_name(d.weight);
  s += '_';
  s += format_short_name(d.act);
  s += '_';
  s += out_name(d.out);
  s += '_' + std::to_string(d.row_block) + "r__";
  s += isa::level_name(d.isa);
  s += '_';
  s += isa::tuning_name(d.tuning);
  return s;
}

std::string instance_name(const KernelDesc& d) {
  std::string s = canonical_name(d);
  s += "_k" + std::to_string(d.cols) + "_pf" + std::to_string(d.prefetch);
  if (d.prefetch_stride > 64) s += "_ps" + std::to_string(d.prefetch_stride);
  if (d.prefetch_hint == PrefetchHint::kNta) s += "_nta";
  if (d.streams != 1) s += "_s" + std::to_string(d.streams);
  if (d.gfni) s += "_gfni";
  s += "_v" + std::to_string(d.version);
  if (static_cast<int>(d.prefetch_hint) > 1) s += "_h" + std::to_string(static_cast<int>(d.prefetch_hint));
  return s;
}

Status validate(const KernelDesc& d) {
  const std::string name = canonical_name(d);
  GgmlType act{};
  if (!activation_for(d.weight, &act))
    return Error{name + ": weight format " + type_name(d.weight) + " has no GEMV kernel"};
  if (d.act != act)
    return Error{name + ": weight format " + type_name(d.weight) + " is dotted with " +
                 type_name(act) + " activations, not " + type_name(d.act)};
  if (static_cast<int>(d.op) >= kKernelOpCount) return Error{name + ": unknown op"};
  const bool fused = d.op == KernelOp::kGateUpSwiglu;
  if (d.out != (fused ? OutType::kQ8K : OutType::kF32))
    return Error{name + (fused ? ": gate+up+SwiGLU writes Q8_K" : ": GEMV kernels write f32")};
  if (fused && d.weight != GgmlType::Q4_K)
    return Error{name + ": fused gate+up+SwiGLU exists for q4_K weights only"};
  if (fused && 512 % d.row_block != 0)
    return Error{name + ": fused gate+up+SwiGLU needs a row block dividing 512"};
  if (is_gemm(d.op) && d.cols > kGemmMaxCols)
    return Error{name + ": GEMM kernels take K up to " + std::to_string(kGemmMaxCols) + ", not " +
                 std::to_string(d.cols)};
  if (is_gemm(d.op) && d.prefetch != 0)
    return Error{name + ": GEMM kernels take no prefetch distance (each prefetches its next row block)"};
  if (static_cast<int>(d.isa) >= isa::kIsaLevelCount) return Error{name + ": unknown ISA level"};
  if (static_cast<int>(d.tuning) >= isa::kTuningCount) return Error{name + ": unknown tuning"};
  const TypeGeometry* g = type_geometry(d.weight);
  if (d.cols <= 0 || d.cols % g->block_elems != 0 || d.cols > (1 << 20))
    return Error{name + ": K = " + std::to_string(d.cols) + " is not a positive multiple of " +
                 std::to_string(g->block_elems) + " up to 2^20"};
  const bool rows16 = is_block32_format(d.weight) || is_plain_format(d.weight) || d.weight == GgmlType::Q5_K ||
                      d.weight == GgmlType::Q6_K;
  if (rows16 && d.row_block != 16)
    return Error{name + ": " + type_name(d.weight) + " kernels block 16 rows (one per vector lane)"};
  if (d.row_block < 2 || d.row_block > 16 || d.row_block % 2 != 0)
    return Error{name + ": row block " + std::to_string(d.row_block) + " is not even in 2..16"};
  if (d.prefetch < 0 || d.prefetch > (1 << 16) || d.prefetch % 64 != 0)
    return Error{name + ": prefetch distance " + std::to_string(d.prefetch) +
                 " is not a multiple of 64 in 0..65536"};
  if (d.prefetch_stride != 0) {
    const int ps = d.prefetch_stride;
    if (d.prefetch == 0)
      return Error{name + ": prefetch stride " + std::to_string(ps) + " without a prefetch distance"};
    if (ps < 64 || ps > 4096 || (ps & (ps - 1)) != 0)
      return Error{name + ": prefetch stride " + std::to_string(ps) + " is not a power of two in 64..4096"};
    if (ps > 64 && !strided_prefetch_kernel(d))
      return Error{name + ": only the AVX-512 row-per-lane GEMV kernels prefetch less than every line"};
  }
  if (d.streams != 1 && d.streams != 2 && d.streams != 4)
    return Error{name + ": " + std::to_string(d.streams) + " streams is not 1, 2 or 4"};
  if (d.streams != 1 && !multi_stream_kernel(d))
    return Error{name + ": only the Q4_K GEMV and gate+up kernels (AVX2 and up), the AVX-512 VNNI "
                        "Q8_0, Q4_0, Q5_0 and Q5_K GEMVs and the AVX-512 F32, F16 and BF16 GEMVs stream "
                        "several row groups side by side"};
  if (d.gfni > 1) return Error{name + ": GFNI flag " + std::to_string(d.gfni) + " is not 0 or 1"};
  if (d.gfni && !gfni_kernel(d.weight, d.isa, d.op))
    return Error{name + ": only the Q5_0 kernels and the Q5_K GEMV from AVX-512 VNNI up use GFNI"};
  if (d.version != kGeneratorVersion)
    return Error{name + ": generator version " + std::to_string(d.version) + " is not " +
                 std::to_string(kGeneratorVersion)};
  if (d.prefetch_hint != PrefetchHint::kT0 && d.prefetch_hint != PrefetchHint::kNta)
    return Error{name + ": prefetch hint " + std::to_string(static_cast<int>(d.prefetch_hint)) +
                 " is not 0 (prefetcht0) or 1 (prefetchnta)"};
  if (d.prefetch_hint != PrefetchHint::kT0 && d.prefetch == 0)
    return Error{name + ": prefetchnta without a prefetch distance"};
  return Status::ok();
}

KernelDesc default_gemv_desc(GgmlType weight, int32_t cols, isa::Target target, KernelOp op) {
  KernelDesc d;
  d.op = op;
  d.out = op == KernelOp::kGateUpSwiglu ? OutType::kQ8K : OutType::kF32;
  d.weight = weight;
  GgmlType act = weight;
  activation_for(weight, &act);
  d.act = act;
  d.cols = cols;
  d.isa = isa::kernel_level(target.level);
  d.tuning = target.tuning;
  // Row-per-lane layouts (kernels/pack.h) block 16 rows; K-quants block 8 (4 row pairs).
  d.row_block = weight == GgmlType::Q4_K ? 8 : 16;
  d.prefetch = prefetch_distance(weight, target);
  d.prefetch_stride = static_cast<uint16_t>(prefetch_stride(weight, target));
  d.streams = static_cast<uint8_t>(gemv_streams(weight, op, target));
  if (d.prefetch > 0) d.prefetch_hint = prefetch_hint(weight, target);
  d.gfni = target.gfni && gfni_kernel(weight, d.isa, op);
  return d;
}

bool gfni_kernel(GgmlType weight, isa::IsaLevel level, KernelOp op) {
  if (level < isa::IsaLevel::kAvx512Vnni) return false;
  return weight == GgmlType::Q5_0 || (weight == GgmlType::Q5_K && !is_gemm(op) && op != KernelOp::kGateUpSwiglu);
}

PrefetchHint prefetch_hint(GgmlType weight, isa::Target target) {
  // Zen 5 (EPYC, family 1Ah) at AVX-512 levels: prefetchnta against prefetcht0, the same
  // distances and strides. bench model (bench preset plan, 1-token prompt, 64 decoded, two
  // binaries alternated, three rounds): 120.4-122.6 tok/s against 105.6-108.9 at 1 thread
  // (79-80 % of the read-bandwidth probe against 70-71 %) and 207.6-220.5 against 177.5-184.3
  // at 2 threads (75-83 % against 63-68 %). The weights are streamed once per token. bench
  // kernels in the L2 and L3 regimes (the same weights read again and again) moved with the
  // host's load, 71-96 GB/s for Q4_K either way, not with the hint. Other targets were not
  // measured and keep prefetcht0.
  // Zen 4 (EPYC, family 19h): Q4_K and Q5_K take prefetchnta with their 2 streams and
  // distances (see gemv_streams); the other formats keep prefetcht0.
  return zen5_avx512(target) || zen4_kquant_stream(weight, target) ? PrefetchHint::kNta : PrefetchHint::kT0;
}

int gemv_streams(GgmlType weight, KernelOp op, isa::Target target) {
  // One core reading one sequential stream got 10-12 GB/s on this host, four interleaved
  // streams 14-19 GB/s (a plain AVX-512 read loop). The Q4_K GEMV, one stream per row group,
  // ran at one stream's speed; streaming 2 or 4 groups side by side took it from 13.6 to
  // 16.5-17.6 GB/s (bench kernels, DRAM regime, 1 thread, K = 2048 and 7168).
  // Q8_0 and Q4_0 (AVX-512 VNNI): 11.0-11.4 -> 11.9-13.4 GB/s at 1 thread, 16.5-19.5 ->
  // 23.5-24.5 GB/s at 2 (Kimi expert gate shape). The AVX-512 VNNI Q6_K GEMV streamed the
  // same with 4 groups side by side as with one (11-13 GB/s either way), so it keeps one.
  // The AVX-512 VNNI Q5_K GEMV, 4 streams against 1 (bench kernels, DRAM regime, 1 thread,
  // median of per-round ratios): 1.10 at 2048 -> 7168 (4 rounds), 1.06 at 4608 -> 2048 and
  // 1.00 at 7168 -> 2048 (6 rounds); 2 threads: 1.05 and 1.01 (3 rounds).
  // The AVX-512 F32, F16 and BF16 GEMVs, same method, fraction of the read bandwidth: F32
  // 1.09-1.23 at 7168 -> 2048 and 0.89-1.45 (GB/s 1.14-1.37) at the 2048 -> 64 router (3
  // rounds), 2 threads 1.11-1.17 and 1.02-1.09; BF16 1.14-1.18 and F16 1.13-1.16 at 1 thread.
  // The AVX2 Q4_K GEMV (bench kernels --isa avx2): 65-72 % of the read bandwidth with one
  // stream, 70-81 % with 4 (three rounds, two shapes).
  // Zen 5 (EPYC, family 1Ah) at AVX-512 levels: 2 streams.
  // - Q4_K: 2 streams 3072 bytes ahead against 4 streams 1536 bytes ahead (the same bytes in
  //   flight), three rounds in turn. bench kernels, DRAM regime, GEMV and fused gate/up at the
  //   bench expert, 2048 -> 768 and Kimi expert shapes: +3 to +19 points of the read-bandwidth
  //   probe at 2 threads in every pair, -6 to +8 at 1 thread (mostly ahead). bench model (bench
  //   preset, 64-token prompt, 128 decoded): decode 107-126 tok/s against 108-118 at 1 thread
  //   (75-84 % of the probe against 68-72 %) and 179-185 against 159-165 at 2 (71-73 % against
  //   61-62 %). 1 stream 6144 bytes ahead lost at 1 thread (79-91 %).
  // - Q5_K, 4096 bytes ahead (Kimi expert gate and down shapes, bench expert; two rounds):
  //   92-98 % against 84-92 % at 1 thread, 83-95 % against 69-90 % at 2. 6144 bytes ahead, or 4
  //   streams 2048 ahead, did no better.
  // - Kimi and bench expert shapes, two rounds: F16 96-98 % against 86-91 % at 1 thread and
  //   86-92 % against 77-87 % at 2; Q8_0 98-101 % against 88-98 % at 1 thread; Q4_0 85-93 %
  //   against 81-90 %; BF16 and F32 even (93-117 % either way).
  // Zen 4 (EPYC, family 19h) at AVX-512 levels: Q4_K and Q5_K with 2 streams and prefetchnta
  // against the 4 streams, prefetcht0, 4096 bytes ahead they had (bench kernels, DRAM regime, 1
  // thread, fractions of the read probe; three rounds in turn, every pair the same way):
  // - Q4_K, 1024 bytes ahead: GEMV and fused gate/up at the bench expert, bench dense and Kimi
  //   expert down shapes 87-101 % against 50-64 %; 1536 ahead 83-97 %, 2048 ahead 78-90 %, one
  //   stream 1024 ahead 64-92 %. bench model (bench preset plan, 1-token prompt, 64 decoded, the
  //   variants in turn, medians of four or five runs): decode 92.7-97.1 tok/s at 1 thread
  //   (82-83 % of the probe) against 58-62 (57-59 %); 512, 768 and 896 bytes ahead 74-78 %, 1280 and
  //   1536 76-83 %, 2048 73 %, 3072 (Zen 5's) 68-72 %; 4 streams 1024 ahead 79 %, 512 ahead 62 %;
  //   prefetcht0 instead of prefetchnta within the noise (80.6-81.4 %).
  // - Q5_K, 2048 bytes ahead (bench dense down and Kimi expert gate shapes): 84-89 % against
  //   43-45 %; 1024 ahead 73-77 %, 4096 ahead 71-74 %, one stream 4096 ahead 73-78 %.
  // The block32 and plain formats stay at 4 streams: Q8_0, Q5_0 and BF16 with 2 streams (either
  // hint) were within the noise or lower (Kimi and bench expert gate shapes, two rounds).
  if (!multi_stream_kernel(weight, op, target.level)) return 1;
  return zen5_avx512(target) || zen4_kquant_stream(weight, target) ? 2 : 4;
}

int prefetch_stride(GgmlType weight, isa::Target target) {
  // One line per KiB for the formats whose AVX-512 kernel streams a row block as one long run
  // (F32, F16, BF16, Q8_0, Q4_0), measured in turn against every line 4 KiB ahead and against
  // no software prefetch (bench kernels, DRAM regime, Kimi expert and dense shapes, three
  // rounds): +17-47 % at 1 thread and +6-48 % at 2 threads for the first four. A line per 512
  // bytes or per 2 KiB gained less than half as much. Q4_0 lost 7-13 % at 2 threads that way
  // while its scales were a separate region; with one record per block it gained 13-34 % at 1
  // thread and 10-50 % at 2 (Kimi expert shapes, three rounds). The other kernels prefetch
  // whole records, spread over the work on each.
  // Those figures came from an earlier host; the Zen tunings keep them. On the Intel Xeon host
  // (generic tuning) every line 4 KiB ahead won instead, in every case of `bench kernels
  // --formats f32,f16,bf16,q8_0 --shapes kimi_expert_gate_up,bench_expert_gate_up --regimes
  // dram -t 1,2`, two rounds each way; as fractions of a probe without software prefetch, e.g.
  // Q8_0 at the Kimi expert shape 79-81 % -> 103-104 % at 1 thread, BF16 at 2 threads
  // 78-83 % -> 99-102 %, F16 88-92 % -> 106-107 % at 1 thread, F32 95 % -> 119-120 %.
  // On a Zen 5 host (EPYC, family 1Ah; `bench kernels --formats q8_0,q4_0,bf16,f16,f32 --shapes
  // kimi_expert_gate_up,bench_expert_gate_up --regimes dram -t 1,2`, two rounds each way, as
  // fractions of the prefetching probe) the stride kept its lead at 1 thread for Q8_0
  // (95-99 % against 92-93 %), BF16 (97-98 % against 88-92 %) and F32 (97-100 % against
  // 88-92 %); F16 was even. Q4_0 went the other way while its code chunks straddled cache
  // lines in every other block (every line 4 KiB ahead read 87-89 % against 74-82 % at 1
  // thread); with every chunk one aligned line (plan version 7) the stride won back: 16 KiB
  // ahead against every line 4 KiB ahead, six rounds in turn, 1.04-1.45x (median 1.27) at 1
  // thread and four rounds 0.99-1.22x (median 1.19) at 2, Kimi expert gate and down shapes
  // and the bench expert's (bench kernels --formats q4_0 --regimes dram).
  // Q5_0 on a Zen 5 host (its fifth bits take a shift, a mask and a vpternlogd per half chunk,
  // so it does more work per line than Q4_0): every line 4 KiB ahead read 79-106 % of the probe
  // against 63-80 % with one line per KiB 16 KiB ahead, in every pair of two rounds (bench kernels
  // --formats q5_0 --shapes 2048x512,7168x2048,128x8192 --regimes dram -t 1,2; 128x8192 is
  // the absorbed attention's attn_k_b, which Q4_K models hold in Q5_0); every line 3 KiB ahead
  // was within the noise of 4 KiB, 2 KiB ahead 1-8 points lower and 6-8 KiB ahead 5-12 lower.
  const bool sparse = is_plain_format(weight) || is_block32_format(weight);
  return sparse && strided_prefetch_kernel(weight, target.level) && !every_line_prefetch(weight, target) ? 1024 : 0;
}

int prefetch_distance(GgmlType weight, isa::Target target) {
  if (target.level == isa::IsaLevel::kScalar) return 0;
  // Measured with paired runs (each distance timed in turn, three to eight rounds, the median
  // of the per-round ratios; bench kernels, DRAM regime, Kimi and bench expert shapes):
  // - One line per KiB (prefetch_stride) goes 16 KiB ahead. For BF16, 8, 16 and 32 KiB were
  //   within 7 % of each other; for Q8_0, 8 KiB was 8 % slower to 12 % faster (no clear winner).
  // - Without a stride, F32, F16 and BF16 do little work per cache line and ran best with no
  //   software prefetch: every line 4 KiB ahead was 6-23 % slower at 1 thread (an earlier
  //   host; the generic tuning prefetches every line 4 KiB ahead, see prefetch_stride).
  // - Q6_K's 3392-byte records need 8 KiB: +29-33 % over 4 KiB (an earlier host: 50 % of the
  //   read bandwidth at 4 KiB, 70 % at 8 KiB, 64-67 % at 10-12 KiB).
  // - Q4_K: 4 KiB was 6-11 % faster than 8 KiB at 1 and 2 threads (2-3 KiB within 5 %). An
  //   earlier host had 8 KiB ahead by 6 points at K = 2048 and equal elsewhere.
  // - Q5_K, and Q4_0 and Q8_0 where they prefetch every line, keep the base distance: 4 KiB
  //   beat 2 KiB and none; 8 KiB was within 8 % (slower for Q5_K).
  // - With each record's prefetches spread over its work (jit_base.h), Q4_K at 2, 4, 8 and
  //   16 KiB and Q6_K at 4, 8 and 16 KiB were timed in turn again (three rounds): 4 and 8 KiB
  //   stay the best or within the noise.
  // - Zen 5 (EPYC, family 1Ah), Q4_K from AVX-512 up, with 4 streams: base distances 4096,
  //   2048, 1536 and 1280 timed in turn (three rounds; Kimi expert and dense shapes and the bench
  //   expert's, GEMV and fused gate/up, 1 and 2 threads). 1536 read 94-96 % of the probe at the
  //   Kimi expert shape at 1 thread against 88-90 % at 4096, 86-91 % against 81-91 % at 2
  //   threads, and 85-89 % against 72-77 % at the bench expert shape; 2048 was within a few
  //   points of it and 1280 no better. Q6_K lost 10-15 points at half its distance and Q5_K
  //   and Q4_0 gained nothing, so they keep theirs. With 2 streams (gemv_streams) the same
  //   bytes in flight, 3072 per stream, beat 1024, 1536, 2048 and 4096.
  if (prefetch_stride(weight, target) > 64) return 16384;
  // - Zen 4 (family 19h), Q4_K and Q5_K from AVX-512 up: 1024 and 2048 bytes ahead with 2
  //   streams and prefetchnta (measured with them; see gemv_streams). Q6_K on Zen 4 kept its
  //   8 KiB: 4096 and 2048 bytes ahead read 57-71 % and 51-52 % of the probe against 80-85 %.
  if (weight == GgmlType::Q4_K && zen5_avx512(target)) return 3072;
  if (zen4_kquant_stream(weight, target)) return weight == GgmlType::Q4_K ? 1024 : 2048;
  if (is_plain_format(weight) && !every_line_prefetch(weight, target)) return 0;
  const int base = isa::tuning_hints(target.tuning).prefetch_distance;
  return weight == GgmlType::Q6_K ? 2 * base : base;
}

KernelDesc default_gemm_desc(GgmlType weight, int32_t cols, isa::Target target, KernelOp op) {
  KernelDesc d = default_gemv_desc(weight, cols, target, KernelOp::kGemv);
  d.op = op;
  d.prefetch = 0;
  d.prefetch_stride = 0;
  d.prefetch_hint = PrefetchHint::kT0;
  d.streams = 1;
  d.gfni = target.gfni && gfni_kernel(weight, d.isa, op);
  return d;
}

}  // namespace zenmoe
