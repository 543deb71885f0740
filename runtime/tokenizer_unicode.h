// Unicode helpers for the byte-level BPE tokenizer: code point classes (from ICU, cached in one
// table), lenient UTF-8 decoding, and the GPT-2 byte-to-unicode mapping (spec §6.2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zenmoe::tok {

// Class bits of one code point, as the pre-tokenizer regexes see them.
enum CpFlag : uint8_t {
  kLetter = 1 << 0,       // \p{L}
  kMark = 1 << 1,         // \p{M}
  kNumber = 1 << 2,       // \p{N}
  kPunct = 1 << 3,        // \p{P}
  kSymbol = 1 << 4,       // \p{S}
  kSpace = 1 << 5,        // \s (Unicode White_Space, as Oniguruma and llama.cpp define it)
  kHan = 1 << 6,          // llama.cpp's Han ranges (kimi-k2 splitter)
  kUnassigned = 1 << 7,   // general category Cn (and undecodable bytes)
};

// Flags of code point `cp` (any value; > 0x10FFFF gives kUnassigned).
uint8_t cp_flags(uint32_t cp);

// Simple lowercase mapping of one code point (ICU u_tolower).
uint32_t cp_tolower(uint32_t cp);

// UTF-8 text decoded to code points. A byte that does not start a valid, shortest-form
// sequence becomes a code point of its own, 0x110000 + byte (flags kUnassigned), so arbitrary
// bytes still tokenize (each maps to its byte token) and nothing is lost.
struct CodePoints {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> flags;
  std::vector<uint32_t> offset;  // byte offset of each code point, plus one final entry = size
  void decode(std::string_view text);
  size_t size() const { return cp.size(); }
};

// Number of bytes of the valid UTF-8 sequence starting at s[0] (s has n > 0 bytes), or 0 if
// the bytes there are not a complete valid sequence. `*incomplete` is set when the bytes are
// a valid prefix that more bytes could complete.
size_t utf8_sequence_length(const unsigned char* s, size_t n, bool* incomplete);

// Appends the UTF-8 encoding of `cp` (cp <= 0x10FFFF).
void append_utf8(uint32_t cp, std::string* out);

// GPT-2 byte-to-unicode table: byte -> code point, and the inverse (code point -> byte, or -1).
uint32_t byte_to_cp(uint8_t b);
int cp_to_byte(uint32_t cp);

}  // namespace zenmoe::tok
