// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"), spec §6: the vocabulary comes from
// GGUF metadata (tokenizer.ggml.*) or directly from a Vocabulary; encoding reproduces the
// Hugging Face tokenizer (special tokens split out leftmost-longest, pre-tokenizer regexes,
// rank-ordered merges); decoding maps bytes back and can stream across token boundaries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.h"
#include "runtime/gguf.h"
#include "runtime/tokenizer_pretok.h"

namespace zenmoe::tok {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Everything a tokenizer is built from, as stored under tokenizer.ggml.* (spec §6.1).
struct Vocabulary {
  std::string model = "gpt2";          // only "gpt2" (byte-level BPE) is supported
  std::string pre = "default";         // pre-tokenizer name (deepseek-v3, kimi-k2, gpt2, ...)
  std::vector<std::string> tokens;     // token text by id, in the byte-to-unicode alphabet
  std::vector<int32_t> types;          // TokenType per id; empty = all normal
  std::vector<std::string> merges;     // "left right"; index = rank (0 merges first)
  // Special ids; -1 = absent.
  int64_t bos = -1, eos = -1, eot = -1, eom = -1, pad = -1, unk = -1;
  int64_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
  bool add_bos = false, add_eos = false;
  std::string chat_template;           // tokenizer.chat_template (may be empty)
};

// Reads the tokenizer keys of a GGUF. Errors name the key and the problem.
Expected<Vocabulary> vocabulary_from_metadata(const gguf::Metadata& md);
// Writes them: tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_*_token}
// and tokenizer.chat_template when non-empty. Absent ids (-1) are not written.
void vocabulary_to_metadata(const Vocabulary& v, gguf::Metadata* md);

class Tokenizer {
 public:
  static Expected<Tokenizer> create(const Vocabulary& v);
  static Expected<Tokenizer> from_metadata(const gguf::Metadata& md);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, appended to *out. parse_special: exact occurrences of CONTROL and
  // USER_DEFINED token texts become those ids (leftmost, longest first). add_special: BOS /
  // EOS as add_bos / add_eos say. Any bytes are accepted (invalid UTF-8 maps byte by byte).
  // Thread safe (the per-word cache is shared under a lock).
  void encode(std::string_view text, bool add_special, bool parse_special,
              std::vector<int32_t>* out) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special = false,
                              bool parse_special = true) const;

  // The bytes token `id` stands for. CONTROL / UNUSED tokens give nothing unless
  // render_special; USER_DEFINED tokens give their text as is. Out-of-range ids give nothing.
  std::string_view piece(int32_t id, bool render_special = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const;
  const std::string& token_text(int32_t id) const;  // id must be < n_vocab()
  TokenType token_type(int32_t id) const;           // id must be < n_vocab()
  int32_t find_token(std::string_view text) const;  // id of a token text, or -1

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  int32_t eot() const;  // from the key, else detected by text (spec §6.5)
  bool add_bos() const;
  bool add_eos() const;
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;  // sorted

  PreType pre_type() const;
  bool pre_known() const;  // false when tokenizer.ggml.pre was not recognised (gpt2 used)
  const std::string& chat_template() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text that is always whole UTF-8: a sequence split across
// tokens is held back until its last byte arrives; bytes that can never form a valid sequence
// are replaced by U+FFFD.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool render_special = false)
      : tok_(&t), render_special_(render_special) {}
  std::string push(int32_t id);  // the text completed by this token (may be empty)
  std::string flush();           // what is still held (an unfinished sequence -> U+FFFD)

 private:
  std::string drain(bool final);
  const Tokenizer* tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace zenmoe::tok
