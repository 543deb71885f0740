#include "kernels/pack.h"

#include "kernels/pack_q5k.h"
#include "kernels/pack_q6k.h"
#include "kernels/pack_rows16.h"
#include "kernels/ref/fp16.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace zenmoe {
namespace {

constexpr int64_t kAlign = 64;

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// 6-bit scale and min of sub-block j (spec §2.5).
void scale_min_k4(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// ---- Q4_K ----------------------------------------------------------------------------

struct Q4KOffsets {
  int64_t codes, scales, d;  // region starts of super-block sb's record inside a group
};

Q4KOffsets q4k_offsets(int64_t sb, int64_t R) {
  const int64_t rec = sb * R * kQ4KPackedRowBytes;
  return {rec, rec + q4k_scales_offset(R), rec + q4k_d_offset(R)};
}

// The 4-bit code of weight w (0..255) of a GGUF Q4_K block (spec §2.6).
uint8_t q4k_code(const BlockQ4_K& b, int w) {
  const int chunk = w / 64, l = w % 32;
  const uint8_t byte = b.qs[32 * chunk + l];
  return (w % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
}

void pack_q4k_block(const BlockQ4_K& b, int64_t R, int64_t sb, int64_t i, uint8_t* group) {
  const Q4KOffsets o = q4k_offsets(sb, R);
  const int64_t pair = i / 2, h = i % 2;
  uint8_t* codes = group + o.codes + pair * 256;
  for (int c = 0; c < 4; ++c)
    for (int s = 0; s < 8; ++s)
      for (int t = 0; t < 4; ++t) {
        const uint8_t lo = q4k_code(b, 32 * s + 4 * c + t), hi = q4k_code(b, 32 * s + 4 * (c + 4) + t);
        codes[64 * c + 4 * (2 * s + h) + t] = uint8_t(lo | (hi << 4));
      }
  uint8_t* sm = group + o.scales + pair * kQ4KPairScaleBytes;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0, m = 0;
    scale_min_k4(b.scales, s, &sc, &m);
    sm[2 * s + h] = uint8_t(sc | (m & 3) << 6);
    sm[16 + 4 * h + s / 2] = uint8_t(sm[16 + 4 * h + s / 2] | (m >> 2) << (4 * (s % 2)));
  }
  uint16_t* d = reinterpret_cast<uint16_t*>(group + o.d);
  d[i] = b.d;
  d[R + i] = b.dmin;
}

void pack_q4k(const PackLayout& L, const uint8_t* src, uint8_t* dst) {
  const int64_t nsb = L.cols / kQK_K, R = L.row_block;
  for (int64_t r = 0; r < L.rows; ++r) {
    uint8_t* group = dst + (r / R) * L.group_stride;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ4_K b;
      std::memcpy(&b, src + (r * nsb + sb) * sizeof(BlockQ4_K), sizeof b);
      pack_q4k_block(b, R, sb, r % R, group);
    }
  }
}

// One packed Q4_K row against Q8_K activations; integer sums as ggml's vec_dot_q4_K_q8_K.
float dot_q4k_packed(const PackLayout& L, const uint8_t* group, int64_t i, const BlockQ8_K* x) {
  const int64_t nsb = L.cols / kQK_K, R = L.row_block, pair = i / 2, h = i % 2;
  float sum = 0.0f;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const Q4KOffsets o = q4k_offsets(sb, R);
    const uint8_t* codes = group + o.codes + pair * 256;
    const uint8_t* sm = group + o.scales + pair * kQ4KPairScaleBytes;
    uint16_t dh[2];
    std::memcpy(&dh[0], group + o.d + 2 * i, 2);
    std::memcpy(&dh[1], group + o.d + 2 * (R + i), 2);
    int32_t sumi_s = 0, sumi_m = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t isum = 0;
      for (int c = 0; c < 8; ++c)
        for (int t = 0; t < 4; ++t) {
          const uint8_t byte = codes[64 * (c % 4) + 4 * (2 * s + h) + t];
          const int q = c < 4 ? (byte & 0x0F) : (byte >> 4);
          isum += q * x[sb].qs[32 * s + 4 * c + t];
        }
      const int sc = sm[2 * s + h] & 63;
      const int m = (sm[2 * s + h] >> 6) | ((sm[16 + 4 * h + s / 2] >> (4 * (s % 2))) & 15) << 2;
      sumi_s += sc * isum;
      sumi_m += m * (x[sb].bsums[2 * s] + x[sb].bsums[2 * s + 1]);
    }
    const float dd = ref::fp16_to_fp32(dh[0]) * x[sb].d, dm = ref::fp16_to_fp32(dh[1]) * x[sb].d;
    sum += dd * float(sumi_s) - dm * float(sumi_m);
  }
  return sum;
}

}  // namespace

void AlignedFree::operator()(uint8_t* p) const { std::free(p); }

bool pack_supported(GgmlType format) {
  return format == GgmlType::Q4_K || format == GgmlType::Q5_K || format == GgmlType::Q6_K ||
         pack_detail::rows16_format(format);
}

Expected<PackLayout> pack_layout(GgmlType format, int32_t row_block, int64_t rows, int64_t cols) {
  const std::string what = std::string("pack ") + type_name(format) + " " + std::to_string(rows) +
                           "x" + std::to_string(cols) + ": ";
  if (!pack_supported(format)) return Error{what + "format has no packed layout"};
  const bool rows16 = pack_detail::rows16_format(format) || format == GgmlType::Q5_K || format == GgmlType::Q6_K;
  if (rows16 && row_block != pack_detail::kRows16)
    return Error{what + "row block must be 16 (one row per vector lane), not " + std::to_string(row_block)};
  if (row_block < 2 || row_block > 16 || row_block % 2 != 0)
    return Error{what + "row block " + std::to_string(row_block) + " is not even in 2..16"};
  if (rows <= 0 || rows > (int64_t{1} << 31)) return Error{what + "row count out of range"};
  const int64_t blk = type_geometry(format)->block_elems;
  if (cols <= 0 || cols % blk != 0 || cols > (int64_t{1} << 20))
    return Error{what + "K is not a positive multiple of " + std::to_string(blk) + " up to 2^20"};
  PackLayout L;
  L.format = format;
  L.row_block = row_block;
  L.rows = rows;
  L.cols = cols;
  L.groups = (rows + row_block - 1) / row_block;
  const int64_t raw = format == GgmlType::Q5_K ? pack_detail::q5k_group_bytes(cols)
                      : format == GgmlType::Q6_K ? pack_detail::q6k_group_bytes(cols)
                      : rows16                 ? pack_detail::rows16_group_bytes(format, cols)
                                               : cols / kQK_K * row_block * kQ4KPackedRowBytes;
  L.group_stride = round_up(raw, kAlign);
  L.total_bytes = L.groups * L.group_stride;
  return L;
}

Status pack_into(const PackLayout& L, const void* src, size_t src_bytes, uint8_t* dst) {
  const int64_t need = row_bytes(L.format, L.cols) * L.rows;
  if (src == nullptr || dst == nullptr) return Error{"pack: null source or destination"};
  if (need < 0 || static_cast<uint64_t>(need) > src_bytes)
    return Error{std::string("pack ") + type_name(L.format) + ": source has " +
                 std::to_string(src_bytes) + " bytes, " + std::to_string(need) + " needed"};
  if (reinterpret_cast<uintptr_t>(dst) % kAlign != 0) return Error{"pack: destination not 64-byte aligned"};
  std::memset(dst, 0, static_cast<size_t>(L.total_bytes));
  if (L.format == GgmlType::Q5_K) {
    pack_detail::q5k_pack(L, static_cast<const uint8_t*>(src), dst);
  } else if (L.format == GgmlType::Q6_K) {
    pack_detail::q6k_pack(L, static_cast<const uint8_t*>(src), dst);
  } else if (pack_detail::rows16_format(L.format)) {
    pack_detail::rows16_pack(L, static_cast<const uint8_t*>(src), dst);
  } else {
    pack_q4k(L, static_cast<const uint8_t*>(src), dst);
  }
  return Status::ok();
}

Expected<PackedWeights> pack_weights(GgmlType format, int32_t row_block, const void* src,
                                     size_t src_bytes, int64_t rows, int64_t cols) {
  Expected<PackLayout> L = pack_layout(format, row_block, rows, cols);
  if (!L) return Error{L.error()};
  PackedWeights p;
  p.layout = *L;
  p.data.reset(static_cast<uint8_t*>(std::aligned_alloc(kAlign, static_cast<size_t>(L->total_bytes))));
  if (!p.data) return Error{"pack: out of memory for " + std::to_string(L->total_bytes) + " bytes"};
  ZENMOE_RETURN_IF_ERROR(pack_into(*L, src, src_bytes, p.data.get()));
  return p;
}

Expected<PackedWeights> pack_gate_up(GgmlType format, int32_t row_block, const void* gate,
                                     const void* up, size_t bytes_each, int64_t rows, int64_t cols) {
  const int64_t rb = row_bytes(format, cols);
  if (gate == nullptr || up == nullptr) return Error{"pack_gate_up: null gate or up matrix"};
  if (rb <= 0 || rows <= 0 || static_cast<uint64_t>(rb * rows) > bytes_each)
    return Error{std::string("pack_gate_up ") + type_name(format) + ": gate/up have " +
                 std::to_string(bytes_each) + " bytes, " + std::to_string(rb * rows) + " needed"};
  std::vector<uint8_t> both(static_cast<size_t>(2 * rows * rb));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(both.data() + (2 * r) * rb, static_cast<const uint8_t*>(gate) + r * rb, static_cast<size_t>(rb));
    std::memcpy(both.data() + (2 * r + 1) * rb, static_cast<const uint8_t*>(up) + r * rb, static_cast<size_t>(rb));
  }
  return pack_weights(format, row_block, both.data(), both.size(), 2 * rows, cols);
}

Status gemv_packed_ref(const PackLayout& L, const uint8_t* packed, const void* x, float* y,
                       int64_t r0, int64_t r1, bool accumulate, float alpha) {
  if (r0 < 0 || r1 > L.rows || r0 > r1) return Error{"gemv_packed_ref: row range out of bounds"};
  if (!pack_supported(L.format)) return Error{"gemv_packed_ref: format has no packed layout"};
  const bool rows16 = pack_detail::rows16_format(L.format);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* group = packed + (r / L.row_block) * L.group_stride;
    const int64_t i = r % L.row_block;
    const float v = L.format == GgmlType::Q5_K ? pack_detail::q5k_dot(L, group, i, static_cast<const BlockQ8_K*>(x))
                    : L.format == GgmlType::Q6_K ? pack_detail::q6k_dot(L, group, i, static_cast<const BlockQ8_K*>(x))
                    : rows16                   ? pack_detail::rows16_dot(L, group, i, x)
                                               : dot_q4k_packed(L, group, i, static_cast<const BlockQ8_K*>(x));
    y[r] = accumulate ? y[r] + alpha * v : v;
  }
  return Status::ok();
}

}  // namespace zenmoe
