#include "ir/memplan.h"

#include <algorithm>
#include <string>

namespace zenmoe::ir {

namespace {

std::string output_key(size_t k) { return k == 0 ? "arena" : "arena" + std::to_string(k); }
std::string input_key(const Value& v) { return "arena." + v.name; }

bool is_arena_key(const std::string& k) { return k == "max_tokens" || k.rfind("arena", 0) == 0; }

void strip(std::vector<Attr>& attrs) {
  attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [](const Attr& a) { return is_arena_key(a.key); }),
              attrs.end());
}

const AttrValue* find(const std::vector<Attr>& attrs, const std::string& key) {
  for (const Attr& a : attrs)
    if (a.key == key) return &a.value;
  return nullptr;
}

// Offset of value `id` from `attrs`, checked against the arena; -1 after setting `err`.
int64_t read_offset(const Graph& g, const std::vector<Attr>& attrs, const std::string& key, int id,
                    const MemoryPlan& p, std::string& err) {
  const Value& v = g.values[static_cast<size_t>(id)];
  const AttrValue* a = find(attrs, key);
  const int64_t at = a && std::holds_alternative<int64_t>(*a) ? std::get<int64_t>(*a) : -1;
  const int64_t bytes = arena_slot_bytes(v, p.max_tokens);
  if (at < 0 || at % 64 != 0 || at > p.arena_bytes || bytes > p.arena_bytes - at) {
    err = "memory plan: value %" + v.name + " has no valid arena offset ('" + key + "') in an arena of " +
          std::to_string(p.arena_bytes) + " bytes";
    return -1;
  }
  return at;
}

}  // namespace

Status plan_memory_pass(Graph& g, const PipelineOptions& opt) {
  if (opt.max_tokens <= 0) return Status::ok();
  auto p = plan_memory(g, opt.max_tokens);
  if (!p) return Error{p.error()};
  strip(g.attrs);
  g.attrs.push_back({"max_tokens", opt.max_tokens});
  g.attrs.push_back({"arena_bytes", p->arena_bytes});
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].kind == ValueKind::Input) g.attrs.push_back({input_key(g.values[i]), p->offset[i]});
  for (Node& n : g.nodes) {
    strip(n.attrs);
    for (size_t k = 0; k < n.outputs.size(); ++k)
      n.attrs.push_back({output_key(k), p->offset[static_cast<size_t>(n.outputs[k])]});
  }
  return Status::ok();
}

Expected<std::optional<MemoryPlan>> recorded_memory_plan(const Graph& g, int64_t max_tokens) {
  MemoryPlan p;
  p.max_tokens = g.attr_int("max_tokens", 0);
  p.arena_bytes = g.attr_int("arena_bytes", -1);
  if (p.max_tokens <= 0 || p.max_tokens < max_tokens) return std::optional<MemoryPlan>();
  if (p.arena_bytes < 0 || p.arena_bytes > (int64_t{1} << 40) || p.max_tokens > (int64_t{1} << 20))
    return Error{"memory plan: recorded arena of " + std::to_string(p.arena_bytes) + " bytes for " +
                 std::to_string(p.max_tokens) + " tokens is out of range"};
  p.offset.assign(g.values.size(), -1);
  p.bytes.assign(g.values.size(), 0);
  std::string err;
  auto place = [&](const std::vector<Attr>& attrs, const std::string& key, int id) {
    const int64_t at = read_offset(g, attrs, key, id, p, err);
    p.offset[static_cast<size_t>(id)] = at;
    p.bytes[static_cast<size_t>(id)] = arena_slot_bytes(g.values[static_cast<size_t>(id)], p.max_tokens);
    p.naive_bytes += p.bytes[static_cast<size_t>(id)];
    return at >= 0;
  };
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].kind == ValueKind::Input && !place(g.attrs, input_key(g.values[i]), static_cast<int>(i)))
      return Error{err};
  for (const Node& n : g.nodes)
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!place(n.attrs, output_key(k), n.outputs[k])) return Error{err};
  return std::optional<MemoryPlan>(std::move(p));
}

}  // namespace zenmoe::ir
