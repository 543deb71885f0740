// Pre-tokenizers: split a span of code points into the "words" that BPE runs on (spec §6.4).
// The regexes are matched by hand (leftmost-first alternation with the backtracking the
// patterns need), which is both faster than a regex engine and exact about \p classes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace zenmoe::tok {

enum class PreType {
  kGpt2,        // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kDeepseekV3,  // three regexes in sequence (digits, CJK/kana runs, words/punct/space)
  kKimiK2,      // llama.cpp's hand-written splitter for Moonshot's pattern
};

// Maps tokenizer.ggml.pre to a pre-tokenizer. Unknown names give kGpt2 and *known = false
// (the caller decides whether that deserves a message).
PreType pre_type_from_name(std::string_view name, bool* known);
const char* pre_type_name(PreType t);

// Splits cp[0..n) (flags from cp_flags) into consecutive words; appends each word's end index
// to *ends (the words tile the span; the last end is n). Nothing is appended for n == 0.
void split_words(PreType type, const uint32_t* cp, const uint8_t* flags, size_t n,
                 std::vector<uint32_t>* ends);

}  // namespace zenmoe::tok
