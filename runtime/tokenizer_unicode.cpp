#include "runtime/tokenizer_unicode.h"

#include <unicode/uchar.h>

#include <array>
#include <memory>

namespace zenmoe::tok {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// llama.cpp's Han ranges (CJK Unified Ideographs, extensions A-F, compatibility ideographs).
bool is_han(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2EBEF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

uint8_t compute_flags(uint32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  const uint32_t mask = U_GET_GC_MASK(u);
  uint8_t f = 0;
  if (mask & U_GC_L_MASK) f |= kLetter;
  if (mask & U_GC_M_MASK) f |= kMark;
  if (mask & U_GC_N_MASK) f |= kNumber;
  if (mask & U_GC_P_MASK) f |= kPunct;
  if (mask & U_GC_S_MASK) f |= kSymbol;
  if (mask & U_GC_CN_MASK) f |= kUnassigned;
  if (u_isUWhiteSpace(u)) f |= kSpace;
  if (is_han(c)) f |= kHan;
  return f;
}

// One byte per code point for the whole range (1.1 MB), filled once: the per-character ICU
// calls would otherwise dominate pre-tokenisation.
const uint8_t* flag_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    std::unique_ptr<uint8_t[]> t(new uint8_t[kMaxCp + 1]);
    for (uint32_t c = 0; c <= kMaxCp; ++c) t[c] = compute_flags(c);
    return t;
  }();
  return table.get();
}

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // every mapped code point is < 324
};

const ByteTables& byte_tables() {
  static const ByteTables t = [] {
    ByteTables bt;
    bt.from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      bt.to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      bt.from_cp[bt.to_cp[b]] = static_cast<int16_t>(b);
    }
    return bt;
  }();
  return t;
}

}  // namespace

uint8_t cp_flags(uint32_t cp) { return cp <= kMaxCp ? flag_table()[cp] : uint8_t{kUnassigned}; }

uint32_t cp_tolower(uint32_t cp) {
  return cp <= kMaxCp ? static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp))) : cp;
}

size_t utf8_sequence_length(const unsigned char* s, size_t n, bool* incomplete) {
  *incomplete = false;
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return 1;
  size_t len;
  uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;       // no overlong forms
    else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    else if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < len; ++i) {
    if (i >= n) {
      *incomplete = true;
      return 0;
    }
    const unsigned char c = s[i];
    const uint32_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (c < l || c > h) return 0;
  }
  return len;
}

void CodePoints::decode(std::string_view text) {
  cp.clear();
  flags.clear();
  offset.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const uint8_t* table = flag_table();
  size_t i = 0;
  while (i < n) {
    uint32_t c;
    size_t len;
    if (s[i] < 0x80) {
      c = s[i];
      len = 1;
    } else {
      bool incomplete;
      len = utf8_sequence_length(s + i, n - i, &incomplete);
      if (len == 0) {
        c = 0x110000 + s[i];
        len = 1;
      } else {
        c = s[i] & (0x7F >> len);
        for (size_t k = 1; k < len; ++k) c = (c << 6) | (s[i + k] & 0x3F);
      }
    }
    cp.push_back(c);
    flags.push_back(c <= kMaxCp ? table[c] : uint8_t{kUnassigned});
    offset.push_back(static_cast<uint32_t>(i));
    i += len;
  }
  offset.push_back(static_cast<uint32_t>(n));
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t byte_to_cp(uint8_t b) { return byte_tables().to_cp[b]; }

int cp_to_byte(uint32_t cp) { return cp < 324 ? byte_tables().from_cp[cp] : -1; }

}  // namespace zenmoe::tok
