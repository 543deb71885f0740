#include "runtime/grammar.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <unordered_map>
#include <optional>
#include <utility>

namespace zenmoe::grammar {

bool Element::matches(uint32_t c) const {
  bool in = false;
  for (const CharRange& r : ranges) in = in || (r.lo <= c && c <= r.hi);
  return in != negate;
}

bool Element::may_match(uint32_t lo, uint32_t hi) const {
  for (const CharRange& r : ranges) {
    if (!negate && r.lo <= hi && lo <= r.hi) return true;
    if (negate && r.lo <= lo && hi <= r.hi) return false;  // every candidate excluded
  }
  return negate;
}

namespace {

// Limits that keep a hostile grammar (a request's) from exhausting time, memory or the stack.
constexpr int kMaxRepeat = 1000;  // the largest m or n of {m,n}
constexpr size_t kMaxRules = 4096;  // rules, the parser's own (groups, repetitions) included
constexpr int kMaxNesting = 64;     // parentheses inside parentheses
constexpr size_t kMaxElements = size_t{1} << 18;  // items of all sequences together
constexpr size_t kMaxText = size_t{1} << 20;      // bytes of grammar text
constexpr size_t kMaxStacks = 2048;  // stacks one character may leave (an ambiguous grammar's)
constexpr size_t kMaxWork = 4 * kMaxStacks;  // stacks one character may make or expand

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Bytes of the UTF-8 sequence a lead byte starts (0: not a lead byte).
int utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xe) return 3;
  if ((b >> 3) == 0x1e) return 4;
  return 0;
}

// A byte of the grammar text as an error message shows it: printable ASCII as it is, else \xHH
// (so a message stays one line of text).
std::string shown(char c) {
  const auto b = static_cast<unsigned char>(c);
  if (b >= 0x20 && b < 0x7f) return std::string(1, c);
  static const char* const kHex = "0123456789ABCDEF";
  return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
}

enum class Utf8 { kChar, kUnfinished, kInvalid };

// Reads the code point at s[*i] into *c and moves *i past it (kChar); or, when s ends inside
// it, gives the range of code points it can still become (kUnfinished, [*lo, *hi], *i left at
// its first byte); kInvalid for bytes that can never be UTF-8 (a stray continuation byte, a
// bad lead byte, an overlong form, a code point past U+10FFFF).
Utf8 next_utf8(std::string_view s, size_t* i, uint32_t* c, uint32_t* lo, uint32_t* hi) {
  const auto b = static_cast<unsigned char>(s[*i]);
  const int len = utf8_length(b);
  if (len == 0) return Utf8::kInvalid;
  uint32_t v = len == 1 ? b : b & (0x7fu >> len);
  const size_t have = std::min(s.size() - *i, static_cast<size_t>(len));
  for (size_t k = 1; k < have; ++k) {
    const auto x = static_cast<unsigned char>(s[*i + k]);
    if ((x & 0xc0) != 0x80) return Utf8::kInvalid;
    v = (v << 6) | (x & 0x3f);
  }
  // The smallest code point a sequence of this length may carry (shorter forms are overlong).
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (have < static_cast<size_t>(len)) {
    const int missing_bits = 6 * (len - static_cast<int>(have));
    *lo = std::max(v << missing_bits, kMin[len]);
    *hi = std::min((v << missing_bits) | ((1u << missing_bits) - 1), 0x10ffffu);
    return *lo <= *hi ? Utf8::kUnfinished : Utf8::kInvalid;
  }
  if (v < kMin[len] || v > 0x10ffff) return Utf8::kInvalid;
  *c = v;
  *i += static_cast<size_t>(len);
  return Utf8::kChar;
}

}  // namespace

// Recursive descent over GBNF text, building the grammar's rules; errors name line and column.
class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Expected<Grammar> run() {
    skip_space(true);
    while (ok_ && i_ < t_.size()) {
      const size_t name_at = i_;
      const std::string name = parse_name();
      if (name.empty()) return fail_here("expected a rule name");
      skip_space(false);
      if (t_.substr(i_, 3) != "::=") return fail_here("expected '::=' after '" + name + "'");
      i_ += 3;
      skip_space(true);
      const int r = rule_id(name);
      if (defined_[static_cast<size_t>(r)]) {
        i_ = name_at;
        return fail_here("rule '" + name + "' is defined twice");
      }
      defined_[static_cast<size_t>(r)] = true;
      parse_alternates(r, false);
      if (!ok_) break;
      skip_space(false);
      if (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r')
        return fail_here("unexpected '" + shown(t_[i_]) + "'");
      skip_space(true);
    }
    if (!ok_) return Error{err_};
    for (size_t r = 0; r < names_.size(); ++r)
      if (!defined_[r]) return Error{"grammar: rule '" + names_[r] + "' is used but not defined"};
    auto root = ids_.find("root");
    if (root == ids_.end()) return Error{"grammar: no rule named 'root'"};
    g_.root_ = root->second;
    if (auto bad = left_recursive_rule()) return Error{"grammar: rule '" + names_[*bad] + "' is left-recursive"};
    return std::move(g_);
  }

 private:
  Error fail_here(const std::string& what) {
    if (!ok_) return Error{err_};
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) {
      col = t_[k] == '\n' ? 1 : col + 1;
      line += t_[k] == '\n';
    }
    ok_ = false;
    err_ = "grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what;
    return Error{err_};
  }

  bool bad(const std::string& what) {
    fail_here(what);
    return false;
  }

  int rule_id(const std::string& name) {
    auto [it, added] = ids_.try_emplace(name, static_cast<int>(names_.size()));
    if (added && names_.size() == kMaxRules) bad("more than 4096 rules (groups and repetitions count too)");
    if (added) {
      names_.push_back(name);
      defined_.push_back(false);
      g_.rule_alts_.emplace_back();
    }
    return it->second;
  }
  // A rule of the parser's own (groups, repetitions), named after the rule being parsed.
  int new_rule() {
    const int r = rule_id(names_[static_cast<size_t>(current_)] + "_" + std::to_string(++anon_));
    defined_[static_cast<size_t>(r)] = true;
    return r;
  }
  void add_alt(int rule, std::vector<Element> seq) {
    if ((elements_ += seq.size()) > kMaxElements) bad("more than 262144 items in all");
    g_.rule_alts_[static_cast<size_t>(rule)].push_back(static_cast<int>(g_.alts_.size()));
    g_.alts_.push_back(std::move(seq));
  }
  static Element ref(int rule) {
    Element e;
    e.rule = rule;
    return e;
  }

  void skip_space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++i_;
      } else if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t from = i_;
    while (i_ < t_.size() && is_name_char(t_[i_])) ++i_;
    return std::string(t_.substr(from, i_ - from));
  }

  // One character of a literal or class: an escape or a whole UTF-8 sequence.
  bool parse_char(uint32_t* c) {
    if (i_ >= t_.size()) return false;
    if (t_[i_] == '\\') {
      if (++i_ >= t_.size()) return bad("unfinished escape");
      const char e = t_[i_++];
      int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (hex) {
        uint32_t v = 0;
        for (; hex > 0; --hex, ++i_) {
          const char h = i_ < t_.size() ? t_[i_] : '\0';
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return bad("bad hexadecimal escape '\\" + shown(e) + "'");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > 0x10ffff) return bad("escape beyond U+10FFFF");
        *c = v;
        return true;
      }
      switch (e) {
        case 'n': *c = '\n'; return true;
        case 'r': *c = '\r'; return true;
        case 't': *c = '\t'; return true;
        case '\\': case '"': case '[': case ']': case '-': case '^': *c = static_cast<unsigned char>(e); return true;
        default: return bad("unknown escape '\\" + shown(e) + "'");
      }
    }
    uint32_t lo, hi;
    if (next_utf8(t_, &i_, c, &lo, &hi) != Utf8::kChar) return bad("invalid UTF-8");
    return true;
  }

  void parse_literal(std::vector<Element>& seq) {
    ++i_;  // the opening quote
    while (ok_) {
      if (i_ >= t_.size()) return void(bad("unterminated literal"));
      if (t_[i_] == '"') {
        ++i_;
        return;
      }
      uint32_t c;
      if (!parse_char(&c)) return;
      Element e;
      e.ranges.push_back({c, c});
      seq.push_back(std::move(e));
    }
  }

  void parse_class(std::vector<Element>& seq) {
    ++i_;  // '['
    Element e;
    if (i_ < t_.size() && t_[i_] == '^') {
      e.negate = true;
      ++i_;
    }
    while (ok_) {
      if (i_ >= t_.size()) return void(bad("unterminated character class"));
      if (t_[i_] == ']') {
        ++i_;
        seq.push_back(std::move(e));
        return;
      }
      uint32_t lo, hi;
      if (!parse_char(&lo)) return;
      hi = lo;
      if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
        ++i_;
        if (!parse_char(&hi)) return;
        if (hi < lo) return void(bad("character range out of order"));
      }
      e.ranges.push_back({lo, hi});
    }
  }

  // {m}, {m,}, {m,n}: the bounds; n = -1 for no upper bound.
  bool parse_bounds(int* m, int* n) {
    ++i_;  // '{'
    const auto number = [this](int* v) {
      const size_t from = i_;
      long long x = 0;
      for (; i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9'; ++i_)
        if (x <= kMaxRepeat) x = x * 10 + (t_[i_] - '0');
      *v = static_cast<int>(std::min<long long>(x, kMaxRepeat + 1));
      return i_ > from;
    };
    skip_space(true);
    if (!number(m)) return bad("expected a repetition count");
    skip_space(true);
    *n = *m;
    if (i_ < t_.size() && t_[i_] == ',') {
      ++i_;
      skip_space(true);
      *n = -1;
      if (!(i_ < t_.size() && t_[i_] == '}') && !number(n)) return bad("expected a repetition count");
      skip_space(true);
    }
    if (i_ >= t_.size() || t_[i_] != '}') return bad("expected '}'");
    ++i_;
    if (*m > kMaxRepeat || *n > kMaxRepeat) return bad("repetition count above 1000");
    if (*n >= 0 && *n < *m) return bad("repetition {m,n} with n < m");
    return true;
  }

  // Replaces the items of seq from `from` on (one unit) by their repetition.
  void repeat(std::vector<Element>& seq, size_t from, int m, int n) {
    Element unit;  // a reference, so copies of it stay small
    if (seq.size() - from == 1 && seq.back().rule >= 0) {
      unit = seq.back();
    } else {
      unit = ref(new_rule());
      add_alt(unit.rule, std::vector<Element>(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end()));
    }
    seq.resize(from);
    for (int k = 0; k < m; ++k) seq.push_back(unit);
    if (n < 0) {  // unit* : R ::= unit R | (empty)
      const int r = new_rule();
      add_alt(r, {unit, ref(r)});
      add_alt(r, {});
      seq.push_back(ref(r));
    } else if (n > m) {  // up to n - m more: R_k ::= unit R_(k-1) | (empty)
      int inner = -1;
      for (int k = 0; k < n - m; ++k) {
        const int r = new_rule();
        std::vector<Element> more = {unit};
        if (inner >= 0) more.push_back(ref(inner));
        add_alt(r, std::move(more));
        add_alt(r, {});
        inner = r;
      }
      seq.push_back(ref(inner));
    }
  }

  void parse_sequence(std::vector<Element>& seq, bool nested) {
    while (ok_) {
      skip_space(nested);
      if (i_ >= t_.size()) return;
      const char c = t_[i_];
      const size_t from = seq.size();
      if (c == '"') {
        parse_literal(seq);
      } else if (c == '[') {
        parse_class(seq);
      } else if (c == '.') {
        ++i_;
        Element any;
        any.negate = true;
        seq.push_back(std::move(any));
      } else if (is_name_char(c)) {
        seq.push_back(ref(rule_id(parse_name())));
      } else if (c == '(') {
        if (++depth_ > kMaxNesting) return void(bad("groups nested deeper than 64"));
        ++i_;
        const int r = new_rule();
        skip_space(true);
        parse_alternates(r, true);
        --depth_;
        skip_space(true);
        if (ok_ && (i_ >= t_.size() || t_[i_] != ')')) return void(bad("expected ')'"));
        ++i_;
        seq.push_back(ref(r));
      } else {
        return;  // '|', ')', the end of the line: the sequence is over
      }
      if (!ok_) return;
      skip_space(nested);
      if (i_ >= t_.size()) return;
      const char op = t_[i_];
      int m = 0, n = -1;
      if (op == '*' || op == '+' || op == '?') {
        ++i_;
        m = op == '+' ? 1 : 0;
        n = op == '?' ? 1 : -1;
      } else if (op == '{') {
        if (!parse_bounds(&m, &n)) return;
      } else {
        continue;
      }
      if (seq.size() == from) return void(bad("a repetition of nothing"));
      repeat(seq, from, m, n);
    }
  }

  void parse_alternates(int rule, bool nested) {
    const int outer = current_;
    if (!nested) current_ = rule;
    while (ok_) {
      std::vector<Element> seq;
      parse_sequence(seq, nested);
      if (!ok_) break;
      add_alt(rule, std::move(seq));
      skip_space(nested);
      if (i_ >= t_.size() || t_[i_] != '|') break;
      ++i_;
      skip_space(true);
    }
    if (!nested) current_ = outer;
  }

  // A rule that can reach itself without matching a character, or nothing.
  std::optional<size_t> left_recursive_rule() const {
    const size_t n = names_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (int a : g_.rule_alts_[r]) {
          bool all = true;
          for (const Element& e : g_.alts_[static_cast<size_t>(a)])
            all = all && e.rule >= 0 && nullable[static_cast<size_t>(e.rule)];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<size_t>> first(n);  // rules a rule may start with
    for (size_t r = 0; r < n; ++r)
      for (int a : g_.rule_alts_[r])
        for (const Element& e : g_.alts_[static_cast<size_t>(a)]) {
          if (e.rule < 0) break;
          first[r].push_back(static_cast<size_t>(e.rule));
          if (!nullable[static_cast<size_t>(e.rule)]) break;
        }
    std::vector<int> color(n, 0);  // 0 unseen, 1 on the path, 2 done
    std::optional<size_t> found;
    std::function<void(size_t)> visit = [&](size_t r) {
      color[r] = 1;
      for (size_t s : first[r]) {
        if (found) return;
        if (color[s] == 1) found = s;
        if (color[s] == 0) visit(s);
      }
      color[r] = 2;
    };
    for (size_t r = 0; r < n && !found; ++r)
      if (color[r] == 0) visit(r);
    return found;
  }

  std::string_view t_;
  size_t i_ = 0;
  bool ok_ = true;
  std::string err_;
  Grammar g_;
  std::map<std::string, int> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  int current_ = 0, anon_ = 0, depth_ = 0;
  size_t elements_ = 0;
};

const char* Grammar::json_value_rules() {
  return R"(value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" char* "\"" ws
char ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,4} )? ws
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
ws ::= ( " " | "\n" [ \t]{0,20} )?
)";
}

const std::string& Grammar::json_object_text() {
  static const std::string text = std::string("root ::= object\n") + json_value_rules();
  return text;
}

struct State::Automaton {
  // Past this many cells (nodes and kept stacks) the automaton starts over (State::compact): an
  // ambiguous grammar over a long text, or over a vocabulary's tokens, would otherwise keep
  // growing it.
  static constexpr size_t kMaxCells = size_t{1} << 20;
  static constexpr int kUnknown = -2;
  struct Node {
    Pos pos;
    Stack below;
  };
  std::vector<Node> nodes;
  struct Slot {
    Node node{};
    Stack id = kEmpty;  // kEmpty: a free slot
  };
  std::vector<Slot> table;      // open addressing over nodes, half full at most
  std::vector<uint32_t> mark;   // per node: the expansion that met it last
  uint32_t expansion = 0;
  std::map<std::vector<Stack>, int> ids;
  std::vector<const std::vector<Stack>*> states;  // keys of ids
  std::vector<std::array<int, 128>> ascii;  // per state: ASCII code point -> state, -1 or kUnknown
  std::unordered_map<uint64_t, int> next;   // state << 32 | other code point -> state or -1
  size_t cells = 0;
};

State::State(std::shared_ptr<const Grammar> g) : g_(std::move(g)), a_(std::make_shared<Automaton>()) {
  std::vector<Stack> start;
  for (int alt : g_->rule_alts_[static_cast<size_t>(g_->root_)]) start.push_back(push({alt, 0}, kEmpty));
  cur_ = intern(settle(start, nullptr, &start_cut_));
}

int State::intern(std::vector<Stack> stacks) const {  // no two alike
  const size_t n = stacks.size();
  auto [it, added] = a_->ids.try_emplace(std::move(stacks), static_cast<int>(a_->states.size()));
  if (added) {
    a_->states.push_back(&it->first);
    a_->ascii.emplace_back().fill(Automaton::kUnknown);
    a_->cells += n + 128;  // its stacks and its ASCII table
  }
  return it->second;
}

int State::transition(int state, uint32_t c) const {
  const uint64_t key = (static_cast<uint64_t>(state) << 32) | c;
  if (c < 128) {
    if (const int to = a_->ascii[static_cast<size_t>(state)][c]; to != Automaton::kUnknown) return to;
  } else if (auto it = a_->next.find(key); it != a_->next.end()) {
    return it->second;
  }
  std::vector<Stack> out = settle(*a_->states[static_cast<size_t>(state)], &c, nullptr);
  const int to = out.empty() ? -1 : intern(std::move(out));
  if (c < 128) {
    a_->ascii[static_cast<size_t>(state)][c] = to;
  } else {
    a_->next.emplace(key, to);
    ++a_->cells;
  }
  return to;
}

State::Stack State::push(Pos p, Stack below) const {
  Automaton& a = *a_;
  const auto slot = [&a](Pos q, Stack b) {  // where the node (q, b) is or would go
    uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(q.alt)) << 32 | static_cast<uint32_t>(b)) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(q.idx)) * 0x9E3779B97F4A7C15ull);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finish: every bit of the key mixed
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    const size_t m = a.table.size() - 1;
    size_t i = static_cast<size_t>(h ^ (h >> 31)) & m;
    for (; a.table[i].id != kEmpty; i = (i + 1) & m) {
      const Automaton::Slot& t = a.table[i];
      if (t.node.pos.alt == q.alt && t.node.pos.idx == q.idx && t.node.below == b) break;
    }
    return i;
  };
  if (2 * (a.nodes.size() + 1) > a.table.size()) {  // grow: twice the slots, every node placed again
    a.table.assign(std::max<size_t>(1024, 2 * a.table.size()), Automaton::Slot{});
    for (size_t id = 0; id < a.nodes.size(); ++id)
      a.table[slot(a.nodes[id].pos, a.nodes[id].below)] = {a.nodes[id], static_cast<Stack>(id)};
  }
  Automaton::Slot& t = a.table[slot(p, below)];
  if (t.id == kEmpty) {
    t = {{p, below}, static_cast<Stack>(a.nodes.size())};
    a.nodes.push_back(t.node);
    a.mark.push_back(0);
    ++a.cells;
  }
  return t.id;
}

const Element& State::top(Stack s) const {
  const Pos& p = a_->nodes[static_cast<size_t>(s)].pos;
  return g_->alts_[static_cast<size_t>(p.alt)][static_cast<size_t>(p.idx)];
}

State::Stack State::after_top(Stack s) const {
  const Automaton::Node n = a_->nodes[static_cast<size_t>(s)];
  if (n.pos.idx + 1 == static_cast<int32_t>(g_->alts_[static_cast<size_t>(n.pos.alt)].size())) return n.below;
  return push({n.pos.alt, n.pos.idx + 1}, n.below);
}

// The stacks `from` becomes before its next character, when `c` is given just those whose top
// matches *c, moved past it: finished sequences popped, references at the top replaced by each
// alternative of their rule (depth first, in the order of the alternatives), a stack met before
// in this call not expanded again. In the order met, so the parses of earlier stacks and earlier
// alternatives come first; no two alike. Past kMaxStacks stacks, or kMaxWork stacks made and
// expanded, the parses left are dropped (*cut is then set).
std::vector<State::Stack> State::settle(const std::vector<Stack>& from, const uint32_t* c, bool* cut) const {
  Automaton& a = *a_;
  if (++a.expansion == 0) {  // the counter wrapped: every mark is stale
    std::fill(a.mark.begin(), a.mark.end(), 0);
    a.expansion = 1;
  }
  std::vector<Stack> out, todo;
  bool ended = false;
  size_t work = 0;
  const auto open = [&] { return out.size() < kMaxStacks && work < kMaxWork; };
  for (Stack f : from) {
    if (!open()) break;
    if (c != nullptr) {
      if (f == kEmpty || !top(f).matches(*c)) continue;
      f = after_top(f);
    }
    todo.push_back(f);
    for (; !todo.empty() && open(); ++work) {
      const Stack s = todo.back();
      todo.pop_back();
      if (s == kEmpty) {
        if (!ended) out.push_back(kEmpty);
        ended = true;
        continue;
      }
      if (a.mark[static_cast<size_t>(s)] == a.expansion) continue;
      a.mark[static_cast<size_t>(s)] = a.expansion;
      const Automaton::Node n = a.nodes[static_cast<size_t>(s)];
      const auto& seq = g_->alts_[static_cast<size_t>(n.pos.alt)];
      if (n.pos.idx == static_cast<int32_t>(seq.size())) {  // an empty alternative
        todo.push_back(n.below);
        continue;
      }
      const Element& e = seq[static_cast<size_t>(n.pos.idx)];
      if (e.rule < 0) {
        out.push_back(s);
        continue;
      }
      const Stack rest = after_top(s);  // continue after the reference once its rule is matched
      const size_t first = todo.size();  // the alternatives, the first one on top
      work += g_->rule_alts_[static_cast<size_t>(e.rule)].size();
      for (int alt : g_->rule_alts_[static_cast<size_t>(e.rule)]) todo.push_back(push({alt, 0}, rest));
      std::reverse(todo.begin() + static_cast<std::ptrdiff_t>(first), todo.end());
    }
  }
  if (cut != nullptr) *cut = !open();
  return out;
}

int State::walk(std::string_view bytes, size_t* tail_len, uint32_t* lo, uint32_t* hi) const {
  std::string joined;  // only when a character is unfinished: most calls allocate nothing
  std::string_view s = bytes;
  if (!partial_.empty()) s = joined = partial_ + std::string(bytes);
  int state = cur_;
  *tail_len = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t c;
    switch (next_utf8(s, &i, &c, lo, hi)) {
      case Utf8::kInvalid:
        return -1;
      case Utf8::kUnfinished:
        *tail_len = s.size() - i;
        return state;
      case Utf8::kChar:
        if ((state = transition(state, c)) < 0) return -1;  // refused: the rest is not read
    }
  }
  return state;
}

bool State::accepts(std::string_view bytes) const {
  if (bytes.empty()) return false;
  compact();  // a whole vocabulary's checks add states: their memory stays bounded
  size_t tail_len;
  uint32_t lo = 0, hi = 0;
  const int state = walk(bytes, &tail_len, &lo, &hi);
  if (state < 0) return false;
  if (tail_len == 0) return true;
  for (Stack st : *a_->states[static_cast<size_t>(state)])
    if (st != kEmpty && top(st).may_match(lo, hi)) return true;
  return false;
}

void State::advance(std::string_view bytes) {
  size_t tail_len = 0;
  uint32_t lo, hi;
  const int state = walk(bytes, &tail_len, &lo, &hi);
  const std::string s = partial_ + std::string(bytes);
  partial_ = state >= 0 ? s.substr(s.size() - tail_len) : std::string();
  cur_ = state >= 0 ? state : intern({});
  compact();
}

void State::compact() const {
  if (a_->cells <= Automaton::kMaxCells) return;
  // Start over with just the current stacks: their nodes moved, each once, below before above.
  const std::shared_ptr<const Automaton> old = a_;
  a_ = std::make_shared<Automaton>();
  std::vector<Stack> stacks = *old->states[static_cast<size_t>(cur_)];
  std::unordered_map<Stack, Stack> moved{{kEmpty, kEmpty}};
  for (Stack& st : stacks) {
    std::vector<Stack> chain;  // the nodes not moved yet, top first
    for (Stack n = st; !moved.count(n); n = old->nodes[static_cast<size_t>(n)].below) chain.push_back(n);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Automaton::Node& n = old->nodes[static_cast<size_t>(*it)];
      moved.emplace(*it, push(n.pos, moved.at(n.below)));
    }
    st = moved.at(st);
  }
  cur_ = intern(std::move(stacks));
}

bool State::can_end() const {
  if (!partial_.empty()) return false;
  for (Stack s : *a_->states[static_cast<size_t>(cur_)])
    if (s == kEmpty) return true;
  return false;
}

bool State::ended() const {
  for (Stack s : *a_->states[static_cast<size_t>(cur_)])
    if (s != kEmpty) return false;
  return true;
}

Expected<Grammar> Grammar::parse(std::string_view text) {
  if (text.size() > kMaxText) return Error{"grammar: longer than 1 MiB"};
  auto g = Parser(text).run();
  if (!g) return g;
  // A grammar whose alternatives multiply stacks (a ::= b | b, b ::= c | c, ...) is refused
  // before it is used: its first character alone would leave too many.
  const State probe(std::make_shared<const Grammar>(*g));
  if (probe.start_cut_) return Error{"grammar: too ambiguous (its start alone passes the limits on parses)"};
  return g;
}

}  // namespace zenmoe::grammar
