#include "tools/bench_weights.h"

#include <cstring>
#include <string>

namespace zenmoe::tools {
namespace {

// splitmix64: fast, seedable, good enough for benchmark data.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-23f - 1.0f; }  // [-1, 1)
};

void fill_bytes(Rng& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(rng.next());
}

// A small positive scale, as real quantised weights have.
uint16_t random_scale(Rng& rng) { return f32_to_f16_bits(0.001f + 0.01f * (rng.uniform() + 1.0f)); }

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

}  // namespace

uint16_t f32_to_f16_bits(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

uint16_t f32_to_bf16_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  return static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

Status fill_random_weights(GgmlType t, uint8_t* dst, int64_t rows, int64_t cols, uint64_t seed) {
  const int64_t rb = row_bytes(t, cols);
  if (rb < 0) return Error{std::string("cannot lay out ") + std::to_string(cols) + " columns of " + type_name(t)};
  const int64_t n = rows * cols;
  Rng rng{seed};
  switch (t) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) {
        float f = rng.uniform();
        std::memcpy(dst + 4 * i, &f, 4);
      }
      return Status::ok();
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put16(dst + 2 * i, f32_to_f16_bits(rng.uniform()));
      return Status::ok();
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) put16(dst + 2 * i, f32_to_bf16_bits(rng.uniform()));
      return Status::ok();
    default: break;
  }
  const TypeGeometry* g = type_geometry(t);
  const int64_t blocks = n / g->block_elems;
  const size_t bb = static_cast<size_t>(g->block_bytes);
  fill_bytes(rng, dst, static_cast<size_t>(blocks) * bb);
  // Overwrite the f16 scale fields with normal values; everything else is free bits.
  for (int64_t k = 0; k < blocks; ++k) {
    uint8_t* b = dst + static_cast<size_t>(k) * bb;
    switch (t) {
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_XS:
        put16(b, random_scale(rng));
        break;
      case GgmlType::Q4_K: case GgmlType::Q5_K:
        put16(b, random_scale(rng));
        put16(b + 2, random_scale(rng));
        break;
      case GgmlType::Q6_K:
        put16(b + offsetof(BlockQ6_K, d), random_scale(rng));
        break;
      default:
        return Error{std::string("no benchmark data generator for ") + type_name(t)};
    }
  }
  return Status::ok();
}

std::vector<float> random_activations(int64_t n, uint64_t seed) {
  Rng rng{seed};
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = rng.uniform();
  return v;
}

}  // namespace zenmoe::tools
