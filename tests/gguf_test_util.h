// Builders for hand-made GGUF bytes (valid and deliberately broken) used by the GGUF tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf.h"

namespace zenmoe::gguf::testing {

// Raw little-endian GGUF bytes, written field by field with no validation at all.
struct RawGguf {
  std::vector<uint8_t> b;

  template <class T>
  RawGguf& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
    return *this;
  }
  RawGguf& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(int64_t n_tensors, int64_t n_kv, uint32_t version = 3) {
    put<uint32_t>(0x46554747).put<uint32_t>(version).put<int64_t>(n_tensors);
    return put<int64_t>(n_kv);
  }
  RawGguf& kv_u32(std::string_view key, uint32_t v) {
    return str(key).put<int32_t>(static_cast<int32_t>(ValueType::U32)).put<uint32_t>(v);
  }
  RawGguf& kv_str(std::string_view key, std::string_view v) {
    return str(key).put<int32_t>(static_cast<int32_t>(ValueType::STRING)).str(v);
  }
  RawGguf& tensor(std::string_view name, std::vector<int64_t> dims, int32_t type,
                  uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) put<int64_t>(d);
    return put<int32_t>(type).put<uint64_t>(offset);
  }
  RawGguf& pad(size_t align = 32) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

inline Expected<File> parse(const std::vector<uint8_t>& bytes, std::string name = "bad.gguf") {
  return File::from_memory(bytes.data(), bytes.size(), std::move(name));
}

// The spec §1.7 worked example, byte for byte (192 bytes, data_offset 160).
inline std::vector<uint8_t> spec_example_bytes() {
  RawGguf r;
  r.header(1, 2).kv_str("general.architecture", "deepseek2").kv_u32("general.alignment", 32);
  r.tensor("a", {4, 2}, 0, 0).pad();
  for (int k = 0; k < 8; ++k) r.put<float>(static_cast<float>(k));
  return r.b;
}

// A fresh, empty folder under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zenmoe-gguf-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  size_t entries() const {
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(path_);
         it != std::filesystem::directory_iterator(); ++it)
      ++n;
    return n;
  }

 private:
  std::string path_;
};

}  // namespace zenmoe::gguf::testing
