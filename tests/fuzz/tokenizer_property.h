// The tokenizer fuzz property (tests/fuzz/fuzz_tokenizer.cpp, and the replay of kept inputs
// in the test suite): a vocabulary built from the input (the 256 byte tokens, then merges,
// merged tokens and special tokens the input describes) and a text to encode. Creating the
// tokenizer may fail with an error; once it exists, encoding any bytes must give ids inside
// the vocabulary, and decoding them (special tokens rendered) must give the text back:
// byte-level BPE with every byte in the vocabulary loses nothing. The piece-by-piece decode
// must match the whole one, and the chat-template detector must accept or refuse the text as a
// template; a style it accepts must render the text as a user turn.
//
// Input: byte 0 picks the pre-tokenizer, byte 1 the flags (bit 0: parse special tokens), then
// vocabulary operations up to the first zero byte, then the text:
//   op % 4 == 0: merge of tokens a, b (two 16-bit little-endian ids, modulo the vocabulary);
//                op & 4 also adds the merged text as a token;
//   op % 4 == 1: a special token: a length byte (1..24), then its text; op & 4: CONTROL, else
//                USER_DEFINED;
//   op % 4 == 2: the next 16-bit id (modulo the vocabulary) becomes the end-of-turn id;
//   op % 4 == 3: nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/chat.h"
#include "runtime/tokenizer.h"
#include "runtime/tokenizer_unicode.h"

namespace zenmoe::fuzz {

inline size_t tokenizer_id16(const uint8_t* p) { return static_cast<size_t>(p[0] | p[1] << 8); }

// "" when the input keeps every property above, else what broke. *n_ids (when given) is the
// number of ids the text encoded to, or -1 when the input built no tokenizer.
inline std::string check_tokenizer_input(const uint8_t* data, size_t size, int64_t* n_ids = nullptr) {
  using namespace zenmoe::tok;
  static const char* const kPre[] = {"default", "deepseek-v3", "kimi-k2", "qwen2"};
  if (n_ids != nullptr) *n_ids = -1;
  if (size < 2) return "";
  Vocabulary v;
  v.pre = kPre[data[0] % 4];
  const bool parse_special = (data[1] & 1) != 0;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    append_utf8(byte_to_cp(static_cast<uint8_t>(b)), &t);
    v.tokens.push_back(std::move(t));
    v.types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  size_t i = 2;
  while (i < size && data[i] != 0 && v.tokens.size() < 4096) {
    const uint8_t op = data[i++];
    if (op % 4 == 0 && i + 4 <= size) {
      const std::string a = v.tokens[tokenizer_id16(data + i) % v.tokens.size()];
      const std::string b = v.tokens[tokenizer_id16(data + i + 2) % v.tokens.size()];
      i += 4;
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) continue;  // not a merge line
      v.merges.push_back(a + " " + b);
      if (op & 4) {
        v.tokens.push_back(a + b);
        v.types.push_back(static_cast<int32_t>(TokenType::kNormal));
      }
    } else if (op % 4 == 1 && i < size) {
      const size_t len = data[i++] % 24 + 1;
      if (i + len > size) break;
      v.tokens.emplace_back(reinterpret_cast<const char*>(data + i), len);
      v.types.push_back(static_cast<int32_t>((op & 4) ? TokenType::kControl : TokenType::kUserDefined));
      i += len;
    } else if (op % 4 == 2 && i + 2 <= size) {
      v.eot = static_cast<int64_t>(tokenizer_id16(data + i) % v.tokens.size());
      i += 2;
    }
  }
  if (i < size) ++i;  // the zero byte
  const std::string text(reinterpret_cast<const char*>(data + i), size - i);

  auto tk = Tokenizer::create(v);
  if (!tk) return "";
  std::vector<int32_t> ids;
  tk->encode(text, /*add_special=*/false, parse_special, &ids);
  if (n_ids != nullptr) *n_ids = static_cast<int64_t>(ids.size());
  std::string pieces;
  for (int32_t id : ids) {
    if (id < 0 || id >= tk->n_vocab()) return "id " + std::to_string(id) + " outside the vocabulary";
    pieces.append(tk->piece(id, /*render_special=*/true));
  }
  if (tk->decode(ids, /*render_special=*/true) != pieces) return "decode differs from its pieces";
  if (pieces != text) return "decode(encode(text)) differs from the text";
  if (auto style = detect_chat_style(text)) {
    auto prompt = format_chat(*style, {{"user", text}}, true);
    if (!prompt) return "a detected chat style refused a user turn: " + prompt.error();
    if (prompt->find(text) == std::string::npos) return "the rendered chat turn lost the text";
  }
  return "";
}

// Seeds: merges of 'h'+'e', 'l'+'l', then "he"+"ll" (ids 256, 257 after the byte tokens), two
// special tokens, then mixed text, for every pre-tokenizer with and without special parsing.
inline std::vector<std::string> tokenizer_fuzz_seeds() {
  auto id16 = [](int id) { return std::string{static_cast<char>(id & 255), static_cast<char>(id >> 8)}; };
  std::string ops;
  ops += "\x04" + id16('h') + id16('e');
  ops += "\x04" + id16('l') + id16('l');
  ops += "\x04" + id16(256) + id16(257);
  ops += std::string("\x05\x09") + "<|im_end|>";
  ops += std::string("\x01\x04") + "<tag>";
  const std::string text = "hello world, <tag>12345 hello<|im_end|> \xe4\xbd\xa0\xe5\xa5\xbd \xff\xfe end";
  std::vector<std::string> seeds;
  for (int pre = 0; pre < 4; ++pre)
    for (int flags = 0; flags < 2; ++flags) {
      std::string seed;
      seed += static_cast<char>(pre);
      seed += static_cast<char>(flags);
      seed += ops;
      seed += '\0';
      seed += text;
      seeds.push_back(std::move(seed));
    }
  return seeds;
}

}  // namespace zenmoe::fuzz
