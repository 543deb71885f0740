#include "runtime/ref_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/verifier.h"
#include "runtime/ref_executor_model.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

Status check_eval_tokens(std::span<const int32_t> tokens, int n_past, int n_ctx, int64_t n_rows) {
  if (tokens.empty()) return Error{"eval: no tokens given"};
  if (static_cast<int64_t>(n_past) + static_cast<int64_t>(tokens.size()) > n_ctx)
    return Error{"eval: context limit exceeded: " + std::to_string(n_past) + " positions held + " +
                 std::to_string(tokens.size()) + " new > context size " + std::to_string(n_ctx)};
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_rows)
      return Error{"eval: token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                   " is outside the vocabulary (0.." + std::to_string(n_rows - 1) + ")"};
  return Status::ok();
}

Status check_eval_seqs(const Executor& ex, std::span<const int32_t> tokens, std::span<const int> seqs, int64_t n_rows) {
  if (tokens.empty()) return Error{"eval: no tokens given"};
  if (tokens.size() != seqs.size())
    return Error{"eval: " + std::to_string(tokens.size()) + " tokens for " + std::to_string(seqs.size()) +
                 " sequences"};
  std::vector<bool> seen(static_cast<size_t>(ex.n_seq()), false);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int s = seqs[i];
    if (s < 0 || s >= ex.n_seq())
      return Error{"eval: sequence " + std::to_string(s) + " outside 0.." + std::to_string(ex.n_seq() - 1)};
    if (seen[static_cast<size_t>(s)]) return Error{"eval: sequence " + std::to_string(s) + " given twice"};
    seen[static_cast<size_t>(s)] = true;
    const Status st = check_eval_tokens(tokens.subspan(i, 1), ex.seq_past(s), ex.n_ctx(), n_rows);
    if (!st) return Error{st.message() + " (sequence " + std::to_string(s) + ")"};
  }
  return Status::ok();
}

Status Executor::select_seq(int s) {
  if (s < 0 || s >= n_seq())
    return Error{"sequence " + std::to_string(s) + " outside 0.." + std::to_string(n_seq() - 1)};
  return Status::ok();
}

Status check_copy_seq(const Executor& ex, int src, int dst, int n) {
  if (src < 0 || src >= ex.n_seq() || dst < 0 || dst >= ex.n_seq())
    return Error{"copy of sequence " + std::to_string(src) + " to " + std::to_string(dst) + ": sequences are 0.." +
                 std::to_string(ex.n_seq() - 1)};
  if (n < 0 || n > ex.seq_past(src))
    return Error{"copy of " + std::to_string(n) + " positions: sequence " + std::to_string(src) + " holds " +
                 std::to_string(ex.seq_past(src))};
  return Status::ok();
}

// One sequence, or a copy onto itself: its first n positions kept.
Status Executor::copy_seq(int src, int dst, int n) {
  ZENMOE_RETURN_IF_ERROR(check_copy_seq(*this, src, dst, n));
  if (src != dst) return Error{"this engine cannot copy one sequence into another"};
  const int selected = selected_seq();
  ZENMOE_RETURN_IF_ERROR(select_seq(dst));
  ZENMOE_RETURN_IF_ERROR(rewind(n));
  return select_seq(selected);
}

Status Executor::eval_seqs(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits) {
  ZENMOE_RETURN_IF_ERROR(check_eval_seqs(*this, tokens, seqs, n_vocab()));
  return eval_seqs_in_turn(tokens, seqs, logits);
}

Status Executor::eval_seqs_in_turn(std::span<const int32_t> tokens, std::span<const int> seqs, float* logits) {
  const int selected = selected_seq();
  for (size_t i = 0; i < tokens.size(); ++i) {
    ZENMOE_RETURN_IF_ERROR(select_seq(seqs[i]));
    ZENMOE_RETURN_IF_ERROR(eval(tokens.subspan(i, 1), logits + i * static_cast<size_t>(n_vocab()), false));
  }
  return select_seq(selected);
}

std::string profile_key(const ir::Graph& g, const ir::Node& n, ProfileBy by) {
  std::string key = ir::op_name(n.op);
  if (by == ProfileBy::kOpKind || n.outputs.empty()) return key;
  std::string_view name = g.values[static_cast<size_t>(n.outputs[0])].name;
  if (name.starts_with("blk.")) {
    const size_t dot = name.find('.', 4);
    if (dot != std::string_view::npos && dot > 4 &&
        name.substr(4, dot - 4).find_first_not_of("0123456789") == std::string_view::npos)
      name.remove_prefix(dot + 1);
  }
  return key + ":" + std::string(name);
}

std::vector<std::pair<std::string, double>> sum_by_profile_key(const ir::Graph& g,
                                                                std::span<const ir::Node* const> nodes,
                                                                std::span<const double> seconds, ProfileBy by) {
  std::map<std::string, double> sums;
  for (size_t i = 0; i < nodes.size() && i < seconds.size(); ++i)
    if (seconds[i] > 0) sums[profile_key(g, *nodes[i], by)] += seconds[i];
  std::vector<std::pair<std::string, double>> out(sums.begin(), sums.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::vector<KvCacheRows> refexec::kv_cache_rows(const ir::Graph& g, std::span<Tensor> tensors) {
  std::vector<KvCacheRows> rows;
  for (size_t i = 0; i < g.values.size() && i < tensors.size(); ++i) {
    if (g.values[i].kind != ir::ValueKind::State) continue;
    const Tensor& t = tensors[i];
    int64_t per = t.row_size();
    int64_t elems = t.ne.empty() ? 1 : t.ne[0];
    for (size_t d = 1; d + 1 < t.ne.size(); ++d) {  // the position is the last dimension
      per *= t.ne[d];
      elems *= t.ne[d];
    }
    rows.push_back(KvCacheRows{g.values[i].name, t.type, elems, per, t.data});
  }
  return rows;
}

namespace {

using refexec::Tensor;

int64_t resolve(int64_t d, int64_t n_tokens, int64_t n_ctx) {
  return d == ir::kDimTokens ? n_tokens : d == ir::kDimContext ? n_ctx : d;
}

int64_t value_bytes(GgmlType type, const std::vector<int64_t>& ne) {
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  return ne.empty() ? row_bytes(type, 1) : row_bytes(type, ne[0]) * rows;
}

class RefExecutor final : public Executor {
 public:
  static Expected<std::unique_ptr<Executor>> create(ir::Graph g, const WeightTable& weights,
                                                    const ExecutorOptions& opts);
  int n_vocab() const override { return n_vocab_; }
  int n_ctx() const override { return n_ctx_; }
  int n_past() const override { return n_past_; }
  Status eval(std::span<const int32_t> tokens, float* logits, bool all_logits) override;
  void reset() override { n_past_ = 0; }
  std::vector<KvCacheRows> kv_caches() override { return refexec::kv_cache_rows(g_, tensors_); }
  Status rewind(int n) override {
    if (n < 0 || n > n_past_)
      return Error{"rewind to " + std::to_string(n) + " positions: the sequence holds " + std::to_string(n_past_)};
    n_past_ = n;
    return Status::ok();
  }
  Status restore(int n) override {
    if (n < 0 || n > n_ctx_)
      return Error{"restore of " + std::to_string(n) + " positions: the context holds " + std::to_string(n_ctx_)};
    n_past_ = n;
    return Status::ok();
  }
  std::vector<std::pair<std::string, double>> profile() const override;

 private:
  RefExecutor() = default;
  Status bind(const WeightTable& weights);
  void size_temps(int64_t n_tokens);

  ir::Graph g_;
  std::vector<Tensor> tensors_;                 // one per value
  std::vector<std::vector<uint8_t>> storage_;   // owned bytes of inputs, states and temps
  int tokens_ = -1, positions_ = -1, logits_ = -1;
  int n_vocab_ = 0, n_ctx_ = 0, n_past_ = 0;
  int64_t n_rows_embd_ = 0;
  bool profile_ = false;
  ProfileBy profile_by_ = ProfileBy::kOpKind;
  std::vector<double> node_seconds_;  // per node of g_ when profiling
};

std::vector<std::pair<std::string, double>> RefExecutor::profile() const {
  std::vector<const ir::Node*> nodes;
  for (const ir::Node& n : g_.nodes) nodes.push_back(&n);
  return sum_by_profile_key(g_, nodes, node_seconds_, profile_by_);
}

Status RefExecutor::bind(const WeightTable& weights) {
  const size_t nv = g_.values.size();
  tensors_.assign(nv, Tensor{});
  storage_.assign(nv, {});
  for (size_t i = 0; i < nv; ++i) {
    const ir::Value& v = g_.values[i];
    Tensor& t = tensors_[i];
    t.type = v.type;
    for (int64_t d : v.shape) t.ne.push_back(resolve(d, 0, n_ctx_));
    if (v.kind == ir::ValueKind::Weight) {
      auto it = weights.find(v.name);
      if (it == weights.end()) return Error{"reference executor: no data for weight '" + v.name + "'"};
      const int64_t want = value_bytes(v.type, t.ne);
      if (it->second.data == nullptr || it->second.nbytes != static_cast<uint64_t>(want))
        return Error{"reference executor: weight '" + v.name + "' has " +
                     std::to_string(it->second.nbytes) + " bytes, expected " + std::to_string(want)};
      t.cdata = static_cast<const uint8_t*>(it->second.data);
    } else if (v.kind == ir::ValueKind::State) {
      storage_[i].assign(static_cast<size_t>(value_bytes(v.type, t.ne)), 0);
      t.data = storage_[i].data();
      t.cdata = t.data;
    }
  }
  return Status::ok();
}

Expected<std::unique_ptr<Executor>> RefExecutor::create(ir::Graph g, const WeightTable& weights,
                                                        const ExecutorOptions& opts) {
  ZENMOE_RETURN_IF_ERROR(ir::verify(g));
  if (opts.n_ctx < 1) return Error{"reference executor: context size must be at least 1"};
  std::unique_ptr<RefExecutor> ex(new RefExecutor());
  ex->g_ = std::move(g);
  ex->n_ctx_ = opts.n_ctx;
  ex->profile_ = opts.profile;
  ex->profile_by_ = opts.profile_by;
  ex->tokens_ = ex->g_.find("tokens");
  ex->positions_ = ex->g_.find("positions");
  if (ex->tokens_ < 0 || ex->positions_ < 0 || ex->g_.outputs.size() != 1)
    return Error{"reference executor: the graph needs inputs 'tokens', 'positions' and one output"};
  ex->logits_ = ex->g_.outputs[0];
  const ir::Value& lv = ex->g_.values[static_cast<size_t>(ex->logits_)];
  if (lv.type != GgmlType::F32 || lv.shape.size() != 2 || lv.shape[1] != ir::kDimTokens)
    return Error{"reference executor: the graph output must be f32 [n_vocab, T]"};
  ex->n_vocab_ = static_cast<int>(lv.shape[0]);
  for (const ir::Node& n : ex->g_.nodes)
    if (n.op == ir::OpKind::Embed) ex->n_rows_embd_ = ex->g_.values[static_cast<size_t>(n.inputs[0])].shape[1];
  ZENMOE_RETURN_IF_ERROR(ex->bind(weights));
  return std::unique_ptr<Executor>(std::move(ex));
}

void RefExecutor::size_temps(int64_t n_tokens) {
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const ir::Value& v = g_.values[i];
    if (v.kind != ir::ValueKind::Temp && v.kind != ir::ValueKind::Input) continue;
    Tensor& t = tensors_[i];
    t.ne.clear();
    for (int64_t d : v.shape) t.ne.push_back(resolve(d, n_tokens, n_ctx_));
    storage_[i].resize(static_cast<size_t>(value_bytes(v.type, t.ne)));
    t.data = storage_[i].data();
    t.cdata = t.data;
  }
}

Status RefExecutor::eval(std::span<const int32_t> tokens, float* logits, bool all_logits) {
  ZENMOE_RETURN_IF_ERROR(check_eval_tokens(tokens, n_past_, n_ctx_, n_rows_embd_));
  const int64_t T = static_cast<int64_t>(tokens.size());
  size_temps(T);
  std::memcpy(tensors_[static_cast<size_t>(tokens_)].data, tokens.data(), tokens.size() * sizeof(int32_t));
  int32_t* pos = tensors_[static_cast<size_t>(positions_)].i32();
  for (int64_t t = 0; t < T; ++t) pos[t] = n_past_ + static_cast<int32_t>(t);
  std::vector<Tensor*> in, out;
  if (profile_) node_seconds_.resize(g_.nodes.size(), 0.0);
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const ir::Node& n = g_.nodes[i];
    in.clear();
    out.clear();
    for (int id : n.inputs) in.push_back(&tensors_[static_cast<size_t>(id)]);
    for (int id : n.outputs) out.push_back(&tensors_[static_cast<size_t>(id)]);
    const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Status s = refexec::run_node(n, in, out);
    if (profile_) {
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      node_seconds_[i] += dt.count();
    }
    if (!s) return Error{std::string("eval: ") + ir::op_name(n.op) + ": " + s.message()};
  }
  n_past_ += static_cast<int>(T);
  const float* y = tensors_[static_cast<size_t>(logits_)].cf32();
  if (all_logits)
    std::memcpy(logits, y, static_cast<size_t>(T * n_vocab_) * sizeof(float));
  else
    std::memcpy(logits, y + (T - 1) * n_vocab_, static_cast<size_t>(n_vocab_) * sizeof(float));
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Executor>> make_reference_executor(ir::Graph graph,
                                                            const WeightTable& weights,
                                                            const ExecutorOptions& opts) {
  return RefExecutor::create(std::move(graph), weights, opts);
}

Expected<std::unique_ptr<Executor>> make_reference_executor(const gguf::Model& model,
                                                            const ExecutorOptions& opts) {
  auto g = build_graph_from_gguf(model);
  if (!g) return Error{g.error()};
  WeightTable weights;
  for (const auto& t : model.tensors()) weights[t.name] = WeightBytes{t.data, t.nbytes};
  return RefExecutor::create(std::move(*g), weights, opts);
}

}  // namespace zenmoe
