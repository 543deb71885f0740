#include "tools/json_schema.h"

#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "runtime/grammar.h"

namespace zenmoe::tools {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;      // schemas inside schemas (a $ref counts once)
constexpr int64_t kMaxCount = 1000;  // the largest minItems / maxItems / minLength / maxLength

// Concatenation (GCC 12 mistakes chains of "literal" + std::string for overlapping copies).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  return s;
}

// A GBNF literal standing for `text`'s bytes.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The compact JSON text of `v` as a literal (an enum or const value).
std::string json_literal(const json& v) { return literal(v.dump(-1, ' ', false, json::error_handler_t::replace)); }

// "{m,n}" for counts m..n (n < 0: no upper bound), "" for exactly one.
std::string bounds(int64_t m, int64_t n) {
  if (m == 1 && n == 1) return "";
  return cat("{", std::to_string(m), ",", n < 0 ? std::string() : std::to_string(n), "}");
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  Expected<std::string> run() {
    auto r = rule(root_, "#", 0);
    if (!r) return Error{r.error()};
    return "root ::= " + *r + "\n" + rules_ + grammar::Grammar::json_value_rules();
  }

 private:
  std::string define(const std::string& body) {
    const std::string name = cat("s", std::to_string(++n_));
    rules_ += cat(name, " ::= ", body, "\n");
    return name;
  }

  // One line: control characters of property names and the like become spaces.
  Error bad(const std::string& path, const std::string& what) const {
    std::string line = "json schema: " + path + ": " + what;
    for (char& c : line)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return Error{line};
  }

  // A count keyword (minItems and the like): *out unchanged when absent.
  Status count(const json& s, const char* key, const std::string& path, int64_t* out) const {
    if (!s.contains(key)) return Status::ok();
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount)
      return bad(path, cat("'", key, "' must be an integer in [0, 1000]"));
    *out = v.get<int64_t>();
    return Status::ok();
  }

  // The name of a rule for the JSON texts schema `s` (at `path`) admits.
  Expected<std::string> rule(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return bad(path, "schemas nested deeper than 64");
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return bad(path, "the schema false admits nothing");
    }
    if (!s.is_object()) return bad(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
    static const std::set<std::string> kKeywords = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
        "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref"};
    for (const auto& [key, value] : s.items())
      if (!kKeywords.count(key) && !kAnnotations.count(key)) return bad(path, "'" + key + "' is not supported");

    if (s.contains("$ref")) return ref(s["$ref"], path, depth);
    if (s.contains("const")) return define(json_literal(s["const"]) + " ws");
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return bad(path, "'enum' must be a non-empty array");
      std::string alts;
      for (const json& v : e) alts += (alts.empty() ? "" : " | ") + json_literal(v);
      return define("( " + alts + " ) ws");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) return bad(path, cat("'", key, "' must be a non-empty array"));
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) {
        auto r = rule(list[i], cat(path, "/", key, "/", std::to_string(i)), depth + 1);
        if (!r) return r;
        alts += (alts.empty() ? "" : " | ") + *r;
      }
      return define(alts);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      if (t.is_array())
        for (const json& x : t)
          if (x.is_string()) types.push_back(x.get<std::string>());
      if (types.empty() || (t.is_array() && types.size() != t.size()))
        return bad(path, "'type' must be a type name or a list of them");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return std::string("value");
    }
    std::string alts;
    for (const std::string& t : types) {
      auto r = typed(s, t, path, depth);
      if (!r) return r;
      alts += (alts.empty() ? "" : " | ") + *r;
    }
    return types.size() == 1 ? alts : define(alts);
  }

  Expected<std::string> typed(const json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "number") return std::string("number");
    if (type == "integer") return define("integer ws");
    if (type == "boolean") return define("( \"true\" | \"false\" ) ws");
    if (type == "null") return define("\"null\" ws");
    if (type == "string") {
      int64_t lo = 0, hi = -1;
      ZENMOE_RETURN_IF_ERROR(count(s, "minLength", path, &lo));
      ZENMOE_RETURN_IF_ERROR(count(s, "maxLength", path, &hi));
      if (hi >= 0 && hi < lo) return bad(path, "'maxLength' is below 'minLength'");
      if (lo == 0 && hi < 0) return std::string("string");
      return define("\"\\\"\" char" + bounds(lo, hi) + " \"\\\"\" ws");
    }
    if (type == "array") return array(s, path, depth);
    if (type == "object") return object(s, path, depth);
    return bad(path, "unknown type '" + type + "'");
  }

  Expected<std::string> array(const json& s, const std::string& path, int depth) {
    std::string item = "value";
    if (s.contains("items")) {
      auto r = rule(s["items"], path + "/items", depth + 1);
      if (!r) return r;
      item = *r;
    }
    int64_t lo = 0, hi = -1;
    ZENMOE_RETURN_IF_ERROR(count(s, "minItems", path, &lo));
    ZENMOE_RETURN_IF_ERROR(count(s, "maxItems", path, &hi));
    if (hi >= 0 && hi < lo) return bad(path, "'maxItems' is below 'minItems'");
    if (hi == 0) return define("\"[\" ws \"]\" ws");
    const std::string more = "( \",\" ws " + item + " )";
    const std::string rest = hi == 1 ? "" : " " + more + bounds(lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    const std::string items = item + rest;
    return define("\"[\" ws " + (lo == 0 ? "( " + items + " )?" : items) + " \"]\" ws");
  }

  Expected<std::string> object(const json& s, const std::string& path, int depth) {
    const json* ap = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!s.contains("properties")) {
      if (s.contains("required") && !s["required"].empty())
        return bad(path, "'required' without 'properties' is not supported");
      if (ap == nullptr || (ap->is_boolean() && ap->get<bool>())) return std::string("object");
      if (ap->is_boolean()) return define("\"{\" ws \"}\" ws");
      auto v = rule(*ap, path + "/additionalProperties", depth + 1);
      if (!v) return v;
      const std::string kv = "string \":\" ws " + *v;
      return define("\"{\" ws ( " + kv + " ( \",\" ws " + kv + " )* )? \"}\" ws");
    }
    if (ap != nullptr && !(ap->is_boolean() && !ap->get<bool>()))
      return bad(path, "'additionalProperties' beside 'properties' must be false");
    const json& props = s["properties"];
    if (!props.is_object()) return bad(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return bad(path, "'required' must be an array of property names");
      for (const json& x : r) {
        if (!x.is_string() || !props.contains(x.get<std::string>()))
          return bad(path, "'required' names " + x.dump() + ", which is not in 'properties'");
        required.insert(x.get<std::string>());
      }
    }
    // kv[i]: one member; after[i]: members from i on once one is written (each after a comma);
    // first[i]: members from i on before any is written.
    std::vector<std::string> kv, names;
    for (const auto& [name, sub] : props.items()) {
      auto v = rule(sub, path + "/properties/" + name, depth + 1);
      if (!v) return v;
      kv.push_back(define(literal(json(name).dump(-1, ' ', false, json::error_handler_t::replace)) + " ws \":\" ws " +
                          *v));
      names.push_back(name);
    }
    std::string after, first;  // of i + 1 (empty: nothing more)
    for (size_t i = kv.size(); i-- > 0;) {
      const bool req = required.count(names[i]) != 0;
      const std::string next_after = after, next_first = first;
      after = define((req ? "\",\" ws " + kv[i] : "( \",\" ws " + kv[i] + " )?") +
                     (next_after.empty() ? "" : " " + next_after));
      const std::string taken = kv[i] + (next_after.empty() ? "" : " " + next_after);
      first = define(req ? taken : next_first.empty() ? "( " + taken + " )?" : taken + " | " + next_first);
    }
    return define("\"{\" ws " + first + " \"}\" ws");
  }

  Expected<std::string> ref(const json& r, const std::string& path, int depth) {
    if (!r.is_string()) return bad(path, "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json* schema = nullptr;
    if (target == "#") {
      schema = &root_;
    } else {
      for (const char* base : {"#/$defs/", "#/definitions/"}) {
        const std::string b = base;
        if (target.rfind(b, 0) != 0) continue;
        const std::string name = target.substr(b.size()), defs = b.substr(2, b.size() - 3);
        if (name.find('/') == std::string::npos && root_.is_object() && root_.contains(defs) &&
            root_[defs].is_object() && root_[defs].contains(name))
          schema = &root_[defs][name];
      }
    }
    if (schema == nullptr)
      return bad(path, "'$ref' " + r.dump() + " does not name #, #/$defs/NAME or #/definitions/NAME");
    // Named before its body, so a schema may refer to itself (through an object or array).
    const std::string name = cat("s", std::to_string(++n_));
    refs_[target] = name;
    auto body = rule(*schema, target, depth + 1);
    if (!body) return body;
    rules_ += name + " ::= " + *body + "\n";
    return name;
  }

  const json& root_;
  std::string rules_;
  std::map<std::string, std::string> refs_;
  int n_ = 0;
};

}  // namespace

Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema) { return Converter(schema).run(); }

Expected<grammar::Grammar> json_schema_grammar(const nlohmann::json& schema) {
  auto text = json_schema_to_gbnf(schema);
  if (!text) return Error{text.error()};
  auto g = grammar::Grammar::parse(*text);
  if (!g) return Error{"json schema: its " + g.error()};
  return g;
}

}  // namespace zenmoe::tools
