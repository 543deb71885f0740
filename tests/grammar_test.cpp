// GBNF grammars: parsing (and one clear error per kind of bad grammar) and the generation
// state: which texts it allows, fed whole or a token's bytes at a time (characters split
// across tokens too), and when it may end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "runtime/grammar.h"

namespace zenmoe {
namespace {

using grammar::Grammar;
using grammar::State;

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = Grammar::parse(text);
  EXPECT_TRUE(g) << g.error();
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

// Feeds `pieces` one after another; false at the first the state does not allow.
bool feed(State& s, const std::vector<std::string>& pieces) {
  for (const std::string& p : pieces) {
    if (!s.accepts(p)) return false;
    s.advance(p);
  }
  return true;
}

// Whether the whole text is a sentence of the grammar, fed as one piece and character by byte.
bool sentence(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  State whole(g), bytes(g);
  std::vector<std::string> singles;
  for (char c : text) singles.emplace_back(1, c);
  const bool a = (text.empty() || feed(whole, {text})) && whole.can_end();
  const bool b = feed(bytes, singles) && bytes.can_end();
  EXPECT_EQ(a, b) << text;
  return a;
}

TEST(Grammar, AlternativesOfLiterals) {
  const auto g = compile(R"(root ::= "yes" | "no")");
  EXPECT_TRUE(sentence(g, "yes"));
  EXPECT_TRUE(sentence(g, "no"));
  EXPECT_FALSE(sentence(g, "ye"));
  EXPECT_FALSE(sentence(g, "yess"));
  State s(g);
  EXPECT_FALSE(s.can_end());
  EXPECT_FALSE(s.accepts("x"));
  EXPECT_FALSE(s.accepts(""));
  EXPECT_TRUE(s.accepts("ye"));
  s.advance("ye");
  EXPECT_FALSE(s.can_end());
  EXPECT_FALSE(s.accepts("ss"));
  s.advance("s");
  EXPECT_TRUE(s.can_end());
  EXPECT_TRUE(s.ended());
}

TEST(Grammar, RepetitionsAndBounds) {
  const auto g = compile(R"(root ::= "a"{2,3} "b"? [0-9]{2,} ("xy"){1} "z"*)");
  EXPECT_TRUE(sentence(g, "aa00xy"));
  EXPECT_TRUE(sentence(g, "aaab123456xyzzz"));
  EXPECT_FALSE(sentence(g, "a00xy"));
  EXPECT_FALSE(sentence(g, "aaaa00xy"));
  EXPECT_FALSE(sentence(g, "aa0xy"));
  EXPECT_FALSE(sentence(g, "aa00xyxy"));
  const auto opt = compile(R"(root ::= "a"? ("b" | "c")+)");
  EXPECT_TRUE(sentence(opt, "abcb"));
  EXPECT_TRUE(sentence(opt, "c"));
  EXPECT_FALSE(sentence(opt, "a"));
  const auto empty = compile(R"(root ::= "a"*)");
  EXPECT_TRUE(sentence(empty, ""));
  EXPECT_TRUE(sentence(empty, "aaaa"));
  State s(empty);
  EXPECT_TRUE(s.can_end());
  EXPECT_FALSE(s.ended());
}

TEST(Grammar, ClassesNegationAndAnyCharacter) {
  const auto g = compile(R"(root ::= [a-cx] [^a-z\n] . [\]\-\\])");
  EXPECT_TRUE(sentence(g, "aA!]"));
  EXPECT_TRUE(sentence(g, "x9\xC3\xA9-"));  // '.' takes a two-byte character
  EXPECT_TRUE(sentence(g, "b \\\\"));
  EXPECT_FALSE(sentence(g, "dA!]"));
  EXPECT_FALSE(sentence(g, "aq!]"));
  EXPECT_FALSE(sentence(g, "a\n!]"));
  EXPECT_FALSE(sentence(g, "aA!a"));
}

TEST(Grammar, CharactersSplitAcrossTokens) {
  const auto g = compile("root ::= \"\xC3\xA9\" [\\u4e00-\\u9fff] \"!\"");  // é, a CJK character, !
  State s(g);
  EXPECT_TRUE(feed(s, {"\xC3", "\xA9\xE4", "\xB8", "\x80!"}));
  EXPECT_TRUE(s.can_end());
  State t(g);
  EXPECT_TRUE(t.accepts("\xC3"));  // may still become é
  t.advance("\xC3");
  EXPECT_FALSE(t.can_end());        // a character is unfinished
  EXPECT_FALSE(t.accepts("\xA8"));  // è
  EXPECT_FALSE(t.accepts("\xA9\xC3"));  // é, then a two-byte character no class allows
  EXPECT_TRUE(t.accepts("\xA9\xE4"));
  State u(g);
  EXPECT_FALSE(u.accepts("\xA9"));      // a continuation byte first
  EXPECT_FALSE(u.accepts("\xE4\xB8"));  // a CJK character where é must come
  EXPECT_FALSE(u.accepts("\xFF"));
  // Lead bytes whose every completion is overlong or beyond U+10FFFF, and overlong forms.
  const auto y = compile(R"(root ::= "y" .*)");
  State any(y);
  any.advance("y");
  for (const char* bad : {"\xC1", "\xE0\x81", "\xF0\x8F", "\xF4\x90", "\xF5", "\xC1\xB9", "\xC0\x80",
                          "\xE0\x80\x80", "\xF4\x90\x80\x80"})
    EXPECT_FALSE(any.accepts(bad)) << bad;
  for (const char* good : {"\xE0", "\xE0\xA0", "\xF0\x90", "\xF4\x8F\xBF\xBF", "\xC2\x80"})
    EXPECT_TRUE(any.accepts(good)) << good;
  const auto ascii = compile(R"(root ::= "a")");
  EXPECT_FALSE(State(ascii).accepts("\xC3"));  // no two-byte character is 'a'
}

TEST(Grammar, JsonObject) {
  const auto g = compile(Grammar::json_object_text());
  EXPECT_TRUE(sentence(g, "{}"));
  EXPECT_TRUE(sentence(g, R"({"a": [1, 2.5e3, -0, {"b": null}], "c": "x\u00e9\"y\\", "d": true, "e": []})"));
  EXPECT_TRUE(sentence(g, "{\n  \"k\" : false\n}\n"));
  EXPECT_TRUE(sentence(g, "{\"\xC3\xA9\": 1}"));
  EXPECT_FALSE(sentence(g, "[1]"));  // an object, not any value
  EXPECT_FALSE(sentence(g, R"({"a" 1})"));
  EXPECT_FALSE(sentence(g, R"({"a": 01})"));
  EXPECT_FALSE(sentence(g, R"({"a": tru})"));
  EXPECT_FALSE(sentence(g, R"({"a": "\q"})"));
  EXPECT_FALSE(sentence(g, "{\"a\": \"line\nbreak\"}"));
  EXPECT_FALSE(sentence(g, R"({"a": 1,})"));
  EXPECT_FALSE(sentence(g, "{  }"));  // one space, or a line break and an indent
  EXPECT_TRUE(sentence(g, "{\n" + std::string(20, ' ') + "}"));
  EXPECT_FALSE(sentence(g, "{\n" + std::string(21, ' ') + "}"));
  State s(g);
  EXPECT_TRUE(feed(s, {"{\"", "key", "\":", " [", "1", "]}"}));
  EXPECT_TRUE(s.can_end());
  EXPECT_FALSE(s.ended());  // whitespace may follow
  EXPECT_FALSE(s.accepts("x"));
}

TEST(Grammar, CommentsAndLinesOfRules) {
  const auto g = compile(R"(# a list of items
root ::= item ("," item)*   # items, comma separated
item ::=
  "x" |
  "y" (
    "z"
  )?
)");
  EXPECT_TRUE(sentence(g, "x,yz,y"));
  EXPECT_FALSE(sentence(g, "x,"));
  EXPECT_FALSE(sentence(g, "z"));
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Rules a0 .. a(n-1), each with two ways to the next; `tail`: the reference ends each way (the
// parses then coincide), else a different character follows each (2^n parses of the first).
std::string ambiguous(int n, bool tail) {
  std::string g = "root ::= a0\n";
  for (int i = 0; i < n; ++i) {
    std::string next = "a";
    next += std::to_string(i + 1);
    g += "a";
    g += std::to_string(i);
    g += " ::= ";
    g += next;
    g += tail ? " | " : " \"y\" | ";
    g += next;
    g += tail ? "\n" : " \"z\"\n";
  }
  g += "a";
  g += std::to_string(n);
  return g + " ::= \"x\"\n";
}

TEST(Grammar, ManyWaysToTheSameParseStayCheap) {
  const auto g = compile(ambiguous(60, true));  // 2^60 ways, one parse
  EXPECT_TRUE(sentence(g, "x"));
  EXPECT_FALSE(sentence(g, "xx"));
  const auto some = compile(ambiguous(8, false));  // 256 parses: allowed
  EXPECT_TRUE(sentence(some, "xyzzyzyyz"));
  EXPECT_FALSE(sentence(some, "xyzzyzyy"));
}

// 10000 brackets deep: each character leaves one new stack on a long shared tail, and the kept
// states pass the automaton's size limit, so it starts over (with the stacks reached) midway.
TEST(Grammar, DeepNestingAcrossAutomatonRestarts) {
  const auto g = compile(R"g(root ::= "(" root ")" | "[" root "]" | "x")g");
  std::string open, close;
  uint32_t r = 12345;
  for (int i = 0; i < 10000; ++i) {
    r = r * 1103515245u + 12345u;
    const bool round = (r >> 16) & 1;
    open += round ? '(' : '[';
    close.insert(close.begin(), round ? ')' : ']');
  }
  State s(g);
  for (char ch : open + "x") ASSERT_TRUE(feed(s, {std::string(1, ch)}));
  for (size_t i = 0; i < close.size(); ++i) {
    const char wrong = close[i] == ')' ? ']' : ')';
    ASSERT_FALSE(s.accepts(std::string(1, wrong))) << i;
    ASSERT_FALSE(s.can_end()) << i;
    ASSERT_TRUE(feed(s, {std::string(1, close[i])})) << i;
  }
  EXPECT_TRUE(s.can_end());
  EXPECT_TRUE(s.ended());
}

// Two closers for each opener: 2^n parses after n openers, kept to the limit (the first
// alternatives first), so a text that closes with the first closers throughout stays allowed.
TEST(Grammar, AmbiguousNestingKeepsTheFirstParses) {
  const auto g = compile(R"g(root ::= "(" root ")" | "(" root "]" | "x")g");
  State s(g);
  // Checks alone (as over a vocabulary) add a state each, 2048 stacks apiece: the automaton
  // starts over in between, and the answers stay the same.
  for (int n = 1; n <= 120; ++n) {
    ASSERT_TRUE(s.accepts(std::string(static_cast<size_t>(n), '('))) << n;
    ASSERT_TRUE(s.accepts(std::string(static_cast<size_t>(n), '(') + "x]")) << n;
    ASSERT_FALSE(s.accepts(std::string(static_cast<size_t>(n), '(') + ")")) << n;
  }
  ASSERT_TRUE(feed(s, {std::string(400, '('), "x"}));
  EXPECT_TRUE(feed(s, {std::string(399, ')')}));
  EXPECT_FALSE(s.can_end());
  EXPECT_TRUE(feed(s, {")"}));
  EXPECT_TRUE(s.can_end());
}

TEST(Grammar, BadGrammarsGetOneLineErrors) {
  struct Case {
    std::string text, needle;
  };
  const std::vector<Case> cases = {
      {R"(root ::= item)", "rule 'item' is used but not defined"},
      {R"(start ::= "a")", "no rule named 'root'"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= x \"a\"\nx ::= \"\" y\ny ::= \"b\"? root", "left-recursive"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= \"abc", "line 1, column 14: unterminated literal"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "out of order"},
      {R"(root ::= "\q")", "unknown escape '\\q'"},
      {R"(root ::= "\x4")", "bad hexadecimal escape"},
      {R"(root ::= "a"{3,1})", "n < m"},
      {R"(root ::= "a"{2000})", "above 1000"},
      {R"(root ::= "a"{1,1000000000000})", "above 1000"},
      {"root ::= " + std::string(65, '(') + "\"a\"" + std::string(65, ')'), "nested deeper than 64"},
      {"root ::= (\"a\"{0,1000}){0,1000} (\"b\"{0,1000}){0,1000} (\"c\"{0,1000}){0,1000}"
       " (\"d\"{0,1000}){0,1000} (\"e\"{0,1000}){0,1000}",
       "more than 4096 rules"},
      {"root ::= \"" + std::string(300000, 'a') + "\"", "more than 262144 items"},
      {"root ::= \"" + std::string(1 << 20, 'a') + "\"", "longer than 1 MiB"},
      {ambiguous(13, false), "too ambiguous"},
      // 2000 references to a rule with 20000 empty alternatives: refused at the start, not
      // expanded 40 million times.
      {"root ::= " + repeat("e ", 2000) + "\"x\"\ne ::= \"\"" + repeat(" | \"\"", 19999), "too ambiguous"},
      {R"(root ::= "a"{2)", "expected '}'"},
      {R"(root ::= ("a")", "expected ')'"},
      {R"(root ::= "a" ))", "unexpected ')'"},
      {R"(root = "a")", "expected '::='"},
      {"::= \"a\"", "expected a rule name"},
      {"root ::= \"\xC3\"", "invalid UTF-8"},
  };
  for (const Case& c : cases) {
    auto g = Grammar::parse(c.text);
    ASSERT_FALSE(g) << c.text;
    EXPECT_NE(g.error().find(c.needle), std::string::npos) << c.text << " -> " << g.error();
    EXPECT_EQ(g.error().rfind("grammar: ", 0), 0u) << g.error();
    EXPECT_EQ(g.error().find('\n'), std::string::npos) << g.error();
  }
}

// Replays every input kept in tests/fuzz/regressions-grammar/ (fuzzer findings and hand-made
// hostile grammars: a grammar, NUL, a text) as the fuzzer does: a refused grammar gets one line,
// a parsed one takes the text a few bytes at a time without ever reaching a dead end.
TEST(Grammar, EveryKeptFuzzInputIsHandledCleanly) {
  namespace fs = std::filesystem;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions-grammar")) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const size_t nul = bytes.find('\0');
    auto g = Grammar::parse(std::string_view(bytes).substr(0, nul));
    ++n;
    if (!g) {
      EXPECT_EQ(g.error().rfind("grammar: ", 0), 0u) << e.path() << ": " << g.error();
      EXPECT_EQ(g.error().find('\n'), std::string::npos) << g.error();
      continue;
    }
    State st(std::make_shared<const Grammar>(std::move(*g)));
    const std::string text = nul == std::string::npos ? "" : bytes.substr(nul + 1);
    for (size_t i = 0, piece = 1; i < text.size(); i += piece, piece = piece % 4 + 1)
      if (st.accepts(text.substr(i, piece))) st.advance(text.substr(i, piece));
    if (st.ended()) {
      EXPECT_TRUE(st.can_end()) << e.path();
    }
  }
  EXPECT_GE(n, 10u);
}

}  // namespace
}  // namespace zenmoe
