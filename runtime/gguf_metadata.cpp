// GGUF metadata values and the typed accessors.
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/gguf.h"

namespace zenmoe::gguf {
namespace {

bool is_signed_int(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool is_unsigned_int(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

// Floats compare by bit pattern of the stored width (an F32 value is the float it will be
// written as), so NaNs and signed zeros round-trip exactly as they were written.
bool same_bits(ValueType t, double a, double b) {
  if (t == ValueType::F32) {
    const float fa = static_cast<float>(a), fb = static_cast<float>(b);
    return std::memcmp(&fa, &fb, sizeof fa) == 0;
  }
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool same_float_vectors(ValueType t, const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!same_bits(t, a[k], b[k])) return false;
  return true;
}

std::string describe(const Value& v) {
  std::string s = value_type_name(v.type);
  if (v.type == ValueType::ARRAY) s += std::string(" of ") + value_type_name(v.array_type);
  return s;
}

Error missing(std::string_view key) {
  return Error{"metadata key '" + std::string(key) + "' is missing"};
}

Error wrong_type(std::string_view key, const Value& v, const char* wanted) {
  return Error{"metadata key '" + std::string(key) + "' is " + describe(v) + ", expected " +
               wanted};
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

static Value scalar_u(ValueType t, uint64_t v) {
  Value r;
  r.type = t;
  r.u = v;
  return r;
}
static Value scalar_i(ValueType t, int64_t v) {
  Value r;
  r.type = t;
  r.i = v;
  return r;
}

Value Value::u8(uint8_t v) { return scalar_u(ValueType::U8, v); }
Value Value::i8(int8_t v) { return scalar_i(ValueType::I8, v); }
Value Value::u16(uint16_t v) { return scalar_u(ValueType::U16, v); }
Value Value::i16(int16_t v) { return scalar_i(ValueType::I16, v); }
Value Value::u32(uint32_t v) { return scalar_u(ValueType::U32, v); }
Value Value::i32(int32_t v) { return scalar_i(ValueType::I32, v); }
Value Value::u64(uint64_t v) { return scalar_u(ValueType::U64, v); }
Value Value::i64(int64_t v) { return scalar_i(ValueType::I64, v); }
Value Value::boolean(bool v) { return scalar_u(ValueType::BOOL, v ? 1 : 0); }

Value Value::f32(float v) {
  Value r;
  r.type = ValueType::F32;
  r.f = v;
  return r;
}
Value Value::f64(double v) {
  Value r;
  r.type = ValueType::F64;
  r.f = v;
  return r;
}
Value Value::string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.str = std::move(v);
  return r;
}
Value Value::array_of_strings(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = ValueType::STRING;
  r.arr_str = std::move(v);
  return r;
}
Value Value::array_of_ints(ValueType elem, std::vector<int64_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.arr_i = std::move(v);
  return r;
}
Value Value::array_of_uints(ValueType elem, std::vector<uint64_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.arr_u = std::move(v);
  return r;
}
Value Value::array_of_floats(ValueType elem, std::vector<double> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.arr_f = std::move(v);
  return r;
}

Value Value::array_of_arrays(std::vector<Value> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = ValueType::ARRAY;
  r.arr_arr = std::move(v);
  return r;
}

size_t Value::array_size() const {
  if (type != ValueType::ARRAY) return 0;
  if (array_type == ValueType::ARRAY) return arr_arr.size();
  if (array_type == ValueType::STRING) return arr_str.size();
  if (is_signed_int(array_type)) return arr_i.size();
  if (is_float(array_type)) return arr_f.size();
  return arr_u.size();  // unsigned integers and bool
}

bool Value::operator==(const Value& o) const {
  if (type != o.type) return false;
  if (is_signed_int(type)) return i == o.i;
  if (is_unsigned_int(type) || type == ValueType::BOOL) return u == o.u;
  if (is_float(type)) return same_bits(type, f, o.f);
  if (type == ValueType::STRING) return str == o.str;
  if (type != ValueType::ARRAY) return false;  // not a valid type id
  if (array_type != o.array_type) return false;
  if (array_type == ValueType::STRING) return arr_str == o.arr_str;
  if (array_type == ValueType::ARRAY) return arr_arr == o.arr_arr;
  if (is_signed_int(array_type)) return arr_i == o.arr_i;
  if (is_float(array_type)) return same_float_vectors(array_type, arr_f, o.arr_f);
  return arr_u == o.arr_u;
}

void Metadata::set(std::string key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    kv_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, kv_.size());
  kv_.emplace_back(std::move(key), std::move(v));
}

bool Metadata::has(std::string_view key) const { return find(key) != nullptr; }

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &kv_[it->second].second;
}

Expected<uint64_t> Metadata::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (is_unsigned_int(v->type)) return v->u;
  if (is_signed_int(v->type)) {
    if (v->i < 0)
      return Error{"metadata key '" + std::string(key) + "' = " + std::to_string(v->i) +
                   " is negative, expected an unsigned integer"};
    return static_cast<uint64_t>(v->i);
  }
  return wrong_type(key, *v, "an unsigned integer");
}

Expected<int64_t> Metadata::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (is_signed_int(v->type)) return v->i;
  if (is_unsigned_int(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error{"metadata key '" + std::string(key) + "' = " + std::to_string(v->u) +
                   " does not fit a signed 64-bit integer"};
    return static_cast<int64_t>(v->u);
  }
  return wrong_type(key, *v, "an integer");
}

Expected<double> Metadata::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (is_float(v->type)) return v->f;
  // Integers are exact enough for hyper-parameters some converters store as ints.
  if (is_signed_int(v->type)) return static_cast<double>(v->i);
  if (is_unsigned_int(v->type)) return static_cast<double>(v->u);
  return wrong_type(key, *v, "a float");
}

Expected<bool> Metadata::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::BOOL) return wrong_type(key, *v, "bool");
  return v->u != 0;
}

Expected<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::STRING) return wrong_type(key, *v, "string");
  return v->str;
}

Expected<std::vector<std::string>> Metadata::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY || v->array_type != ValueType::STRING)
    return wrong_type(key, *v, "array of string");
  return v->arr_str;
}

Expected<std::vector<int64_t>> Metadata::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY) return wrong_type(key, *v, "array of integers");
  if (is_signed_int(v->array_type)) return v->arr_i;
  if (!is_unsigned_int(v->array_type)) return wrong_type(key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->arr_u.size());
  for (size_t k = 0; k < v->arr_u.size(); ++k) {
    if (v->arr_u[k] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error{"metadata key '" + std::string(key) + "' element " + std::to_string(k) +
                   " = " + std::to_string(v->arr_u[k]) + " does not fit a signed 64-bit integer"};
    out.push_back(static_cast<int64_t>(v->arr_u[k]));
  }
  return out;
}

Expected<std::vector<double>> Metadata::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::ARRAY) return wrong_type(key, *v, "array of floats");
  if (is_float(v->array_type)) return v->arr_f;
  std::vector<double> out;
  if (is_signed_int(v->array_type)) {
    out.assign(v->arr_i.begin(), v->arr_i.end());
    return out;
  }
  if (is_unsigned_int(v->array_type)) {
    out.assign(v->arr_u.begin(), v->arr_u.end());
    return out;
  }
  return wrong_type(key, *v, "array of floats");
}

uint64_t Metadata::get_uint_or(std::string_view key, uint64_t def) const {
  auto r = get_uint(key);
  return r ? *r : def;
}
double Metadata::get_float_or(std::string_view key, double def) const {
  auto r = get_float(key);
  return r ? *r : def;
}
bool Metadata::get_bool_or(std::string_view key, bool def) const {
  auto r = get_bool(key);
  return r ? *r : def;
}
std::string Metadata::get_string_or(std::string_view key, std::string def) const {
  auto r = get_string(key);
  return r ? std::move(*r) : std::move(def);
}

}  // namespace zenmoe::gguf
