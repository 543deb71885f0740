#include "runtime/tokenizer_hf.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

namespace zenmoe::tok {
namespace {

using nlohmann::json;

// The three Split regexes of DeepSeek-V3's pre_tokenizer, exactly as tokenizer.json holds them.
constexpr const char* kDeepseekV3Regexes[] = {
    "\\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
constexpr int64_t kMaxVocab = int64_t{1} << 24;  // refuse absurd ids rather than allocate them

Expected<json> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path + ": cannot open"};
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{path + ": not valid JSON"};
  if (!j.is_object()) return Error{path + ": expected a JSON object at the top level"};
  return j;
}

bool is_byte_level(const json& p, bool with_regex) {
  return p.is_object() && p.value("type", "") == "ByteLevel" &&
         p.value("use_regex", true) == with_regex && !p.value("add_prefix_space", false);
}

// Name of the pre-tokenizer described by the "pre_tokenizer" section, or "" if unknown.
std::string detect_pre(const json& pre) {
  if (is_byte_level(pre, true)) return "gpt2";
  if (!pre.is_object() || pre.value("type", "") != "Sequence") return "";
  const json& seq = pre.contains("pretokenizers") ? pre["pretokenizers"] : json();
  if (!seq.is_array() || seq.size() != 4 || !is_byte_level(seq[3], false)) return "";
  for (size_t i = 0; i < 3; ++i) {
    const json& s = seq[i];
    if (!s.is_object() || s.value("type", "") != "Split" || s.value("behavior", "") != "Isolated" ||
        s.value("invert", false) || !s.contains("pattern") || !s["pattern"].is_object())
      return "";
    const json& r = s["pattern"];
    if (!r.contains("Regex") || !r["Regex"].is_string() || r["Regex"] != kDeepseekV3Regexes[i]) return "";
  }
  return "deepseek-v3";
}

Status check_normalizer(const json& root, const std::string& path) {
  if (!root.contains("normalizer") || root["normalizer"].is_null()) return Status::ok();
  const json& n = root["normalizer"];
  if (n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
      n["normalizers"].is_array() && n["normalizers"].empty())
    return Status::ok();
  return Error{path + ": normalizer '" + (n.is_object() ? n.value("type", "?") : "?") +
               "' is not supported (byte-level BPE without normalisation only)"};
}

// Fills v->tokens / v->types from model.vocab and added_tokens.
Status read_tokens(const json& root, const std::string& path, Vocabulary* v) {
  const json& vocab = root.at("model").at("vocab");
  if (!vocab.is_object()) return Error{path + ": model.vocab is not an object"};
  std::vector<std::pair<int64_t, std::pair<std::string, int32_t>>> entries;
  entries.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) return Error{path + ": model.vocab['" + it.key() + "'] is not an integer id"};
    entries.push_back({it.value().get<int64_t>(), {it.key(), static_cast<int32_t>(TokenType::kNormal)}});
  }
  if (root.contains("added_tokens")) {
    const json& added = root["added_tokens"];
    if (!added.is_array()) return Error{path + ": added_tokens is not an array"};
    for (const json& a : added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return Error{path + ": an added_tokens entry lacks an integer id or a string content"};
      const bool special = a.value("special", false);
      entries.push_back({a["id"].get<int64_t>(),
                         {a["content"].get<std::string>(),
                          static_cast<int32_t>(special ? TokenType::kControl : TokenType::kUserDefined)}});
    }
  }
  int64_t max_id = -1;
  for (const auto& e : entries) {
    if (e.first < 0 || e.first >= kMaxVocab)
      return Error{path + ": token '" + e.second.first + "' has id " + std::to_string(e.first) + " (out of range)"};
    max_id = std::max(max_id, e.first);
  }
  if (max_id < 0) return Error{path + ": the vocabulary is empty"};
  v->tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  v->types.assign(static_cast<size_t>(max_id + 1), 0);
  for (auto& [id, tt] : entries) {  // added tokens come last, so their type wins for shared ids
    v->tokens[id] = std::move(tt.first);
    v->types[id] = tt.second;
  }
  for (size_t id = 0; id < v->tokens.size(); ++id)
    if (v->types[id] == 0) {
      v->tokens[id] = "[PAD" + std::to_string(id) + "]";
      v->types[id] = static_cast<int32_t>(TokenType::kUnused);
    }
  return Status::ok();
}

Status read_merges(const json& model, const std::string& path, Vocabulary* v) {
  if (!model.contains("merges") || !model["merges"].is_array()) return Error{path + ": model.merges missing"};
  const json& merges = model["merges"];
  v->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      v->merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v->merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return Error{path + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]"};
    }
  }
  return Status::ok();
}

// A token in tokenizer_config.json: a string, {"content": ...}, or null.
Status config_token_id(const json& cfg, const char* key, const std::string& path,
                       const std::unordered_map<std::string, int64_t>& ids, int64_t* out) {
  if (!cfg.contains(key) || cfg[key].is_null()) return Status::ok();
  const json& t = cfg[key];
  std::string text;
  if (t.is_string()) text = t.get<std::string>();
  else if (t.is_object() && t.contains("content") && t["content"].is_string()) text = t["content"].get<std::string>();
  else return Error{path + ": " + key + " is neither a string nor an object with a content string"};
  auto it = ids.find(text);
  if (it == ids.end()) return Error{path + ": " + key + " '" + text + "' is not a token of the vocabulary"};
  *out = it->second;
  return Status::ok();
}

Status read_config(const std::string& path, Vocabulary* v) {
  auto cfg = read_json(path);
  if (!cfg) return Error{cfg.error()};
  std::unordered_map<std::string, int64_t> ids;
  ids.reserve(v->tokens.size());
  for (size_t i = 0; i < v->tokens.size(); ++i) ids.emplace(v->tokens[i], static_cast<int64_t>(i));
  ZENMOE_RETURN_IF_ERROR(config_token_id(*cfg, "bos_token", path, ids, &v->bos));
  ZENMOE_RETURN_IF_ERROR(config_token_id(*cfg, "eos_token", path, ids, &v->eos));
  ZENMOE_RETURN_IF_ERROR(config_token_id(*cfg, "pad_token", path, ids, &v->pad));
  ZENMOE_RETURN_IF_ERROR(config_token_id(*cfg, "unk_token", path, ids, &v->unk));
  for (auto [key, field] : {std::pair{"add_bos_token", &Vocabulary::add_bos},
                            std::pair{"add_eos_token", &Vocabulary::add_eos}}) {
    if (!cfg->contains(key) || (*cfg)[key].is_null()) continue;
    if (!(*cfg)[key].is_boolean()) return Error{path + ": " + key + " is not a boolean"};
    v->*field = (*cfg)[key].get<bool>();
  }
  if (cfg->contains("chat_template")) {
    const json& t = (*cfg)["chat_template"];
    if (t.is_string()) {
      v->chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": ..., "template": ...}]: the default one, else the first
      for (const json& e : t)
        if (e.is_object() && e.contains("template") && e["template"].is_string() &&
            (v->chat_template.empty() || e.value("name", "") == "default"))
          v->chat_template = e["template"].get<std::string>();
    } else if (!t.is_null()) {
      return Error{path + ": chat_template is neither a string nor a list of named templates"};
    }
  }
  return Status::ok();
}

Expected<Vocabulary> convert(const std::string& json_path, const std::string& config_path,
                             const HfConvertOptions& options) {
  auto root = read_json(json_path);
  if (!root) return Error{root.error()};
  const json& model = (*root).contains("model") ? (*root)["model"] : json();
  if (!model.is_object() || model.value("type", "BPE") != "BPE" || !model.contains("vocab"))
    return Error{json_path + ": model is not a BPE model with a vocab"};
  if (model.value("byte_fallback", false))
    return Error{json_path + ": byte_fallback BPE is not byte-level BPE (not supported)"};
  ZENMOE_RETURN_IF_ERROR(check_normalizer(*root, json_path));
  Vocabulary v;
  v.model = "gpt2";
  v.pre = options.pre_override;
  if (v.pre.empty()) {
    v.pre = detect_pre((*root).contains("pre_tokenizer") ? (*root)["pre_tokenizer"] : json());
    if (v.pre.empty())
      return Error{json_path + ": pre_tokenizer not recognised (known: deepseek-v3, gpt2); name it explicitly"};
  }
  ZENMOE_RETURN_IF_ERROR(read_tokens(*root, json_path, &v));
  ZENMOE_RETURN_IF_ERROR(read_merges(model, json_path, &v));
  if (!config_path.empty()) ZENMOE_RETURN_IF_ERROR(read_config(config_path, &v));
  return v;
}

}  // namespace

Expected<Vocabulary> hf_tokenizer_to_vocabulary(const std::string& json_path, const std::string& config_path,
                                                const HfConvertOptions& options) {
  try {  // the checks above cover the expected shapes; a type surprise deep inside still ends here
    return convert(json_path, config_path, options);
  } catch (const std::exception& e) {
    return Error{json_path + ": unexpected content (" + e.what() + ")"};
  }
}

Status hf_tokenizer_to_metadata(const std::string& json_path, const std::string& config_path,
                                const HfConvertOptions& options, gguf::Metadata* out) {
  auto v = hf_tokenizer_to_vocabulary(json_path, config_path, options);
  if (!v) return Error{v.error()};
  vocabulary_to_metadata(*v, out);
  return Status::ok();
}

Status hf_tokenizer_to_metadata(const std::string& json_path, const std::string& config_path,
                                gguf::Metadata* out) {
  return hf_tokenizer_to_metadata(json_path, config_path, HfConvertOptions{}, out);
}

}  // namespace zenmoe::tok
