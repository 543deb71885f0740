#include "ir/parser.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>

namespace zenmoe::ir {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-' || c == '+';
}

// A cursor over one line; the first error sticks.
class Line {
 public:
  Line(std::string_view s, int number) : s_(s), number_(number) {}
  std::string error;

  bool fail(const std::string& msg) {
    if (error.empty())
      error = "IR line " + std::to_string(number_) + ", column " + std::to_string(i_ + 1) + ": " + msg;
    return false;
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool at_end() {
    skip_ws();
    return i_ >= s_.size();
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool expect(char c) {
    if (peek(c)) {
      ++i_;
      return true;
    }
    return fail(std::string("expected '") + c + "'");
  }
  std::string word() {
    skip_ws();
    size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  bool value_name(std::string* out) {
    if (!expect('%')) return false;
    *out = word();
    return !out->empty() || fail("expected a value name after '%'");
  }
  bool type_and_shape(Value* v);
  bool attr_value(AttrValue* out);
  bool attr_list(std::vector<Attr>* attrs);

 private:
  std::string_view s_;
  size_t i_ = 0;
  int number_;
};

bool Line::type_and_shape(Value* v) {
  const std::string t = word();
  if (t.empty() || !type_from_name(t.c_str(), &v->type)) return fail("unknown type '" + t + "'");
  if (!expect('[')) return false;
  while (!peek(']')) {
    if (!v->shape.empty() && !expect(',')) return false;
    const std::string d = word();
    if (d == "T") v->shape.push_back(kDimTokens);
    else if (d == "C") v->shape.push_back(kDimContext);
    else {
      char* end = nullptr;
      errno = 0;
      long long n = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end || errno || n <= 0) return fail("bad dimension '" + d + "'");
      v->shape.push_back(n);
    }
  }
  return expect(']');
}

bool Line::attr_value(AttrValue* out) {
  const std::string w = word();
  if (w.empty()) return fail("expected an attribute value");
  const char c = w[0];
  if ((c >= '0' && c <= '9') || c == '-' || w == "inf" || w == "nan") {
    char* end = nullptr;
    errno = 0;
    if (w.find_first_of(".eEn") != std::string::npos) {
      float f = std::strtof(w.c_str(), &end);
      if (*end) return fail("bad number '" + w + "'");
      *out = f;
    } else {
      long long n = std::strtoll(w.c_str(), &end, 10);
      if (*end || errno) return fail("bad integer '" + w + "'");
      *out = static_cast<int64_t>(n);
    }
    return true;
  }
  *out = w;
  return true;
}

// "{key=value, ...}"
bool Line::attr_list(std::vector<Attr>* attrs) {
  if (!expect('{')) return false;
  while (!peek('}')) {
    Attr a;
    if ((!attrs->empty() && !expect(',')) || (a.key = word()).empty() || !expect('=') || !attr_value(&a.value))
      return a.key.empty() ? fail("expected an attribute name") : false;
    attrs->push_back(std::move(a));
  }
  return expect('}');
}

class Parser {
 public:
  Expected<Graph> run(std::string_view text);

 private:
  bool declaration(Line& l, ValueKind kind);
  bool node(Line& l);
  bool lookup(Line& l, const std::string& name, int* id) {
    auto it = ids_.find(name);
    if (it == ids_.end()) return l.fail("unknown value %" + name);
    *id = it->second;
    return true;
  }
  bool define(Line& l, Value v, int* id) {
    if (ids_.count(v.name)) return l.fail("value %" + v.name + " defined twice");
    *id = g_.add_value(std::move(v));
    ids_[g_.values[static_cast<size_t>(*id)].name] = *id;
    return true;
  }
  Graph g_;
  std::unordered_map<std::string, int> ids_;
};

bool Parser::declaration(Line& l, ValueKind kind) {
  Value v;
  v.kind = kind;
  int id = 0;
  return l.value_name(&v.name) && l.expect(':') && l.type_and_shape(&v) && define(l, std::move(v), &id) &&
         (l.at_end() || l.fail("unexpected text after the declaration"));
}

bool Parser::node(Line& l) {
  std::vector<int> outs;
  do {
    Value v;
    int id = 0;
    if (!l.value_name(&v.name) || !l.expect(':') || !l.type_and_shape(&v) || !define(l, std::move(v), &id))
      return false;
    outs.push_back(id);
  } while (l.peek(',') && l.expect(','));
  if (!l.expect('=')) return false;
  const std::string opname = l.word();
  OpKind op;
  if (!op_from_name(opname, &op)) return l.fail("unknown op '" + opname + "'");
  std::vector<int> ins;
  if (!l.expect('(')) return false;
  while (!l.peek(')')) {
    std::string name;
    int id = 0;
    if ((!ins.empty() && !l.expect(',')) || !l.value_name(&name) || !lookup(l, name, &id)) return false;
    ins.push_back(id);
  }
  if (!l.expect(')')) return false;
  std::vector<Attr> attrs;
  if (l.peek('{') && !l.attr_list(&attrs)) return false;
  if (!l.at_end()) return l.fail("unexpected text after the node");
  g_.add_node(op, std::move(ins), std::move(outs), std::move(attrs));
  return true;
}

Expected<Graph> Parser::run(std::string_view text) {
  int number = 0;
  bool opened = false, closed = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    Line l(raw, ++number);
    if (l.at_end() || l.peek('#')) continue;
    if (closed) return Error{"IR line " + std::to_string(number) + ": text after the closing '}'"};
    bool ok = true;
    if (!opened) {
      ok = l.word() == "graph" ? true : l.fail("expected 'graph <arch> {'");
      if (ok) g_.arch = l.word();
      ok = ok && !g_.arch.empty() && l.expect('{') && l.at_end();
      if (ok) opened = true;
      else l.fail("expected 'graph <arch> {'");
    } else if (l.peek('}')) {
      closed = l.expect('}') && l.at_end();
      ok = closed || l.fail("unexpected text after '}'");
    } else if (l.peek('%')) {
      ok = node(l);
    } else {
      const std::string kw = l.word();
      std::string name;
      int id = 0;
      if (kw == "input") ok = declaration(l, ValueKind::Input);
      else if (kw == "weight") ok = declaration(l, ValueKind::Weight);
      else if (kw == "state") ok = declaration(l, ValueKind::State);
      else if (kw == "attrs" && g_.attrs.empty())
        ok = l.attr_list(&g_.attrs) && (l.at_end() || l.fail("unexpected text"));
      else if (kw == "output") {
        ok = l.value_name(&name) && lookup(l, name, &id) && (l.at_end() || l.fail("unexpected text"));
        if (ok) g_.outputs.push_back(id);
      } else ok = l.fail("unknown statement '" + kw + "'");
    }
    if (!ok) return Error{l.error};
  }
  if (!opened || !closed) return Error{"IR text: missing 'graph <arch> {' ... '}'"};
  return std::move(g_);
}

}  // namespace

Expected<Graph> parse_graph(std::string_view text) { return Parser().run(text); }

}  // namespace zenmoe::ir
