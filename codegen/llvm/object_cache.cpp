#include "codegen/llvm/object_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <llvm/IR/Module.h>

namespace zenmoe::glue_llvm {
namespace {

// File layout: magic, u32 key length, key text, u64 object length, u64 FNV-1a of the object,
// object bytes.
constexpr char kMagic[8] = {'Z', 'M', 'G', 'L', 'U', 'E', 'O', '1'};

uint64_t fnv(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

template <class T>
void put(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

template <class T>
bool get(const std::vector<char>& s, size_t& at, T* v) {
  if (s.size() - at < sizeof(T)) return false;
  std::memcpy(v, s.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

// The object bytes of a cache file when it is complete, for `key`, and its checksum matches.
bool parse(const std::vector<char>& s, const std::string& key, size_t* obj_at, size_t* obj_len) {
  if (s.size() < sizeof(kMagic) || std::memcmp(s.data(), kMagic, sizeof(kMagic)) != 0) return false;
  size_t at = sizeof(kMagic);
  uint32_t key_len = 0;
  if (!get(s, at, &key_len) || key_len != key.size() || s.size() - at < key_len) return false;
  if (std::memcmp(s.data() + at, key.data(), key_len) != 0) return false;
  at += key_len;
  uint64_t len = 0, sum = 0;
  if (!get(s, at, &len) || !get(s, at, &sum) || len == 0 || s.size() - at != len) return false;
  if (fnv(s.data() + at, len) != sum) return false;
  *obj_at = at;
  *obj_len = len;
  return true;
}

}  // namespace

void DiskObjectCache::expect(const std::string& file, const std::string& key_text) {
  file_ = file;
  key_text_ = key_text;
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::lookup(const std::string& file) { return load(file, true); }

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::load(const std::string& file, bool count_reject) {
  if (dir_.empty() || file != file_) return nullptr;
  std::ifstream in(dir_ + "/" + file, std::ios::binary);
  if (!in) return nullptr;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0, len = 0;
  if (!parse(bytes, key_text_, &at, &len)) {
    if (count_reject) ++rejected_;
    return nullptr;
  }
  return llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(bytes.data() + at, len), file);
}

std::unique_ptr<llvm::MemoryBuffer> DiskObjectCache::getObject(const llvm::Module* m) {
  // GlueSession looks up (and counts rejects) before building IR; this is the compiler's
  // second look, normally a miss.
  return load(m->getModuleIdentifier(), false);
}

void DiskObjectCache::notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) {
  if (dir_.empty() || m->getModuleIdentifier() != file_) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return;  // the cache is an optimisation: an unwritable directory only costs time
  std::string data(kMagic, sizeof(kMagic));
  put(data, static_cast<uint32_t>(key_text_.size()));
  data += key_text_;
  const llvm::StringRef o = obj.getBuffer();
  put(data, static_cast<uint64_t>(o.size()));
  put(data, fnv(o.data(), o.size()));
  data.append(o.data(), o.size());
  // Written under a unique temporary name, then renamed: readers see a whole file or none.
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = dir_ + "/" + file_;
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace zenmoe::glue_llvm
