#include "ir/printer.h"

#include <cstdio>
#include <cstring>

namespace zenmoe::ir {

namespace {

std::string float_str(float f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "n": inf / nan
  return s;
}

std::string attr_str(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* f = std::get_if<float>(&v)) return float_str(*f);
  return std::get<std::string>(v);
}

std::string decl(const Value& v) { return "%" + v.name + " : " + type_string(v); }

std::string attr_list(const std::vector<Attr>& attrs) {
  std::string s = "{";
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (i) s += ", ";
    s += attrs[i].key;
    s += '=';
    s += attr_str(attrs[i].value);
  }
  s += '}';
  return s;
}

}  // namespace

std::string print_graph(const Graph& g) {
  std::string s = "graph " + g.arch + " {\n";
  if (!g.attrs.empty()) {
    s += "  attrs ";
    s += attr_list(g.attrs);
    s += '\n';
  }
  for (const auto& v : g.values)
    if (v.kind != ValueKind::Temp) s += std::string("  ") + value_kind_name(v.kind) + " " + decl(v) + "\n";
  for (const auto& n : g.nodes) {
    s += "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      s += (i ? ", " : "") + decl(g.values[static_cast<size_t>(n.outputs[i])]);
    s += std::string(" = ") + op_name(n.op) + "(";
    for (size_t i = 0; i < n.inputs.size(); ++i)
      s += (i ? ", %" : "%") + g.values[static_cast<size_t>(n.inputs[i])].name;
    s += ")";
    if (!n.attrs.empty()) {
      s += ' ';
      s += attr_list(n.attrs);
    }
    s += "\n";
  }
  for (int id : g.outputs) s += "  output %" + g.values[static_cast<size_t>(id)].name + "\n";
  s += "}\n";
  return s;
}

}  // namespace zenmoe::ir
