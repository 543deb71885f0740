// Rounding helpers shared by the reference quantisers.
#pragma once

#include <bit>
#include <cstdint>

namespace zenmoe::ref {

// Round half to even via the 1.5*2^23 trick ggml uses (spec §2.9): adding the magic constant
// leaves the rounded integer in the low mantissa bits. Valid for |f| <= 4194303.
inline int nearest_int(float f) {
  const float v = f + 12582912.0f;
  const int32_t bits = std::bit_cast<int32_t>(v);
  return (bits & 0x007FFFFF) - 0x00400000;
}

}  // namespace zenmoe::ref
