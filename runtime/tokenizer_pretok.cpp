#include "runtime/tokenizer_pretok.h"

#include "runtime/tokenizer_unicode.h"

namespace zenmoe::tok {
namespace {

bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
bool ascii_alpha(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
// The 32 ASCII punctuation / symbol characters of the first class of the deepseek-v3 regex.
bool ascii_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// Shared view of one span being split; i, e are absolute indices into cp / fl.
struct Span {
  const uint32_t* cp;
  const uint8_t* fl;
  size_t run(size_t i, size_t e, uint8_t mask) const {
    while (i < e && (fl[i] & mask)) ++i;
    return i;
  }
};

// The whitespace tail shared by the patterns: \s*[\r\n]+ | \s+(?!\S) | \s+ at i (fl[i] is \s),
// with (with_crlf = false) or without the first alternative. Returns the match end.
size_t match_space(const Span& s, size_t i, size_t e, bool with_crlf) {
  size_t j = i, last_crlf = 0;
  bool has_crlf = false;
  for (; j < e && (s.fl[j] & kSpace); ++j)
    if (is_crlf(s.cp[j])) has_crlf = true, last_crlf = j;
  if (with_crlf && has_crlf) return last_crlf + 1;  // \s* backtracks to the last CR/LF
  if (j == e || j - i == 1) return j;              // (?!\S) holds at the end; else plain \s+
  return j - 1;                                    // leave one space for the next word
}

// deepseek-v3 regex 3:
// [!-/:-@[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+        Returns the match end, or i when nothing matches at i.
size_t match_ds3(const Span& s, size_t i, size_t e) {
  const uint32_t c = s.cp[i];
  const uint8_t f = s.fl[i];
  if (ascii_punct(c) && i + 1 < e && ascii_alpha(s.cp[i + 1])) {
    size_t j = i + 2;
    while (j < e && ascii_alpha(s.cp[j])) ++j;
    return j;
  }
  if (!is_crlf(c) && !(f & (kLetter | kPunct | kSymbol))) {
    const size_t j = s.run(i + 1, e, kLetter | kMark);
    if (j > i + 1) return j;
  }
  if (f & (kLetter | kMark)) return s.run(i, e, kLetter | kMark);
  size_t j = (c == ' ' && i + 1 < e && (s.fl[i + 1] & (kPunct | kSymbol))) ? i + 1 : i;
  if (s.fl[j] & (kPunct | kSymbol)) {
    j = s.run(j, e, kPunct | kSymbol);
    while (j < e && is_crlf(s.cp[j])) ++j;
    return j;
  }
  if (f & kSpace) return match_space(s, i, e, true);
  return i;
}

// Isolated split of [b, e) by `match`: matches and the gaps between them are both words.
template <class Match>
void isolated_split(const Span& s, size_t b, size_t e, Match match, std::vector<uint32_t>* ends) {
  size_t gap = b, i = b;
  while (i < e) {
    const size_t m = match(s, i, e);
    if (m == i) {
      ++i;
      continue;
    }
    if (gap < i) ends->push_back(static_cast<uint32_t>(i));
    ends->push_back(static_cast<uint32_t>(m));
    i = gap = m;
  }
  if (gap < e) ends->push_back(static_cast<uint32_t>(e));
}

// Regex 2, [一-龥぀-ゟ゠-ヿ]+, isolated; each piece goes on to regex 3.
bool ds_cjk(uint32_t c) { return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF); }

void split_ds_cjk(const Span& s, size_t b, size_t e, std::vector<uint32_t>* ends) {
  size_t i = b;
  while (i < e) {
    size_t j = i;
    const bool cjk = ds_cjk(s.cp[i]);
    while (j < e && ds_cjk(s.cp[j]) == cjk) ++j;
    isolated_split(s, i, j, match_ds3, ends);  // regex 3 splits every piece, CJK runs too
    i = j;
  }
}

// Regex 1, \p{N}{1,3}, isolated; digits leave in chunks of three, the rest goes to regex 2.
void split_deepseek_v3(const Span& s, size_t n, std::vector<uint32_t>* ends) {
  size_t i = 0;
  while (i < n) {
    if (s.fl[i] & kNumber) {
      const size_t j = s.run(i, n, kNumber);
      for (size_t k = i + 3; k < j; k += 3) ends->push_back(static_cast<uint32_t>(k));
      ends->push_back(static_cast<uint32_t>(j));
      i = j;
    } else {
      size_t j = i;
      while (j < n && !(s.fl[j] & kNumber)) ++j;
      split_ds_cjk(s, i, j, ends);
      i = j;
    }
  }
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Span& s, size_t i, size_t e) {
  const uint32_t c = s.cp[i];
  if (c == '\'' && i + 1 < e) {
    const uint32_t c1 = s.cp[i + 1], c2 = i + 2 < e ? s.cp[i + 2] : 0;
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
      return i + 3;
  }
  const size_t j = (c == ' ' && i + 1 < e) ? i + 1 : i;
  const uint8_t fj = s.fl[j];
  if (fj & kLetter) return s.run(j, e, kLetter);
  if (fj & kNumber) return s.run(j, e, kNumber);
  const uint8_t word = kSpace | kLetter | kNumber;
  if (!(fj & word)) {
    size_t k = j;
    while (k < e && !(s.fl[k] & word)) ++k;
    return k;
  }
  if (s.fl[i] & kSpace) return match_space(s, i, e, false);
  return i + 1;
}

// kimi-k2, as llama.cpp's splitter does it (spec §6.4): Han runs; [^\r\n\p{L}\p{N}]? + non-Han
// letters + optional contraction; digits by three;  ?[^\s\p{L}\p{N}]+[\r\n]*; whitespace.
size_t match_kimi_letters(const Span& s, size_t i, size_t e) {
  auto letter = [&](size_t k) { return k < e && (s.fl[k] & kLetter) && !(s.fl[k] & kHan); };
  const uint32_t c = s.cp[i];
  const bool lead_ok = !is_crlf(c) && !(s.fl[i] & (kLetter | kNumber));
  if (!letter(i) && !(lead_ok && letter(i + 1))) return i;
  size_t j = letter(i) ? i : i + 1;
  while (letter(j)) ++j;
  if (j + 1 < e && s.cp[j] == '\'') {
    const uint32_t c1 = cp_tolower(s.cp[j + 1]);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return j + 2;
    if (j + 2 < e) {
      const uint32_t c2 = cp_tolower(s.cp[j + 2]);
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return j + 3;
    }
  }
  return j;
}

size_t match_kimi(const Span& s, size_t i, size_t e) {
  if (s.fl[i] & kHan) return s.run(i, e, kHan);
  if (size_t j = match_kimi_letters(s, i, e); j != i) return j;
  if (s.fl[i] & kNumber) {
    const size_t j = s.run(i, e, kNumber);
    return j - i > 3 ? i + 3 : j;
  }
  const uint8_t word = kSpace | kLetter | kNumber;
  size_t j = (s.cp[i] == ' ' && i + 1 < e) ? i + 1 : i;
  if (!(s.fl[j] & word)) {
    while (j < e && !(s.fl[j] & word)) ++j;
    while (j < e && is_crlf(s.cp[j])) ++j;
    return j;
  }
  if (s.fl[i] & kSpace) return match_space(s, i, e, true);
  return i + 1;
}

}  // namespace

PreType pre_type_from_name(std::string_view name, bool* known) {
  *known = true;
  if (name == "deepseek-v3" || name == "hunyuan-dense") return PreType::kDeepseekV3;
  if (name == "kimi-k2") return PreType::kKimiK2;
  if (name == "gpt2" || name == "default") return PreType::kGpt2;
  *known = false;
  return PreType::kGpt2;
}

const char* pre_type_name(PreType t) {
  switch (t) {
    case PreType::kDeepseekV3: return "deepseek-v3";
    case PreType::kKimiK2: return "kimi-k2";
    case PreType::kGpt2: break;
  }
  return "gpt2";
}

void split_words(PreType type, const uint32_t* cp, const uint8_t* flags, size_t n,
                 std::vector<uint32_t>* ends) {
  const Span s{cp, flags};
  switch (type) {
    case PreType::kDeepseekV3: split_deepseek_v3(s, n, ends); return;
    case PreType::kKimiK2: isolated_split(s, 0, n, match_kimi, ends); return;
    case PreType::kGpt2: isolated_split(s, 0, n, match_gpt2, ends); return;
  }
}

}  // namespace zenmoe::tok
