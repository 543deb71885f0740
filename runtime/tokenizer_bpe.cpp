// BPE core: merge table, special-token trie, per-word merging with a rank-ordered heap, and
// the per-word result cache.
#include <algorithm>

#include "runtime/tokenizer_impl.h"

namespace zenmoe::tok {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  slots_.assign(cap, Entry{});
  mask_ = cap - 1;
  shift_ = 64 - __builtin_ctzll(cap);
  size_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  if (2 * (size_ + 1) > slots_.size()) {
    std::vector<Entry> old = std::move(slots_);
    reserve(old.size());  // doubles: reserve() sizes for twice the requested count
    for (const Entry& e : old)
      if (e.key != kEmpty)
        insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xFFFFFFFF),
               e.rank, e.merged);
  }
  const uint64_t key = pack(left, right);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) {
      if (rank < e.rank) e.rank = rank, e.merged = merged;
      return;
    }
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      ++size_;
      return;
    }
  }
}

void SpecialTrie::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (unsigned char b : text) {
    auto& next = nodes_[node].next;
    auto it = std::find_if(next.begin(), next.end(), [b](const auto& p) { return p.first == b; });
    if (it != next.end()) {
      node = it->second;
      continue;
    }
    const int32_t child = static_cast<int32_t>(nodes_.size());
    next.emplace_back(b, child);  // may reallocate nodes_ below: `next` is not used after
    nodes_.emplace_back();
    node = child;
  }
  if (nodes_[node].id < 0) nodes_[node].id = id;  // the first id for a repeated text wins
  first_[static_cast<unsigned char>(text[0])] = true;
}

int32_t SpecialTrie::longest(const unsigned char* s, size_t n, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = 0; i < n; ++i) {
    const auto& next = nodes_[node].next;
    auto it = std::find_if(next.begin(), next.end(), [&](const auto& p) { return p.first == s[i]; });
    if (it == next.end()) break;
    node = it->second;
    if (nodes_[node].id >= 0) best = nodes_[node].id, *len = i + 1;
  }
  return best;
}

Status build_bpe(const std::vector<std::string>& merges, Tokenizer::Impl* impl) {
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra;
  impl->n_symbols = static_cast<int32_t>(impl->tokens.size());
  auto intern = [&](std::string_view s) -> int32_t {
    if (auto it = impl->token_ids.find(s); it != impl->token_ids.end()) return it->second;
    if (auto it = extra.find(s); it != extra.end()) return it->second;
    extra.emplace(std::string(s), impl->n_symbols);
    return impl->n_symbols++;
  };
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_cp(static_cast<uint8_t>(b)), &s);
    impl->byte_sym[b] = intern(s);
  }
  impl->merges.reserve(merges.size());
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ', 1);  // a left part may itself start with a space-like char
    if (sp == std::string::npos || sp + 1 >= m.size())
      return Error{"tokenizer.ggml.merges[" + std::to_string(r) + "] = '" + m +
                   "' is not two parts separated by a space"};
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left).append(right);
    const int32_t l = intern(left), rr = intern(right), merged = intern(joined);
    impl->merges.insert(l, rr, static_cast<uint32_t>(r), merged);
  }
  return Status::ok();
}

namespace {
// Min-heap order on (rank, position): the lowest rank merges first, leftmost on ties.
bool later(const Tokenizer::Impl::Cand& a, const Tokenizer::Impl::Cand& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}
}  // namespace

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>* out) const {
  const auto* w = reinterpret_cast<const unsigned char*>(word.data());
  const int32_t n = static_cast<int32_t>(word.size());
  syms.resize(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = Sym{byte_sym[w[i]], i - 1, i + 1 < n ? i + 1 : -1};
  heap.clear();
  auto push_pair = [&](int32_t i) {
    const int32_t j = syms[i].next;
    if (j < 0) return;
    if (const MergeTable::Entry* e = merges.find(syms[i].id, syms[j].id)) {
      heap.push_back(Cand{e->rank, static_cast<uint32_t>(i), syms[i].id, syms[j].id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    Sym& l = syms[c.left];
    // Entries go stale when either side was merged since; skip those.
    if (l.id != c.left_id || l.next < 0 || syms[l.next].id != c.right_id) continue;
    Sym& r = syms[l.next];
    l.id = merges.find(c.left_id, c.right_id)->merged;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = static_cast<int32_t>(c.left);
    if (l.prev >= 0) push_pair(l.prev);
    push_pair(static_cast<int32_t>(c.left));
  }
  const int32_t n_vocab = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) {
    if (syms[i].id < n_vocab) {
      out->push_back(syms[i].id);
      continue;
    }
    // Not a token: fall back to the one-byte tokens of its bytes (spec §6.3 step 5).
    const int32_t end = syms[i].next < 0 ? n : syms[i].next;
    for (int32_t k = i; k < end; ++k)
      if (byte_sym[w[k]] < n_vocab) out->push_back(byte_sym[w[k]]);
  }
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  constexpr size_t kMaxCachedWord = 256;
  constexpr size_t kMaxCacheIds = size_t{1} << 22;
  if (word.size() == 1) {
    const int32_t id = byte_sym[static_cast<unsigned char>(word[0])];
    if (id < static_cast<int32_t>(tokens.size())) out->push_back(id);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    bpe(word, out);
    return;
  }
  if (auto it = cache.find(word); it != cache.end()) {
    const auto first = cache_ids.begin() + it->second.begin;
    out->insert(out->end(), first, first + it->second.count);
    return;
  }
  const size_t before = out->size();
  bpe(word, out);
  if (cache_ids.size() > kMaxCacheIds) {  // bounded memory: start over rather than evict
    cache.clear();
    cache_ids.clear();
  }
  const auto begin = static_cast<uint32_t>(cache_ids.size());
  cache_ids.insert(cache_ids.end(), out->begin() + static_cast<std::ptrdiff_t>(before), out->end());
  cache.emplace(std::string(word), CacheSpan{begin, static_cast<uint32_t>(out->size() - before)});
}

void Tokenizer::Impl::encode_span(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  cps.decode(text);
  word_ends.clear();
  split_words(pre, cps.cp.data(), cps.flags.data(), cps.size(), &word_ends);
  uint32_t prev = 0;
  for (uint32_t end : word_ends) {
    const uint32_t b = cps.offset[prev], e = cps.offset[end];
    encode_word(text.substr(b, e - b), out);
    prev = end;
  }
}

}  // namespace zenmoe::tok
