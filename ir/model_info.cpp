#include "ir/model_info.h"

#include <utility>

namespace zenmoe::ir {

namespace {

const char* kind_name(MetaValue::Kind k) {
  switch (k) {
    case MetaValue::Kind::Int: return "an integer";
    case MetaValue::Kind::Float: return "a float";
    case MetaValue::Kind::Bool: return "a bool";
    case MetaValue::Kind::String: return "a string";
    case MetaValue::Kind::Array: return "an array";
  }
  return "?";
}

}  // namespace

void ModelInfo::set_int(std::string key, int64_t v) {
  MetaValue m;
  m.kind = MetaValue::Kind::Int;
  m.i = v;
  meta[std::move(key)] = m;
}

void ModelInfo::set_float(std::string key, double v) {
  MetaValue m;
  m.kind = MetaValue::Kind::Float;
  m.f = v;
  meta[std::move(key)] = m;
}

void ModelInfo::set_bool(std::string key, bool v) {
  MetaValue m;
  m.kind = MetaValue::Kind::Bool;
  m.b = v;
  meta[std::move(key)] = m;
}

void ModelInfo::set_string(std::string key, std::string v) {
  MetaValue m;
  m.kind = MetaValue::Kind::String;
  m.s = std::move(v);
  meta[std::move(key)] = std::move(m);
}

void ModelInfo::set_array(std::string key, int64_t len) {
  MetaValue m;
  m.kind = MetaValue::Kind::Array;
  m.array_len = len;
  meta[std::move(key)] = m;
}

void ModelInfo::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims) {
  while (dims.size() > 1 && dims.back() == 1) dims.pop_back();
  tensors.push_back(TensorDesc{std::move(name), type, std::move(dims)});
}

const TensorDesc* ModelInfo::find_tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Expected<int64_t> ModelInfo::get_int(std::string_view key) const {
  auto it = meta.find(key);
  if (it == meta.end())
    return Error{source + ": required metadata key '" + std::string(key) + "' is missing"};
  if (it->second.kind != MetaValue::Kind::Int)
    return Error{source + ": metadata key '" + std::string(key) + "' is " +
                 kind_name(it->second.kind) + ", expected an integer"};
  return it->second.i;
}

Expected<double> ModelInfo::get_float(std::string_view key) const {
  auto it = meta.find(key);
  if (it == meta.end())
    return Error{source + ": required metadata key '" + std::string(key) + "' is missing"};
  if (it->second.kind == MetaValue::Kind::Int) return static_cast<double>(it->second.i);
  if (it->second.kind != MetaValue::Kind::Float)
    return Error{source + ": metadata key '" + std::string(key) + "' is " +
                 kind_name(it->second.kind) + ", expected a float"};
  return it->second.f;
}

Expected<std::string> ModelInfo::get_string(std::string_view key) const {
  auto it = meta.find(key);
  if (it == meta.end())
    return Error{source + ": required metadata key '" + std::string(key) + "' is missing"};
  if (it->second.kind != MetaValue::Kind::String)
    return Error{source + ": metadata key '" + std::string(key) + "' is " +
                 kind_name(it->second.kind) + ", expected a string"};
  return it->second.s;
}

Expected<int64_t> ModelInfo::get_int_or(std::string_view key, int64_t def) const {
  return has(key) ? get_int(key) : Expected<int64_t>(def);
}

Expected<double> ModelInfo::get_float_or(std::string_view key, double def) const {
  return has(key) ? get_float(key) : Expected<double>(def);
}

Expected<bool> ModelInfo::get_bool_or(std::string_view key, bool def) const {
  auto it = meta.find(key);
  if (it == meta.end()) return def;
  if (it->second.kind == MetaValue::Kind::Bool) return it->second.b;
  if (it->second.kind == MetaValue::Kind::Int) return it->second.i != 0;
  return Error{source + ": metadata key '" + std::string(key) + "' is " +
               kind_name(it->second.kind) + ", expected a bool"};
}

Expected<std::string> ModelInfo::get_string_or(std::string_view key, std::string def) const {
  return has(key) ? get_string(key) : Expected<std::string>(std::move(def));
}

}  // namespace zenmoe::ir
