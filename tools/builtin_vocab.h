// The built-in tokenizer of synthetic models: a small, deterministic byte-level BPE
// vocabulary (GPT-2 byte alphabet, spec §6.2) whose merges are learned from an embedded
// English/code text, plus the DeepSeek-V3 special and chat tokens and chat template.
// Models made without `--tokenizer` carry it, so tokenising and chat work on every preset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "runtime/gguf.h"

namespace zenmoe::tools {

// GGUF token types (spec §6.1).
enum TokenType : int32_t {
  kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4,
  kTokenUnused = 5, kTokenByte = 6,
};

// Everything the `tokenizer.*` GGUF keys hold.
struct VocabData {
  std::string model = "gpt2";           // tokenizer.ggml.model
  std::string pre = "deepseek-v3";      // tokenizer.ggml.pre
  std::vector<std::string> tokens;      // token text in the byte-to-unicode alphabet
  std::vector<int32_t> token_types;     // one TokenType per token
  std::vector<std::string> merges;      // "left right", index = rank
  uint32_t bos = 0, eos = 0, eot = 0, pad = 0;
  bool add_bos = true, add_eos = false;
  std::string chat_template;            // Jinja, DeepSeek-V3 style
};

// The smallest vocabulary the built-in tokenizer can make: 256 bytes + 5 special tokens.
inline constexpr int64_t kBuiltinVocabMin = 261;

// Builds the built-in vocabulary with exactly n_vocab tokens: ids 0..255 are the bytes,
// then merged tokens learned from the embedded text (most frequent pair first), then
// `[PAD<id>]` (unused) fillers if the text runs out of pairs, then the special tokens
// <｜begin▁of▁sentence｜>, <｜end▁of▁sentence｜>, <｜▁pad▁｜> (control), <｜User｜>,
// <｜Assistant｜> (user-defined). Same n_vocab, same result.
Expected<VocabData> make_builtin_vocab(int64_t n_vocab);

// Writes the tokenizer.* keys (in the order llama.cpp's converter writes them).
void add_vocab_metadata(const VocabData& v, gguf::Metadata& meta);

// UTF-8 of the code point byte b maps to in the GPT-2 byte-to-unicode table (spec §6.2).
std::string byte_to_unicode(uint8_t b);

// The DeepSeek-V3 style chat template stored in tokenizer.chat_template.
const std::string& deepseek_v3_chat_template();

// The embedded training text (English prose and code).
const char* builtin_vocab_corpus();

}  // namespace zenmoe::tools
