// GGUF reader: maps a file read-only and validates header, metadata, tensor infos and the
// placement of tensor data (spec §1). Every read is bounds-checked against the mapping
// before it happens; the first problem found becomes the one error returned.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "runtime/gguf.h"
#include "runtime/gguf_internal.h"

namespace zenmoe::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxDims = 4;

size_t fixed_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string printable(std::string_view s, size_t max_len) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t k = 0; k < s.size() && k < max_len; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

// Parses one mapped buffer into a File. `ctx_` names the record being read so that every
// error says where the problem is without building strings per element.
class Parser {
 public:
  explicit Parser(File& f) : f_(f), p_(f.base_), n_(f.size_) {}
  Status run();

 private:
  Error fail(const std::string& what) const { return Error{f_.path_ + ": " + what}; }
  Error truncated(const char* what, uint64_t need) const {
    return fail("truncated file: " + ctx_ + what + " needs " + std::to_string(need) +
                " bytes at offset " + std::to_string(pos_) + ", but the file has " +
                std::to_string(n_) + " bytes");
  }
  uint64_t left() const { return n_ - pos_; }

  template <class T>
  Status read(T* out, const char* what) {
    if (left() < sizeof(T)) return truncated(what, sizeof(T));
    *out = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return {};
  }
  Status read_string(std::string* out, const char* what);
  Status read_header(int64_t* n_tensors, int64_t* n_kv);
  Status read_kv(int64_t index);
  Status read_scalar(ValueType t, Value* v, const char* what);
  Status read_array(Value* v, int depth);
  Status check_alignment();
  Status read_tensor_info(int64_t index, std::unordered_set<std::string>* names);
  Status place_tensors();

  File& f_;
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
  std::string ctx_;  // "metadata key 'x': " etc., prefixed to error messages
};

Status Parser::read_string(std::string* out, const char* what) {
  uint64_t len = 0;
  if (left() < 8) return truncated(what, 8);
  len = load<uint64_t>(p_ + pos_);
  if (len > left() - 8)
    return fail(ctx_ + what + " has string length " + std::to_string(len) + " at offset " +
                std::to_string(pos_) + ", beyond the end of the file (" +
                std::to_string(left() - 8) + " bytes left)");
  pos_ += 8;
  out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
  pos_ += len;
  return {};
}

Status Parser::read_header(int64_t* n_tensors, int64_t* n_kv) {
  if (n_ < 4) return truncated("header magic", 4);
  const uint32_t magic = load<uint32_t>(p_);
  if (magic != kMagic)
    return fail("not a GGUF file: wrong magic '" +
                printable(std::string_view(reinterpret_cast<const char*>(p_), 4), 4) +
                "' (expected 'GGUF')");
  pos_ = 4;
  uint32_t version = 0;
  ZENMOE_RETURN_IF_ERROR(read(&version, "header version"));
  if (version == 1) return fail("unsupported GGUF version 1 (no longer supported; need 2 or 3)");
  if ((version & 0xFFFF) == 0)
    return fail("unsupported GGUF version " + std::to_string(version) +
                " (looks like a big-endian file; only little-endian files are supported)");
  if (version != 2 && version != 3)
    return fail("unsupported GGUF version " + std::to_string(version) + " (need 2 or 3)");
  f_.version_ = version;
  ZENMOE_RETURN_IF_ERROR(read(n_tensors, "header tensor count"));
  ZENMOE_RETURN_IF_ERROR(read(n_kv, "header metadata count"));
  if (*n_tensors < 0) return fail("negative tensor count " + std::to_string(*n_tensors));
  if (*n_kv < 0) return fail("negative metadata count " + std::to_string(*n_kv));
  return {};
}

Status Parser::read_scalar(ValueType t, Value* v, const char* what) {
  const size_t sz = fixed_size(t);
  if (left() < sz) return truncated(what, sz);
  const uint8_t* q = p_ + pos_;
  pos_ += sz;
  switch (t) {
    case ValueType::U8: v->u = load<uint8_t>(q); break;
    case ValueType::I8: v->i = load<int8_t>(q); break;
    case ValueType::U16: v->u = load<uint16_t>(q); break;
    case ValueType::I16: v->i = load<int16_t>(q); break;
    case ValueType::U32: v->u = load<uint32_t>(q); break;
    case ValueType::I32: v->i = load<int32_t>(q); break;
    case ValueType::U64: v->u = load<uint64_t>(q); break;
    case ValueType::I64: v->i = load<int64_t>(q); break;
    case ValueType::F32: v->f = load<float>(q); break;
    case ValueType::F64: v->f = load<double>(q); break;
    case ValueType::BOOL: v->u = load<uint8_t>(q) != 0; break;
    default: break;
  }
  return {};
}

Status Parser::read_array(Value* v, int depth) {
  int32_t et = 0;
  uint64_t count = 0;
  ZENMOE_RETURN_IF_ERROR(read(&et, "array element type"));
  if (et < 0 || et > static_cast<int32_t>(ValueType::F64))
    return fail(ctx_ + "unknown array element type id " + std::to_string(et));
  const auto elem = static_cast<ValueType>(et);
  if (elem == ValueType::ARRAY && depth >= kMaxArrayDepth)
    return fail(ctx_ + "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  ZENMOE_RETURN_IF_ERROR(read(&count, "array length"));
  // A string element takes at least its 8-byte length and an inner array its 12-byte header,
  // so this bounds every array by the bytes left before anything is allocated.
  const uint64_t min_elem = elem == ValueType::STRING  ? 8
                            : elem == ValueType::ARRAY ? 12
                                                       : fixed_size(elem);
  if (count > left() / min_elem)
    return fail(ctx_ + "array length " + std::to_string(count) + " of " +
                value_type_name(elem) + " at offset " + std::to_string(pos_ - 8) +
                " goes beyond the end of the file (" + std::to_string(left()) + " bytes left)");
  v->type = ValueType::ARRAY;
  v->array_type = elem;
  if (elem == ValueType::ARRAY) {
    v->arr_arr.resize(count);
    for (auto& inner : v->arr_arr) ZENMOE_RETURN_IF_ERROR(read_array(&inner, depth + 1));
    return {};
  }
  if (elem == ValueType::STRING) {
    v->arr_str.resize(count);
    for (auto& s : v->arr_str) ZENMOE_RETURN_IF_ERROR(read_string(&s, "array element"));
    return {};
  }
  Value tmp;
  for (uint64_t k = 0; k < count; ++k) {
    ZENMOE_RETURN_IF_ERROR(read_scalar(elem, &tmp, "array element"));
    if (elem == ValueType::F32 || elem == ValueType::F64) {
      v->arr_f.push_back(tmp.f);
    } else if (elem == ValueType::I8 || elem == ValueType::I16 || elem == ValueType::I32 ||
               elem == ValueType::I64) {
      v->arr_i.push_back(tmp.i);
    } else {
      v->arr_u.push_back(tmp.u);
    }
  }
  return {};
}

Status Parser::read_kv(int64_t index) {
  ctx_ = "metadata pair " + std::to_string(index) + ": ";
  std::string key;
  ZENMOE_RETURN_IF_ERROR(read_string(&key, "key"));
  if (key.empty()) return fail(ctx_ + "empty metadata key");
  ctx_ = "metadata key '" + printable(key) + "': ";
  if (f_.meta_.has(key)) return fail("duplicate metadata key '" + printable(key) + "'");
  int32_t type = 0;
  ZENMOE_RETURN_IF_ERROR(read(&type, "value type"));
  if (type < 0 || type > static_cast<int32_t>(ValueType::F64))
    return fail(ctx_ + "unknown value type id " + std::to_string(type));
  Value v;
  v.type = static_cast<ValueType>(type);
  if (v.type == ValueType::ARRAY) {
    ZENMOE_RETURN_IF_ERROR(read_array(&v, 1));
  } else if (v.type == ValueType::STRING) {
    ZENMOE_RETURN_IF_ERROR(read_string(&v.str, "value"));
  } else {
    ZENMOE_RETURN_IF_ERROR(read_scalar(v.type, &v, "value"));
  }
  f_.meta_.set(std::move(key), std::move(v));
  return {};
}

Status Parser::check_alignment() {
  const Value* a = f_.meta_.find("general.alignment");
  if (!a) return {};
  if (a->type != ValueType::U32)
    return fail(std::string("general.alignment must be u32, found ") + value_type_name(a->type));
  if (a->u == 0 || (a->u & (a->u - 1)) != 0)
    return fail("general.alignment " + std::to_string(a->u) + " is not a power of two");
  f_.alignment_ = static_cast<uint32_t>(a->u);
  return {};
}

// Reads one tensor info record and computes its byte size; placement is checked later,
// once data_offset is known.
Status Parser::read_tensor_info(int64_t index, std::unordered_set<std::string>* names) {
  ctx_ = "tensor info " + std::to_string(index) + ": ";
  TensorInfo t;
  ZENMOE_RETURN_IF_ERROR(read_string(&t.name, "name"));
  if (t.name.empty()) return fail(ctx_ + "empty tensor name");
  if (t.name.size() >= kMaxTensorName)
    return fail(ctx_ + "tensor name '" + printable(t.name) + "' is " +
                std::to_string(t.name.size()) + " bytes, the limit is " +
                std::to_string(kMaxTensorName - 1));
  ctx_ = "tensor '" + printable(t.name) + "': ";
  if (!names->insert(t.name).second)
    return fail("duplicate tensor name '" + printable(t.name) + "'");
  uint32_t n_dims = 0;
  ZENMOE_RETURN_IF_ERROR(read(&n_dims, "n_dims"));
  if (n_dims > kMaxDims)
    return fail(ctx_ + "n_dims " + std::to_string(n_dims) + " is more than the maximum of 4");
  t.n_dims = static_cast<int>(n_dims);
  for (int d = 0; d < t.n_dims; ++d) {
    ZENMOE_RETURN_IF_ERROR(read(&t.ne[d], "dimension"));
    if (t.ne[d] < 0)
      return fail(ctx_ + "dimension " + std::to_string(d) + " is negative (" +
                  std::to_string(t.ne[d]) + ")");
  }
  int32_t type_id = 0;
  ZENMOE_RETURN_IF_ERROR(read(&type_id, "type"));
  ZENMOE_RETURN_IF_ERROR(read(&t.offset, "offset"));
  auto size = tensor_nbytes(type_id, t.ne);
  if (!size) return fail(ctx_ + size.error());
  t.type = static_cast<GgmlType>(type_id);
  t.nbytes = *size;
  f_.tensors_.push_back(std::move(t));
  return {};
}

Expected<uint64_t> tensor_nbytes(int32_t type_id, const int64_t ne[4]) {
  const TypeGeometry* g = type_geometry(type_id);
  if (!g || type_id >= kGgmlTypeCount)
    return Error{"unknown or removed ggml type id " + std::to_string(type_id)};
  if (ne[0] % g->block_elems != 0)
    return Error{"row length ne0=" + std::to_string(ne[0]) + " is not a multiple of the " +
                 g->name + " block size " + std::to_string(g->block_elems)};
  int64_t elems = 1;
  for (int d = 0; d < 4; ++d)
    if (__builtin_mul_overflow(elems, ne[d], &elems))
      return Error{"element count overflows int64"};
  // The row size and the total size must both fit int64 so that callers can do signed
  // size arithmetic on any accepted tensor (even an empty one with a huge ne0).
  int64_t bytes = ne[0] / g->block_elems;
  if (__builtin_mul_overflow(bytes, g->block_bytes, &bytes))
    return Error{"row byte size overflows int64"};
  for (int d = 1; d < 4; ++d)
    if (__builtin_mul_overflow(bytes, ne[d], &bytes)) return Error{"byte size overflows int64"};
  return static_cast<uint64_t>(bytes);
}

// Tensor data must be packed in info order, each tensor at the previous end rounded up to
// the alignment (spec §1.4), and lie inside the file.
Status Parser::place_tensors() {
  const uint64_t align = f_.alignment_;
  if (f_.tensors_.empty()) {
    f_.data_offset_ = pos_;
    return {};
  }
  f_.data_offset_ = (pos_ + align - 1) / align * align;
  if (f_.data_offset_ > n_)
    return fail("truncated file: the data section starts at offset " +
                std::to_string(f_.data_offset_) + ", but the file has " + std::to_string(n_) +
                " bytes");
  const uint64_t room = n_ - f_.data_offset_;
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (TensorInfo& t : f_.tensors_) {
    const std::string who = "tensor '" + printable(t.name) + "'";
    if (t.offset % align != 0)
      return fail(who + " has offset " + std::to_string(t.offset) +
                  ", not aligned to the alignment " + std::to_string(align));
    if (t.offset < expected)
      return fail(who + " at offset " + std::to_string(t.offset) + " overlaps tensor '" +
                  printable(prev->name) + "' which ends at " +
                  std::to_string(prev->offset + prev->nbytes));
    if (t.offset != expected)
      return fail(who + " has offset " + std::to_string(t.offset) + ", expected " +
                  std::to_string(expected) + " (tensor data is not where expected)");
    if (t.offset > room || t.nbytes > room - t.offset)
      return fail(who + " data [" + std::to_string(f_.data_offset_ + t.offset) + ", " +
                  std::to_string(f_.data_offset_ + t.offset + t.nbytes) +
                  ") lies outside the file (" + std::to_string(n_) + " bytes): truncated data");
    t.data = p_ + f_.data_offset_ + t.offset;
    expected = (t.offset + t.nbytes + align - 1) / align * align;
    prev = &t;
  }
  return {};
}

Status Parser::run() {
  int64_t n_tensors = 0, n_kv = 0;
  ZENMOE_RETURN_IF_ERROR(read_header(&n_tensors, &n_kv));
  for (int64_t k = 0; k < n_kv; ++k) ZENMOE_RETURN_IF_ERROR(read_kv(k));
  ctx_.clear();
  ZENMOE_RETURN_IF_ERROR(check_alignment());
  std::unordered_set<std::string> names;
  for (int64_t k = 0; k < n_tensors; ++k) ZENMOE_RETURN_IF_ERROR(read_tensor_info(k, &names));
  ctx_.clear();
  return place_tensors();
}

Expected<File> File::from_memory(const uint8_t* data, size_t size, std::string name) {
  File f;
  f.path_ = std::move(name);
  f.base_ = size ? data : nullptr;
  f.size_ = size;
  Status s = Parser(f).run();
  if (!s) return Error{s.message()};
  return f;
}

Expected<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": not a regular file"};
  }
  File f;
  f.path_ = path;
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > 0) {
    void* m = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Error{path + ": cannot map: " + std::strerror(err)};
    }
    f.base_ = static_cast<const uint8_t*>(m);
    f.owns_mapping_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  Status s = Parser(f).run();
  if (!s) return Error{s.message()};
  return f;
}

File::File(File&& o) noexcept { *this = std::move(o); }

File& File::operator=(File&& o) noexcept {
  if (this == &o) return *this;
  if (owns_mapping_) munmap(const_cast<uint8_t*>(base_), size_);
  path_ = std::move(o.path_);
  base_ = o.base_;
  size_ = o.size_;
  owns_mapping_ = o.owns_mapping_;
  version_ = o.version_;
  alignment_ = o.alignment_;
  data_offset_ = o.data_offset_;
  meta_ = std::move(o.meta_);
  tensors_ = std::move(o.tensors_);
  o.base_ = nullptr;
  o.size_ = 0;
  o.owns_mapping_ = false;
  o.tensors_.clear();
  return *this;
}

File::~File() {
  if (owns_mapping_) munmap(const_cast<uint8_t*>(base_), size_);
}

}  // namespace zenmoe::gguf
