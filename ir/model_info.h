// What a graph builder needs to know about a model file: its metadata scalars and its tensor
// table (name, type, dims). The runtime fills it from a GGUF file; tests fill it by hand, so
// the IR does not depend on the file reader.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"

namespace zenmoe::ir {

struct MetaValue {
  enum class Kind : uint8_t { Int, Float, Bool, String, Array } kind = Kind::Int;
  int64_t i = 0;         // Int (unsigned values that do not fit are clamped by the filler)
  double f = 0.0;        // Float
  bool b = false;        // Bool
  std::string s;         // String
  int64_t array_len = 0; // Array (elements are not needed by any builder)
};

struct TensorDesc {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;  // ggml order, trailing 1s dropped (at least one dim)
};

class ModelInfo {
 public:
  std::string source;  // file name, for error messages
  std::map<std::string, MetaValue, std::less<>> meta;
  std::vector<TensorDesc> tensors;

  void set_int(std::string key, int64_t v);
  void set_float(std::string key, double v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string v);
  void set_array(std::string key, int64_t len);
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims);

  bool has(std::string_view key) const { return meta.find(key) != meta.end(); }
  const TensorDesc* find_tensor(std::string_view name) const;

  // Required keys: an error naming the file and key when absent or of another kind.
  Expected<int64_t> get_int(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;  // accepts Int too
  Expected<std::string> get_string(std::string_view key) const;
  // Optional keys: `def` when absent; an error when present with the wrong kind.
  Expected<int64_t> get_int_or(std::string_view key, int64_t def) const;
  Expected<double> get_float_or(std::string_view key, double def) const;
  Expected<bool> get_bool_or(std::string_view key, bool def) const;
  Expected<std::string> get_string_or(std::string_view key, std::string def) const;
};

}  // namespace zenmoe::ir
