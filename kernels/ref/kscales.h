// The 6-bit scale/min packing of Q4_K and Q5_K (spec §2.5): 8 scales and 8 mins in 12 bytes.
#pragma once

#include <cstdint>

namespace zenmoe::ref {

// Scale and min of sub-block j (0..7) from the 12 packed bytes S.
inline void kscale_get(const uint8_t* S, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = S[j] & 63;
    *m = S[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((S[j + 4] & 0x0F) | ((S[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((S[j + 4] >> 4) | ((S[j] >> 6) << 4));
  }
}

// Inverse of kscale_get: packs sc[0..7], m[0..7] (each 0..63) into S[0..11].
inline void kscale_pack(const uint8_t* sc, const uint8_t* m, uint8_t* S) {
  for (int j = 0; j < 4; ++j) {
    S[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    S[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    S[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

}  // namespace zenmoe::ref
