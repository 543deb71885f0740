// GGUF reader validation: one hand-made bad file per rule; each must be rejected with one
// error that names the file and the problem.
#include <gtest/gtest.h>

#include <initializer_list>

#include "runtime/gguf.h"
#include "tests/gguf_test_util.h"

namespace zenmoe::gguf {
namespace {

using testing::parse;
using testing::RawGguf;
using testing::spec_example_bytes;

constexpr int32_t kF32 = 0, kQ4K = 12;

// Parses `bytes` as "bad.gguf" and checks it is rejected with a one-line message that names
// the file and contains every word in `words`.
void expect_rejected(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> words) {
  auto f = parse(bytes, "bad.gguf");
  ASSERT_FALSE(f.has_value()) << "accepted a bad file";
  const std::string& e = f.error();
  EXPECT_EQ(e.rfind("bad.gguf: ", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const char* w : words) EXPECT_NE(e.find(w), std::string::npos) << "missing '" << w << "' in: " << e;
}

// One tensor file with a single info record, padded, and `data` zero bytes of data.
std::vector<uint8_t> one_tensor(std::vector<int64_t> dims, int32_t type, uint64_t offset,
                                size_t data) {
  RawGguf r;
  r.header(1, 0).tensor("t", std::move(dims), type, offset).pad().zeros(data);
  return r.b;
}

TEST(GgufValidation, WrongMagic) {
  auto b = spec_example_bytes();
  b[0] = 'X';
  expect_rejected(b, {"not a GGUF file", "magic"});
}

TEST(GgufValidation, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    auto b = spec_example_bytes();
    std::memcpy(&b[4], &v, 4);
    expect_rejected(b, {"unsupported GGUF version"});
  }
  auto b = spec_example_bytes();
  const uint32_t be = 0x03000000u;
  std::memcpy(&b[4], &be, 4);
  expect_rejected(b, {"big-endian"});
}

TEST(GgufValidation, TruncatedAtEveryLength) {
  const auto full = spec_example_bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> b(full.begin(), full.begin() + static_cast<long>(n));
    auto f = parse(b, "cut.gguf");
    ASSERT_FALSE(f.has_value()) << "accepted a file cut at " << n;
    const std::string& e = f.error();
    EXPECT_EQ(e.rfind("cut.gguf: ", 0), 0u) << e;
    const bool says = e.find("truncated") != std::string::npos ||
                      e.find("beyond the end of the file") != std::string::npos;
    EXPECT_TRUE(says) << "cut at " << n << ": " << e;
  }
}

TEST(GgufValidation, TruncatedInEachPart) {
  const auto full = spec_example_bytes();
  auto cut = [&](size_t n) { return std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(n)); };
  expect_rejected(cut(2), {"truncated", "header magic"});
  expect_rejected(cut(12), {"truncated", "header tensor count"});
  expect_rejected(cut(28), {"truncated", "metadata pair 0", "key"});
  expect_rejected(cut(34), {"string length 20", "beyond the end of the file"});
  expect_rejected(cut(54), {"truncated", "general.architecture", "value type"});
  expect_rejected(cut(60), {"truncated", "general.architecture", "value"});
  expect_rejected(cut(64), {"general.architecture", "string length 9", "beyond"});
  expect_rejected(cut(104), {"truncated", "general.alignment", "value"});
  expect_rejected(cut(117), {"truncated", "tensor 'a'", "n_dims"});
  expect_rejected(cut(120), {"truncated", "tensor 'a'", "dimension"});
  expect_rejected(cut(140), {"truncated", "tensor 'a'", "offset"});
  expect_rejected(cut(150), {"truncated", "data section starts at offset 160"});
  expect_rejected(cut(191), {"tensor 'a'", "outside the file", "truncated"});
}

TEST(GgufValidation, StringLengthBeyondFile) {
  RawGguf r;
  r.header(0, 1).put<uint64_t>(1ull << 62).zeros(8);
  expect_rejected(r.b, {"string length 4611686018427387904", "beyond the end of the file"});
  RawGguf v;
  v.header(0, 1).str("k").put<int32_t>(8).put<uint64_t>(~0ull);
  expect_rejected(v.b, {"'k'", "value", "string length", "beyond"});
}

TEST(GgufValidation, ArrayLengthBeyondFile) {
  RawGguf r;
  r.header(0, 1).str("arr").put<int32_t>(9).put<int32_t>(4).put<uint64_t>(1ull << 40).zeros(16);
  expect_rejected(r.b, {"'arr'", "array length 1099511627776", "beyond the end of the file"});
  // String arrays: each element needs at least its length, so a huge count fails up front.
  RawGguf s;
  s.header(0, 1).str("arr").put<int32_t>(9).put<int32_t>(8).put<uint64_t>(~0ull >> 1);
  expect_rejected(s.b, {"'arr'", "array length", "beyond"});
  // An element's own string length beyond the file.
  RawGguf e;
  e.header(0, 1).str("arr").put<int32_t>(9).put<int32_t>(8).put<uint64_t>(1).put<uint64_t>(100);
  expect_rejected(e.b, {"'arr'", "array element", "string length 100", "beyond"});
}

TEST(GgufValidation, ValueTypeIds) {
  RawGguf r;
  r.header(0, 1).str("k").put<int32_t>(13).zeros(8);
  expect_rejected(r.b, {"'k'", "unknown value type id 13"});
  RawGguf n;
  n.header(0, 1).str("k").put<int32_t>(-1).zeros(8);
  expect_rejected(n.b, {"unknown value type id -1"});
  // Arrays of arrays are read (see the writer round trip) but their depth is bounded.
  RawGguf nested;
  nested.header(0, 1).str("k");
  nested.put<int32_t>(9);
  for (int d = 0; d < 9; ++d) nested.put<int32_t>(9).put<uint64_t>(1);
  nested.put<int32_t>(5).put<uint64_t>(0);
  expect_rejected(nested.b, {"'k'", "nested deeper than 8"});
  // An inner array's length beyond the file.
  RawGguf inner;
  inner.header(0, 1).str("k").put<int32_t>(9).put<int32_t>(9).put<uint64_t>(1);
  inner.put<int32_t>(4).put<uint64_t>(1000);
  expect_rejected(inner.b, {"'k'", "array length 1000", "beyond"});
  RawGguf bad_elem;
  bad_elem.header(0, 1).str("k").put<int32_t>(9).put<int32_t>(13).put<uint64_t>(0);
  expect_rejected(bad_elem.b, {"'k'", "unknown array element type id 13"});
}

TEST(GgufValidation, EmptyAndDuplicateKeys) {
  RawGguf e;
  e.header(0, 1).kv_u32("", 1);
  expect_rejected(e.b, {"empty metadata key"});
  RawGguf d;
  d.header(0, 2).kv_u32("a.b", 1).kv_str("a.b", "x");
  expect_rejected(d.b, {"duplicate metadata key 'a.b'"});
}

TEST(GgufValidation, NegativeCounts) {
  RawGguf t;
  t.header(-1, 0);
  expect_rejected(t.b, {"negative tensor count"});
  RawGguf k;
  k.header(0, -5);
  expect_rejected(k.b, {"negative metadata count"});
}

TEST(GgufValidation, AlignmentKey) {
  RawGguf t;
  t.header(0, 1).str("general.alignment").put<int32_t>(5).put<int32_t>(32);
  expect_rejected(t.b, {"general.alignment must be u32", "i32"});
  for (uint32_t a : {0u, 3u, 48u}) {
    RawGguf r;
    r.header(0, 1).kv_u32("general.alignment", a);
    expect_rejected(r.b, {"general.alignment", "not a power of two"});
  }
  // A valid non-default alignment moves data_offset and the allowed offsets.
  RawGguf ok;
  ok.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {16}, kF32, 0).pad(64).zeros(64);
  auto f = parse(ok.b);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
}

TEST(GgufValidation, TensorNames) {
  RawGguf e;
  e.header(1, 0).tensor("", {32}, kF32, 0).pad().zeros(128);
  expect_rejected(e.b, {"empty tensor name"});
  RawGguf l;
  l.header(1, 0).tensor(std::string(64, 'n'), {32}, kF32, 0).pad().zeros(128);
  expect_rejected(l.b, {"is 64 bytes, the limit is 63"});
  RawGguf ok;
  ok.header(1, 0).tensor(std::string(63, 'n'), {32}, kF32, 0).pad().zeros(128);
  EXPECT_TRUE(parse(ok.b).has_value());
  RawGguf d;
  d.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad().zeros(64);
  expect_rejected(d.b, {"duplicate tensor name 'w'"});
}

TEST(GgufValidation, Dimensions) {
  RawGguf r;
  r.header(1, 0).tensor("t", {1, 1, 1, 1, 1}, kF32, 0).pad().zeros(32);
  expect_rejected(r.b, {"tensor 't'", "n_dims 5", "maximum of 4"});
  expect_rejected(one_tensor({4, -2}, kF32, 0, 32), {"tensor 't'", "dimension 1 is negative"});
  // 2^32 * 2^32 elements overflow int64.
  expect_rejected(one_tensor({1ll << 32, 1ll << 32}, kF32, 0, 32),
                  {"tensor 't'", "element count overflows int64"});
  // An empty tensor whose row alone would need more than int64 bytes is still rejected.
  expect_rejected(one_tensor({1ll << 61, 0}, kF32, 0, 32),
                  {"tensor 't'", "row byte size overflows int64"});
  expect_rejected(one_tensor({1ll << 31, 1ll << 31}, kF32, 0, 32),
                  {"tensor 't'", "byte size overflows int64"});
  // Zero-sized dims are legal: an empty tensor.
  auto empty = parse(one_tensor({0, 3}, kF32, 0, 0));
  ASSERT_TRUE(empty.has_value()) << empty.error();
  EXPECT_EQ(empty->tensors()[0].nbytes, 0u);
  EXPECT_EQ(empty->tensors()[0].row_bytes(), 0u);
}

TEST(GgufValidation, TypeIds) {
  for (int32_t id : {4, 5, 31, 32, 33, 36, 37, 38, 43, 99, -1}) {
    SCOPED_TRACE(id);
    expect_rejected(one_tensor({32}, id, 0, 256),
                    {"tensor 't'", ("unknown or removed ggml type id " + std::to_string(id)).c_str()});
  }
}

TEST(GgufValidation, RowNotABlockMultiple) {
  expect_rejected(one_tensor({100, 2}, kQ4K, 0, 1024),
                  {"tensor 't'", "ne0=100", "not a multiple", "q4_K", "256"});
  auto ok = parse(one_tensor({256, 2}, kQ4K, 0, 288));
  ASSERT_TRUE(ok.has_value()) << ok.error();
  EXPECT_EQ(ok->tensors()[0].nbytes, 288u);
  EXPECT_EQ(ok->tensors()[0].row_bytes(), 144u);
}

TEST(GgufValidation, DataOutsideFile) {
  expect_rejected(one_tensor({64}, kF32, 0, 100), {"tensor 't'", "outside the file"});
  // An offset far past the end must not wrap around.
  expect_rejected(one_tensor({8}, kF32, ~0ull - 31, 32), {"tensor 't'"});
  expect_rejected(one_tensor({8}, kF32, 1ull << 40, 32), {"tensor 't'", "expected 0"});
}

TEST(GgufValidation, Offsets) {
  RawGguf unaligned;
  unaligned.header(1, 0).tensor("t", {8}, kF32, 4).pad().zeros(64);
  expect_rejected(unaligned.b, {"tensor 't'", "offset 4", "not aligned", "32"});
  RawGguf overlap;
  overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad().zeros(128);
  expect_rejected(overlap.b, {"tensor 'b'", "overlaps tensor 'a'", "ends at 64"});
  RawGguf same;
  same.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad().zeros(128);
  expect_rejected(same.b, {"tensor 'b'", "overlaps tensor 'a'"});
  RawGguf gap;
  gap.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 64).pad().zeros(128);
  expect_rejected(gap.b, {"tensor 'b'", "offset 64, expected 32", "not where expected"});
  RawGguf packed;
  packed.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad().zeros(64);
  auto f = parse(packed.b);
  ASSERT_TRUE(f.has_value()) << f.error();
  EXPECT_EQ(f->tensors()[1].data - f->tensors()[0].data, 32);
}

TEST(GgufValidation, NonPrintableNamesStayOneLine) {
  RawGguf r;
  r.header(0, 2).kv_u32("k\n\x01", 1).kv_u32("k\n\x01", 2);
  expect_rejected(r.b, {"duplicate metadata key 'k\\x0a\\x01'"});
}

TEST(GgufValidation, AllValueTypesParse) {
  RawGguf r;
  r.header(0, 13);
  r.str("u8").put<int32_t>(0).put<uint8_t>(250);
  r.str("i8").put<int32_t>(1).put<int8_t>(-3);
  r.str("u16").put<int32_t>(2).put<uint16_t>(65000);
  r.str("i16").put<int32_t>(3).put<int16_t>(-300);
  r.str("u32").put<int32_t>(4).put<uint32_t>(4000000000u);
  r.str("i32").put<int32_t>(5).put<int32_t>(-70000);
  r.str("f32").put<int32_t>(6).put<float>(0.5f);
  r.str("bool").put<int32_t>(7).put<uint8_t>(1);
  r.str("string").put<int32_t>(8).str("xyz");
  r.str("array").put<int32_t>(9).put<int32_t>(2).put<uint64_t>(2).put<uint16_t>(7).put<uint16_t>(9);
  r.str("u64").put<int32_t>(10).put<uint64_t>(1ull << 63);
  r.str("i64").put<int32_t>(11).put<int64_t>(-(1ll << 62));
  r.str("f64").put<int32_t>(12).put<double>(-0.125);
  auto f = parse(r.b, "types.gguf");
  ASSERT_TRUE(f.has_value()) << f.error();
  const Metadata& m = f->metadata();
  EXPECT_EQ(m.get_uint("u8").value(), 250u);
  EXPECT_EQ(m.get_int("i8").value(), -3);
  EXPECT_EQ(m.get_uint("u16").value(), 65000u);
  EXPECT_EQ(m.get_int("i16").value(), -300);
  EXPECT_EQ(m.get_uint("u32").value(), 4000000000u);
  EXPECT_EQ(m.get_int("i32").value(), -70000);
  EXPECT_EQ(m.get_float("f32").value(), 0.5);
  EXPECT_TRUE(m.get_bool("bool").value());
  EXPECT_EQ(m.get_string("string").value(), "xyz");
  EXPECT_EQ(m.get_int_array("array").value(), (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(m.get_uint("u64").value(), 1ull << 63);
  EXPECT_EQ(m.get_int("i64").value(), -(1ll << 62));
  EXPECT_EQ(m.get_float("f64").value(), -0.125);
  EXPECT_EQ(f->data_offset(), r.b.size());  // no tensors: no padding
  // Every key is named after its type, in file order.
  ASSERT_EQ(m.entries().size(), 13u);
  for (size_t k = 0; k < 13; ++k) {
    EXPECT_EQ(m.entries()[k].first, value_type_name(m.entries()[k].second.type));
    EXPECT_EQ(static_cast<size_t>(m.entries()[k].second.type), k);
  }
}

}  // namespace
}  // namespace zenmoe::gguf
