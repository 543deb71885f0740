// JSON Schema to GBNF (runtime/grammar.h), for structured output: OpenAI's response_format
// json_schema, llama.cpp's "json_schema" field, `run --json-schema`.
//
// Supported: "type" (a name or a list; object, array, string, number, integer, boolean, null),
// "properties" with "required" (an object then holds exactly the listed properties, the
// required ones always, in the order of their names, as nlohmann's parser keeps them;
// "additionalProperties" must be false or absent there), "additionalProperties" as a schema for
// the values of an object without "properties", "items" with "minItems" / "maxItems", "minLength"
// / "maxLength" of strings, "enum", "const", "anyOf", "oneOf" (as anyOf), "$ref" to
// "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed), true and {} (any value).
// Annotations (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored. Any other keyword (pattern, format, minimum, ...) is refused by name rather than
// ignored, so a grammar never admits what the schema forbids.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kernels/status.h"
#include "runtime/grammar.h"

namespace zenmoe::tools {

// The GBNF text of a grammar whose sentences are the JSON texts `schema` admits (whitespace as
// Grammar::json_value_rules allows), or one error line naming the schema path at fault.
Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema);
// That grammar, parsed (a schema that is only itself, {"$ref": "#"}, converts but is refused here).
Expected<grammar::Grammar> json_schema_grammar(const nlohmann::json& schema);

}  // namespace zenmoe::tools
