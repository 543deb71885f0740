// Plan file: the GGUF table checksum, CPU feature lists, the JSON document and field
// validation, and the compatibility check. Reading and writing files is in plan_file_io.cpp.
#include "runtime/plan_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/pack.h"
#include "runtime/plan_file_internal.h"

namespace zenmoe::plan {
namespace detail {

void put_u32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace detail

namespace {

using json = nlohmann::json;

// Length-prefixed hashing so ("ab","c") and ("a","bc") differ.
struct Hasher {
  uint64_t h = kFnvBasis;
  void u64(uint64_t v) { h = fnv1a(&v, sizeof v, h); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void str(std::string_view s) {
    u64(s.size());
    h = fnv1a(s.data(), s.size(), h);
  }
  void value(const gguf::Value& v) {
    i64(static_cast<int64_t>(v.type));
    i64(v.i);
    u64(v.u);
    f64(v.f);
    str(v.str);
    i64(static_cast<int64_t>(v.array_type));
    u64(v.arr_i.size());
    for (int64_t x : v.arr_i) i64(x);
    u64(v.arr_u.size());
    for (uint64_t x : v.arr_u) u64(x);
    u64(v.arr_f.size());
    for (double x : v.arr_f) f64(x);
    u64(v.arr_str.size());
    for (const auto& s : v.arr_str) str(s);
    u64(v.arr_arr.size());
    for (const auto& a : v.arr_arr) value(a);
  }
};

struct Feature {
  const char* name;
  bool isa::CpuFeatures::*member;
};
// Canonical order of feature lists (the order of isa::CpuFeatures).
constexpr Feature kFeatures[] = {
    {"os_ymm", &isa::CpuFeatures::os_ymm},         {"os_zmm", &isa::CpuFeatures::os_zmm},
    {"sse42", &isa::CpuFeatures::sse42},           {"avx", &isa::CpuFeatures::avx},
    {"avx2", &isa::CpuFeatures::avx2},             {"fma", &isa::CpuFeatures::fma},
    {"f16c", &isa::CpuFeatures::f16c},             {"bmi1", &isa::CpuFeatures::bmi1},
    {"bmi2", &isa::CpuFeatures::bmi2},             {"avx512f", &isa::CpuFeatures::avx512f},
    {"avx512bw", &isa::CpuFeatures::avx512bw},     {"avx512vl", &isa::CpuFeatures::avx512vl},
    {"avx512dq", &isa::CpuFeatures::avx512dq},     {"avx512vnni", &isa::CpuFeatures::avx512vnni},
    {"avx512vbmi", &isa::CpuFeatures::avx512vbmi}, {"avx512bf16", &isa::CpuFeatures::avx512bf16},
    {"gfni", &isa::CpuFeatures::gfni},             {"amx_tile", &isa::CpuFeatures::amx_tile},
    {"amx_bf16", &isa::CpuFeatures::amx_bf16},     {"os_amx", &isa::CpuFeatures::os_amx},
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Whether `item` is one of the comma-separated names of `list`.
bool listed(const std::string& list, std::string_view item) {
  const std::vector<std::string> names = split_commas(list);
  return std::find(names.begin(), names.end(), item) != names.end();
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

uint64_t gguf_table_checksum(const gguf::Model& model) {
  Hasher h;
  const std::string arch = model.metadata().get_string_or("general.architecture", "");
  h.str(arch);
  // The hyperparameters the graph is lowered from live under "<arch>.".
  const std::string prefix = arch + ".";
  for (const auto& [key, v] : model.metadata().entries()) {
    if (arch.empty() || key.compare(0, prefix.size(), prefix) != 0) continue;
    h.str(key);
    h.value(v);
  }
  h.u64(model.files().size());
  for (const auto& f : model.files()) h.u64(f.tensors().size());
  for (const gguf::TensorInfo& t : model.tensors()) {
    h.str(t.name);
    h.i64(static_cast<int64_t>(t.type));
    h.i64(t.n_dims);
    for (int64_t ne : t.ne) h.i64(ne);
    h.u64(t.offset);
    h.u64(t.nbytes);
    h.i64(t.shard);
  }
  return h.h;
}

std::string feature_list(const isa::CpuFeatures& f) {
  std::vector<std::string> names;
  for (const Feature& x : kFeatures)
    if (f.*(x.member)) names.emplace_back(x.name);
  return join(names);
}

std::string required_features(isa::IsaLevel level) {
  // A feature is required when a CPU with everything except it cannot run the level: derived
  // from the ISA model's own rule, so the two never disagree.
  isa::CpuFeatures all;
  for (const Feature& x : kFeatures) all.*(x.member) = true;
  std::vector<std::string> names;
  for (const Feature& x : kFeatures) {
    isa::CpuFeatures without = all;
    without.*(x.member) = false;
    if (!isa::supports(without, level)) names.emplace_back(x.name);
  }
  return join(names);
}

std::string required_features(isa::IsaLevel level, const std::vector<KernelDesc>& kernels) {
  std::string s = required_features(level);
  if (std::any_of(kernels.begin(), kernels.end(), [](const KernelDesc& d) { return d.gfni; }))
    s += s.empty() ? "gfni" : ",gfni";
  return s;
}

bool requires_feature(const PlanHeader& h, std::string_view feature) { return listed(h.cpu_features, feature); }

std::string default_weights_file(const std::string& plan_path) {
  return std::filesystem::path(plan_path).filename().string() + ".weights";
}

namespace detail {

std::string encode_json(const PlanHeader& h) {
  json tensors = json::array();
  for (const PlanTensor& t : h.tensors) {
    tensors.push_back({{"name", t.name},          {"format", static_cast<int32_t>(t.format)},
                       {"row_block", t.row_block}, {"rows", t.rows},
                       {"cols", t.cols},           {"n_mats", t.n_mats},
                       {"kind", t.kind},           {"offset", t.offset},
                       {"nbytes", t.nbytes},       {"mat_stride", t.mat_stride}});
  }
  json doc = {{"target_level", h.target_level}, {"target_tuning", h.target_tuning},
              {"cpu_features", h.cpu_features}, {"n_threads", h.n_threads},
              {"gguf_path", h.gguf_path},       {"gguf_checksum", h.gguf_checksum},
              {"graph", h.graph_text},          {"n_kernels", h.kernels.size()},
              {"tensors", std::move(tensors)},  {"weights_file", h.weights_file},
              {"weights_bytes", h.weights_bytes}};
  return doc.dump();
}

namespace {

// Typed field access with one clear error naming the field.
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  bool ok() const { return err_.empty(); }
  const std::string& error() const { return err_; }

  const json* field(const json& obj, const char* key, const std::string& ctx) {
    auto it = obj.find(key);
    if (it == obj.end()) return fail(ctx + key + " is missing");
    return &*it;
  }
  void str(const json& obj, const char* key, std::string* out, const std::string& ctx = "") {
    const json* v = field(obj, key, ctx);
    if (v == nullptr) return;
    if (!v->is_string()) return void(fail(ctx + key + " is not a string"));
    *out = v->get_ref<const std::string&>();
  }
  void u64(const json& obj, const char* key, uint64_t* out, const std::string& ctx = "") {
    const json* v = field(obj, key, ctx);
    if (v == nullptr) return;
    if (!v->is_number_unsigned()) return void(fail(ctx + key + " is not an unsigned integer"));
    *out = v->get<uint64_t>();
  }
  template <class T>
  void integer(const json& obj, const char* key, T* out, int64_t lo, int64_t hi,
               const std::string& ctx = "") {
    const json* v = field(obj, key, ctx);
    if (v == nullptr) return;
    if (!v->is_number_integer()) return void(fail(ctx + key + " is not an integer"));
    const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi);
    const int64_t x = too_big ? hi : v->get<int64_t>();
    if (too_big || x < lo || x > hi) return void(fail(ctx + key + " = " + v->dump() + " is out of range"));
    *out = static_cast<T>(x);
  }
  std::nullptr_t fail(const std::string& msg) {
    if (err_.empty()) err_ = where_ + ": " + msg;
    return nullptr;
  }

 private:
  std::string where_;
  std::string err_;
};

void decode_tensor(Reader& r, const json& t, size_t i, PlanTensor* out) {
  const std::string ctx = "tensors[" + std::to_string(i) + "].";
  if (!t.is_object()) return void(r.fail(ctx.substr(0, ctx.size() - 1) + " is not an object"));
  r.str(t, "name", &out->name, ctx);
  int32_t format = 0;
  r.integer(t, "format", &format, 0, INT32_MAX, ctx);
  out->format = static_cast<GgmlType>(format);
  r.integer(t, "row_block", &out->row_block, 0, INT32_MAX, ctx);
  r.integer(t, "rows", &out->rows, 0, INT64_MAX, ctx);
  r.integer(t, "cols", &out->cols, 0, INT64_MAX, ctx);
  r.integer(t, "n_mats", &out->n_mats, 0, INT64_MAX, ctx);
  r.integer(t, "kind", &out->kind, 0, UINT32_MAX, ctx);
  r.u64(t, "offset", &out->offset, ctx);
  r.u64(t, "nbytes", &out->nbytes, ctx);
  r.u64(t, "mat_stride", &out->mat_stride, ctx);
}

}  // namespace

Status decode_json(std::string_view text, const std::string& where, PlanHeader* out) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Error{where + ": plan document is not valid JSON"};
  if (!doc.is_object()) return Error{where + ": plan document is not a JSON object"};
  Reader r(where);
  r.str(doc, "target_level", &out->target_level);
  r.str(doc, "target_tuning", &out->target_tuning);
  r.str(doc, "cpu_features", &out->cpu_features);
  r.integer(doc, "n_threads", &out->n_threads, 0, INT32_MAX);
  r.str(doc, "gguf_path", &out->gguf_path);
  r.u64(doc, "gguf_checksum", &out->gguf_checksum);
  r.str(doc, "graph", &out->graph_text);
  uint64_t n_kernels = 0;
  r.u64(doc, "n_kernels", &n_kernels);
  r.str(doc, "weights_file", &out->weights_file);
  r.u64(doc, "weights_bytes", &out->weights_bytes);
  if (const json* t = r.field(doc, "tensors", "")) {
    if (!t->is_array()) return Error{where + ": tensors is not an array"};
    out->tensors.resize(t->size());
    for (size_t i = 0; i < t->size() && r.ok(); ++i) decode_tensor(r, (*t)[i], i, &out->tensors[i]);
  }
  if (!r.ok()) return Error{r.error()};
  // The descriptor table follows the document; its size is checked against this count.
  if (n_kernels > (uint64_t{1} << 24)) return Error{where + ": n_kernels is out of range"};
  out->kernels.resize(static_cast<size_t>(n_kernels));
  return Status::ok();
}

namespace {

Status validate_tensor(const PlanTensor& t, size_t i, const std::string& where) {
  const std::string ctx = where + ": tensor " + std::to_string(i) + " '" + t.name + "': ";
  if (t.name.empty()) return Error{where + ": tensor " + std::to_string(i) + " has no name"};
  if (t.kind != kPackWeights && t.kind != kPackGateUp)
    return Error{ctx + "unknown pack kind " + std::to_string(t.kind)};
  if (t.kind == kPackGateUp && t.rows % 2 != 0)
    return Error{ctx + "gate+up rows must be even (interleaved), got " + std::to_string(t.rows)};
  if (t.n_mats < 1 || t.n_mats > (int64_t{1} << 20))
    return Error{ctx + "matrix count " + std::to_string(t.n_mats) + " is out of range"};
  Expected<PackLayout> L = pack_layout(t.format, t.row_block, t.rows, t.cols);
  if (!L) return Error{ctx + L.error()};
  if (t.mat_stride != 0 &&
      (t.mat_stride < static_cast<uint64_t>(L->total_bytes) || t.mat_stride % 64 != 0))
    return Error{ctx + "matrix stride " + std::to_string(t.mat_stride) +
                 " is not a multiple of 64 holding the packed " + std::to_string(L->total_bytes) +
                 " bytes"};
  if (t.mat_stride > (uint64_t{1} << 40))
    return Error{ctx + "matrix stride " + std::to_string(t.mat_stride) + " is out of range"};
  return Status::ok();
}

}  // namespace

Status validate_fields(const PlanHeader& h, const std::string& where) {
  if (h.version != kPlanVersion)
    return Error{where + ": plan format version " + std::to_string(h.version) + " is not " +
                 std::to_string(kPlanVersion)};
  Expected<isa::IsaLevel> level = isa::parse_level(h.target_level);
  if (!level) return Error{where + ": target level: " + level.error()};
  Expected<isa::Tuning> tuning = isa::parse_tuning(h.target_tuning);
  if (!tuning) return Error{where + ": target tuning: " + tuning.error()};
  for (const std::string& need : split_commas(required_features(*level, h.kernels)))
    if (!listed(h.cpu_features, need))
      return Error{where + ": cpu_features '" + h.cpu_features + "' lack " + need + ", which target " +
                   h.target_level + (need == "gfni" ? "'s GFNI kernels need" : " needs")};
  if (h.n_threads < 1 || h.n_threads > 4096)
    return Error{where + ": thread count " + std::to_string(h.n_threads) + " is not in 1..4096"};
  if (h.gguf_path.empty()) return Error{where + ": no source GGUF path"};
  const std::string& wf = h.weights_file;
  if (wf.empty() || wf == "." || wf == ".." || wf.find('/') != std::string::npos)
    return Error{where + ": weights file name '" + wf + "' is not a plain file name"};
  for (size_t i = 0; i < h.kernels.size(); ++i) {
    Status s = validate(h.kernels[i]);
    if (!s) return Error{where + ": kernel " + std::to_string(i) + ": " + s.message()};
  }
  std::set<std::string_view> names;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    ZENMOE_RETURN_IF_ERROR(validate_tensor(h.tensors[i], i, where));
    if (!names.insert(h.tensors[i].name).second)
      return Error{where + ": tensor name '" + h.tensors[i].name + "' appears twice"};
  }
  return Status::ok();
}

Status validate_placement(const PlanHeader& h, const std::string& where) {
  if (h.weights_bytes < kWeightsAlign)
    return Error{where + ": weights size " + std::to_string(h.weights_bytes) +
                 " is smaller than the side file header"};
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [offset, end)
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const PlanTensor& t = h.tensors[i];
    const std::string ctx = where + ": tensor '" + t.name + "': ";
    uint64_t want = 0, end = 0;
    if (t.mat_stride == 0 || __builtin_mul_overflow(static_cast<uint64_t>(t.n_mats), t.mat_stride, &want) ||
        want != t.nbytes)
      return Error{ctx + std::to_string(t.nbytes) + " bytes is not " + std::to_string(t.n_mats) +
                   " matrices of " + std::to_string(t.mat_stride) + " bytes"};
    if (t.offset < kWeightsAlign || t.offset % kWeightsAlign != 0)
      return Error{ctx + "offset " + std::to_string(t.offset) +
                   " is not a 4096-aligned offset after the side file header"};
    if (__builtin_add_overflow(t.offset, t.nbytes, &end) || end > h.weights_bytes)
      return Error{ctx + "bytes " + std::to_string(t.offset) + "+" + std::to_string(t.nbytes) +
                   " run past the end of the " + std::to_string(h.weights_bytes) + "-byte side file"};
    spans.emplace_back(t.offset, end);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      return Error{where + ": two tensors overlap at side file offset " + std::to_string(spans[i].first)};
  return Status::ok();
}

Status place_tensors(PlanHeader* h, const std::string& where) {
  uint64_t cursor = kWeightsAlign;  // the first page holds the side file header
  for (PlanTensor& t : h->tensors) {
    Expected<PackLayout> L = pack_layout(t.format, t.row_block, t.rows, t.cols);
    if (!L) return Error{where + ": tensor '" + t.name + "': " + L.error()};
    if (t.mat_stride == 0) t.mat_stride = static_cast<uint64_t>(L->total_bytes);
    t.nbytes = static_cast<uint64_t>(t.n_mats) * t.mat_stride;  // both bounded by validate_fields
    t.offset = cursor;
    cursor = (cursor + t.nbytes + kWeightsAlign - 1) / kWeightsAlign * kWeightsAlign;
  }
  h->weights_bytes = cursor;
  return validate_placement(*h, where);
}

}  // namespace detail

namespace {

// The refusals that need no model: another plan version, a CPU feature the host lacks.
Status check_version_and_cpu(const PlanHeader& header, const isa::CpuFeatures& host) {
  if (header.version != kPlanVersion)
    return Error{"plan was made by plan format version " + std::to_string(header.version) +
                 ", this zenmoe reads version " + std::to_string(kPlanVersion) + " — recompile"};
  const std::string have = feature_list(host);
  std::vector<std::string> lacking;
  for (const std::string& need : split_commas(header.cpu_features))
    if (!listed(have, need)) lacking.push_back(need);
  if (!lacking.empty())
    return Error{"plan was compiled for CPU features " + header.cpu_features + "; this CPU lacks " +
                 join(lacking) + " — recompile with --target host"};
  return Status::ok();
}

}  // namespace

Status check_plan_compatible(const PlanHeader& header, const isa::CpuFeatures& host,
                             const gguf::Model* gguf) {
  ZENMOE_RETURN_IF_ERROR(check_version_and_cpu(header, host));
  if (gguf == nullptr) return Error{"GGUF " + header.gguf_path + " used by the plan is missing"};
  if (gguf_table_checksum(*gguf) != header.gguf_checksum)
    return Error{"model file " + header.gguf_path +
                 " changed since the plan was compiled (tensor table checksum differs) — recompile"};
  return Status::ok();
}

Expected<gguf::Model> open_plan_gguf(const PlanHeader& header, const isa::CpuFeatures& host) {
  // Version and CPU first: they need no model and say more than a missing file would.
  ZENMOE_RETURN_IF_ERROR(check_version_and_cpu(header, host));
  std::error_code ec;
  if (!std::filesystem::exists(header.gguf_path, ec))
    return Error{"GGUF " + header.gguf_path + " used by the plan is missing"};
  Expected<gguf::Model> model = gguf::Model::open(header.gguf_path);
  if (!model) return Error{model.error()};
  ZENMOE_RETURN_IF_ERROR(check_plan_compatible(header, host, &*model));
  return model;
}

}  // namespace zenmoe::plan
