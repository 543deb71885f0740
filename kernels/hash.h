// FNV-1a (64-bit) over raw bytes: the keys of the kernel and glue registries and the plan
// file's checksums. Not a cryptographic hash; it only has to tell byte strings apart. Plan
// files store its values (checksums, the weights file's id), so changing it refuses every plan
// written before.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zenmoe {

inline constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// `h` continues an earlier hash (kFnvBasis starts one).
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace zenmoe
