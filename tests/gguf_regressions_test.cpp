// Replays every input kept in tests/fuzz/regressions/ (fuzzer findings and hand-made bad
// files) through the reader: each must be rejected cleanly or parse into a File whose data
// stays inside the buffer. Under the sanitizer build any out-of-bounds read fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/gguf.h"

namespace zenmoe::gguf {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions";

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

Expected<File> replay(const fs::path& p, const std::vector<uint8_t>& bytes) {
  auto f = File::from_memory(bytes.data(), bytes.size(), p.filename().string());
  if (!f) return f;
  const uint8_t* end = bytes.data() + bytes.size();
  uint64_t sum = 0;
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_GE(t.data, bytes.data());
    EXPECT_LE(t.data + t.nbytes, end);
    for (uint64_t k = 0; k < t.nbytes; ++k) sum += t.data[k];
  }
  for (const auto& [key, v] : f->metadata().entries()) sum += key.size() + v.array_size();
  volatile uint64_t sink = sum;  // every byte was read
  (void)sink;
  return f;
}

TEST(GgufRegressions, EveryKeptInputIsHandledCleanly) {
  ASSERT_TRUE(fs::is_directory(kDir)) << kDir;
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(kDir)) {
    if (!entry.is_regular_file()) continue;
    SCOPED_TRACE(entry.path().string());
    const auto bytes = slurp(entry.path());
    auto f = replay(entry.path(), bytes);
    if (!f) {
      EXPECT_EQ(f.error().rfind(entry.path().filename().string() + ": ", 0), 0u) << f.error();
      EXPECT_EQ(f.error().find('\n'), std::string::npos) << f.error();
    }
    ++n;
  }
  EXPECT_GE(n, 2u);
}

TEST(GgufRegressions, HandMadeInputsAreRejected) {
  const auto cut = slurp(kDir / "truncated-tensor-info.gguf");
  ASSERT_EQ(cut.size(), 130u);
  auto f = replay(kDir / "truncated-tensor-info.gguf", cut);
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.error().find("truncated"), std::string::npos) << f.error();
  EXPECT_NE(f.error().find("tensor 'a'"), std::string::npos) << f.error();

  const auto huge = slurp(kDir / "huge-string-array.gguf");
  ASSERT_FALSE(huge.empty());
  auto g = replay(kDir / "huge-string-array.gguf", huge);
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().find("'tokenizer.ggml.tokens'"), std::string::npos) << g.error();
  EXPECT_NE(g.error().find("array length 2305843009213693952"), std::string::npos) << g.error();
}

}  // namespace
}  // namespace zenmoe::gguf
