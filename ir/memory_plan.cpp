#include "ir/memory_plan.h"

#include <algorithm>

namespace zenmoe::ir {

namespace {

constexpr int64_t kAlign = 64;

}  // namespace

int64_t arena_slot_bytes(const Value& v, int64_t max_tokens) {
  int64_t rows = 1;
  for (size_t i = 1; i < v.shape.size(); ++i) rows *= v.shape[i] == kDimTokens ? max_tokens : v.shape[i];
  const int64_t ne0 = v.shape.empty() ? 1 : (v.shape[0] == kDimTokens ? max_tokens : v.shape[0]);
  const int64_t b = row_bytes(v.type, ne0) * rows;
  return (b + kAlign - 1) / kAlign * kAlign;
}

bool in_arena(const Value& v) { return v.kind == ValueKind::Temp || v.kind == ValueKind::Input; }

namespace {

struct Block {
  int64_t offset, bytes, last_use;
};

// Lowest 64-aligned offset where `bytes` fit between the blocks still live at `now`.
int64_t first_fit(std::vector<Block>& live, int64_t now, int64_t bytes) {
  live.erase(std::remove_if(live.begin(), live.end(), [&](const Block& b) { return b.last_use < now; }),
             live.end());
  std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
  int64_t at = 0;
  for (const Block& b : live) {
    if (b.offset >= at + bytes) break;
    at = std::max(at, b.offset + b.bytes);
  }
  return at;
}

// Per value: the root value whose arena slot it shares, and per root the last node reading any
// value of that slot. Reshapes share their input's slot; a matmul_add writes into its
// accumulator's slot when nothing reads that slot after it (the product accumulates in place).
void alias_slots(const Graph& g, std::vector<int>& root, std::vector<int64_t>& def, std::vector<int64_t>& last) {
  const size_t nv = g.values.size(), nn = g.nodes.size();
  std::vector<int64_t> used(nv, -1);
  for (size_t k = 0; k < nn; ++k)
    for (int in : g.nodes[k].inputs) used[static_cast<size_t>(in)] = static_cast<int64_t>(k);
  for (int out : g.outputs) used[static_cast<size_t>(out)] = static_cast<int64_t>(nn);
  for (size_t i = 0; i < nv; ++i) {
    root[i] = static_cast<int>(i);
    last[i] = used[i];
  }
  for (size_t k = 0; k < nn; ++k) {
    const Node& n = g.nodes[k];
    for (int out : n.outputs) def[static_cast<size_t>(out)] = static_cast<int64_t>(k);
    const auto out = static_cast<size_t>(n.outputs[0]);
    int r = -1;
    if (n.op == OpKind::Reshape) r = root[static_cast<size_t>(n.inputs[0])];
    if (n.op == OpKind::MatMulAdd) {
      const int acc = root[static_cast<size_t>(n.inputs[2])];
      if (in_arena(g.values[static_cast<size_t>(acc)]) && last[static_cast<size_t>(acc)] == static_cast<int64_t>(k))
        r = acc;
    }
    if (r < 0) continue;
    root[out] = r;
    last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], used[out]);
  }
}

}  // namespace

Expected<MemoryPlan> plan_memory(const Graph& g, int64_t max_tokens) {
  if (max_tokens < 1) return Error{"memory plan: max_tokens must be at least 1"};
  const size_t nv = g.values.size();
  std::vector<int> root(nv);
  std::vector<int64_t> def(nv, -1), last(nv, -1);
  alias_slots(g, root, def, last);
  MemoryPlan p;
  p.max_tokens = max_tokens;
  p.offset.assign(nv, -1);
  p.bytes.assign(nv, 0);
  std::vector<Block> live;
  for (size_t i = 0; i < nv; ++i) {  // inputs first: they are live from the start
    const Value& v = g.values[i];
    if (!in_arena(v)) continue;
    for (int64_t d : v.shape)
      if (d == kDimContext) return Error{"memory plan: value '" + v.name + "' has a context dimension"};
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < nv; ++i)
    if (in_arena(g.values[i]) && root[i] == static_cast<int>(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return def[a] < def[b]; });
  for (size_t i : order) {
    const int64_t bytes = arena_slot_bytes(g.values[i], max_tokens);
    p.naive_bytes += bytes;
    const int64_t at = first_fit(live, def[i], bytes);
    live.push_back(Block{at, bytes, std::max(last[i], def[i])});
    p.offset[i] = at;
    p.bytes[i] = bytes;
    p.arena_bytes = std::max(p.arena_bytes, at + bytes);
  }
  for (size_t i = 0; i < nv; ++i)
    if (in_arena(g.values[i]) && root[i] != static_cast<int>(i)) {
      p.offset[i] = p.offset[static_cast<size_t>(root[i])];
      p.bytes[i] = p.bytes[static_cast<size_t>(root[i])];
    }
  return p;
}

}  // namespace zenmoe::ir
