// The human-readable `zenmoe inspect` report, rendered from the JSON report so both always
// say the same thing.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "tools/inspect.h"

namespace zenmoe::tools {
namespace {

using json = nlohmann::ordered_json;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string mb(uint64_t bytes) { return fmt("%.2f MB", static_cast<double>(bytes) / 1e6); }
std::string millions(uint64_t n) { return fmt("%.3f M", static_cast<double>(n) / 1e6); }

std::string in_quotes(const std::string& s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('"');
  q.append(s);
  q.push_back('"');
  return q;
}

// One value on one line: strings quoted and cut, arrays as type[length] plus a few values.
std::string value_text(const json& v) {
  const size_t kMax = 80;
  if (v["type"] == "array") {
    std::string s = "[";
    size_t shown = 0;
    for (const auto& e : v["values"]) {
      const std::string one = e.is_string() ? in_quotes(e.get<std::string>()) : e.dump();
      if (s.size() + one.size() > kMax) break;
      if (shown++) s += ", ";
      s += one;
    }
    if (shown < v["length"].get<size_t>()) s += shown ? ", ..." : "...";
    return v["element_type"].get<std::string>() + "[" + v["length"].dump() + "] " + s + "]";
  }
  const json& x = v["value"];
  if (x.is_string()) {
    std::string s = x.get<std::string>();
    for (char& c : s)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (s.size() > kMax) s.replace(kMax, std::string::npos, "...");
    return in_quotes(s);
  }
  return x.dump();
}

std::string shape_text(const json& shape) {
  std::string s = "{";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + shape[k].dump();
  return s + "}";
}

void files_section(const json& j, std::string& out) {
  for (const auto& f : j["files"])
    out += fmt("file      %s  GGUF v%u, %s, %zu keys, %zu tensors, alignment %u, data at %" PRIu64 "\n",
               f["path"].get<std::string>().c_str(), f["version"].get<unsigned>(),
               mb(f["size"].get<uint64_t>()).c_str(), f["metadata_keys"].get<size_t>(),
               f["tensors"].get<size_t>(), f["alignment"].get<unsigned>(),
               f["data_offset"].get<uint64_t>());
  const int parts = j["split"]["count"].get<int>();
  out += parts > 1 ? fmt("split     %d parts presented as one model\n", parts)
                   : std::string("split     single file\n");
}

void metadata_section(const json& j, std::string& out) {
  out += fmt("\nmetadata (%zu keys)\n", j["metadata"].size());
  for (const auto& [k, v] : j["metadata"].items())
    out += fmt("  %-48s %-7s %s\n", k.c_str(),
               v["type"] == "array" ? "array" : v["type"].get<std::string>().c_str(),
               value_text(v).c_str());
}

void tensor_section(const json& j, std::string& out) {
  out += fmt("\ntensors (%zu)\n  %-36s %-6s %-22s %14s  %s\n", j["tensors"].size(), "name", "type",
             "shape", "bytes", "role");
  for (const auto& t : j["tensors"])
    out += fmt("  %-36s %-6s %-22s %14" PRIu64 "  %s\n", t["name"].get<std::string>().c_str(),
               t["type"].get<std::string>().c_str(), shape_text(t["shape"]).c_str(),
               t["bytes"].get<uint64_t>(), t["role"].get<std::string>().c_str());
}

void totals_section(const json& j, std::string& out) {
  const json& tot = j["totals"];
  out += fmt("\ntotals    %zu tensors, %s parameters, %s of tensor data, %s on disk\n",
             tot["tensors"].get<size_t>(), millions(tot["params"].get<uint64_t>()).c_str(),
             mb(tot["bytes"].get<uint64_t>()).c_str(), mb(tot["file_bytes"].get<uint64_t>()).c_str());
  for (const auto& [name, e] : tot["by_type"].items())
    out += fmt("  %-6s %4zu tensors  %s\n", name.c_str(), e["count"].get<size_t>(),
               mb(e["bytes"].get<uint64_t>()).c_str());
}

void moe_section(const json& j, std::string& out) {
  const json& m = j["moe"];
  if (m["is_moe"].get<bool>())
    out += fmt("\nMoE       %" PRId64 " experts, %" PRId64 " used per token\n",
               m["expert_count"].get<int64_t>(), m["expert_used_count"].get<int64_t>());
  else
    out += "\ndense model (no expert_count)\n";
  out += fmt("parameters: %s total, %s active per token\n",
             millions(m["total_params"].get<uint64_t>()).c_str(),
             millions(m["active_params_per_token"].get<uint64_t>()).c_str());
  out += fmt("weight bytes read per decoded token: %s (%" PRIu64 " bytes)\n",
             mb(m["bytes_per_token"].get<uint64_t>()).c_str(), m["bytes_per_token"].get<uint64_t>());
  out += fmt("  %-16s %12s %14s %16s\n", "role", "params", "bytes", "read per token");
  for (const auto& [role, r] : m["by_role"].items())
    out += fmt("  %-16s %12s %14s %16s\n", role.c_str(), millions(r["params"].get<uint64_t>()).c_str(),
               mb(r["bytes"].get<uint64_t>()).c_str(), mb(r["active_bytes"].get<uint64_t>()).c_str());
}

}  // namespace

Expected<std::string> inspect_text(const gguf::Model& model) {
  auto j = inspect_json(model);
  if (!j) return Error{j.error()};
  std::string out;
  files_section(*j, out);
  metadata_section(*j, out);
  tensor_section(*j, out);
  totals_section(*j, out);
  moe_section(*j, out);
  return out;
}

}  // namespace zenmoe::tools
