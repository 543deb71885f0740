// JSON schemas to grammars (tools/json_schema.h): which JSON texts each grammar admits, against
// what the schema says, and one error line for what is not supported.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/grammar.h"
#include "tools/json_schema.h"

namespace zenmoe {
namespace {

using json = nlohmann::json;

class Schema {
 public:
  explicit Schema(const std::string& schema) {
    auto text = tools::json_schema_to_gbnf(json::parse(schema));
    EXPECT_TRUE(text) << text.error();
    if (!text) return;
    auto g = grammar::Grammar::parse(*text);
    EXPECT_TRUE(g) << g.error() << "\n" << *text;
    if (g) g_ = std::make_shared<const grammar::Grammar>(std::move(*g));
  }
  // Whether `text` is a whole sentence of the schema's grammar.
  bool admits(const std::string& text) const {
    if (!g_) return false;
    grammar::State s(g_);
    if (!s.accepts(text)) return false;
    s.advance(text);
    return s.can_end();
  }

 private:
  std::shared_ptr<const grammar::Grammar> g_;
};

TEST(JsonSchema, ObjectsHoldTheirPropertiesRequiredOnesAlways) {
  const Schema s(R"({"type": "object", "additionalProperties": false, "required": ["name"], "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2}}})");
  EXPECT_TRUE(s.admits(R"({"name": "bob"})"));
  EXPECT_TRUE(s.admits(R"({"name":"bob"})"));
  EXPECT_TRUE(s.admits(R"({"age": -3, "name": ""})"));
  EXPECT_TRUE(s.admits(R"({"age": 3, "name": "al", "tags": ["a"]})"));
  EXPECT_TRUE(s.admits("{\n  \"name\": \"al\",\n  \"tags\": [\"a\", \"b\"]\n}"));
  EXPECT_FALSE(s.admits("{}"));                                   // name is required
  EXPECT_FALSE(s.admits(R"({"name": "toolong"})"));               // maxLength
  EXPECT_FALSE(s.admits(R"({"name": "x", "age": 1})"));           // properties in name order
  EXPECT_FALSE(s.admits(R"({"name": "x", "tags": []})"));         // minItems
  EXPECT_FALSE(s.admits(R"({"name": "x", "tags": ["a", "b", "a"]})"));  // maxItems
  EXPECT_FALSE(s.admits(R"({"name": "x", "tags": ["c"]})"));      // enum
  EXPECT_FALSE(s.admits(R"({"name": "x", "extra": 1})"));         // no other properties
  EXPECT_FALSE(s.admits(R"({"age": 1.5, "name": "x"})"));         // integer
  EXPECT_FALSE(s.admits(R"({"name": "x",})"));
  const Schema optional(R"({"properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}})");
  EXPECT_TRUE(optional.admits("{}"));
  EXPECT_TRUE(optional.admits(R"({"b": null})"));
  EXPECT_TRUE(optional.admits(R"({"a": true, "b": null})"));
  EXPECT_FALSE(optional.admits(R"({, "b": null})"));
  EXPECT_FALSE(optional.admits(R"({"a": true,})"));
}

TEST(JsonSchema, TypesAlternativesConstantsAndAnyValue) {
  const Schema nullable(R"({"anyOf": [{"type": "null"}, {"type": "number"}]})");
  EXPECT_TRUE(nullable.admits("null"));
  EXPECT_TRUE(nullable.admits("-1.5e3"));
  EXPECT_FALSE(nullable.admits("true"));
  const Schema either(R"({"type": ["string", "boolean"]})");
  EXPECT_TRUE(either.admits(R"("x\"y")"));
  EXPECT_TRUE(either.admits("false"));
  EXPECT_FALSE(either.admits("0"));
  const Schema constant(R"({"const": {"a": [1, "x\ny"]}})");
  EXPECT_TRUE(constant.admits(R"({"a":[1,"x\ny"]})"));
  EXPECT_FALSE(constant.admits(R"({"a": [1, "x\ny"]})"));  // the value as written compactly
  const Schema choices(R"({"enum": ["he said \"hi\"", 7, null]})");
  EXPECT_TRUE(choices.admits(R"("he said \"hi\"")"));
  EXPECT_TRUE(choices.admits("7"));
  EXPECT_TRUE(choices.admits("null"));
  EXPECT_FALSE(choices.admits("8"));
  const Schema anything("{}");
  EXPECT_TRUE(anything.admits(R"([1, {"a": null}, "s"])"));
  EXPECT_TRUE(Schema("true").admits("3"));
  const Schema map(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(map.admits(R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(map.admits(R"({"a": "x"})"));
  const Schema strings(R"({"type": "array", "items": {"type": "string", "minLength": 2}, "maxItems": 1})");
  EXPECT_TRUE(strings.admits(R"(["ab"])"));
  EXPECT_TRUE(strings.admits("[]"));
  EXPECT_FALSE(strings.admits(R"(["a"])"));
  EXPECT_FALSE(strings.admits(R"(["ab", "cd"])"));
}

TEST(JsonSchema, ReferencesMayRecurse) {
  const Schema list(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "required": ["v", "next"],
      "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}}})");
  EXPECT_TRUE(list.admits(R"({"next": null, "v": 1})"));
  EXPECT_TRUE(list.admits(R"({"next": {"next": {"next": null, "v": 3}, "v": 2}, "v": 1})"));
  EXPECT_FALSE(list.admits(R"({"next": {"v": 2}, "v": 1})"));
  const Schema tree(R"({"definitions": {"t": {"type": "array", "items": {"$ref": "#/definitions/t"}}},
      "$ref": "#/definitions/t"})");
  EXPECT_TRUE(tree.admits("[[], [[]]]"));
  EXPECT_FALSE(tree.admits("[1]"));
}

TEST(JsonSchema, UnsupportedOrWrongSchemasGetOneLineErrors) {
  struct Case {
    std::string schema, needle;
  };
  const Case cases[] = {
      {R"({"type": "string", "pattern": "a+"})", "#: 'pattern' is not supported"},
      {R"({"properties": {"d": {"type": "string", "format": "date"}}})", "#/properties/d: 'format' is not supported"},
      {R"({"type": "integer", "minimum": 0})", "'minimum' is not supported"},
      {R"({"$ref": "#/components/x"})", "does not name"},
      {R"({"$ref": "#/$defs/missing", "$defs": {}})", "does not name"},
      {"false", "admits nothing"},
      {R"({"properties": {"a": {}}, "required": ["b"]})", "'required' names \"b\""},
      {R"({"properties": {"a": {}}, "additionalProperties": true})", "must be false"},
      {R"({"type": "array", "maxItems": 5000})", "'maxItems' must be an integer in [0, 1000]"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "below 'minItems'"},
      {R"({"type": "text"})", "unknown type 'text'"},
      {R"({"type": 3})", "'type' must be"},
      {R"({"enum": []})", "'enum' must be a non-empty array"},
      {R"({"anyOf": {}})", "'anyOf' must be a non-empty array"},
      {"3", "a schema must be an object or a boolean"},
      {R"({"properties": {"a\nb": {"format": "x"}}})", "#/properties/a b: 'format' is not supported"},
  };
  for (const Case& c : cases) {
    auto r = tools::json_schema_to_gbnf(json::parse(c.schema));
    ASSERT_FALSE(r) << c.schema;
    EXPECT_NE(r.error().find(c.needle), std::string::npos) << c.schema << " -> " << r.error();
    EXPECT_EQ(r.error().rfind("json schema: ", 0), 0u) << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
  }
  std::string deep = "{}";
  for (int i = 0; i < 70; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  auto r = tools::json_schema_to_gbnf(json::parse(deep));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("nested deeper than 64"), std::string::npos) << r.error();
  // A schema that is itself, and nothing more, converts but its grammar is refused.
  auto self = tools::json_schema_to_gbnf(json::parse(R"({"$ref": "#"})"));
  ASSERT_TRUE(self) << self.error();
  auto g = tools::json_schema_grammar(json::parse(R"({"$ref": "#"})"));
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().rfind("json schema: its grammar: ", 0), 0u) << g.error();
  EXPECT_NE(g.error().find("left-recursive"), std::string::npos) << g.error();
}

}  // namespace
}  // namespace zenmoe
