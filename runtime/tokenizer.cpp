#include "runtime/tokenizer.h"

#include <algorithm>

#include "runtime/tokenizer_impl.h"

namespace zenmoe::tok {
namespace {

// Token texts llama.cpp treats as end-of-turn / end-of-generation by name (spec §6.5).
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   "<｜end▁of▁sentence｜>",
};
constexpr std::string_view kEogTexts[] = {"<|eom_id|>", "<|end_of_text|>", "<end_of_utterance>"};

std::string decode_token_text(const std::string& text) {
  std::string out;
  CodePoints cps;
  cps.decode(text);
  for (size_t i = 0; i < cps.size(); ++i) {
    const int b = cp_to_byte(cps.cp[i]);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {  // not from the byte alphabet: keep the text as it is
      out.append(text, cps.offset[i], cps.offset[i + 1] - cps.offset[i]);
    }
  }
  return out;
}

Status check_id(int64_t id, size_t n, const char* what) {
  if (id < -1 || id >= static_cast<int64_t>(n))
    return Error{std::string("tokenizer: ") + what + " id " + std::to_string(id) +
                 " is outside the vocabulary of " + std::to_string(n) + " tokens"};
  return Status::ok();
}

Status validate(const Vocabulary& v) {
  if (v.model != "gpt2")
    return Error{"tokenizer.ggml.model '" + v.model +
                 "' is not supported (only 'gpt2', byte-level BPE)"};
  if (v.tokens.empty()) return Error{"tokenizer.ggml.tokens is empty"};
  if (v.tokens.size() > 0x7FFFFFF0) return Error{"tokenizer.ggml.tokens has too many entries"};
  if (!v.types.empty() && v.types.size() != v.tokens.size())
    return Error{"tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                 " entries but tokenizer.ggml.tokens has " + std::to_string(v.tokens.size())};
  for (size_t i = 0; i < v.types.size(); ++i)
    if (v.types[i] < 1 || v.types[i] > 6)
      return Error{"tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                   std::to_string(v.types[i]) + " is not a token type (1..6)"};
  const std::pair<int64_t, const char*> ids[] = {
      {v.bos, "bos"}, {v.eos, "eos"}, {v.eot, "eot"}, {v.eom, "eom"}, {v.pad, "padding"},
      {v.unk, "unknown"}, {v.fim_pad, "fim_pad"}, {v.fim_rep, "fim_rep"}, {v.fim_sep, "fim_sep"}};
  for (const auto& [id, what] : ids) ZENMOE_RETURN_IF_ERROR(check_id(id, v.tokens.size(), what));
  return Status::ok();
}

// End-of-generation set: EOS, EOT, EOM, FIM pad/rep/sep, and tokens named like an end of turn.
void build_eog(const Vocabulary& v, Tokenizer::Impl* impl) {
  impl->eot = static_cast<int32_t>(v.eot);
  if (impl->eot < 0) {
    for (std::string_view t : kEotTexts) {
      auto it = impl->token_ids.find(t);
      if (it != impl->token_ids.end()) {
        impl->eot = it->second;
        impl->types[it->second] = TokenType::kControl;  // as llama.cpp forces it
        break;
      }
    }
  }
  for (int64_t id : {int64_t{impl->eos}, int64_t{impl->eot}, v.eom, v.fim_pad, v.fim_rep, v.fim_sep})
    if (id >= 0) impl->eog.push_back(static_cast<int32_t>(id));
  auto add_named = [&](const auto& texts) {
    for (std::string_view t : texts)
      if (auto it = impl->token_ids.find(t); it != impl->token_ids.end()) impl->eog.push_back(it->second);
  };
  add_named(kEotTexts);
  add_named(kEogTexts);
  std::sort(impl->eog.begin(), impl->eog.end());
  impl->eog.erase(std::unique(impl->eog.begin(), impl->eog.end()), impl->eog.end());
}

}  // namespace

Expected<Tokenizer> Tokenizer::create(const Vocabulary& v) {
  ZENMOE_RETURN_IF_ERROR(validate(v));
  auto impl = std::make_unique<Impl>();
  const size_t n = v.tokens.size();
  impl->tokens = v.tokens;
  impl->types.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < v.types.size(); ++i) impl->types[i] = static_cast<TokenType>(v.types[i]);
  impl->token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i)
    impl->token_ids.emplace(impl->tokens[i], static_cast<int32_t>(i));  // first id of a text wins
  // BPE's defaults when the ids are absent (spec §6.1).
  impl->bos = static_cast<int32_t>(v.bos >= 0 ? v.bos : (n > 11 ? 11 : -1));
  impl->eos = static_cast<int32_t>(v.eos >= 0 ? v.eos : (n > 11 ? 11 : -1));
  impl->add_bos = v.add_bos;
  impl->add_eos = v.add_eos;
  bool known = true;
  impl->pre = pre_type_from_name(v.pre, &known);
  impl->pre_known = known;
  impl->chat_template = v.chat_template;
  ZENMOE_RETURN_IF_ERROR(build_bpe(v.merges, impl.get()));
  build_eog(v, impl.get());
  impl->pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = impl->types[i];
    if (t == TokenType::kControl || t == TokenType::kUserDefined)
      impl->specials.add(impl->tokens[i], static_cast<int32_t>(i));
    if (t == TokenType::kUserDefined) {
      impl->pieces[i] = impl->tokens[i];  // added tokens hold real text, not byte symbols
    } else if (t != TokenType::kControl && t != TokenType::kUnused) {
      impl->pieces[i] = decode_token_text(impl->tokens[i]);
    }
  }
  return Tokenizer(std::move(impl));
}

Expected<Tokenizer> Tokenizer::from_metadata(const gguf::Metadata& md) {
  auto v = vocabulary_from_metadata(md);
  if (!v) return Error{v.error()};
  return create(*v);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                       std::vector<int32_t>* out) const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (add_special && m.add_bos && m.bos >= 0) out->push_back(m.bos);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  if (parse_special && !m.specials.empty()) {
    for (size_t i = 0; i < n;) {
      size_t len = 0;
      const int32_t id = m.specials.may_start(s[i]) ? m.specials.longest(s + i, n - i, &len) : -1;
      if (id < 0) {
        ++i;
        continue;
      }
      m.encode_span(text.substr(start, i - start), out);
      out->push_back(id);
      i += len;
      start = i;
    }
  }
  m.encode_span(text.substr(start), out);
  if (add_special && m.add_eos && m.eos >= 0) out->push_back(m.eos);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  encode(text, add_special, parse_special, &out);
  return out;
}

std::string_view Tokenizer::piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return {};
  const TokenType t = impl_->types[id];
  if (render_special && (t == TokenType::kControl || t == TokenType::kUnused))
    return impl_->tokens[id];
  return impl_->pieces[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out.append(piece(id, render_special));
  return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->tokens.size()); }
const std::string& Tokenizer::token_text(int32_t id) const { return impl_->tokens[id]; }
TokenType Tokenizer::token_type(int32_t id) const { return impl_->types[id]; }
int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->token_ids.find(text);
  return it == impl_->token_ids.end() ? -1 : it->second;
}
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
PreType Tokenizer::pre_type() const { return impl_->pre; }
bool Tokenizer::pre_known() const { return impl_->pre_known; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

std::string StreamDecoder::push(int32_t id) {
  pending_.append(tok_->piece(id, render_special_));
  return drain(false);
}

std::string StreamDecoder::flush() { return drain(true); }

std::string StreamDecoder::drain(bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    bool incomplete = false;
    const size_t len = utf8_sequence_length(s + i, n - i, &incomplete);
    if (len > 0) {
      out.append(pending_, i, len);
      i += len;
    } else if (incomplete && !final) {
      break;  // the rest of this sequence comes with a later token
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace zenmoe::tok
