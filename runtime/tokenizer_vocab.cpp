// Vocabulary <-> GGUF metadata (tokenizer.ggml.* keys, spec §6.1).
#include "runtime/tokenizer.h"

namespace zenmoe::tok {
namespace {

struct IdKey {
  const char* key;
  int64_t Vocabulary::*field;
};
constexpr IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &Vocabulary::bos},
    {"tokenizer.ggml.eos_token_id", &Vocabulary::eos},
    {"tokenizer.ggml.eot_token_id", &Vocabulary::eot},
    {"tokenizer.ggml.eom_token_id", &Vocabulary::eom},
    {"tokenizer.ggml.padding_token_id", &Vocabulary::pad},
    {"tokenizer.ggml.unknown_token_id", &Vocabulary::unk},
    {"tokenizer.ggml.fim_pad_token_id", &Vocabulary::fim_pad},
    {"tokenizer.ggml.fim_rep_token_id", &Vocabulary::fim_rep},
    {"tokenizer.ggml.fim_sep_token_id", &Vocabulary::fim_sep},
};

}  // namespace

Expected<Vocabulary> vocabulary_from_metadata(const gguf::Metadata& md) {
  Vocabulary v;
  if (!md.has("tokenizer.ggml.model")) return Error{"no tokenizer in the model (tokenizer.ggml.model missing)"};
  auto model = md.get_string("tokenizer.ggml.model");
  if (!model) return Error{model.error()};
  v.model = *model;
  if (md.has("tokenizer.ggml.pre")) {
    auto pre = md.get_string("tokenizer.ggml.pre");
    if (!pre) return Error{pre.error()};
    v.pre = *pre;
  }
  auto tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return Error{tokens.error()};
  v.tokens = std::move(*tokens);
  if (md.has("tokenizer.ggml.token_type")) {
    auto types = md.get_int_array("tokenizer.ggml.token_type");
    if (!types) return Error{types.error()};
    v.types.reserve(types->size());
    for (int64_t t : *types) {
      if (t < 1 || t > 6) return Error{"tokenizer.ggml.token_type holds " + std::to_string(t) + ", not a token type (1..6)"};
      v.types.push_back(static_cast<int32_t>(t));
    }
  }
  if (!md.has("tokenizer.ggml.merges"))
    return Error{"tokenizer.ggml.merges missing (a gpt2 BPE tokenizer needs its merges)"};
  auto merges = md.get_string_array("tokenizer.ggml.merges");
  if (!merges) return Error{merges.error()};
  v.merges = std::move(*merges);
  for (const IdKey& k : kIdKeys) {
    if (!md.has(k.key)) continue;
    auto id = md.get_uint(k.key);
    if (!id) return Error{id.error()};
    if (*id >= v.tokens.size())
      return Error{std::string(k.key) + " = " + std::to_string(*id) + " is outside the vocabulary of " +
                   std::to_string(v.tokens.size()) + " tokens"};
    v.*k.field = static_cast<int64_t>(*id);
  }
  for (auto [key, field] : {std::pair{"tokenizer.ggml.add_bos_token", &Vocabulary::add_bos},
                            std::pair{"tokenizer.ggml.add_eos_token", &Vocabulary::add_eos}}) {
    if (!md.has(key)) continue;
    auto b = md.get_bool(key);
    if (!b) return Error{b.error()};
    v.*field = *b;
  }
  if (md.has("tokenizer.chat_template")) {
    auto t = md.get_string("tokenizer.chat_template");
    if (!t) return Error{t.error()};
    v.chat_template = std::move(*t);
  }
  return v;
}

void vocabulary_to_metadata(const Vocabulary& v, gguf::Metadata* md) {
  md->set("tokenizer.ggml.model", gguf::Value::string(v.model));
  md->set("tokenizer.ggml.pre", gguf::Value::string(v.pre));
  md->set("tokenizer.ggml.tokens", gguf::Value::array_of_strings(v.tokens));
  std::vector<int64_t> types(v.tokens.size(), static_cast<int64_t>(TokenType::kNormal));
  for (size_t i = 0; i < v.types.size() && i < types.size(); ++i) types[i] = v.types[i];
  md->set("tokenizer.ggml.token_type", gguf::Value::array_of_ints(gguf::ValueType::I32, std::move(types)));
  md->set("tokenizer.ggml.merges", gguf::Value::array_of_strings(v.merges));
  for (const IdKey& k : kIdKeys)
    if (v.*k.field >= 0) md->set(k.key, gguf::Value::u32(static_cast<uint32_t>(v.*k.field)));
  md->set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(v.add_bos));
  md->set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(v.add_eos));
  if (!v.chat_template.empty()) md->set("tokenizer.chat_template", gguf::Value::string(v.chat_template));
}

}  // namespace zenmoe::tok
