// libFuzzer target for GBNF grammars (runtime/grammar.h), which requests to `serve` and `batch`
// carry: the input is a grammar, then a NUL byte and a text. A grammar is refused with one line
// ("grammar: ..."), or parsed; the text is then offered in pieces of one to four bytes, each
// one the state allows taken, and the state must stay consistent (nothing allowed once it has
// ended, and it ends only on a whole sentence). Only the text's first 512 bytes are offered: a
// character costs at most the grammar's fixed amount of work (runtime/grammar.cpp, kMaxWork),
// so a longer text repeats the work of a shorter one and only adds time.
//
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a seed corpus of grammars
// and texts; scripts/fuzz.sh uses this.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/grammar.h"

namespace {

using namespace zenmoe;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void write_seeds(const std::string& dir) {
  const std::pair<std::string, std::string> seeds[] = {
      {grammar::Grammar::json_object_text(), R"({"a": [1, -2.5e3, {"b": null}], "c": "x\u00e9\"y"})"},
      {R"(root ::= "yes" | "no")", "yes"},
      {"root ::= item (\",\" item)*  # list\nitem ::= [a-z]{1,3} | \"(\" root \")\"", "ab,(c,d),efg"},
      {R"(root ::= [^\x00-\x1f]+ "." .?)", "h\xC3\xA9llo \xE4\xB8\x80."},
      {"root ::= (\"a\"{2,4} | [0-9]?)* \"z\"", "aa7aaaz"},
  };
  int n = 0;
  for (const auto& [g, text] : seeds) {
    std::ofstream f(dir + "/seed-" + std::to_string(n++) + ".txt", std::ios::binary);
    f << g << '\0' << text;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seeds = std::getenv("ZENMOE_FUZZ_SEED_DIR")) write_seeds(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view text = in.substr(0, nul);
  const std::string_view feed = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1, 512);
  auto g = grammar::Grammar::parse(text);
  if (!g) {
    require(g.error().rfind("grammar: ", 0) == 0);
    require(g.error().find('\n') == std::string::npos);
    return 0;
  }
  grammar::State st(std::make_shared<const grammar::Grammar>(std::move(*g)));
  size_t i = 0, piece = 1;
  while (i < feed.size()) {
    const std::string_view p = feed.substr(i, piece);
    if (st.ended()) require(!st.accepts(p));
    if (st.accepts(p)) {
      const grammar::State before = st;
      st.advance(p);
      require(before.accepts(p));
    }
    i += p.size();
    piece = piece % 4 + 1;
  }
  if (st.ended()) require(st.can_end());  // no dead end: every stack ended on a whole sentence
  return 0;
}
