// A model lowered for the fast executor: the graph after the pass pipeline, and every matmul
// weight repacked once into the layout the generated GEMV/GEMM kernels stream (kernels/pack.h).
// The same structure comes from an in-memory compile of a GGUF or from a plan file, whose
// side file holds exactly the bytes pack_into_request() produces.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/isa.h"
#include "ir/graph.h"
#include "ir/pipeline.h"
#include "kernels/pack.h"
#include "kernels/status.h"
#include "runtime/executor.h"
#include "runtime/ref_executor.h"

namespace zenmoe {

namespace gguf {
class Model;
}

// Tokens per forward chunk the fast executor uses unless told otherwise (ExecutorOptions'
// n_ubatch, --ubatch-size); the memory plan is recorded for this batch at compile time.
inline constexpr int kDefaultMaxBatch = ExecutorOptions{}.n_ubatch;

enum class PackKind : uint32_t {
  kWeights = 0,  // one weight as stored (plan::kPackWeights)
  kGateUp = 1,   // a gate and an up weight, rows interleaved (plan::kPackGateUp, pack_gate_up)
};

// One weight to repack: a stack of n_mats matrices (experts or per-head slices), each
// `rows` x `cols`, stored mat_stride bytes apart.
struct PackRequest {
  std::string name;        // the weight value's name in the graph (= the GGUF tensor);
                           // kGateUp: gate_up_pack_name (GGUF tensors `name` and `up`)
  PackKind kind = PackKind::kWeights;
  std::string gate, up;    // kGateUp: the two GGUF tensors (rows = 2 x their rows)
  GgmlType source = GgmlType::F32;  // format in the GGUF file
  GgmlType packed = GgmlType::F32;  // format the kernels read (below AVX-512 VNNI Q5_0 becomes
                                    // Q8_0, exactly)
  int32_t row_block = 16;
  int64_t rows = 0, cols = 0, n_mats = 1;
  uint64_t mat_stride = 0;  // bytes per packed matrix (PackLayout::total_bytes)
  uint64_t nbytes = 0;      // n_mats * mat_stride
};

// A repacked weight ready for the kernels; `data` lives as long as the CompiledModel.
struct PackedMats {
  PackRequest req;
  PackLayout layout;  // of one matrix
  const uint8_t* data = nullptr;
  const uint8_t* mat(int64_t i) const { return data + static_cast<uint64_t>(i) * req.mat_stride; }
};

struct CompiledModel {
  ir::Graph graph;                                       // after ir::run_pipeline
  WeightTable raw;                                       // every GGUF tensor by name (mapped file)
  std::unordered_map<std::string, PackedMats> packed;    // repacked matmul weights by name
  isa::Target target;                                    // kernels are generated for this
  std::vector<std::shared_ptr<void>> storage;            // owns the packed bytes (heap or mapping)
};

// The weights of `g` that get repacked for `target`: every matmul / matmul_id weight whose
// format (after the Q5_0 → Q8_0 transcode) the packer and some generated kernel support.
// Deterministic order (graph order), so plan files are reproducible.
std::vector<PackRequest> pack_requests(const ir::Graph& g, isa::Target target);

// Writes the packed bytes of `req` (req.nbytes) from the GGUF bytes of the weight (kGateUp:
// `src` is the gate, `up` the up weight; unused otherwise).
Status pack_into_request(const PackRequest& req, const WeightBytes& src, uint8_t* dst,
                         const WeightBytes* up = nullptr);

// The packed-weight key of a gate_up_swiglu node: "<gate tensor>+<up tensor>".
std::string gate_up_pack_name(const ir::Node& n, const ir::Graph& g);

// The pass options for `target`: fusions limited to what its kernels run, the kernels' row
// geometry, this machine's cache sizes (detect_cache_sizes), `threads` (0: not recorded).
ir::PipelineOptions pipeline_options(isa::Target target, int threads = 0);


struct CompileOptions {
  isa::Target target;
  bool fuse = true;  // run the passes with pipeline_options(target) (false: the plain graph)
  // Called with (bytes packed so far, total bytes) while weights are repacked (one call at a
  // time, from the packing threads).
  std::function<void(uint64_t, uint64_t)> progress;
};

namespace plan {
class LoadedPlan;
struct PlanHeader;
}

// The target a plan header names (level and tuning); errors on unknown names.
Expected<isa::Target> plan_target(const plan::PlanHeader& h);

// Builds the graph of `model`, runs the pipeline and repacks the weights into memory.
// `model` must outlive the result (raw tensors point into its mapping).
Expected<CompiledModel> compile_in_memory(const gguf::Model& model, const CompileOptions& opts);

// The model of a plan: its lowered graph parsed back, packed weights pointing into the mapped
// side file (no repacking), raw tensors from `model` (the plan's GGUF, already checked by
// plan::check_plan_compatible). Refuses a plan whose weight list does not match its graph.
// Both must outlive the result; the plan is kept alive by it.
Expected<CompiledModel> compiled_from_plan(std::shared_ptr<const plan::LoadedPlan> loaded, const gguf::Model& model);

}  // namespace zenmoe
