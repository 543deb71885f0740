// Split models (spec §1.10): a 3-part model opened as one, and every split error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "runtime/gguf.h"
#include "tests/gguf_test_util.h"

namespace zenmoe::gguf {
namespace {

using testing::TempDir;

const float kZeros[8] = {};  // tensor data must outlive Writer::write

std::string part_name(const TempDir& dir, int no, int count, const char* prefix = "model") {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05d-of-%05d.gguf", prefix, no, count);
  return dir.file(buf);
}

// Hooks to corrupt one part's split keys or tensors while writing it.
using PartEdit = std::function<void(int part, Writer& w)>;

// Writes a 3-part model: part 0 holds the model metadata and tensors a,b; part 1 c; part 2
// d,e. Tensor k (0-based over all parts) is F32 {8, 2} filled with the value k.
void write_model(const TempDir& dir, const PartEdit& edit = nullptr, int count = 3) {
  const std::vector<std::vector<std::string>> names = {{"a", "b"}, {"c"}, {"d", "e"}};
  int value = 0;
  for (int p = 0; p < count; ++p) {
    Writer w;
    if (p == 0) w.metadata().set("general.architecture", Value::string("deepseek2"));
    w.metadata().set("split.no", Value::u16(static_cast<uint16_t>(p)));
    w.metadata().set("split.count", Value::u16(static_cast<uint16_t>(count)));
    w.metadata().set("split.tensors.count", Value::i32(5));
    for (const std::string& n : names[p]) {
      const float v = static_cast<float>(value++);
      ASSERT_TRUE(w.add_tensor(n, GgmlType::F32, {8, 2}, [v](uint8_t* dst, uint64_t nb) {
                     for (uint64_t k = 0; k < nb / 4; ++k) std::memcpy(dst + 4 * k, &v, 4);
                   }).is_ok());
    }
    if (edit) edit(p, w);
    Status s = w.write(part_name(dir, p + 1, count));
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
}

void expect_error(const Expected<Model>& m, std::initializer_list<const char*> words) {
  ASSERT_FALSE(m.has_value());
  for (const char* w : words)
    EXPECT_NE(m.error().find(w), std::string::npos) << "missing '" << w << "' in: " << m.error();
}

TEST(GgufSplit, ThreePartsPresentedAsOne) {
  TempDir dir;
  write_model(dir);
  auto m = Model::open(part_name(dir, 1, 3));
  ASSERT_TRUE(m.has_value()) << m.error();
  EXPECT_EQ(m->shard_count(), 3);
  ASSERT_EQ(m->tensors().size(), 5u);
  EXPECT_EQ(m->metadata().get_string("general.architecture").value(), "deepseek2");
  const char* order[] = {"a", "b", "c", "d", "e"};
  const int shard[] = {0, 0, 1, 2, 2};
  uint64_t sum = 0;
  for (int k = 0; k < 5; ++k) {
    const TensorInfo& t = m->tensors()[k];
    EXPECT_EQ(t.name, order[k]);
    EXPECT_EQ(t.shard, shard[k]);
    EXPECT_EQ(m->find_tensor(order[k]), &t);
    const File& f = m->files()[t.shard];
    EXPECT_GE(t.data, f.base() + f.data_offset());
    EXPECT_LE(t.data + t.nbytes, f.base() + f.size());
    EXPECT_EQ(reinterpret_cast<const float*>(t.data)[15], static_cast<float>(k));
  }
  for (const File& f : m->files()) sum += f.size();
  EXPECT_EQ(m->total_bytes(), sum);
  EXPECT_EQ(m->find_tensor("f"), nullptr);
}

TEST(GgufSplit, SingleFileWithSplitCountOne) {
  TempDir dir;
  Writer w;
  w.metadata().set("split.count", Value::u16(1));
  ASSERT_TRUE(w.write(dir.file("plain.gguf")).is_ok());
  auto m = Model::open(dir.file("plain.gguf"));
  ASSERT_TRUE(m.has_value()) << m.error();
  EXPECT_EQ(m->shard_count(), 1);
}

TEST(GgufSplit, MissingPart) {
  TempDir dir;
  write_model(dir);
  std::filesystem::remove(part_name(dir, 3, 3));
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"missing or unreadable split part 3 of 3", "model-00003-of-00003.gguf"});
}

TEST(GgufSplit, MustOpenFirstPart) {
  TempDir dir;
  write_model(dir);
  expect_error(Model::open(part_name(dir, 2, 3)), {"split part 2 of 3", "open part 1"});
}

TEST(GgufSplit, FirstPartMustFollowTheNamingScheme) {
  TempDir dir;
  write_model(dir);
  std::filesystem::rename(part_name(dir, 1, 3), dir.file("model.gguf"));
  expect_error(Model::open(dir.file("model.gguf")),
               {"model.gguf", "does not end with '-00001-of-00003.gguf'"});
}

TEST(GgufSplit, WrongSplitNo) {
  TempDir dir;
  write_model(dir, [](int p, Writer& w) {
    if (p == 1) w.metadata().set("split.no", Value::u16(2));
  });
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"model-00002-of-00003.gguf", "split.no is 2, expected 1"});
}

TEST(GgufSplit, PartWithoutSplitNo) {
  TempDir dir;
  write_model(dir, [](int p, Writer& w) {
    if (p != 2) return;
    Writer copy;  // same part without split.no
    for (const auto& [k, v] : w.metadata().entries())
      if (k != "split.no") copy.metadata().set(k, v);
    w = std::move(copy);
    ASSERT_TRUE(w.add_tensor("d", GgmlType::F32, {4}, kZeros).is_ok());
    ASSERT_TRUE(w.add_tensor("e", GgmlType::F32, {4}, kZeros).is_ok());
  });
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"model-00003-of-00003.gguf", "without split.no"});
}

TEST(GgufSplit, MismatchedSplitCount) {
  TempDir dir;
  write_model(dir, [](int p, Writer& w) {
    if (p == 2) w.metadata().set("split.count", Value::u16(4));
  });
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"model-00003-of-00003.gguf", "split.count is 4", "part 1 says 3"});
}

TEST(GgufSplit, TensorCountMismatchAndMissing) {
  TempDir dir;
  write_model(dir, [](int p, Writer& w) {
    if (p == 0) w.metadata().set("split.tensors.count", Value::i32(6));
  });
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"split.tensors.count is 6", "hold 5 tensors"});
  TempDir dir2;
  write_model(dir2, [](int p, Writer& w) {
    if (p != 0) return;
    Writer copy;
    for (const auto& [k, v] : w.metadata().entries())
      if (k != "split.tensors.count") copy.metadata().set(k, v);
    w = std::move(copy);
  });
  expect_error(Model::open(part_name(dir2, 1, 3)), {"'split.tensors.count' is missing"});
}

TEST(GgufSplit, TensorDuplicatedAcrossParts) {
  TempDir dir;
  write_model(dir, [](int p, Writer& w) {
    if (p == 2) {
      ASSERT_TRUE(w.add_tensor("b", GgmlType::F32, {8}, kZeros).is_ok());
    }
    if (p == 0) w.metadata().set("split.tensors.count", Value::i32(6));
  });
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"tensor 'b' is duplicated", "model-00001-of-00003.gguf",
                "model-00003-of-00003.gguf"});
}

TEST(GgufSplit, FromFilesChecksThePartCount) {
  TempDir dir;
  write_model(dir);
  std::vector<File> files;
  for (int p = 1; p <= 2; ++p) {
    auto f = File::open(part_name(dir, p, 3));
    ASSERT_TRUE(f.has_value()) << f.error();
    files.push_back(std::move(*f));
  }
  expect_error(Model::from_files(std::move(files)),
               {"missing split parts", "split.count is 3", "2 part(s)"});
  expect_error(Model::from_files({}), {"no files"});
}

TEST(GgufSplit, BadPartIsReportedWithItsName) {
  TempDir dir;
  write_model(dir);
  std::filesystem::resize_file(part_name(dir, 2, 3), 40);
  expect_error(Model::open(part_name(dir, 1, 3)),
               {"split part 2 of 3", "model-00002-of-00003.gguf", "truncated"});
}

}  // namespace
}  // namespace zenmoe::gguf
