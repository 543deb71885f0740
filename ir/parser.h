// Parses the text form written by print_graph (see printer.h) back into a Graph.
// print_graph(parse_graph(text)) == text for any text print_graph wrote.
#pragma once

#include <string_view>

#include "ir/graph.h"
#include "kernels/status.h"

namespace zenmoe::ir {

// Syntax errors name the line and column. The result is not verified: call verify().
Expected<Graph> parse_graph(std::string_view text);

}  // namespace zenmoe::ir
