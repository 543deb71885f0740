// GGUF writer: spec §1.7 bytes, round trips of every metadata type, alignment, streamed
// tensor data, progress and atomic writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "runtime/gguf.h"
#include "tests/gguf_test_util.h"

namespace zenmoe::gguf {
namespace {

using testing::spec_example_bytes;
using testing::TempDir;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufWriter, SpecExampleBytesExactly) {
  TempDir dir;
  Writer w;
  w.metadata().set("general.architecture", Value::string("deepseek2"));
  w.metadata().set("general.alignment", Value::u32(32));
  const float data[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(w.add_tensor("a", GgmlType::F32, {4, 2}, data).is_ok());
  EXPECT_EQ(w.tensor_data_bytes(), 32u);
  const std::string path = dir.file("example.gguf");
  Status s = w.write(path);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const auto bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 192u);
  EXPECT_EQ(bytes, spec_example_bytes());
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->data_offset(), 160u);
}

// One value of every scalar type and one array of every element type, at the limits.
Metadata every_type() {
  Metadata m;
  m.set("u8", Value::u8(255));
  m.set("i8", Value::i8(-128));
  m.set("u16", Value::u16(65535));
  m.set("i16", Value::i16(-32768));
  m.set("u32", Value::u32(4294967295u));
  m.set("i32", Value::i32(std::numeric_limits<int32_t>::min()));
  m.set("f32", Value::f32(-3.25e-7f));
  m.set("bool.t", Value::boolean(true));
  m.set("bool.f", Value::boolean(false));
  m.set("string", Value::string(std::string("bytes \0 and \xff utf-8 \xe2\x82\xac", 22)));
  m.set("string.empty", Value::string(""));
  m.set("u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  m.set("i64", Value::i64(std::numeric_limits<int64_t>::min()));
  m.set("f64", Value::f64(6.02214076e23));
  m.set("f64.nan", Value::f64(std::numeric_limits<double>::quiet_NaN()));
  m.set("a.u8", Value::array_of_uints(ValueType::U8, {0, 1, 255}));
  m.set("a.i8", Value::array_of_ints(ValueType::I8, {-128, 0, 127}));
  m.set("a.u16", Value::array_of_uints(ValueType::U16, {65535}));
  m.set("a.i16", Value::array_of_ints(ValueType::I16, {-32768, 32767}));
  m.set("a.u32", Value::array_of_uints(ValueType::U32, {4294967295u, 7}));
  m.set("a.i32", Value::array_of_ints(ValueType::I32, {-1, 2, -3}));
  m.set("a.f32", Value::array_of_floats(ValueType::F32, {0.5, -1e30, 3.0}));
  m.set("a.bool", Value::array_of_uints(ValueType::BOOL, {1, 0, 1}));
  m.set("a.string", Value::array_of_strings({"", "x", std::string(300, 'y')}));
  m.set("a.u64", Value::array_of_uints(ValueType::U64, {~0ull, 0}));
  m.set("a.i64", Value::array_of_ints(ValueType::I64, {std::numeric_limits<int64_t>::min()}));
  m.set("a.f64", Value::array_of_floats(ValueType::F64, {1e300, -0.0}));
  m.set("a.empty", Value::array_of_ints(ValueType::I32, {}));
  m.set("a.nested", Value::array_of_arrays(
                        {Value::array_of_ints(ValueType::I32, {1, -2}), Value::array_of_strings({"a", "bc"}),
                         Value::array_of_arrays({Value::array_of_floats(ValueType::F32, {0.25})}),
                         Value::array_of_uints(ValueType::U8, {})}));
  return m;
}

TEST(GgufWriter, RoundTripsEveryMetadataType) {
  TempDir dir;
  Writer w;
  const Metadata src = every_type();
  for (const auto& [k, v] : src.entries()) w.metadata().set(k, v);
  const std::string path = dir.file("types.gguf");
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.error();
  const auto& got = f->metadata().entries();
  ASSERT_EQ(got.size(), src.entries().size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].first, src.entries()[k].first);
    EXPECT_TRUE(got[k].second == src.entries()[k].second) << got[k].first;
    EXPECT_EQ(got[k].second.type, src.entries()[k].second.type) << got[k].first;
  }
  // Every array element type is covered, and each scalar type.
  std::vector<bool> scalar(13), array(13);
  for (const auto& [k, v] : got) {
    scalar[static_cast<size_t>(v.type)] = true;
    if (v.type == ValueType::ARRAY) array[static_cast<size_t>(v.array_type)] = true;
  }
  for (int t = 0; t < 13; ++t) {
    EXPECT_TRUE(scalar[t]) << t;
    EXPECT_TRUE(array[t]) << t;
  }
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufWriter, RejectsValuesThatDoNotFitTheirType) {
  TempDir dir;
  Writer w;
  Value v = Value::u8(1);
  v.u = 256;
  w.metadata().set("too.big", v);
  Status s = w.write(dir.file("x.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'too.big'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("does not fit u8"), std::string::npos) << s.message();
  Writer n;
  n.metadata().set("nested", Value::array_of_arrays({Value::u8(3)}));
  s = n.write(dir.file("x.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("is not an array"), std::string::npos) << s.message();
  Writer e;
  e.metadata().set("", Value::u8(1));
  EXPECT_FALSE(e.write(dir.file("x.gguf")).is_ok());
  EXPECT_EQ(dir.entries(), 0u);
}

TEST(GgufWriter, TensorsAlignmentPaddingAndData) {
  TempDir dir;
  Writer w;
  w.set_alignment(64);
  w.metadata().set("general.architecture", Value::string("test"));
  std::vector<uint8_t> q(144 * 3);
  for (size_t k = 0; k < q.size(); ++k) q[k] = static_cast<uint8_t>(k * 7 + 1);
  const float f[3] = {1, 2, 3};
  ASSERT_TRUE(w.add_tensor("q", GgmlType::Q4_K, {256, 3}, q.data()).is_ok());
  ASSERT_TRUE(w.add_tensor("f", GgmlType::F32, {3}, f).is_ok());
  ASSERT_TRUE(w.add_tensor("e", GgmlType::F16, {0, 4}, nullptr).is_ok());  // empty tensor
  ASSERT_TRUE(w.add_tensor("g", GgmlType::I32, {5, 1, 1, 2},
                           [](uint8_t* dst, uint64_t n) {
                             for (uint64_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(0xA0 + k);
                           }).is_ok());
  EXPECT_EQ(w.tensor_data_bytes(), 448u + 64u + 0u + 64u);
  const std::string path = dir.file("t.gguf");
  ASSERT_TRUE(w.write(path).is_ok());
  auto file = File::open(path);
  ASSERT_TRUE(file.has_value()) << file.error();
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->metadata().get_uint("general.alignment").value(), 64u);
  EXPECT_EQ(file->data_offset() % 64, 0u);
  EXPECT_EQ(file->size(), file->data_offset() + w.tensor_data_bytes());
  const auto& t = file->tensors();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(std::vector<uint8_t>(t[0].data, t[0].data + t[0].nbytes), q);
  EXPECT_EQ(t[1].offset, 448u);
  EXPECT_EQ(reinterpret_cast<const float*>(t[1].data)[2], 3.0f);
  EXPECT_EQ(t[2].nbytes, 0u);
  EXPECT_EQ(t[3].n_dims, 4);
  EXPECT_EQ(t[3].ne[3], 2);
  ASSERT_EQ(t[3].nbytes, 40u);
  for (uint64_t k = 0; k < 40; ++k) EXPECT_EQ(t[3].data[k], 0xA0 + k);
  // Padding between and after tensors is zero.
  for (const uint8_t* p = t[0].data + t[0].nbytes; p < t[1].data; ++p) ASSERT_EQ(*p, 0);
  for (const uint8_t* p = t[3].data + 40; p < file->base() + file->size(); ++p) ASSERT_EQ(*p, 0);
}

TEST(GgufWriter, AddTensorErrors) {
  Writer w;
  const float d[64] = {};
  auto expect_error = [](Status s, const char* word) {
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  };
  expect_error(w.add_tensor("", GgmlType::F32, {1}, d), "empty name");
  expect_error(w.add_tensor(std::string(64, 'x'), GgmlType::F32, {1}, d), "limit is 63");
  expect_error(w.add_tensor("t", static_cast<GgmlType>(4), {32}, d), "unknown or removed");
  expect_error(w.add_tensor("t", GgmlType::Q8_0, {48}, d), "not a multiple");
  expect_error(w.add_tensor("t", GgmlType::F32, {}, d), "need 1 to 4");
  expect_error(w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 1}, d), "need 1 to 4");
  expect_error(w.add_tensor("t", GgmlType::F32, {-1}, d), "negative");
  expect_error(w.add_tensor("t", GgmlType::F32, {4}, static_cast<const void*>(nullptr)), "no data");
  ASSERT_TRUE(w.add_tensor("t", GgmlType::F32, {4}, d).is_ok());
  expect_error(w.add_tensor("t", GgmlType::F32, {4}, d), "duplicate tensor name");
  EXPECT_EQ(w.tensor_data_bytes(), 32u);
}

TEST(GgufWriter, ProgressReachesTotal) {
  TempDir dir;
  Writer w;
  std::vector<float> a(1000, 1.0f), b(3000, 2.0f);
  ASSERT_TRUE(w.add_tensor("a", GgmlType::F32, {1000}, a.data()).is_ok());
  ASSERT_TRUE(w.add_tensor("b", GgmlType::F32, {3000}, b.data()).is_ok());
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(w.write(dir.file("p.gguf"), [&](uint64_t d, uint64_t t) { calls.emplace_back(d, t); }).is_ok());
  ASSERT_GE(calls.size(), 3u);
  const uint64_t total = std::filesystem::file_size(dir.file("p.gguf"));
  for (size_t k = 0; k < calls.size(); ++k) {
    EXPECT_EQ(calls[k].second, total);
    if (k) {
      EXPECT_GE(calls[k].first, calls[k - 1].first);
    }
  }
  EXPECT_EQ(calls.back().first, total);
}

TEST(GgufWriter, FailedWriteLeavesNothingBehind) {
  TempDir dir;
  Writer w;
  ASSERT_TRUE(w.add_tensor("boom", GgmlType::F32, {8},
                           [](uint8_t*, uint64_t) { throw std::runtime_error("generator broke"); })
                  .is_ok());
  Status s = w.write(dir.file("fail.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'boom'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("generator broke"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 0u);
  // The destination is a folder: the rename fails and the temporary file is removed.
  std::filesystem::create_directory(dir.file("taken"));
  Writer ok;
  ok.metadata().set("k", Value::u32(1));
  s = ok.write(dir.file("taken"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("taken"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 1u);
  // A folder that does not exist.
  s = ok.write(dir.file("no/such/dir/x.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no/such/dir/x.gguf"), std::string::npos) << s.message();
}

TEST(GgufWriter, OverwritesAtomically) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  Writer a;
  a.metadata().set("v", Value::u32(1));
  ASSERT_TRUE(a.write(path).is_ok());
  auto first = File::open(path);  // keeps the old mapping alive while replaced
  ASSERT_TRUE(first.has_value());
  Writer b;
  b.metadata().set("v", Value::u32(2));
  ASSERT_TRUE(b.write(path).is_ok());
  EXPECT_EQ(first->metadata().get_uint("v").value(), 1u);
  EXPECT_EQ(File::open(path)->metadata().get_uint("v").value(), 2u);
  EXPECT_EQ(dir.entries(), 1u);
}

TEST(GgufWriter, AlignmentMismatchIsAnError) {
  TempDir dir;
  Writer w;
  w.metadata().set("general.alignment", Value::u32(64));
  Status s = w.write(dir.file("x.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("general.alignment"), std::string::npos) << s.message();
  Writer bad;
  bad.set_alignment(48);
  s = bad.write(dir.file("x.gguf"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not a power of two"), std::string::npos) << s.message();
  Writer back;
  back.set_alignment(128);
  back.set_alignment(32);
  ASSERT_TRUE(back.write(dir.file("x.gguf")).is_ok());
  EXPECT_EQ(File::open(dir.file("x.gguf"))->alignment(), 32u);
}

}  // namespace
}  // namespace zenmoe::gguf
