#include "runtime/compiled_model.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "ir/parser.h"
#include "ir/pipeline.h"
#include "kernels/ref/fp16.h"
#include "runtime/gguf.h"
#include "runtime/huge_buffer.h"
#include "runtime/plan_file.h"
#include "runtime/ref_executor_model.h"
#include "runtime/thread_pool.h"

namespace zenmoe {

namespace {

// Q5_0 codes are 5-bit integers −16..15 with one f16 scale per 32 weights; Q8_0 holds the same
// integers and scale exactly, and both dot with Q8_0 activations, so below AVX-512 VNNI (where
// Q5_0 has its own kernel, reading 22 bytes per block instead of 34) Q5_0 weights run on the
// Q8_0 kernels with identical integer sums.
GgmlType packed_format(GgmlType t, isa::Target target) {
  return t == GgmlType::Q5_0 && target.level < isa::IsaLevel::kAvx512Vnni ? GgmlType::Q8_0 : t;
}

void transcode_q5_0_row(const BlockQ5_0* src, BlockQ8_0* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t qh;
    std::memcpy(&qh, src[b].qh, sizeof(qh));
    dst[b].d = src[b].d;
    for (int j = 0; j < kQK / 2; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[b].qs[j] = static_cast<int8_t>(((src[b].qs[j] & 0x0F) | hi0) - 16);
      dst[b].qs[j + kQK / 2] = static_cast<int8_t>(((src[b].qs[j] >> 4) | hi1) - 16);
    }
  }
}

// The ISA level whose kernel runs `format`: the highest implemented one not above the target.
isa::IsaLevel level_for(GgmlType format, isa::IsaLevel target) {
  isa::IsaLevel best = isa::IsaLevel::kScalar;
  for (isa::IsaLevel l : implemented_levels(format))
    if (l <= target && l > best) best = l;
  return best;
}

// The row block and packed size of `r` (format, rows, cols, n_mats set); false when the
// packer refuses the shape (the weight then stays on the raw path).
bool fill_layout(PackRequest& r, isa::Target target) {
  isa::Target t = target;
  t.level = level_for(r.packed, target.level);
  r.row_block = default_gemv_desc(r.packed, static_cast<int32_t>(r.cols), t).row_block;
  auto layout = pack_layout(r.packed, r.row_block, r.rows, r.cols);
  if (!layout) return false;
  r.mat_stride = static_cast<uint64_t>(layout->total_bytes);
  r.nbytes = r.mat_stride * static_cast<uint64_t>(r.n_mats);
  return true;
}

}  // namespace

std::string gate_up_pack_name(const ir::Node& n, const ir::Graph& g) {
  return g.values[static_cast<size_t>(n.inputs[0])].name + "+" + g.values[static_cast<size_t>(n.inputs[1])].name;
}

// Row block and packed bytes per row of the kernel pack_requests / MatOp pick for a weight;
// formats that stay on the reference path walk single rows of their GGUF bytes.
ir::KernelRows kernel_rows(GgmlType w, int64_t K, isa::Target target) {
  const GgmlType packed = packed_format(w, target);
  if (pack_supported(packed) && !implemented_levels(packed).empty()) {
    isa::Target t = target;
    t.level = level_for(packed, target.level);
    const int32_t rb = default_gemv_desc(packed, static_cast<int32_t>(K), t).row_block;
    if (auto layout = pack_layout(packed, rb, rb, K)) return {rb, layout->group_stride / rb};
  }
  return {1, row_bytes(w, K)};
}

ir::PipelineOptions pipeline_options(isa::Target target, int threads) {
  ir::PipelineOptions o;
  o.kernel_rows = [target](GgmlType w, int64_t K) { return kernel_rows(w, K, target); };
  o.threads = threads;
  const CacheSizes caches = detect_cache_sizes();
  o.l1_bytes = caches.l1d;
  o.l2_bytes = caches.l2;
  o.l3_bytes = caches.l3;
  // Residual adds become accumulating GEMV/GEMM calls; every format with a kernel has both.
  o.fuse_residual = true;
  // The routed experts' down projection accumulates each slot times its router weight into
  // the token's row (accumulating GEMV/GEMM calls with per-token factors).
  o.fuse_moe_sum = true;
  // rms_norm + Q8_K quantisation is one generated glue kernel (the reference path otherwise).
  o.norm_quantize_kernel = [](GgmlType out) { return out == GgmlType::Q8_K; };
  o.max_tokens = kDefaultMaxBatch;
  // The fused gate/up kernel exists for Q4_K weights writing Q8_K, at AVX-512 levels (its
  // scalar form is a test reference, slower than the unfused path).
  o.gate_up_kernel = [target](GgmlType w, int64_t K, int64_t F, GgmlType out) {
    if (w != GgmlType::Q4_K || out != GgmlType::Q8_K || F % 256 != 0 || !pack_supported(w)) return false;
    if (level_for(w, target.level) < isa::IsaLevel::kAvx512) return false;
    isa::Target t = target;
    t.level = level_for(w, target.level);
    return static_cast<bool>(validate(default_gemv_desc(w, static_cast<int32_t>(K), t, KernelOp::kGateUpSwiglu)));
  };
  return o;
}

std::vector<PackRequest> pack_requests(const ir::Graph& g, isa::Target target) {
  std::vector<PackRequest> out;
  std::set<int> seen;
  for (const ir::Node& n : g.nodes) {
    if (n.op == ir::OpKind::GateUpSwiGlu || n.op == ir::OpKind::GateUpSwiGluId) {
      const ir::Value& w = g.values[static_cast<size_t>(n.inputs[0])];
      PackRequest r;
      r.name = gate_up_pack_name(n, g);
      r.kind = PackKind::kGateUp;
      r.gate = w.name;
      r.up = g.values[static_cast<size_t>(n.inputs[1])].name;
      r.source = r.packed = w.type;
      r.cols = w.shape[0];
      r.rows = 2 * w.shape[1];
      r.n_mats = w.shape.size() == 3 ? w.shape[2] : 1;  // gate_up_swiglu_id: one pair per expert
      if (fill_layout(r, target)) out.push_back(std::move(r));
      continue;
    }
    if (n.op != ir::OpKind::MatMul && n.op != ir::OpKind::MatMulId && n.op != ir::OpKind::MatMulAdd &&
        n.op != ir::OpKind::MatMulIdSum) continue;
    const int wid = n.inputs[0];
    if (!seen.insert(wid).second) continue;
    const ir::Value& w = g.values[static_cast<size_t>(wid)];
    if (w.kind != ir::ValueKind::Weight) continue;
    const GgmlType packed = packed_format(w.type, target);
    if (!pack_supported(packed) || implemented_levels(packed).empty()) continue;
    PackRequest r;
    r.name = w.name;
    r.source = w.type;
    r.packed = packed;
    r.cols = w.shape[0];
    r.rows = w.shape[1];
    r.n_mats = w.shape.size() == 3 ? w.shape[2] : 1;
    if (fill_layout(r, target)) out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Gate and up rows interleaved, packed as one matrix of 2 x rows per expert (n_mats of them).
Status pack_gate_up_request(const PackRequest& req, const WeightBytes& gate, const WeightBytes* up, uint8_t* dst) {
  if (up == nullptr) return Error{req.name + ": no up weight given for the gate/up pair"};
  const uint64_t each = static_cast<uint64_t>(row_bytes(req.source, req.cols) * (req.rows / 2));
  const uint64_t total = each * static_cast<uint64_t>(req.n_mats);
  if (gate.nbytes != total || up->nbytes != total)
    return Error{req.name + ": gate/up tensors have " + std::to_string(gate.nbytes) + " and " +
                 std::to_string(up->nbytes) + " bytes, expected " + std::to_string(total)};
  for (int64_t m = 0; m < req.n_mats; ++m) {
    const uint64_t off = static_cast<uint64_t>(m) * each;
    auto p = pack_gate_up(req.packed, req.row_block, static_cast<const uint8_t*>(gate.data) + off,
                          static_cast<const uint8_t*>(up->data) + off, each, req.rows / 2, req.cols);
    if (!p) return Error{req.name + ": " + p.error()};
    std::memcpy(dst + static_cast<uint64_t>(m) * req.mat_stride, p->data.get(), static_cast<size_t>(p->layout.total_bytes));
  }
  return Status::ok();
}

}  // namespace

Status pack_into_request(const PackRequest& req, const WeightBytes& src, uint8_t* dst, const WeightBytes* up) {
  if (req.kind == PackKind::kGateUp) return pack_gate_up_request(req, src, up, dst);
  auto layout = pack_layout(req.packed, req.row_block, req.rows, req.cols);
  if (!layout) return Error{req.name + ": " + layout.error()};
  const uint64_t src_row = static_cast<uint64_t>(row_bytes(req.source, req.cols));
  const uint64_t src_mat = src_row * static_cast<uint64_t>(req.rows);
  if (src.nbytes != src_mat * static_cast<uint64_t>(req.n_mats))
    return Error{req.name + ": tensor has " + std::to_string(src.nbytes) + " bytes, expected " +
                 std::to_string(src_mat * static_cast<uint64_t>(req.n_mats))};
  const auto* s = static_cast<const uint8_t*>(src.data);
  std::vector<uint8_t> transcoded;
  for (int64_t m = 0; m < req.n_mats; ++m) {
    const uint8_t* mat = s + static_cast<uint64_t>(m) * src_mat;
    uint64_t mat_bytes = src_mat;
    if (req.source != req.packed) {  // Q5_0 → Q8_0
      const int64_t nb = req.cols / kQK;
      transcoded.resize(static_cast<size_t>(row_bytes(req.packed, req.cols) * req.rows));
      for (int64_t r = 0; r < req.rows; ++r)
        transcode_q5_0_row(reinterpret_cast<const BlockQ5_0*>(mat + static_cast<uint64_t>(r) * src_row),
                           reinterpret_cast<BlockQ8_0*>(transcoded.data()) + r * nb, nb);
      mat = transcoded.data();
      mat_bytes = transcoded.size();
    }
    ZENMOE_RETURN_IF_ERROR(pack_into(*layout, mat, mat_bytes, dst + static_cast<uint64_t>(m) * req.mat_stride));
  }
  return Status::ok();
}

Expected<CompiledModel> compile_in_memory(const gguf::Model& model, const CompileOptions& opts) {
  auto g = build_graph_from_gguf(model);
  if (!g) return Error{g.error()};
  CompiledModel cm;
  cm.graph = std::move(*g);
  ZENMOE_RETURN_IF_ERROR(ir::run_pipeline(cm.graph, opts.fuse ? pipeline_options(opts.target) : ir::PipelineOptions{}));
  cm.target = opts.target;
  for (const auto& t : model.tensors()) cm.raw[t.name] = WeightBytes{t.data, t.nbytes};
  const std::vector<PackRequest> reqs = pack_requests(cm.graph, opts.target);
  uint64_t total = 0;
  auto padded = [](uint64_t n) { return (n + 4095) / 4096 * 4096; };
  std::vector<uint64_t> at(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    at[i] = total;
    total += padded(reqs[i].nbytes);
  }
  auto mem = alloc_huge_buffer(total, "compile");
  if (!mem) return Error{mem.error()};
  cm.storage.push_back(std::static_pointer_cast<void>(*mem));
  // A thread per core packs a request at a time; progress under a lock.
  std::mutex mu;
  uint64_t done = 0;
  Status packed = parallel_for_each(default_thread_count(), reqs.size(), [&](size_t i) -> Status {
    const PackRequest& r = reqs[i];
    const bool pair = r.kind == PackKind::kGateUp;
    auto it = cm.raw.find(pair ? r.gate : r.name);
    auto up = pair ? cm.raw.find(r.up) : cm.raw.end();
    if (it == cm.raw.end() || (pair && up == cm.raw.end()))
      return Error{"compile: no tensor '" + r.name + "' in the model"};
    ZENMOE_RETURN_IF_ERROR(pack_into_request(r, it->second, mem->get() + at[i], pair ? &up->second : nullptr));
    std::lock_guard<std::mutex> lock(mu);
    done += padded(r.nbytes);
    if (opts.progress) opts.progress(done, total);
    return Status::ok();
  });
  ZENMOE_RETURN_IF_ERROR(packed);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const PackRequest& r = reqs[i];
    PackedMats pm;
    pm.req = r;
    pm.layout = *pack_layout(r.packed, r.row_block, r.rows, r.cols);
    pm.data = mem->get() + at[i];
    cm.packed[r.name] = pm;
  }
  return cm;
}

Expected<isa::Target> plan_target(const plan::PlanHeader& h) {
  auto level = isa::parse_level(h.target_level);
  if (!level) return Error{"plan: " + level.error()};
  auto tuning = isa::parse_tuning(h.target_tuning);
  if (!tuning) return Error{"plan: " + tuning.error()};
  return isa::Target{*level, *tuning, plan::requires_feature(h, "gfni")};
}

Expected<CompiledModel> compiled_from_plan(std::shared_ptr<const plan::LoadedPlan> loaded, const gguf::Model& model) {
  const plan::PlanHeader& h = loaded->header;
  auto g = ir::parse_graph(h.graph_text);
  if (!g) return Error{loaded->path + ": lowered graph: " + g.error()};
  auto target = plan_target(h);
  if (!target) return Error{target.error()};
  CompiledModel cm;
  cm.graph = std::move(*g);
  cm.target = *target;
  for (const auto& t : model.tensors()) cm.raw[t.name] = WeightBytes{t.data, t.nbytes};
  const std::vector<PackRequest> reqs = pack_requests(cm.graph, cm.target);
  if (reqs.size() != h.tensors.size())
    return Error{loaded->path + ": the plan holds " + std::to_string(h.tensors.size()) + " packed weights, its graph needs " +
                 std::to_string(reqs.size()) + " — recompile"};
  for (size_t i = 0; i < reqs.size(); ++i) {
    const PackRequest& r = reqs[i];
    const plan::PlanTensor& t = h.tensors[i];
    if (t.name != r.name || t.format != r.packed || t.row_block != r.row_block || t.rows != r.rows ||
        t.cols != r.cols || t.n_mats != r.n_mats || t.kind != (r.kind == PackKind::kGateUp ? plan::kPackGateUp : plan::kPackWeights) || t.mat_stride < r.mat_stride)
      return Error{loaded->path + ": packed weight '" + t.name + "' does not match the graph's '" + r.name +
                   "' — recompile"};
    PackedMats pm;
    pm.req = r;
    pm.req.mat_stride = t.mat_stride;
    pm.req.nbytes = t.nbytes;
    pm.layout = *pack_layout(r.packed, r.row_block, r.rows, r.cols);
    pm.data = loaded->tensor_data(i);
    cm.packed[r.name] = pm;
  }
  cm.storage.push_back(std::const_pointer_cast<plan::LoadedPlan>(loaded));
  return cm;
}

}  // namespace zenmoe
