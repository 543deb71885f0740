// Tokenizer building blocks on hand-made inputs: byte table, pre-tokenizer splits (expected
// splits from the same regexes run in JavaScript), BPE merge order, special tokens, decoding,
// streaming, end-of-generation set, metadata round trip and the HF converter's edge cases.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tokenizer.h"
#include "runtime/tokenizer_hf.h"
#include "runtime/tokenizer_pretok.h"
#include "runtime/tokenizer_unicode.h"
#include "tests/fuzz/tokenizer_property.h"

namespace zenmoe::tok {
namespace {

std::vector<std::string> split(PreType type, const std::string& text) {
  CodePoints cps;
  cps.decode(text);
  std::vector<uint32_t> ends;
  split_words(type, cps.cp.data(), cps.flags.data(), cps.size(), &ends);
  std::vector<std::string> words;
  uint32_t prev = 0;
  for (uint32_t e : ends) {
    words.push_back(text.substr(cps.offset[prev], cps.offset[e] - cps.offset[prev]));
    prev = e;
  }
  return words;
}

std::string byte_token(unsigned char b) {
  std::string s;
  append_utf8(byte_to_cp(b), &s);
  return s;
}

// 256 byte tokens (id = byte), then merged tokens and special tokens.
Vocabulary tiny_vocab() {
  Vocabulary v;
  v.pre = "deepseek-v3";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_token(static_cast<unsigned char>(b)));
  v.types.assign(256, 1);
  auto add = [&](const std::string& t, int type) {
    v.tokens.push_back(t);
    v.types.push_back(type);
  };
  add("he", 1);          // 256
  add("ll", 1);          // 257
  add("hell", 1);        // 258
  add("hello", 1);       // 259
  add("aa", 1);          // 260
  add("<s>", 3);         // 261 control
  add("</s>", 3);        // 262 control
  add("<|x|>", 4);       // 263 user-defined
  add("<|x|>y", 4);      // 264 user-defined, longer with the same start
  add("ab", 4);          // 265
  add("bcd", 4);         // 266
  add("<|im_end|>", 3);  // 267
  add("[PAD268]", 5);    // 268 unused
  v.merges = {"a a", "h e", "l l", "he ll", "hell o"};
  v.bos = 261;
  v.eos = 262;
  v.add_bos = true;
  return v;
}

Tokenizer make(const Vocabulary& v) {
  auto t = Tokenizer::create(v);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error());
  return std::move(*t);
}

TEST(TokenizerUnicode, ByteToUnicodeTable) {
  EXPECT_EQ(byte_to_cp(0x00), 0x100u);
  EXPECT_EQ(byte_to_cp(0x20), 0x120u);  // 'Ġ'
  EXPECT_EQ(byte_to_cp(0x0A), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_cp(0xAD), 0x143u);
  EXPECT_EQ(byte_to_cp('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_to_cp(0xE9), 0xE9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(cp_to_byte(byte_to_cp(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(cp_to_byte(0x3042), -1);
}

TEST(TokenizerUnicode, FlagsAndLenientDecoding) {
  EXPECT_TRUE(cp_flags('a') & kLetter);
  EXPECT_TRUE(cp_flags(0x0301) & kMark);
  EXPECT_TRUE(cp_flags('7') & kNumber);
  EXPECT_TRUE(cp_flags(0x3001) & kPunct);  // 、
  EXPECT_TRUE(cp_flags(0x1F600) & kSymbol);
  EXPECT_TRUE(cp_flags(0x3000) & kSpace);
  EXPECT_TRUE(cp_flags(0x4E2D) & kHan);
  EXPECT_FALSE(cp_flags(0x30C6) & kHan);  // katakana
  EXPECT_EQ(cp_flags(0x110041), kUnassigned);
  CodePoints cps;
  cps.decode(std::string("a\xC3\xA9\xFF\xE3\x81", 6));  // 'a', 'é', a stray byte, a cut sequence
  ASSERT_EQ(cps.size(), 5u);
  EXPECT_EQ(cps.cp[1], 0xE9u);
  EXPECT_EQ(cps.cp[2], 0x110000u + 0xFF);
  EXPECT_EQ(cps.cp[3], 0x110000u + 0xE3);
  EXPECT_EQ(cps.offset.back(), 6u);
}

TEST(TokenizerPretok, DeepseekV3Splits) {
  using V = std::vector<std::string>;
  const PreType ds = PreType::kDeepseekV3;
  EXPECT_EQ(split(ds, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split(ds, "12345 apples"), (V{"123", "45", " apples"}));
  EXPECT_EQ(split(ds, "see a.com now"), (V{"see", " a", ".com", " now"}));
  EXPECT_EQ(split(ds, "  x"), (V{" ", " x"}));
  EXPECT_EQ(split(ds, "x \n\n y"), (V{"x", " \n\n", " y"}));
  EXPECT_EQ(split(ds, "日本語テキストabc"), (V{"日本語テキスト", "abc"}));
  EXPECT_EQ(split(ds, "!!\n\nok"), (V{"!!\n\n", "ok"}));
  EXPECT_EQ(split(ds, "テスト・ケース"), (V{"テスト", "・", "ケース"}));
  EXPECT_EQ(split(ds, "e\u0301t\u00e9 "), (V{"e\u0301t\u00e9", " "}));
  EXPECT_EQ(split(ds, "tab\there  "), (V{"tab", "\there", "  "}));
  EXPECT_EQ(split(ds, "I'm 3.14"), (V{"I", "'m", " ", "3", ".", "14"}));
  EXPECT_TRUE(split(ds, "").empty());
}

TEST(TokenizerPretok, Gpt2AndKimiSplits) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split(PreType::kGpt2, "I'm fine"), (V{"I", "'m", " fine"}));
  EXPECT_EQ(split(PreType::kGpt2, "  hi"), (V{" ", " hi"}));
  EXPECT_EQ(split(PreType::kGpt2, "x1y2 ?!  z"), (V{"x", "1", "y", "2", " ?!", " ", " z"}));
  const PreType k = PreType::kKimiK2;
  EXPECT_EQ(split(k, "getUserName"), (V{"getUserName"}));  // llama.cpp's splitter (spec §6.4)
  EXPECT_EQ(split(k, "中文abc"), (V{"中文", "abc"}));
  EXPECT_EQ(split(k, "1234 it's"), (V{"123", "4", " it's"}));
  EXPECT_EQ(split(k, "He'LL go!!\n"), (V{"He'LL", " go", "!!\n"}));
  EXPECT_EQ(split(k, "a  \n b"), (V{"a", "  \n", " b"}));
  bool known = true;
  EXPECT_EQ(pre_type_from_name("kimi-k2", &known), PreType::kKimiK2);
  EXPECT_TRUE(known);
  EXPECT_EQ(pre_type_from_name("something-new", &known), PreType::kGpt2);
  EXPECT_FALSE(known);
}

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
  const Tokenizer t = make(tiny_vocab());
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{259}));
  EXPECT_EQ(t.encode("hel"), (std::vector<int32_t>{256, 'l'}));
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{260, 'a'}));  // ties go to the leftmost pair
  EXPECT_EQ(t.encode("hello hello"), (std::vector<int32_t>{259, ' ', 259}));
  EXPECT_EQ(t.encode("hello hello"), t.encode("hello hello"));  // cached words give the same
  EXPECT_EQ(t.encode("\xFF"), (std::vector<int32_t>{0xFF}));      // invalid UTF-8 byte by byte
}

TEST(TokenizerBpe, SpecialTokensLeftmostLongest) {
  const Tokenizer t = make(tiny_vocab());
  EXPECT_EQ(t.encode("<s>hello</s>"), (std::vector<int32_t>{261, 259, 262}));
  EXPECT_EQ(t.encode("<|x|>y<|x|>"), (std::vector<int32_t>{264, 263}));
  // HF matches at the leftmost position first: "ab" wins over the longer "bcd".
  EXPECT_EQ(t.encode("abcd"), (std::vector<int32_t>{265, 'c', 'd'}));
  EXPECT_EQ(t.encode("<s>", false, false), (std::vector<int32_t>{'<', 's', '>'}));
  EXPECT_EQ(t.encode("he", true, true), (std::vector<int32_t>{261, 256}));
  EXPECT_EQ(t.encode("[PAD268]"), t.encode("[PAD268]", false, false));  // unused: not parsed
}

TEST(TokenizerDecode, PiecesAndStreaming) {
  const Tokenizer t = make(tiny_vocab());
  EXPECT_EQ(t.piece(' '), " ");
  EXPECT_EQ(t.piece(259), "hello");
  EXPECT_EQ(t.piece(261), "");
  EXPECT_EQ(t.piece(261, true), "<s>");
  EXPECT_EQ(t.piece(263), "<|x|>");
  EXPECT_EQ(t.piece(268), "");
  EXPECT_EQ(t.piece(-1), "");
  EXPECT_EQ(t.piece(100000), "");
  const std::string text = "héllo 日本 😀";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  StreamDecoder sd(t);
  std::string streamed;
  for (int32_t id : t.encode(text)) {
    const std::string part = sd.push(id);
    CodePoints cps;
    cps.decode(part);
    for (uint32_t c : cps.cp) EXPECT_LE(c, 0x10FFFFu) << "stream emitted a broken sequence";
    streamed += part;
  }
  streamed += sd.flush();
  EXPECT_EQ(streamed, text);
  StreamDecoder cut(t);
  EXPECT_EQ(cut.push(0xE3), "");
  EXPECT_EQ(cut.push(0x81), "");
  EXPECT_EQ(cut.push(0x82), "\xE3\x81\x82");
  EXPECT_EQ(cut.push(0xE3), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(cut.push(0xFF), "\xEF\xBF\xBD");
}

TEST(TokenizerSpecial, EndOfGenerationSet) {
  const Tokenizer t = make(tiny_vocab());
  EXPECT_EQ(t.eot(), 267);  // detected by its text
  EXPECT_EQ(t.eog_ids(), (std::vector<int32_t>{262, 267}));
  EXPECT_TRUE(t.is_eog(262));
  EXPECT_FALSE(t.is_eog(261));
  EXPECT_EQ(t.bos(), 261);
  EXPECT_TRUE(t.add_bos());
}

TEST(TokenizerVocab, MetadataRoundTripAndErrors) {
  Vocabulary v = tiny_vocab();
  v.chat_template = "{{ messages }}";
  gguf::Metadata md;
  vocabulary_to_metadata(v, &md);
  auto back = vocabulary_from_metadata(md);
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(back->tokens, v.tokens);
  EXPECT_EQ(back->types, v.types);
  EXPECT_EQ(back->merges, v.merges);
  EXPECT_EQ(back->pre, "deepseek-v3");
  EXPECT_EQ(back->bos, 261);
  EXPECT_EQ(back->eos, 262);
  EXPECT_EQ(back->eot, -1);
  EXPECT_TRUE(back->add_bos);
  EXPECT_EQ(back->chat_template, v.chat_template);

  md.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(5000));
  auto bad = vocabulary_from_metadata(md);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().find("eos_token_id"), std::string::npos) << bad.error();
  EXPECT_FALSE(vocabulary_from_metadata(gguf::Metadata()).has_value());

  Vocabulary w = tiny_vocab();
  w.model = "llama";
  auto e1 = Tokenizer::create(w);
  ASSERT_FALSE(e1.has_value());
  EXPECT_NE(e1.error().find("'llama'"), std::string::npos);
  w = tiny_vocab();
  w.merges.push_back("nospace");
  auto e2 = Tokenizer::create(w);
  ASSERT_FALSE(e2.has_value());
  EXPECT_NE(e2.error().find("merges[5]"), std::string::npos) << e2.error();
  w = tiny_vocab();
  w.types.pop_back();
  EXPECT_FALSE(Tokenizer::create(w).has_value());
  w = tiny_vocab();
  w.bos = 100000;
  EXPECT_FALSE(Tokenizer::create(w).has_value());
}

// A temporary folder with a small tokenizer.json / tokenizer_config.json pair.
struct HfFiles {
  std::filesystem::path dir;
  explicit HfFiles(const std::string& name) {
    dir = std::filesystem::temp_directory_path() / ("zenmoe_tok_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
  }
  ~HfFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string write(const std::string& file, const std::string& text) const {
    std::ofstream(dir / file) << text;
    return (dir / file).string();
  }
};

constexpr const char* kTinyJson = R"({
  "added_tokens": [
    {"id": 5, "content": "<bos>", "special": true},
    {"id": 6, "content": "<tool>", "special": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 4},
            "merges": [["a", "b"]]}
})";

TEST(TokenizerHf, ConvertsVocabTypesMergesAndConfig) {
  HfFiles f("convert");
  const std::string json = f.write("tokenizer.json", kTinyJson);
  const std::string cfg = f.write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<bos>"}, "eos_token": "<tool>",
    "add_bos_token": true,
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  gguf::Metadata md;
  ASSERT_TRUE(hf_tokenizer_to_metadata(json, cfg, &md).is_ok());
  auto v = vocabulary_from_metadata(md);
  ASSERT_TRUE(v.has_value()) << v.error();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "gpt2");
  EXPECT_EQ(v->tokens, (std::vector<std::string>{"a", "b", "ab", "[PAD3]", "\u0120", "<bos>", "<tool>"}));
  EXPECT_EQ(v->types, (std::vector<int32_t>{1, 1, 1, 5, 1, 3, 4}));
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(v->bos, 5);
  EXPECT_EQ(v->eos, 6);
  EXPECT_TRUE(v->add_bos);
  EXPECT_EQ(v->chat_template, "D");
  EXPECT_EQ(md.get_string_or("tokenizer.chat_template", ""), "D");
  auto t = Tokenizer::create(*v);
  ASSERT_TRUE(t.has_value()) << t.error();
  EXPECT_EQ(t->encode("<bos>ab<tool>"), (std::vector<int32_t>{5, 2, 6}));
}

TEST(TokenizerHf, ClearErrors) {
  HfFiles f("errors");
  gguf::Metadata md;
  Status missing = hf_tokenizer_to_metadata((f.dir / "none.json").string(), "", &md);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("none.json: cannot open"), std::string::npos);
  const std::string bad = f.write("bad.json", "{\"model\": [1, 2");
  Status not_json = hf_tokenizer_to_metadata(bad, "", &md);
  ASSERT_FALSE(not_json.is_ok());
  EXPECT_NE(not_json.message().find("not valid JSON"), std::string::npos);
  std::string odd = kTinyJson;
  odd.replace(odd.find("\"use_regex\": true"), 17, "\"use_regex\": false");
  const std::string unknown = f.write("unknown.json", odd);
  Status pre = hf_tokenizer_to_metadata(unknown, "", &md);
  ASSERT_FALSE(pre.is_ok());
  EXPECT_NE(pre.message().find("pre_tokenizer not recognised"), std::string::npos);
  HfConvertOptions opt;
  opt.pre_override = "deepseek-v3";
  ASSERT_TRUE(hf_tokenizer_to_metadata(unknown, "", opt, &md).is_ok());
  EXPECT_EQ(md.get_string_or("tokenizer.ggml.pre", ""), "deepseek-v3");
  const std::string typed = f.write("typed.json", R"({"model": {"type": 7, "vocab": {}}})");
  EXPECT_FALSE(hf_tokenizer_to_metadata(typed, "", &md).is_ok());  // no exception escapes
  const std::string cfg = f.write("cfg.json", R"({"bos_token": "<nope>"})");
  const std::string good = f.write("good.json", kTinyJson);
  Status tok = hf_tokenizer_to_metadata(good, cfg, &md);
  ASSERT_FALSE(tok.is_ok());
  EXPECT_NE(tok.message().find("'<nope>' is not a token"), std::string::npos) << tok.message();
}

// The tokenizer fuzzer's seeds and every input kept in tests/fuzz/regressions-tokenizer/
// (fuzzer findings and hand-made vocabularies) keep its properties (tests/fuzz/tokenizer_property.h):
// ids inside the vocabulary and decode(encode(text)) == text; each builds a tokenizer.
TEST(TokenizerFuzzInputs, SeedsAndKeptInputsRoundTrip) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> inputs;
  const auto seeds = fuzz::tokenizer_fuzz_seeds();
  for (size_t i = 0; i < seeds.size(); ++i) inputs.emplace_back("seed " + std::to_string(i), seeds[i]);
  const fs::path dir = fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions-tokenizer";
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    inputs.emplace_back(e.path().filename().string(), std::string(std::istreambuf_iterator<char>(in), {}));
  }
  ASSERT_GE(inputs.size(), seeds.size() + 2);
  for (const auto& [name, bytes] : inputs) {
    int64_t n_ids = -1;
    EXPECT_EQ(fuzz::check_tokenizer_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &n_ids), "")
        << name;
    EXPECT_GT(n_ids, 0) << name << ": built no tokenizer, or encoded nothing";  // the property was exercised
  }
}

}  // namespace
}  // namespace zenmoe::tok
