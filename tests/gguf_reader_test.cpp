// GGUF reader: the spec §1.7 example, the oracle files, typed accessors.
#include <gtest/gtest.h>

#include <map>

#include "runtime/gguf.h"
#include "tests/gguf_test_util.h"

namespace zenmoe::gguf {
namespace {

using testing::parse;
using testing::RawGguf;
using testing::spec_example_bytes;

// The hex dump printed in spec §1.7, as text, so the test builder is checked against it.
const char* kSpecHex =
    "47475546030000000100000000000000"
    "02000000000000001400000000000000"
    "67656e6572616c2e6172636869746563"
    "74757265080000000900000000000000"
    "646565707365656b3211000000000000"
    "0067656e6572616c2e616c69676e6d65"
    "6e740400000020000000010000000000"
    "00006102000000040000000000000002"
    "00000000000000000000000000000000"
    "00000000000000000000000000000000"
    "000000000000803f0000004000004040"
    "000080400000a0400000c0400000e040";

std::vector<uint8_t> from_hex(const char* s) {
  std::vector<uint8_t> out;
  for (; s[0] && s[1]; s += 2) out.push_back(static_cast<uint8_t>(std::stoi(std::string(s, 2), nullptr, 16)));
  return out;
}

TEST(GgufReader, SpecExampleBytesMatchTheSpecDump) {
  EXPECT_EQ(from_hex(kSpecHex), spec_example_bytes());
  EXPECT_EQ(spec_example_bytes().size(), 192u);
}

TEST(GgufReader, ParsesSpecExample) {
  const auto bytes = spec_example_bytes();
  auto f = parse(bytes, "example.gguf");
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), 160u);
  EXPECT_EQ(f->size(), 192u);
  EXPECT_EQ(f->metadata().get_string("general.architecture").value(), "deepseek2");
  EXPECT_EQ(f->metadata().get_uint("general.alignment").value(), 32u);
  ASSERT_EQ(f->tensors().size(), 1u);
  const TensorInfo& t = f->tensors()[0];
  EXPECT_EQ(t.name, "a");
  EXPECT_EQ(t.type, GgmlType::F32);
  EXPECT_EQ(t.n_dims, 2);
  EXPECT_EQ(t.ne[0], 4);
  EXPECT_EQ(t.ne[1], 2);
  EXPECT_EQ(t.ne[2], 1);
  EXPECT_EQ(t.ne[3], 1);
  EXPECT_EQ(t.n_elements(), 8);
  EXPECT_EQ(t.nbytes, 32u);
  EXPECT_EQ(t.row_bytes(), 16u);
  EXPECT_EQ(t.offset, 0u);
  ASSERT_EQ(t.data, bytes.data() + 160);
  const auto* v = reinterpret_cast<const float*>(t.data);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(v[k], static_cast<float>(k));
}

TEST(GgufReader, AcceptsVersion2) {
  auto bytes = spec_example_bytes();
  bytes[4] = 2;
  auto f = parse(bytes);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->version(), 2u);
}

TEST(GgufReader, OpensFromDiskAndKeepsMappingAcrossMoves) {
  testing::TempDir dir;
  const std::string path = dir.file("example.gguf");
  const auto bytes = spec_example_bytes();
  FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
  std::fclose(fp);
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.error();
  File moved = std::move(*f);
  EXPECT_EQ(moved.path(), path);
  ASSERT_EQ(moved.tensors().size(), 1u);
  EXPECT_EQ(moved.tensors()[0].data, moved.base() + 160);
  EXPECT_EQ(reinterpret_cast<const float*>(moved.tensors()[0].data)[7], 7.0f);
}

TEST(GgufReader, MissingFileNamesThePath) {
  auto f = File::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.error().find("/nonexistent/dir/model.gguf"), std::string::npos) << f.error();
  EXPECT_NE(f.error().find("cannot open"), std::string::npos) << f.error();
}

std::map<std::string, int> type_counts(const std::vector<TensorInfo>& ts) {
  std::map<std::string, int> c;
  for (const auto& t : ts) c[type_name(t.type)]++;
  return c;
}

// Every tensor's data lies inside the mapping, in order, aligned, without overlap.
void expect_sane_layout(const File& f) {
  const uint8_t* end = f.base() + f.size();
  const uint8_t* prev_end = f.base() + f.data_offset();
  for (const auto& t : f.tensors()) {
    EXPECT_GE(t.data, prev_end) << t.name;
    EXPECT_LE(t.data + t.nbytes, end) << t.name;
    EXPECT_EQ((t.data - f.base()) % f.alignment(), 0) << t.name;
    EXPECT_EQ(static_cast<int64_t>(t.nbytes), row_bytes(t.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3]);
    prev_end = t.data + t.nbytes;
  }
}

TEST(GgufReader, OracleQ4ks) {
  auto m = Model::open(ZENMOE_ORACLE_DIR "/tiny-q4ks.gguf");
  ASSERT_TRUE(m.has_value()) << m.error();
  ASSERT_EQ(m->shard_count(), 1);
  const File& f = m->files()[0];
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(m->tensors().size(), 70u);
  const auto c = type_counts(m->tensors());
  EXPECT_EQ(c.at("q4_K"), 42);
  EXPECT_EQ(c.at("q5_0"), 4);
  EXPECT_EQ(c.at("q6_K"), 1);
  EXPECT_EQ(c.at("f32"), 23);
  EXPECT_EQ(c.size(), 4u);
  const Metadata& md = m->metadata();
  EXPECT_EQ(md.get_string("general.architecture").value(), "deepseek2");
  EXPECT_EQ(md.get_uint("deepseek2.block_count").value(), 4u);
  EXPECT_EQ(md.get_uint("deepseek2.expert_count").value(), 32u);
  EXPECT_EQ(md.get_int("deepseek2.expert_used_count").value(), 8);
  EXPECT_EQ(md.get_uint("general.file_type").value(), 14u);
  EXPECT_FLOAT_EQ(md.get_float("deepseek2.rope.freq_base").value(), 50000.0);
  EXPECT_TRUE(md.get_bool("deepseek2.expert_weights_norm").value());
  EXPECT_EQ(md.get_string_array("tokenizer.ggml.tokens").value().size(), 512u);
  EXPECT_EQ(md.get_int_array("tokenizer.ggml.token_type").value().size(), 512u);
  EXPECT_EQ(md.get_string("tokenizer.ggml.pre").value(), "deepseek-v3");
  const TensorInfo* out = m->find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->type, GgmlType::Q6_K);
  EXPECT_EQ(out->ne[0], 256);
  EXPECT_EQ(out->ne[1], 512);
  const TensorInfo* kb = m->find_tensor("blk.0.attn_k_b.weight");
  ASSERT_NE(kb, nullptr);
  EXPECT_EQ(kb->type, GgmlType::Q5_0);
  EXPECT_EQ(kb->ne[0], 128);
  EXPECT_EQ(m->find_tensor("no.such.tensor"), nullptr);
  EXPECT_EQ(m->total_bytes(), f.size());
  expect_sane_layout(f);
}

TEST(GgufReader, OracleF16) {
  auto m = Model::open(ZENMOE_ORACLE_DIR "/tiny-f16.gguf");
  ASSERT_TRUE(m.has_value()) << m.error();
  EXPECT_EQ(m->files()[0].version(), 3u);
  EXPECT_EQ(m->tensors().size(), 70u);
  const auto c = type_counts(m->tensors());
  EXPECT_EQ(c.at("f16"), 47);
  EXPECT_EQ(c.at("f32"), 23);
  EXPECT_EQ(m->metadata().get_string("general.architecture").value(), "deepseek2");
  EXPECT_EQ(m->metadata().get_uint("deepseek2.attention.kv_lora_rank").value(), 512u);
  for (const auto& t : m->tensors()) EXPECT_EQ(m->find_tensor(t.name), &t);
  expect_sane_layout(m->files()[0]);
}

Metadata sample_metadata() {
  Metadata md;
  md.set("u8", Value::u8(200));
  md.set("i8", Value::i8(-5));
  md.set("u32", Value::u32(4000000000u));
  md.set("i32", Value::i32(-7));
  md.set("u64.big", Value::u64(~0ull));
  md.set("i64", Value::i64(1ll << 40));
  md.set("f32", Value::f32(1.5f));
  md.set("b", Value::boolean(true));
  md.set("s", Value::string("hello"));
  md.set("strs", Value::array_of_strings({"a", "b"}));
  md.set("ints", Value::array_of_ints(ValueType::I16, {-1, 2}));
  md.set("uints", Value::array_of_uints(ValueType::U64, {1, ~0ull}));
  md.set("floats", Value::array_of_floats(ValueType::F64, {0.25, -2}));
  return md;
}

TEST(GgufMetadata, IntegerGettersAcceptAnyWidthThatFits) {
  const Metadata md = sample_metadata();
  EXPECT_EQ(md.get_uint("u8").value(), 200u);
  EXPECT_EQ(md.get_int("u8").value(), 200);
  EXPECT_EQ(md.get_int("i8").value(), -5);
  EXPECT_EQ(md.get_uint("u32").value(), 4000000000u);
  EXPECT_EQ(md.get_int("i64").value(), 1ll << 40);
  EXPECT_EQ(md.get_uint("i64").value(), 1ull << 40);
  EXPECT_EQ(md.get_uint("u64.big").value(), ~0ull);
  auto neg = md.get_uint("i32");
  ASSERT_FALSE(neg.has_value());
  EXPECT_NE(neg.error().find("'i32'"), std::string::npos) << neg.error();
  EXPECT_NE(neg.error().find("negative"), std::string::npos) << neg.error();
  auto big = md.get_int("u64.big");
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.error().find("does not fit"), std::string::npos) << big.error();
}

TEST(GgufMetadata, TypeErrorsNameKeyAndType) {
  const Metadata md = sample_metadata();
  auto s = md.get_uint("s");
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().find("'s' is string"), std::string::npos) << s.error();
  auto miss = md.get_string("nope");
  ASSERT_FALSE(miss.has_value());
  EXPECT_NE(miss.error().find("'nope' is missing"), std::string::npos) << miss.error();
  auto arr = md.get_string_array("ints");
  ASSERT_FALSE(arr.has_value());
  EXPECT_NE(arr.error().find("array of i16"), std::string::npos) << arr.error();
  EXPECT_FALSE(md.get_bool("u8").has_value());
  EXPECT_FALSE(md.get_int_array("strs").has_value());
  EXPECT_FALSE(md.get_int_array("uints").has_value());  // 2^64-1 does not fit int64
}

TEST(GgufMetadata, ArraysFloatsAndDefaults) {
  Metadata md = sample_metadata();
  EXPECT_EQ(md.get_string_array("strs").value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(md.get_int_array("ints").value(), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(md.get_float_array("floats").value(), (std::vector<double>{0.25, -2}));
  EXPECT_EQ(md.get_float_array("ints").value(), (std::vector<double>{-1, 2}));
  EXPECT_EQ(md.get_float("f32").value(), 1.5);
  EXPECT_TRUE(md.get_bool("b").value());
  EXPECT_EQ(md.get_uint_or("absent", 9), 9u);
  EXPECT_EQ(md.get_uint_or("u8", 9), 200u);
  EXPECT_EQ(md.get_float_or("absent", 0.5), 0.5);
  EXPECT_FALSE(md.get_bool_or("absent", false));
  EXPECT_EQ(md.get_string_or("absent", "x"), "x");
  EXPECT_EQ(md.get_string_or("s", "x"), "hello");
  // set() replaces in place and keeps the order of keys.
  md.set("u8", Value::u8(1));
  EXPECT_EQ(md.entries()[0].first, "u8");
  EXPECT_EQ(md.get_uint("u8").value(), 1u);
  EXPECT_EQ(md.entries().size(), 13u);
}

}  // namespace
}  // namespace zenmoe::gguf
