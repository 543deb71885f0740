// GGUF v3 writer: header, metadata, tensor infos, aligned zero-padded tensor data; written to
// a temporary file in the destination folder and renamed into place at the end.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>

#include "runtime/gguf.h"
#include "runtime/gguf_internal.h"

namespace zenmoe::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kCopyChunk = 64ull << 20;  // progress granularity for in-memory data

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
  }
  void put_str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

bool int_fits(ValueType t, int64_t v) {
  switch (t) {
    case ValueType::I8: return v >= INT8_MIN && v <= INT8_MAX;
    case ValueType::I16: return v >= INT16_MIN && v <= INT16_MAX;
    case ValueType::I32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return true;
  }
}

bool uint_fits(ValueType t, uint64_t v) {
  switch (t) {
    case ValueType::U8: return v <= UINT8_MAX;
    case ValueType::U16: return v <= UINT16_MAX;
    case ValueType::U32: return v <= UINT32_MAX;
    case ValueType::BOOL: return v <= 1;
    default: return true;
  }
}

bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

void put_int(Bytes& out, ValueType t, int64_t v) {
  switch (t) {
    case ValueType::I8: out.put<int8_t>(static_cast<int8_t>(v)); break;
    case ValueType::I16: out.put<int16_t>(static_cast<int16_t>(v)); break;
    case ValueType::I32: out.put<int32_t>(static_cast<int32_t>(v)); break;
    default: out.put<int64_t>(v); break;
  }
}

void put_uint(Bytes& out, ValueType t, uint64_t v) {
  switch (t) {
    case ValueType::U8: case ValueType::BOOL: out.put<uint8_t>(static_cast<uint8_t>(v)); break;
    case ValueType::U16: out.put<uint16_t>(static_cast<uint16_t>(v)); break;
    case ValueType::U32: out.put<uint32_t>(static_cast<uint32_t>(v)); break;
    default: out.put<uint64_t>(v); break;
  }
}

void put_float(Bytes& out, ValueType t, double v) {
  if (t == ValueType::F32) {
    out.put<float>(static_cast<float>(v));
  } else {
    out.put<double>(v);
  }
}

bool valid_id(ValueType t) {
  return static_cast<int32_t>(t) >= 0 && static_cast<int32_t>(t) <= static_cast<int32_t>(ValueType::F64);
}

// Appends one scalar (or one array element) of type t held in v's scalar fields.
Status put_array(Bytes& out, const std::string& key, const Value& v) {
  const ValueType et = v.array_type;
  if (!valid_id(et))
    return Error{"metadata key '" + key + "': arrays of type id " +
                 std::to_string(static_cast<int>(et)) + " cannot be written"};
  out.put<int32_t>(static_cast<int32_t>(et));
  out.put<uint64_t>(v.array_size());
  if (et == ValueType::ARRAY) {
    for (const auto& inner : v.arr_arr) {
      if (inner.type != ValueType::ARRAY)
        return Error{"metadata key '" + key + "': an element of an array of arrays is not an array"};
      ZENMOE_RETURN_IF_ERROR(put_array(out, key, inner));
    }
    return {};
  }
  auto bad = [&](size_t k) {
    return Error{"metadata key '" + key + "': element " + std::to_string(k) +
                 " does not fit " + value_type_name(et)};
  };
  if (et == ValueType::STRING) {
    for (const auto& s : v.arr_str) out.put_str(s);
  } else if (et == ValueType::F32 || et == ValueType::F64) {
    for (double f : v.arr_f) put_float(out, et, f);
  } else if (is_signed(et)) {
    for (size_t k = 0; k < v.arr_i.size(); ++k) {
      if (!int_fits(et, v.arr_i[k])) return bad(k);
      put_int(out, et, v.arr_i[k]);
    }
  } else {
    for (size_t k = 0; k < v.arr_u.size(); ++k) {
      if (!uint_fits(et, v.arr_u[k])) return bad(k);
      put_uint(out, et, v.arr_u[k]);
    }
  }
  return {};
}

Status put_kv(Bytes& out, const std::string& key, const Value& v) {
  if (key.empty()) return Error{"metadata: empty key"};
  if (!valid_id(v.type))
    return Error{"metadata key '" + key + "': invalid value type id " +
                 std::to_string(static_cast<int>(v.type))};
  out.put_str(key);
  out.put<int32_t>(static_cast<int32_t>(v.type));
  const auto bad = Error{"metadata key '" + key + "': value does not fit " + value_type_name(v.type)};
  switch (v.type) {
    case ValueType::STRING: out.put_str(v.str); return {};
    case ValueType::ARRAY: return put_array(out, key, v);
    case ValueType::F32: case ValueType::F64: put_float(out, v.type, v.f); return {};
    default: break;
  }
  if (is_signed(v.type)) {
    if (!int_fits(v.type, v.i)) return bad;
    put_int(out, v.type, v.i);
  } else {
    if (!uint_fits(v.type, v.u)) return bad;
    put_uint(out, v.type, v.u);
  }
  return {};
}

uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// The temporary output file; removed unless committed.
struct TempFile {
  int fd = -1;
  std::string path;
  bool committed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

Status write_all(int fd, const uint8_t* p, uint64_t n, uint64_t at, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Error{path + ": write failed: " + std::strerror(w < 0 ? errno : EIO)};
    p += w;
    n -= static_cast<uint64_t>(w);
    at += static_cast<uint64_t>(w);
  }
  return {};
}

// Lets `fill` write straight into the file through a shared mapping, so multi-GB tensors
// never need a heap buffer. The space was reserved with posix_fallocate beforehand, so a
// full disk cannot surface as SIGBUS here.
Status fill_mapped(int fd, uint64_t at, uint64_t n, const Writer::FillFn& fill,
                   const std::string& path, const std::string& tensor) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = at / page * page;
  const uint64_t len = at + n - start;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (m == MAP_FAILED) return Error{path + ": cannot map for writing: " + std::strerror(errno)};
  Status s;
  try {
    fill(static_cast<uint8_t*>(m) + (at - start), n);
  } catch (const std::exception& e) {
    s = Error{path + ": producing data of tensor '" + tensor + "' failed: " + e.what()};
  } catch (...) {
    s = Error{path + ": producing data of tensor '" + tensor + "' failed"};
  }
  munmap(m, len);
  return s;
}

}  // namespace

void Writer::set_alignment(uint32_t a) {
  alignment_ = a;
  if (a != kDefaultAlignment || meta_.has("general.alignment"))
    meta_.set("general.alignment", Value::u32(a));
}

Status Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                          const void* data) {
  ZENMOE_RETURN_IF_ERROR(add_tensor(std::move(name), type, std::move(dims), FillFn()));
  Pending& p = tensors_.back();
  if (!data && p.nbytes > 0) {
    const std::string msg = "tensor '" + p.name + "': no data given";
    tensors_.pop_back();
    return Error{msg};
  }
  p.data = data;
  return {};
}

Status Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                          FillFn fill) {
  if (name.empty()) return Error{"tensor with an empty name"};
  if (name.size() >= kMaxTensorName)
    return Error{"tensor '" + name + "': name is " + std::to_string(name.size()) +
                 " bytes, the limit is " + std::to_string(kMaxTensorName - 1)};
  for (const Pending& p : tensors_)
    if (p.name == name) return Error{"tensor '" + name + "': duplicate tensor name"};
  if (dims.empty() || dims.size() > 4)
    return Error{"tensor '" + name + "': " + std::to_string(dims.size()) +
                 " dimensions, need 1 to 4"};
  int64_t ne[4] = {1, 1, 1, 1};
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0) return Error{"tensor '" + name + "': negative dimension"};
    ne[d] = dims[d];
  }
  auto nbytes = tensor_nbytes(static_cast<int32_t>(type), ne);
  if (!nbytes) return Error{"tensor '" + name + "': " + nbytes.error()};
  tensors_.push_back(Pending{std::move(name), type, std::move(dims), *nbytes, nullptr,
                             std::move(fill)});
  return {};
}

uint64_t Writer::tensor_data_bytes() const {
  uint64_t sum = 0;
  for (const Pending& p : tensors_) sum += pad_to(p.nbytes, alignment_);
  return sum;
}

Status Writer::write(const std::string& path,
                     const std::function<void(uint64_t, uint64_t)>& progress) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
    return Error{path + ": alignment " + std::to_string(alignment_) + " is not a power of two"};
  if (const Value* a = meta_.find("general.alignment");
      a && (a->type != ValueType::U32 || a->u != alignment_))
    return Error{path + ": metadata general.alignment disagrees with the writer alignment " +
                 std::to_string(alignment_) + " (use set_alignment)"};
  Bytes h;
  h.put<uint32_t>(0x46554747);
  h.put<uint32_t>(3);
  h.put<int64_t>(static_cast<int64_t>(tensors_.size()));
  h.put<int64_t>(static_cast<int64_t>(meta_.entries().size()));
  for (const auto& [key, value] : meta_.entries()) {
    Status s = put_kv(h, key, value);
    if (!s) return Error{path + ": " + s.message()};
  }
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  for (const Pending& p : tensors_) {
    h.put_str(p.name);
    h.put<uint32_t>(static_cast<uint32_t>(p.dims.size()));
    for (int64_t d : p.dims) h.put<int64_t>(d);
    h.put<int32_t>(static_cast<int32_t>(p.type));
    h.put<uint64_t>(data_bytes);
    offsets.push_back(data_bytes);
    data_bytes += pad_to(p.nbytes, alignment_);
  }
  const uint64_t data_offset = tensors_.empty() ? h.b.size() : pad_to(h.b.size(), alignment_);
  h.b.resize(data_offset, 0);
  return write_file(path, h.b, offsets, progress);
}

Status Writer::write_file(const std::string& path, const std::vector<uint8_t>& header,
                          const std::vector<uint64_t>& offsets,
                          const std::function<void(uint64_t, uint64_t)>& progress) const {
  const uint64_t total = header.size() + tensor_data_bytes();
  TempFile tmp;
  std::vector<char> name(path.begin(), path.end());
  const std::string tail = ".tmp-XXXXXX";
  name.insert(name.end(), tail.begin(), tail.end());
  name.push_back('\0');
  tmp.fd = ::mkstemp(name.data());
  if (tmp.fd < 0) return Error{path + ": cannot create a temporary file: " + std::strerror(errno)};
  tmp.path = name.data();
  ::fchmod(tmp.fd, 0644);
  // Reserving the space up front turns a full disk into an error here rather than a SIGBUS
  // while filling a mapped tensor; the reserved range reads as zeros, which is the padding.
  if (const int rc = ::posix_fallocate(tmp.fd, 0, static_cast<off_t>(total)); rc != 0)
    return Error{path + ": cannot reserve " + std::to_string(total) +
                 " bytes: " + std::strerror(rc)};
  ZENMOE_RETURN_IF_ERROR(write_all(tmp.fd, header.data(), header.size(), 0, path));
  uint64_t done = header.size();
  if (progress) progress(done, total);
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Pending& p = tensors_[k];
    const uint64_t at = header.size() + offsets[k];
    if (p.nbytes == 0) continue;
    if (p.fill) {
      ZENMOE_RETURN_IF_ERROR(fill_mapped(tmp.fd, at, p.nbytes, p.fill, path, p.name));
      done += p.nbytes;
      if (progress) progress(done, total);
      continue;
    }
    const auto* src = static_cast<const uint8_t*>(p.data);
    for (uint64_t o = 0; o < p.nbytes; o += kCopyChunk) {
      const uint64_t n = std::min(kCopyChunk, p.nbytes - o);
      ZENMOE_RETURN_IF_ERROR(write_all(tmp.fd, src + o, n, at + o, path));
      done += n;
      if (progress) progress(done, total);
    }
  }
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) return Error{path + ": write failed: " + std::strerror(errno)};
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    return Error{path + ": cannot rename the temporary file into place: " +
                 std::strerror(errno)};
  tmp.committed = true;
  if (progress && done != total) progress(total, total);
  return {};
}

}  // namespace zenmoe::gguf
