#include "tools/builtin_vocab.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_map>
#include <utility>

namespace zenmoe::tools {
namespace {

const char* const kBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const char* const kEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const char* const kPad = "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>";
const char* const kUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
const char* const kAssistant = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool is_letter(unsigned char c) { return std::isalpha(c) != 0; }
bool is_digit(unsigned char c) { return std::isdigit(c) != 0; }
bool is_newline(unsigned char c) { return c == '\r' || c == '\n'; }
bool is_space(unsigned char c) { return std::isspace(c) != 0; }
bool is_punct(unsigned char c) { return std::ispunct(c) != 0; }

// Length of the whitespace piece at i (the `\s*[\r\n]+ | \s+(?!\S) | \s+` alternatives).
size_t whitespace_piece(const std::string& t, size_t i) {
  size_t j = i;
  while (j < t.size() && is_space(t[j])) ++j;
  size_t last_nl = std::string::npos;
  for (size_t k = i; k < j; ++k)
    if (is_newline(t[k])) last_nl = k;
  if (last_nl != std::string::npos) return last_nl + 1 - i;
  // A run followed by a non-space leaves its last character to lead the next word.
  if (j < t.size() && j - i > 1) return j - i - 1;
  return j - i;
}

// Length of the piece starting at i: an ASCII rendering of the deepseek-v3 pre-tokenizer
// (spec §6.4). Training only needs the same word boundaries for ordinary English and code,
// so non-ASCII bytes are simply treated as letters.
size_t piece_length(const std::string& t, size_t i) {
  auto letter = [&](size_t k) { return k < t.size() && (is_letter(t[k]) || (t[k] & 0x80)); };
  auto run = [&](size_t k) {
    while (letter(k)) ++k;
    return k;
  };
  const unsigned char c = t[i];
  if (is_digit(c)) {
    size_t j = i;
    while (j < t.size() && j - i < 3 && is_digit(t[j])) ++j;
    return j - i;
  }
  if (is_punct(c) && letter(i + 1)) return run(i + 1) - i;
  if (letter(i)) return run(i) - i;
  if (!is_newline(c) && !is_punct(c) && !is_digit(c) && letter(i + 1)) return run(i + 1) - i;
  if ((c == ' ' && i + 1 < t.size() && is_punct(t[i + 1])) || is_punct(c)) {
    size_t j = c == ' ' ? i + 1 : i;
    while (j < t.size() && is_punct(t[j])) ++j;
    while (j < t.size() && is_newline(t[j])) ++j;
    return j - i;
  }
  if (is_space(c)) return whitespace_piece(t, i);
  return 1;
}

std::map<std::string, int64_t> count_words(const std::string& text) {
  std::map<std::string, int64_t> words;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::max<size_t>(1, piece_length(text, i));
    ++words[text.substr(i, n)];
    i += n;
  }
  return words;
}

// Byte-pair training on symbol ids. Pair choice: highest count, then lowest (left, right)
// ids, so the result is fully deterministic. Once frequent pairs run out, pairs seen once
// still merge (whole rare words become tokens) until every word is a single token.
class Trainer {
 public:
  explicit Trainer(const std::string& text) {
    for (int b = 0; b < 256; ++b) symbols_.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
    for (const auto& [w, n] : count_words(text)) {
      std::vector<int32_t> s;
      for (unsigned char ch : w) s.push_back(ch);
      words_.push_back({std::move(s), n});
    }
  }

  // Learns merges until `want_tokens` distinct tokens exist or no pair is left.
  void train(size_t want_tokens) {
    std::unordered_map<std::string, int32_t> ids;
    for (size_t k = 0; k < symbols_.size(); ++k) ids[symbols_[k]] = static_cast<int32_t>(k);
    while (symbols_.size() < want_tokens) {
      auto best = best_pair();
      if (best.second < 1) break;
      const int32_t l = best.first.first, r = best.first.second;
      std::string joined = symbols_[l] + symbols_[r];
      merges_.push_back(symbols_[l] + " " + symbols_[r]);
      auto [it, fresh] = ids.emplace(joined, static_cast<int32_t>(symbols_.size()));
      if (fresh) symbols_.push_back(joined);
      apply(l, r, it->second);
    }
  }

  const std::vector<std::string>& symbols() const { return symbols_; }
  const std::vector<std::string>& merges() const { return merges_; }

 private:
  using Pair = std::pair<int32_t, int32_t>;

  std::pair<Pair, int64_t> best_pair() const {
    std::map<Pair, int64_t> counts;
    for (const auto& [s, n] : words_)
      for (size_t k = 0; k + 1 < s.size(); ++k) counts[{s[k], s[k + 1]}] += n;
    std::pair<Pair, int64_t> best{{0, 0}, 0};
    for (const auto& [p, n] : counts)  // map order = lowest ids first among equal counts
      if (n > best.second) best = {p, n};
    return best;
  }

  void apply(int32_t l, int32_t r, int32_t merged) {
    for (auto& [s, n] : words_) {
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == l && s[k + 1] == r) {
          out.push_back(merged);
          ++k;
        } else {
          out.push_back(s[k]);
        }
      }
      s.swap(out);
    }
  }

  std::vector<std::string> symbols_;
  std::vector<std::string> merges_;
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words_;
};

}  // namespace

std::string byte_to_unicode(uint8_t b) {
  const bool same = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (same) return utf8(b);
  // The 68 remaining bytes, in increasing order, map to U+0100, U+0101, ...
  uint32_t rank = 0;
  for (uint32_t k = 0; k < b; ++k) {
    const bool k_same = (k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE;
    if (!k_same) ++rank;
  }
  return utf8(256 + rank);
}

const std::string& deepseek_v3_chat_template() {
  // The structure of DeepSeek-V3's template without its tool-call branches: system prompt
  // first, then <｜User｜> / <｜Assistant｜> turns, assistant turns closed by EOS.
  static const std::string t =
      std::string("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
                  "{% endif %}{% set ns = namespace(system_prompt='') %}"
                  "{%- for message in messages %}{%- if message['role'] == 'system' %}"
                  "{% set ns.system_prompt = ns.system_prompt + message['content'] %}{%- endif %}"
                  "{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
                  "{%- for message in messages %}{%- if message['role'] == 'user' %}{{ '") +
      kUser + "' + message['content'] }}{%- endif %}{%- if message['role'] == 'assistant' %}{{ '" +
      kAssistant + "' + message['content'] + '" + kEos +
      "' }}{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ '" + kAssistant +
      "' }}{% endif %}";
  return t;
}

Expected<VocabData> make_builtin_vocab(int64_t n_vocab) {
  if (n_vocab < kBuiltinVocabMin)
    return Error{"the built-in vocabulary needs at least " + std::to_string(kBuiltinVocabMin) +
                 " tokens (256 bytes + 5 special), got " + std::to_string(n_vocab)};
  if (n_vocab > (int64_t{1} << 24))
    return Error{"vocabulary of " + std::to_string(n_vocab) + " tokens is too large"};
  const size_t n_special = 5;
  const size_t n_normal = static_cast<size_t>(n_vocab) - n_special;
  Trainer trainer(builtin_vocab_corpus());
  trainer.train(n_normal);

  VocabData v;
  v.tokens = trainer.symbols();
  v.token_types.assign(v.tokens.size(), kTokenNormal);
  v.merges = trainer.merges();
  while (v.tokens.size() < n_normal) {  // the text ran out of pairs: unused fillers
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.token_types.push_back(kTokenUnused);
  }
  const uint32_t first = static_cast<uint32_t>(n_normal);
  const std::pair<const char*, int32_t> specials[] = {
      {kBos, kTokenControl}, {kEos, kTokenControl}, {kPad, kTokenControl},
      {kUser, kTokenUserDefined}, {kAssistant, kTokenUserDefined}};
  for (const auto& [text, type] : specials) {
    v.tokens.push_back(text);
    v.token_types.push_back(type);
  }
  v.bos = first;
  v.eos = first + 1;
  v.eot = first + 1;  // DeepSeek-V3 ends a turn with <｜end▁of▁sentence｜>
  v.pad = first + 2;
  v.chat_template = deepseek_v3_chat_template();
  return v;
}

void add_vocab_metadata(const VocabData& v, gguf::Metadata& meta) {
  using gguf::Value;
  meta.set("tokenizer.ggml.model", Value::string(v.model));
  meta.set("tokenizer.ggml.pre", Value::string(v.pre));
  meta.set("tokenizer.ggml.tokens", Value::array_of_strings(v.tokens));
  meta.set("tokenizer.ggml.token_type",
           Value::array_of_ints(gguf::ValueType::I32,
                                std::vector<int64_t>(v.token_types.begin(), v.token_types.end())));
  meta.set("tokenizer.ggml.merges", Value::array_of_strings(v.merges));
  meta.set("tokenizer.ggml.bos_token_id", Value::u32(v.bos));
  meta.set("tokenizer.ggml.eos_token_id", Value::u32(v.eos));
  meta.set("tokenizer.ggml.eot_token_id", Value::u32(v.eot));
  meta.set("tokenizer.ggml.padding_token_id", Value::u32(v.pad));
  meta.set("tokenizer.ggml.add_bos_token", Value::boolean(v.add_bos));
  meta.set("tokenizer.ggml.add_eos_token", Value::boolean(v.add_eos));
  if (!v.chat_template.empty()) meta.set("tokenizer.chat_template", Value::string(v.chat_template));
}

}  // namespace zenmoe::tools
