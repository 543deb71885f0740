// The one weight packer: repacks GGUF rows once into the layout the GEMV kernels stream,
// and a scalar reference that computes the GEMV from that packed layout. Used by the
// runtime, the tests and the benchmarks alike.
//
// Rows are grouped by `row_block` (R, even). A group's bytes are contiguous and 64-byte
// aligned; rows beyond `rows` in the last group are zero. K-quant groups hold one
// contiguous record per super-block b (S = K/256 of them), so a group streams from memory as
// a single sequential run (code and scale regions read side by side cost about a third of
// one core's DRAM bandwidth):
//
// Q4_K (R rows, record b at b*R*144, group stride = round_up(S*R*144, 64): as many bytes
// as the GGUF blocks; the kernels use R = 8, 1152-byte records of 18 whole cache lines):
//   codes  at +0:         [R/2 pairs][4 chunks][64 bytes]. In chunk c of pair (A, B),
//                         the 32-bit lane l = 2s + h (h = 0 row A, 1 row B; sub-block
//                         s = 0..7) holds in byte t (0..3) the code of weight 32s+4c+t in
//                         its low nibble and of weight 32s+4(c+4)+t in its high nibble.
//                         Every lane keeps one (row, sub-block) in every chunk, so one
//                         scale vector serves all of a super-block's dot products.
//   scales at +R*128:     [R/2][24 bytes], the 6-bit scale sc and min m of spec §2.5 per
//                         lane l = 2s + h: bytes 0..15 hold sc[l] | (m[l] & 3) << 6, and
//                         the 32-bit word h at byte 16 + 4h holds m[2s+h] >> 2 in bits
//                         4s..4s+3. One zero-extension gives sc (a mask) and m's low bits
//                         (a shift); the high bits come from one 64-bit broadcast, a
//                         per-lane right shift by 4s and a left shift by 2, joined to the
//                         low bits under the 6-bit mask by one vpternlogd. Expanded
//                         to a byte each (32 bytes per pair, 148 per row and super-block)
//                         they made every token read 2.8 % more than the GGUF holds.
//   d      at +R*140:     [2][R] f16: d of the R rows, then dmin of the R rows.
//
// Row block 16, one row per 32-bit lane of a 512-bit vector (nb = K/32 blocks):
// Q8_0: one 544-byte record per block (group stride round_up(nb*544, 64)): codes [8 chunks]
//       [16 rows][4 bytes] (byte t of chunk c = q[4c+t] + 128) and d [16 rows] f16.
// Q4_0: one 288-byte record per block (group stride round_up(nb*288, 64)): codes [4 chunks]
//       [16 rows][4 bytes] (byte t of chunk c: low nibble = code of weight 4c+t, high nibble =
//       code of weight 16+4c+t, codes 0..15 unbiased) and d [16 rows] f16.
//       Codes and scales side by side in one stream: a separate scale region read alongside
//       the codes streamed 20-35 % slower from DRAM.
// Q5_0: one 352-byte record per block (22 bytes a row, as in the GGUF): the fifth bits [16
//       rows][4 bytes] (bit c of byte t: weight 4c+t, bit 4+c: weight 16+4c+t; one shift and a
//       mask put chunk c's into bit 4 of each byte), then the Q4_0 codes of the low four bits,
//       then d [16 rows] f16. Codes 0..31, unbiased (the weight is code - 16). The kernels need
//       the fifth bits first; with them after the codes each record was read out of address
//       order, and on a Zen 4 host the GEMV streamed 70-74 % of the read probe from DRAM against
//       79-94 % this way (bench kernels --formats q5_0 --regimes dram -t 1, 2048x2048, 128x8192
//       and the bench expert, old and new binary in turn, three rounds, every pair ahead).
//   In all three, an even block's record holds its codes (and fifth bits), then d; an odd
//   block's holds d, then its codes. A record is 8.5 (4.5, 5.5) cache lines, so codes after
//   d in every record would put every other block's code chunks across two lines each; this
//   way every chunk is one aligned line. L2-resident AVX-512 GEMV at 1 thread, Kimi and
//   bench expert shapes (bench kernels --formats q8_0,q4_0 --regimes l2,dram, two rounds):
//   Q8_0 136-141 -> 163-169 GB/s, Q4_0 100-105 -> 114-120; from DRAM unchanged.
// F32 / F16: [K][16 rows] elements (column-major inside the group).
// BF16: [ceil(K/2) column pairs][16 rows][2]: the 32-bit lane of row i in pair j holds
//       column 2j in its low half and 2j+1 in its high half (zero past an odd K). A 16-bit
//       shift or a mask widens either half to f32 in place, and the lanes are the bf16 pairs
//       vdpbf16ps takes.
// Q6_K (S = K/256 super-blocks; 6-bit codes c = q + 32 in 0..63; sub-block s = 0..15 of 16):
//   one 3392-byte record per super-block (53 cache lines; group stride S*3392), four quarters
//   of 832 bytes (sub-blocks 4q .. 4q+3), then d:
//   832q       scales [4 sub-blocks][16 rows] int8 (one line)
//   832q + 64  [4 sub-blocks][3 chunks m = 0..2][16 rows][4 bytes]: byte t of row i in chunk m
//              of sub-block s holds c(16s+4m+t) in bits 0-5 and bits 2m..2m+1 of c(16s+12+t)
//              in bits 6-7. The three chunks of a sub-block give its first 12 codes with one
//              mask each, and its last 4 from their top bits (three shifts, two selects and a
//              mask): 16 vector operations per sub-block against 25 with the former low-nibble
//              and high-bit planes. L2-resident GEMV at 1 thread, Kimi expert shapes (bench
//              kernels --formats q6_K --regimes l2, three rounds in turn): AVX-512 108 -> 125
//              GB/s, AVX2 35 -> 41; from DRAM unchanged (90-100 % of the probe either way).
//   3328       d [16 rows] f16; 3360..3391 zero.
//   The kernels read a record in address order. With all scales after the codes (3072), each
//   record's scale line was read before most of its code lines: on a Zen 4 host (bench kernels
//   --formats q6_K --regimes dram, 2048x2048, bench expert and 7168x2048, old and new binary in
//   turn, three rounds) 76-83 % of the read probe before, 80-91 % after at 1 thread (8 of 9
//   pairs ahead); 2 threads, four rounds, 8 of 8 pairs ahead.
// Q5_K (S super-blocks, sub-block s = 0..7 of 32; 5-bit codes c in 0..31): one contiguous
//   2880-byte record per super-block (group stride S*2880), at record offsets
//   0     [8 sub-blocks][5 chunks m = 0..4][16 rows][4 bytes]: byte t of row i in chunk m of
//         sub-block s holds c(32s+4m+t) in bits 0-4 and bits 3m..3m+2 of
//         e = c(32s+20+t) | c(32s+24+t) << 5 | c(32s+28+t) << 10 in bits 5-7. A sub-block's
//         first 20 codes are one mask per chunk, its last 12 come from the chunks' top bits
//         (JitKernelBase::q5k_last_code): 33 vector operations per sub-block against 42 with
//         the former low-nibble and fifth-bit planes. L2-resident GEMV at 1 thread, Kimi and
//         bench expert shapes (bench kernels --formats q5_K --regimes l2, three rounds in
//         turn): AVX-512 97-101 -> 115-121 GB/s, AVX2 35 -> 43-46; from DRAM unchanged.
//   2560  scales [8 sub-blocks][16 rows] u8, 2688 mins [8][16] u8 (6-bit values expanded)
//   2816  d [16 rows] f16, 2848 dmin [16 rows] f16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe {

// Q4_K records (see the layout above): bytes per row and super-block, a row pair's scale
// bytes, and the offsets of the scales and of d inside a record of R rows.
inline constexpr int64_t kQ4KPackedRowBytes = 144;
inline constexpr int64_t kQ4KPairScaleBytes = 24;
inline constexpr int64_t q4k_scales_offset(int64_t R) { return R * 128; }
inline constexpr int64_t q4k_d_offset(int64_t R) { return R * 128 + R / 2 * kQ4KPairScaleBytes; }
static_assert(q4k_d_offset(8) + 4 * 8 == 8 * kQ4KPackedRowBytes);

// Q8_0 / Q4_0 / Q5_0 row-block-16 records (see the layout above): the code bytes of a record
// (Q5_0: with its fifth bits), and the whole record (codes and the 16 rows' d).
inline constexpr int64_t rows16_code_bytes(GgmlType f) {
  return f == GgmlType::Q8_0 ? 512 : f == GgmlType::Q5_0 ? 320 : 256;
}
inline constexpr int64_t rows16_record_bytes(GgmlType f) { return rows16_code_bytes(f) + 32; }
// Offsets inside the record of block b (by b's parity, see the layout above): codes, and d.
inline constexpr int64_t rows16_codes_in_record(int64_t b) { return b % 2 == 0 ? 0 : 32; }
inline constexpr int64_t rows16_d_in_record(GgmlType f, int64_t b) { return b % 2 == 0 ? rows16_code_bytes(f) : 0; }

// Q5_0 record: the fifth bits, then low-nibble chunk c (0..3), from the record's codes.
inline constexpr int64_t kQ5_0FifthBits = 0;
inline constexpr int64_t q5_0_chunk_offset(int c) { return 64 + 64 * c; }

// Q5_K record offset (see the layout above) of chunk m (0..4) of sub-block s (0..7).
inline constexpr int64_t q5k_chunk_offset(int s, int m) { return 320 * s + 64 * m; }

// Q6_K record offset (see the layout above) of chunk m (0..2) of sub-block s (0..15).
inline constexpr int64_t q6k_chunk_offset(int s, int m) { return 832 * (s / 4) + 64 + 192 * (s % 4) + 64 * m; }
// Q6_K record offset of sub-block s's 16 int8 scales (one per row), and of the rows' d.
inline constexpr int64_t q6k_scale_offset(int s) { return 832 * (s / 4) + 16 * (s % 4); }
inline constexpr int64_t kQ6KDOffset = 3328;

struct PackLayout {
  GgmlType format = GgmlType::Q4_K;
  int32_t row_block = 8;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t groups = 0;        // ceil(rows / row_block)
  int64_t group_stride = 0;  // bytes between consecutive row groups (multiple of 64)
  int64_t total_bytes = 0;   // groups * group_stride
};

// Whether the packer handles this format, and the layout it would produce.
bool pack_supported(GgmlType format);
Expected<PackLayout> pack_layout(GgmlType format, int32_t row_block, int64_t rows, int64_t cols);

struct AlignedFree {
  void operator()(uint8_t* p) const;
};

struct PackedWeights {
  PackLayout layout;
  std::unique_ptr<uint8_t[], AlignedFree> data;  // 64-byte aligned, layout.total_bytes
  const uint8_t* group(int64_t g) const { return data.get() + g * layout.group_stride; }
};

// Packs `rows` rows of `cols` elements in GGUF layout (`src`, `src_bytes` long) into `dst`
// (layout.total_bytes, 64-byte aligned). Errors name the problem; nothing is read past src_bytes.
Status pack_into(const PackLayout& layout, const void* src, size_t src_bytes, uint8_t* dst);
Expected<PackedWeights> pack_weights(GgmlType format, int32_t row_block, const void* src,
                                     size_t src_bytes, int64_t rows, int64_t cols);

// Packs an expert's gate and up matrices (each `rows` x `cols`, GGUF layout) interleaved:
// packed row 2r = gate row r, 2r+1 = up row r, so each row pair of a K-quant group holds one
// gate row and its up row (layout.rows = 2 * rows). For KernelOp::kGateUpSwiglu.
Expected<PackedWeights> pack_gate_up(GgmlType format, int32_t row_block, const void* gate,
                                     const void* up, size_t bytes_each, int64_t rows, int64_t cols);

// Scalar reference of the packed layout: for r in [r0, r1),
//   y[r] = dot(row r, x)                 (accumulate == false)
//   y[r] += alpha * dot(row r, x)        (accumulate == true)
// x is one activation row in the format's vec_dot_type (spec §2.12). Integer parts are
// computed exactly as the reference vec_dot; only float summation order may differ.
Status gemv_packed_ref(const PackLayout& layout, const uint8_t* packed, const void* x, float* y,
                       int64_t r0, int64_t r1, bool accumulate = false, float alpha = 1.0f);

}  // namespace zenmoe
