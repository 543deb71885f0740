// Grammar-constrained generation: grammars in llama.cpp's GBNF notation, and the state of a
// generation under one, which says whether a token's bytes may come next.
//
// GBNF: rules `name ::= alternatives` (names of letters, digits, '-' and '_'; the start rule is
// `root`); alternatives separated by `|`; a sequence of "literals" (escapes \n \r \t \\ \"
// \[ \] \xHH \uHHHH \UHHHHHHHH), character classes [a-z0-9_] and [^...], `.` (any character),
// rule names and ( groups ), each optionally followed by *, +, ?, {m}, {m,} or {m,n};
// `#` comments to the end of the line. A rule ends at the end of its line, except inside
// parentheses and after `::=` or `|`.
//
// The state is the set of parse stacks llama.cpp's grammar sampler keeps: each stack lists the
// positions still to match, its top a character class; a code point advances every stack whose
// top matches it. Left-recursive grammars are refused (their stacks would grow without end), and
// so are grammars past the limits that keep a request's grammar cheap: 1 MiB of text, 4096
// rules, 262144 items, groups nested 64 deep, repetitions up to 1000, and, at the start, 2048
// stacks (parses) or 8192 stacks made and expanded (later characters drop the parses past those
// limits, the first alternatives' kept). Stacks share their tails, so a character costs the
// same at any nesting depth.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::grammar {

struct CharRange {
  uint32_t lo, hi;  // inclusive
};

// One item of a sequence: a character class or a reference to a rule.
struct Element {
  int rule = -1;  // >= 0: a reference to that rule
  bool negate = false;
  std::vector<CharRange> ranges;  // the class (negate: code points outside these)
  bool matches(uint32_t c) const;
  bool may_match(uint32_t lo, uint32_t hi) const;  // some code point of [lo, hi] matches
};

class Grammar {
 public:
  // Parses GBNF text; errors are one line naming the rule or the line and column.
  static Expected<Grammar> parse(std::string_view text);
  // A grammar for one JSON object (as OpenAI's response_format json_object asks); whitespace
  // between tokens is one space, or a line break and up to 20 spaces or tabs.
  static const std::string& json_object_text();
  // Its rules but root: value, object, member, array, string, char (one character of a string),
  // number, integer (no trailing whitespace) and ws; each value rule ends with ws.
  static const char* json_value_rules();

 private:
  friend class State;
  friend class Parser;
  std::vector<std::vector<int>> rule_alts_;      // rule -> its alternatives
  std::vector<std::vector<Element>> alts_;       // alternative -> its sequence
  int root_ = -1;
};

// Where a generation stands in a grammar. Each set of stacks met is interned as a state of a
// lazily built automaton whose transitions (state, code point) are kept, so checking a whole
// vocabulary mostly looks up transitions already computed. Copies share that automaton; a
// state and its copies belong to one thread.
class State {
 public:
  explicit State(std::shared_ptr<const Grammar> g);

  // Whether `bytes` (a token's text) may come next: every whole character it completes is
  // matched in turn, and a character it leaves unfinished can still be one the grammar allows.
  // Empty text is never allowed.
  bool accepts(std::string_view bytes) const;
  // Moves past `bytes`, which accepts() allowed.
  void advance(std::string_view bytes);
  // The text so far is a whole sentence of the grammar (an end of generation may come).
  bool can_end() const;
  // Nothing more may come: every stack is done.
  bool ended() const;

 private:
  struct Pos {
    int32_t alt, idx;
  };
  // A parse stack is the id of its top node (a position and the stack below it; kEmpty: no
  // stack). Nodes are interned in the automaton, so equal stacks have one id and share their
  // tails: a step costs the same at any depth.
  using Stack = int32_t;
  static constexpr Stack kEmpty = -1;
  struct Automaton;
  friend Expected<Grammar> Grammar::parse(std::string_view text);

  const Element& top(Stack s) const;
  Stack push(Pos p, Stack below) const;
  Stack after_top(Stack s) const;  // the stack once its top element is matched
  std::vector<Stack> settle(const std::vector<Stack>& from, const uint32_t* c, bool* cut) const;
  int intern(std::vector<Stack> stacks) const;
  int transition(int state, uint32_t c) const;  // -1: no stack takes c
  // The state after the whole characters of partial_ then bytes, -1 when one is refused or the
  // bytes are not UTF-8; *tail_len: bytes of an unfinished last character, [*lo, *hi] the code
  // points it may become.
  int walk(std::string_view bytes, size_t* tail_len, uint32_t* lo, uint32_t* hi) const;
  // Past a size limit the automaton starts over with just the current stacks (the state's value
  // is unchanged, hence const).
  void compact() const;

  std::shared_ptr<const Grammar> g_;
  mutable std::shared_ptr<Automaton> a_;
  mutable int cur_ = 0;
  std::string partial_;  // the first bytes of a character still to be completed
  bool start_cut_ = false;  // the start state lost parses to the limits
};

}  // namespace zenmoe::grammar
