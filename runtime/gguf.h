// GGUF v2/v3 reader (mmap, validated, split models) and writer.
// Nothing read from a file is trusted: every size and offset is checked against the mapping.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe::gguf {

enum class ValueType : int32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);  // "u32", "string", "array", ...

// One metadata value. Scalars: integers live in `i` (signed types) or `u` (unsigned types,
// bool), floats in `f`, strings in `str`. Arrays: `array_type` is the element type and the
// elements are in `arr_i` / `arr_u` / `arr_f` / `arr_str` by the same rule; arrays of arrays
// (allowed by the GGUF format, rare in practice) keep each inner array as a Value in `arr_arr`.
struct Value {
  ValueType type = ValueType::U32;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0.0;
  std::string str;
  ValueType array_type = ValueType::U8;
  std::vector<int64_t> arr_i;
  std::vector<uint64_t> arr_u;
  std::vector<double> arr_f;
  std::vector<std::string> arr_str;
  std::vector<Value> arr_arr;  // element type ARRAY: each element is itself an ARRAY value

  static Value u8(uint8_t v), i8(int8_t v), u16(uint16_t v), i16(int16_t v);
  static Value u32(uint32_t v), i32(int32_t v), u64(uint64_t v), i64(int64_t v);
  static Value f32(float v), f64(double v), boolean(bool v), string(std::string v);
  static Value array_of_strings(std::vector<std::string> v);
  static Value array_of_ints(ValueType elem, std::vector<int64_t> v);    // signed elem types
  static Value array_of_uints(ValueType elem, std::vector<uint64_t> v);  // unsigned / bool
  static Value array_of_floats(ValueType elem, std::vector<double> v);   // F32 / F64
  static Value array_of_arrays(std::vector<Value> v);  // every element must be an ARRAY value
  size_t array_size() const;
  bool operator==(const Value& o) const;
};

// Ordered key/value metadata with typed accessors. Integer getters accept any integer width
// and signedness as long as the value fits; errors name the key and what was found.
class Metadata {
 public:
  void set(std::string key, Value v);  // replaces an existing key in place
  bool has(std::string_view key) const;
  const Value* find(std::string_view key) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return kv_; }

  Expected<uint64_t> get_uint(std::string_view key) const;
  Expected<int64_t> get_int(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;  // F32 / F64
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::string> get_string(std::string_view key) const;
  Expected<std::vector<std::string>> get_string_array(std::string_view key) const;
  Expected<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Expected<std::vector<double>> get_float_array(std::string_view key) const;

  // `def` if the key is absent or cannot be read as the requested type.
  uint64_t get_uint_or(std::string_view key, uint64_t def) const;
  double get_float_or(std::string_view key, double def) const;
  bool get_bool_or(std::string_view key, bool def) const;
  std::string get_string_or(std::string_view key, std::string def) const;

 private:
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> index_;  // key -> position in kv_
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] fastest; unused dims are 1
  uint64_t offset = 0;           // relative to its shard's data section
  uint64_t nbytes = 0;
  int shard = 0;                 // index of the file holding the data
  const uint8_t* data = nullptr; // points into the read-only mapping
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const {
    const int64_t rows = ne[1] * ne[2] * ne[3];
    return rows > 0 ? nbytes / static_cast<uint64_t>(rows) : 0;
  }
};

// One mapped GGUF file. Move-only; tensors' data pointers stay valid while it lives.
class File {
 public:
  static Expected<File> open(const std::string& path);
  // Parses a caller-owned buffer (the fuzzer, tests). `name` is used in error messages.
  static Expected<File> from_memory(const uint8_t* data, size_t size, std::string name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t size() const { return size_; }
  const uint8_t* base() const { return base_; }
  const Metadata& metadata() const { return meta_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  File() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool owns_mapping_ = false;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  Metadata meta_;
  std::vector<TensorInfo> tensors_;
  friend class Parser;
};

// A whole model: one file, or all parts of a split model presented as one.
class Model {
 public:
  // Opens `path`; if it is part 1 of a split (`split.count` > 1), opens and checks every
  // part (`<prefix>-%05d-of-%05d.gguf`).
  static Expected<Model> open(const std::string& path);
  // From already parsed files in part order (tests, fuzzing); validates split keys.
  static Expected<Model> from_files(std::vector<File> files);

  const Metadata& metadata() const;  // the first part's metadata
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // all parts, file order
  const TensorInfo* find_tensor(std::string_view name) const;
  const std::vector<File>& files() const { return files_; }
  int shard_count() const { return static_cast<int>(files_.size()); }
  uint64_t total_bytes() const;  // sum of file sizes

 private:
  std::vector<File> files_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::pair<std::string_view, size_t>> index_;  // sorted by name
};

// Writes a GGUF v3 file. Tensor data can be given as bytes or produced on demand (large
// synthetic models), in which case `fill` is called once with a buffer of exactly nbytes.
class Writer {
 public:
  using FillFn = std::function<void(uint8_t* dst, uint64_t nbytes)>;
  Metadata& metadata() { return meta_; }
  void set_alignment(uint32_t a);  // also written as general.alignment when != 32
  // dims in ggml order (ne0 first). Errors: bad name, unknown type, ne0 not a block multiple,
  // duplicate name. `data` is not copied: it must stay valid until write() returns.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, const void* data);
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, FillFn fill);
  uint64_t tensor_data_bytes() const;  // sum of padded tensor sizes
  // Writes to `path` atomically: a temporary name in the same folder, renamed at the end; on
  // any error nothing is left behind. `progress(done, total)` is called as data is written.
  Status write(const std::string& path,
               const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;

 private:
  struct Pending {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    uint64_t nbytes;
    const void* data;
    FillFn fill;
  };
  Status write_file(const std::string& path, const std::vector<uint8_t>& header,
                    const std::vector<uint64_t>& offsets,
                    const std::function<void(uint64_t, uint64_t)>& progress) const;
  Metadata meta_;
  uint32_t alignment_ = 32;
  std::vector<Pending> tensors_;
};

}  // namespace zenmoe::gguf
