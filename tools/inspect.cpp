#include "tools/inspect.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>

#include "tools/model_stats.h"

namespace zenmoe::tools {
namespace {

using json = nlohmann::ordered_json;
using gguf::Value;
using gguf::ValueType;

bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

json scalar_json(const Value& v) {
  if (v.type == ValueType::STRING) return v.str;
  if (v.type == ValueType::BOOL) return v.u != 0;
  if (is_float(v.type)) return v.f;
  if (is_signed(v.type)) return v.i;
  return v.u;
}

json array_values(const Value& v, size_t limit) {
  json out = json::array();
  const size_t n = std::min(v.array_size(), limit);
  for (size_t k = 0; k < n; ++k) {
    const ValueType t = v.array_type;
    if (t == ValueType::ARRAY) out.push_back(array_values(v.arr_arr[k], limit));
    else if (t == ValueType::STRING) out.push_back(v.arr_str[k]);
    else if (t == ValueType::BOOL) out.push_back(v.arr_u[k] != 0);
    else if (is_float(t)) out.push_back(v.arr_f[k]);
    else if (is_signed(t)) out.push_back(v.arr_i[k]);
    else out.push_back(v.arr_u[k]);
  }
  return out;
}

json value_json(const Value& v) {
  json j;
  j["type"] = gguf::value_type_name(v.type);
  if (v.type != ValueType::ARRAY) {
    j["value"] = scalar_json(v);
    return j;
  }
  j["element_type"] = gguf::value_type_name(v.array_type);
  j["length"] = v.array_size();
  j["values"] = array_values(v, kInspectArrayValues);
  j["truncated"] = v.array_size() > kInspectArrayValues;
  return j;
}

json shape_json(const gguf::TensorInfo& t) {
  json s = json::array();
  for (int k = 0; k < std::max(1, t.n_dims); ++k) s.push_back(t.ne[k]);
  return s;
}

json role_json(const RoleTotals& r) {
  return json{{"tensors", r.tensors}, {"params", r.params}, {"bytes", r.bytes},
              {"active_params", r.active_params}, {"active_bytes", r.active_bytes}};
}

json stats_json(const ModelStats& st) {
  json roles = json::object();
  for (int k = 0; k < kWeightRoleCount; ++k)
    if (st.by_role[k].tensors) roles[role_name(static_cast<WeightRole>(k))] = role_json(st.by_role[k]);
  return json{{"is_moe", st.is_moe()},
              {"expert_count", st.n_expert},
              {"expert_used_count", st.n_expert_used},
              {"total_params", st.total_params},
              {"active_params_per_token", st.active_params},
              {"weight_bytes", st.total_bytes},
              {"bytes_per_token", st.active_bytes},
              {"tied_output", st.tied_output},
              {"by_role", roles}};
}

json files_json(const gguf::Model& m) {
  json files = json::array();
  for (const auto& f : m.files()) {
    size_t n = 0;
    for (const auto& t : m.tensors()) n += &m.files()[t.shard] == &f;
    files.push_back({{"path", f.path()}, {"version", f.version()}, {"alignment", f.alignment()},
                     {"data_offset", f.data_offset()}, {"size", f.size()},
                     {"metadata_keys", f.metadata().entries().size()}, {"tensors", n}});
  }
  return files;
}

json totals_json(const gguf::Model& m) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // name -> (count, bytes)
  uint64_t bytes = 0, params = 0;
  for (const auto& t : m.tensors()) {
    auto& e = by_type[type_name(t.type)];
    ++e.first;
    e.second += t.nbytes;
    bytes += t.nbytes;
    params += static_cast<uint64_t>(t.n_elements());
  }
  json types = json::object();
  for (const auto& [name, e] : by_type) types[name] = {{"count", e.first}, {"bytes", e.second}};
  return json{{"tensors", m.tensors().size()}, {"params", params}, {"bytes", bytes},
              {"file_bytes", m.total_bytes()}, {"by_type", types}};
}

}  // namespace

Expected<json> inspect_json(const gguf::Model& m) {
  json j;
  j["files"] = files_json(m);
  j["split"] = {{"count", m.shard_count()},
                {"split_keys", m.metadata().has("split.count")}};
  json meta = json::object();
  for (const auto& [k, v] : m.metadata().entries()) meta[k] = value_json(v);
  j["metadata"] = meta;
  json tensors = json::array();
  for (const auto& t : m.tensors())
    tensors.push_back({{"name", t.name}, {"type", type_name(t.type)}, {"shape", shape_json(t)},
                       {"bytes", t.nbytes}, {"offset", t.offset}, {"shard", t.shard},
                       {"role", role_name(classify_tensor(t.name))}});
  j["tensors"] = tensors;
  j["totals"] = totals_json(m);
  auto st = compute_stats(m);
  if (!st) return Error{m.files().front().path() + ": " + st.error()};
  j["moe"] = stats_json(*st);
  return j;
}

}  // namespace zenmoe::tools
