#include "kernels/pack_rows16.h"

#include <cstring>

#include "kernels/ref/fp16.h"

namespace zenmoe::pack_detail {
namespace {

constexpr int64_t R = kRows16;

int64_t nblocks(const PackLayout& L) { return L.cols / kQK; }

// One record per block: codes and the 16 rows' d, in an order set by the block's parity
// (kernels/pack.h). Where block b's codes, and its d, start in a group:
int64_t codes_at(GgmlType f, int64_t b) { return b * rows16_record_bytes(f) + rows16_codes_in_record(b); }
int64_t d_at(GgmlType f, int64_t b) { return b * rows16_record_bytes(f) + rows16_d_in_record(f, b); }

// Every block of every row: `codes(blk, at, i)` writes row i's codes of `blk` into the record
// whose codes start at `at`; the row's d goes to the record's d.
template <typename Block, typename Codes>
void pack_blocks(const PackLayout& L, const uint8_t* src, uint8_t* dst, Codes codes) {
  const int64_t nb = nblocks(L);
  for (int64_t r = 0; r < L.rows; ++r) {
    uint8_t* g = dst + (r / R) * L.group_stride;
    const int64_t i = r % R;
    for (int64_t b = 0; b < nb; ++b) {
      Block blk;
      std::memcpy(&blk, src + (r * nb + b) * sizeof blk, sizeof blk);
      codes(blk, g + codes_at(L.format, b), i);
      std::memcpy(g + d_at(L.format, b) + i * 2, &blk.d, 2);
    }
  }
}

// Q8_0 codes stored as q + 128 (unsigned) so vpdpbusd can take them as its unsigned operand;
// the kernel subtracts 128 * sum(x) per block.
void pack_q8_0(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  pack_blocks<BlockQ8_0>(L, src, dst, [](const BlockQ8_0& blk, uint8_t* codes, int64_t i) {
    for (int c = 0; c < 8; ++c)
      for (int t = 0; t < 4; ++t) codes[64 * c + 4 * i + t] = static_cast<uint8_t>(blk.qs[4 * c + t] ^ 0x80);
  });
}

// Q4_0 codes stay unsigned (0..15); the kernel subtracts 8 * sum(x) per block. Weight j < 16
// is the low nibble of qs[j], weight 16 + j its high nibble (spec §2.2): the bytes as they are.
void pack_q4_0(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  pack_blocks<BlockQ4_0>(L, src, dst, [](const BlockQ4_0& blk, uint8_t* codes, int64_t i) {
    for (int c = 0; c < 4; ++c)
      for (int t = 0; t < 4; ++t) codes[64 * c + 4 * i + t] = blk.qs[4 * c + t];
  });
}

// Q5_0: the fifth bits, then the low four bits of the codes as Q4_0 holds them (kernels/pack.h);
// the kernel subtracts 16 * sum(x) per block.
void pack_q5_0(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  pack_blocks<BlockQ5_0>(L, src, dst, [](const BlockQ5_0& blk, uint8_t* codes, int64_t i) {
    uint32_t qh;
    std::memcpy(&qh, blk.qh, 4);  // bit j: the fifth bit of weight j (spec §2.3)
    for (int c = 0; c < 4; ++c)
      for (int t = 0; t < 4; ++t) {
        const int lo = 4 * c + t;
        codes[q5_0_chunk_offset(c) + 4 * i + t] = blk.qs[lo];  // weight lo low nibble, 16 + lo high
        uint8_t& fifth = codes[kQ5_0FifthBits + 4 * i + t];
        fifth = static_cast<uint8_t>(fifth | ((qh >> lo) & 1) << c | ((qh >> (16 + lo)) & 1) << (4 + c));
      }
  });
}

// Byte offset of element (row i of the group, column k) in a plain-format group: F32 and F16
// column-major, BF16 in column pairs (kernels/pack.h).
int64_t plain_offset(GgmlType f, int64_t i, int64_t k) {
  if (f == GgmlType::BF16) return ((k / 2) * R + i) * 4 + (k % 2) * 2;
  return (k * R + i) * (f == GgmlType::F32 ? 4 : 2);
}

// Every element to its place; the high half of an odd K's last BF16 pair stays zero (the
// destination comes zeroed).
void pack_plain(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  const int64_t es = L.format == GgmlType::F32 ? 4 : 2;
  for (int64_t r = 0; r < L.rows; ++r) {
    uint8_t* g = dst + (r / R) * L.group_stride;
    const int64_t i = r % R;
    for (int64_t k = 0; k < L.cols; ++k)
      std::memcpy(g + plain_offset(L.format, i, k), src + (r * L.cols + k) * es, static_cast<size_t>(es));
  }
}

float dot_q8_0(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_0* x) {
  const int64_t nb = nblocks(L);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j)
      isum += int8_t(g[codes_at(GgmlType::Q8_0, b) + 64 * (j / 4) + 4 * i + j % 4] ^ 0x80) * x[b].qs[j];
    uint16_t d;
    std::memcpy(&d, g + d_at(GgmlType::Q8_0, b) + i * 2, 2);
    sum += (ref::fp16_to_fp32(d) * ref::fp16_to_fp32(x[b].d)) * float(isum);
  }
  return sum;
}

float dot_q4_0(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_0* x) {
  const int64_t nb = nblocks(L);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t byte = g[codes_at(GgmlType::Q4_0, b) + 64 * (j / 4) + 4 * i + j % 4];
      isum += ((byte & 0x0F) - 8) * x[b].qs[j] + ((byte >> 4) - 8) * x[b].qs[j + 16];
    }
    uint16_t d;
    std::memcpy(&d, g + d_at(GgmlType::Q4_0, b) + i * 2, 2);
    sum += (ref::fp16_to_fp32(d) * ref::fp16_to_fp32(x[b].d)) * float(isum);
  }
  return sum;
}

float dot_q5_0(const PackLayout& L, const uint8_t* g, int64_t i, const BlockQ8_0* x) {
  const int64_t nb = nblocks(L);
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* codes = g + codes_at(GgmlType::Q5_0, b);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      const int c = j / 4, t = j % 4;
      const uint8_t byte = codes[q5_0_chunk_offset(c) + 4 * i + t], high = codes[kQ5_0FifthBits + 4 * i + t];
      const int lo = (byte & 0x0F) | ((high >> c) & 1) << 4, hi = (byte >> 4) | ((high >> (4 + c)) & 1) << 4;
      isum += (lo - 16) * x[b].qs[j] + (hi - 16) * x[b].qs[j + 16];
    }
    uint16_t d;
    std::memcpy(&d, g + d_at(GgmlType::Q5_0, b) + i * 2, 2);
    sum += (ref::fp16_to_fp32(d) * ref::fp16_to_fp32(x[b].d)) * float(isum);
  }
  return sum;
}

float plain_value(GgmlType f, const uint8_t* p) {
  if (f == GgmlType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f == GgmlType::F16 ? ref::fp16_to_fp32(h) : ref::bf16_to_fp32(h);
}

// As the reference: products in f32, summed in double, rounded once.
float dot_plain(const PackLayout& L, const uint8_t* g, int64_t i, const uint8_t* x) {
  const int64_t es = L.format == GgmlType::F32 ? 4 : 2;
  double sum = 0.0;
  for (int64_t k = 0; k < L.cols; ++k)
    sum += double(plain_value(L.format, g + plain_offset(L.format, i, k)) * plain_value(L.format, x + k * es));
  return float(sum);
}

}  // namespace

bool rows16_format(GgmlType f) {
  return f == GgmlType::Q8_0 || f == GgmlType::Q4_0 || f == GgmlType::Q5_0 || f == GgmlType::F32 ||
         f == GgmlType::F16 || f == GgmlType::BF16;
}

int64_t rows16_group_bytes(GgmlType f, int64_t cols) {
  switch (f) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0: return cols / kQK * rows16_record_bytes(f);
    case GgmlType::F32: return cols * R * 4;
    case GgmlType::F16: return cols * R * 2;
    case GgmlType::BF16: return (cols + 1) / 2 * R * 4;
    default: return 0;
  }
}

void rows16_pack(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  switch (L.format) {
    case GgmlType::Q8_0: pack_q8_0(L, src, dst); break;
    case GgmlType::Q4_0: pack_q4_0(L, src, dst); break;
    case GgmlType::Q5_0: pack_q5_0(L, src, dst); break;
    default: pack_plain(L, src, dst); break;
  }
}

float rows16_dot(const PackLayout& L, const uint8_t* group, int64_t i, const void* x) {
  switch (L.format) {
    case GgmlType::Q8_0: return dot_q8_0(L, group, i, static_cast<const BlockQ8_0*>(x));
    case GgmlType::Q4_0: return dot_q4_0(L, group, i, static_cast<const BlockQ8_0*>(x));
    case GgmlType::Q5_0: return dot_q5_0(L, group, i, static_cast<const BlockQ8_0*>(x));
    default: return dot_plain(L, group, i, static_cast<const uint8_t*>(x));
  }
}

}  // namespace zenmoe::pack_detail
