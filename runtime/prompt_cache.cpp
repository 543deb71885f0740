#include "runtime/prompt_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/gguf_internal.h"
#include "runtime/temp_files.h"

namespace zenmoe {
namespace {

constexpr char kMagic[8] = {'Z', 'M', 'P', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kMaxName = 1 << 12;
constexpr uint64_t kIoChunk = uint64_t{8} << 20;

// A 64-bit checksum over a byte stream fed in pieces of any length: eight bytes at a time
// through a multiply-xorshift (several GB/s, where byte-wise FNV-1a would hold up a save of a
// long context's rows). It only has to catch damaged files.
class Checksum {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    len_ += n;
    while (n > 0 && fill_ > 0) {
      tail_[fill_++] = *p++;
      --n;
      if (fill_ == 8) {
        word(tail_);
        fill_ = 0;
      }
    }
    for (; n >= 8; n -= 8, p += 8) word(p);
    while (n-- > 0) tail_[fill_++] = *p++;
  }
  uint64_t value() const {
    uint64_t h = h_;
    for (size_t i = 0; i < fill_; ++i) h = mix(h ^ tail_[i]);
    return mix(h ^ len_);
  }

 private:
  static uint64_t mix(uint64_t h) {
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 32);
  }
  void word(const uint8_t* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h_ = mix(h_ ^ w);
  }
  uint64_t h_ = 0x9e3779b97f4a7c15ull, len_ = 0;
  uint8_t tail_[8] = {};
  size_t fill_ = 0;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_text() { return std::strerror(errno); }

void put(std::string* out, const void* p, size_t n) { out->append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string* out, T v) {
  put(out, &v, sizeof v);
}

// Every byte goes through the checksum on its way to the file.
class Writer {
 public:
  Writer(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  Status write(const void* data, size_t n) {
    sum_.add(data, n);
    return raw(data, n);
  }
  Status finish() {
    const uint64_t s = sum_.value();
    return raw(&s, sizeof s);
  }

 private:
  Status raw(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, kIoChunk));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Error{where_ + ": write failed: " + errno_text()};
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::ok();
  }
  int fd_;
  std::string where_;
  Checksum sum_;
};

// Reads exactly n bytes, summing them; a file that ends first is an error.
class Reader {
 public:
  Reader(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  Status read(void* data, size_t n, bool sum = true) {
    auto* p = static_cast<uint8_t*>(data);
    const size_t total = n;
    while (n > 0) {
      const ssize_t r = ::read(fd_, p, std::min<size_t>(n, kIoChunk));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Error{where_ + ": read failed: " + errno_text()};
      if (r == 0) return Error{where_ + ": the file ends early (truncated)"};
      p += r;
      n -= static_cast<size_t>(r);
    }
    if (sum) sum_.add(data, total);
    return Status::ok();
  }
  uint64_t sum() const { return sum_.value(); }

 private:
  int fd_;
  std::string where_;
  Checksum sum_;
};

// The fixed part after the magic.
struct Head {
  uint32_t version = 0, n_caches = 0;
  uint64_t model_id = 0;
  uint32_t n_tokens = 0, zero = 0;
};

std::string describe(const KvCacheRows& c) {
  return std::string(type_name(c.type)) + " rows of " + std::to_string(c.row_elems);
}

}  // namespace

uint64_t prompt_cache_checksum(const void* data, size_t n) {
  Checksum c;
  c.add(data, n);
  return c.value();
}

Status save_prompt_cache(const std::string& path, uint64_t model_id, Executor& ex, std::span<const int32_t> tokens) {
  const std::string where = "prompt cache " + path;
  if (tokens.size() != static_cast<size_t>(ex.n_past()))
    return Error{where + ": " + std::to_string(tokens.size()) + " tokens given for a sequence of " +
                 std::to_string(ex.n_past())};
  const std::vector<KvCacheRows> caches = ex.kv_caches();
  std::string head(kMagic, sizeof kMagic);
  put(&head, Head{kPromptCacheVersion, static_cast<uint32_t>(caches.size()), model_id,
                  static_cast<uint32_t>(tokens.size()), 0});
  for (const KvCacheRows& c : caches) {
    put(&head, static_cast<uint32_t>(c.name.size()));
    put(&head, c.name.data(), c.name.size());
    put(&head, static_cast<int32_t>(c.type));
    put(&head, c.row_elems);
    put(&head, c.row_bytes);
  }
  put(&head, tokens.data(), tokens.size_bytes());
  TempFiles temps;
  Expected<int> fd = temps.create(0, path);
  if (!fd) return Error{where + ": " + fd.error()};
  Fd file{*fd};
  Writer w(file.fd, where);
  ZENMOE_RETURN_IF_ERROR(w.write(head.data(), head.size()));
  for (const KvCacheRows& c : caches)
    ZENMOE_RETURN_IF_ERROR(w.write(c.data, static_cast<size_t>(c.row_bytes) * tokens.size()));
  ZENMOE_RETURN_IF_ERROR(w.finish());
  if (::fsync(file.fd) != 0) return Error{where + ": cannot flush the file: " + errno_text()};
  return temps.commit(0, path);
}

Expected<PromptCacheLoad> load_prompt_cache(const std::string& path, uint64_t model_id, Executor& ex,
                                            std::span<const int32_t> prompt) {
  const std::string where = "prompt cache " + path;
  ex.reset();
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return Error{where + ": cannot open: " + errno_text()};
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return Error{where + ": cannot stat: " + errno_text()};
  if (!S_ISREG(st.st_mode)) return Error{where + ": not a regular file"};
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  Reader r(file.fd, where);
  char magic[sizeof kMagic];
  Head h;
  if (file_bytes < sizeof magic + sizeof h) return Error{where + ": not a prompt cache file (too short)"};
  ZENMOE_RETURN_IF_ERROR(r.read(magic, sizeof magic));
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) return Error{where + ": not a prompt cache file"};
  ZENMOE_RETURN_IF_ERROR(r.read(&h, sizeof h));
  if (h.version != kPromptCacheVersion)
    return Error{where + ": version " + std::to_string(h.version) + ", this build reads version " +
                 std::to_string(kPromptCacheVersion) + " (delete the file to make a new one)"};
  if (h.model_id != model_id) return Error{where + ": made with another model"};
  const std::vector<KvCacheRows> caches = ex.kv_caches();
  if (h.n_caches != caches.size() || h.zero != 0)
    return Error{where + ": holds " + std::to_string(h.n_caches) + " KV caches, the model has " +
                 std::to_string(caches.size())};
  // The descriptors, checked against the engine's caches as they are read; then the sizes.
  unsigned __int128 expected = sizeof magic + sizeof h + uint64_t{h.n_tokens} * sizeof(int32_t) + sizeof(uint64_t);
  for (const KvCacheRows& c : caches) {
    uint32_t len = 0;
    ZENMOE_RETURN_IF_ERROR(r.read(&len, sizeof len));
    if (len > kMaxName) return Error{where + ": damaged (a cache name of " + std::to_string(len) + " bytes)"};
    std::string name(len, '\0');
    int32_t type = 0;
    int64_t elems = 0, bytes = 0;
    ZENMOE_RETURN_IF_ERROR(r.read(name.data(), len));
    ZENMOE_RETURN_IF_ERROR(r.read(&type, sizeof type));
    ZENMOE_RETURN_IF_ERROR(r.read(&elems, sizeof elems));
    ZENMOE_RETURN_IF_ERROR(r.read(&bytes, sizeof bytes));
    if (name != c.name)
      return Error{where + ": holds KV cache '" + gguf::printable(name) + "' where the model has '" + c.name + "'"};
    if (type != static_cast<int32_t>(c.type) || elems != c.row_elems || bytes != c.row_bytes) {
      const GgmlType t = static_cast<GgmlType>(type);
      return Error{where + ": holds KV cache '" + name + "' as " +
                   (type_geometry(t) != nullptr ? std::string(type_name(t)) : "type " + std::to_string(type)) +
                   " rows of " + std::to_string(elems) + ", this run keeps " + describe(c) +
                   " (the type -ctk sets; --ref keeps f32)"};
    }
    expected += 4 + len + 4 + 8 + 8 + uint64_t{h.n_tokens} * static_cast<uint64_t>(bytes);
  }
  if (file_bytes != expected)
    return Error{where + ": " + std::to_string(file_bytes) + " bytes where its header says " +
                 (expected >> 64 != 0 ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(expected))) +
                 " (truncated or damaged)"};
  PromptCacheLoad out;
  out.saved.resize(h.n_tokens);
  ZENMOE_RETURN_IF_ERROR(r.read(out.saved.data(), out.saved.size() * sizeof(int32_t)));
  // The longest common run, short of the prompt's last token, within the context.
  size_t m = 0;
  const size_t cap = std::min({out.saved.size(), prompt.empty() ? 0 : prompt.size() - 1,
                               static_cast<size_t>(ex.n_ctx())});
  while (m < cap && out.saved[m] == prompt[m]) ++m;
  std::vector<uint8_t> skip;
  for (const KvCacheRows& c : caches) {
    const auto row = static_cast<size_t>(c.row_bytes);
    ZENMOE_RETURN_IF_ERROR(r.read(c.data, m * row));
    // The rows past the restored ones are read for the checksum only.
    for (size_t left = (h.n_tokens - m) * row; left > 0;) {
      const size_t n = std::min<size_t>(left, kIoChunk);
      skip.resize(n);
      ZENMOE_RETURN_IF_ERROR(r.read(skip.data(), n));
      left -= n;
    }
  }
  const uint64_t sum = r.sum();
  uint64_t stored = 0;
  ZENMOE_RETURN_IF_ERROR(r.read(&stored, sizeof stored, false));
  if (stored != sum) return Error{where + ": checksum mismatch (damaged)"};
  ZENMOE_RETURN_IF_ERROR(ex.restore(static_cast<int>(m)));
  out.restored = static_cast<int>(m);
  return out;
}

}  // namespace zenmoe
