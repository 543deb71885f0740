// Internals of Tokenizer shared by its .cpp files (not part of the public interface).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tokenizer.h"
#include "runtime/tokenizer_unicode.h"

namespace zenmoe::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// (left symbol, right symbol) -> (rank, merged symbol), open addressing on a 64-bit key.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n);
  // Keeps the lowest rank when a pair repeats.
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Trie over the texts of the tokens that are split out of raw text before pre-tokenisation.
class SpecialTrie {
 public:
  void add(std::string_view text, int32_t id);
  // Longest token text that starts at s[0] (n bytes available): its id and length, or -1.
  int32_t longest(const unsigned char* s, size_t n, size_t* len) const;
  bool may_start(unsigned char b) const { return first_[b]; }
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // byte -> node
    int32_t id = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  bool first_[256] = {};
};

struct Tokenizer::Impl {
  // Vocabulary.
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::unordered_map<std::string_view, int32_t, StringHash, std::equal_to<>> token_ids;
  std::vector<std::string> pieces;  // decoded bytes per token (normal and user-defined)
  int32_t bos = -1, eos = -1, eot = -1;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> eog;
  PreType pre = PreType::kGpt2;
  bool pre_known = true;
  std::string chat_template;

  // BPE. Symbols are token ids, or ids >= n_vocab for strings merges create that are not
  // tokens (their text is only needed for the byte fallback, which works from the word bytes).
  int32_t byte_sym[256] = {};
  MergeTable merges;
  int32_t n_symbols = 0;
  SpecialTrie specials;

  // Per-word cache and scratch space, guarded by `mu`.
  mutable std::mutex mu;
  struct CacheSpan {
    uint32_t begin, count;
  };
  mutable std::unordered_map<std::string, CacheSpan, StringHash, std::equal_to<>> cache;
  mutable std::vector<int32_t> cache_ids;
  mutable CodePoints cps;
  mutable std::vector<uint32_t> word_ends;
  struct Sym {
    int32_t id, prev, next;
  };
  mutable std::vector<Sym> syms;
  struct Cand {
    uint32_t rank, left;
    int32_t left_id, right_id;
  };
  mutable std::vector<Cand> heap;

  void encode_span(std::string_view text, std::vector<int32_t>* out) const;
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;
  void bpe(std::string_view word, std::vector<int32_t>* out) const;
};

// Builds the BPE tables (byte symbols, merges) of `impl` from the vocabulary's merges.
Status build_bpe(const std::vector<std::string>& merges, Tokenizer::Impl* impl);

}  // namespace zenmoe::tok
