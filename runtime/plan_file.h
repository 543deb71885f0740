// The plan file (.zplan) written by `zenmoe compile` and loaded by `zenmoe run`: the lowered
// graph, kernel descriptors, target, thread layout and a checksum of the source GGUF's tensor
// table, plus the repacked weights in an mmap-able side file (PLAN.weights).
//
// Plan file layout (little-endian):
//   0   "ZPLN"                 magic
//   4   u32 version            first, so a future format is refused before anything else is read
//   8   u64 json_bytes         length of the JSON document that follows the fixed header
//   16  u64 kernel_bytes       length of the kernel descriptor table (28 bytes per KernelDesc)
//   24  u64 weights_id         FNV-1a 64 of the JSON document; the side file repeats it
//   32  u64 body_checksum      FNV-1a 64 of the JSON document and the descriptor table
//   40  JSON document, then the descriptor table (raw KernelDesc bytes)
//
// Side file layout: a 4096-byte header page ("ZPLW", u32 version, u64 weights_id, u64 total
// bytes), then every tensor at a 4096-aligned offset, so each one can be mapped on its own and
// sits 64-byte aligned in memory. The shared weights_id catches a side file left over from
// another compile.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/isa.h"
#include "codegen/kernel_desc.h"
#include "kernels/formats.h"
#include "kernels/status.h"
#include "runtime/gguf.h"

namespace zenmoe::plan {

// 2: Q4_K and Q6_K packed groups hold one record per super-block (kernels/pack.h).
// 3: Q5_K and Q6_K records hold their code chunks in the order the kernels read them.
// 4: Q8_0 and Q4_0 groups hold one record per block (codes, then the rows' d).
// 5: kernel descriptors carry a stream count (a byte of the former reserved field).
// 6: BF16 groups hold column pairs per 32-bit lane.
// 7: odd Q8_0 and Q4_0 block records hold d before the codes.
// 8: Q6_K (Q5_K) sub-blocks are three (five) chunks of codes whose top bits carry the last codes.
// 9: Q4_K records hold 144 bytes per row: scales and mins 12 bits per (row, sub-block).
// 10: Q5_0 weights are packed as Q5_0 (22 bytes per block and row) on AVX-512 VNNI targets.
// 11: kernel descriptors carry a GFNI flag (Q5_0, Q5_K), and cpu_features name gfni when one is set.
// 12: Q5_0 records hold the fifth bits before the codes; Q6_K records hold each quarter's scales
//     before its chunks (every record read in address order).
inline constexpr uint32_t kPlanVersion = 12;
inline constexpr uint64_t kWeightsAlign = 4096;  // tensor offsets in the side file

// How a tensor's matrices were packed (kernels/pack.h).
enum : uint32_t {
  kPackWeights = 0,  // pack_weights layout
  kPackGateUp = 1,   // pack_gate_up: gate and up rows interleaved (rows = 2 x expert rows)
};

// One repacked weight in the side file.
struct PlanTensor {
  std::string name;                // value name in the lowered graph
  GgmlType format = GgmlType::Q4_K;  // packed format (kernels/pack.h)
  int32_t row_block = 8;           // pack row block
  int64_t rows = 0, cols = 0;      // per matrix (rows = packed rows)
  int64_t n_mats = 1;              // experts (1 for a plain matrix)
  uint32_t kind = kPackWeights;    // kPackWeights or kPackGateUp
  // Side file placement, assigned by write_plan: n_mats matrices back to back, each
  // mat_stride bytes (0 on input = the packed size; a larger multiple of 64 pads each one).
  uint64_t offset = 0, nbytes = 0;
  uint64_t mat_stride = 0;
};

struct PlanHeader {
  uint32_t version = kPlanVersion;
  std::string target_level, target_tuning;  // isa::level_name / isa::tuning_name
  std::string cpu_features;                 // required_features(level, kernels): what the kernels need
  int32_t n_threads = 1;                    // thread layout the plan was partitioned for
  std::string gguf_path;                    // the GGUF compiled (first split), absolute
  uint64_t gguf_checksum = 0;               // gguf_table_checksum()
  std::string graph_text;                   // the lowered graph (ir/printer.h)
  std::vector<KernelDesc> kernels;          // each passes validate()
  std::vector<PlanTensor> tensors;
  std::string weights_file;                 // side file name, relative to the plan's folder
  uint64_t weights_bytes = 0;               // side file size, assigned by write_plan
};

// FNV-1a 64 over the model's tensor table (every split: names, types, shapes, data offsets,
// sizes, shard) and the metadata the graph is lowered from (general.architecture and every
// "<arch>." key). No tensor data is hashed, so it is cheap; it changes when the file is
// re-quantised, its tensors are edited, or a hyperparameter is changed.
uint64_t gguf_table_checksum(const gguf::Model& model);

// Canonical comma-separated feature names. required_features: what kernels generated for
// `level` execute (e.g. "avx,avx2,fma,f16c,bmi1,bmi2,os_ymm,avx512f,..."); feature_list: every
// such feature `f` has.
std::string required_features(isa::IsaLevel level);
std::string feature_list(const isa::CpuFeatures& f);
// required_features(level), and "gfni" when one of `kernels` uses it (KernelDesc::gfni).
std::string required_features(isa::IsaLevel level, const std::vector<KernelDesc>& kernels);
// Whether the plan's cpu_features name `feature` (e.g. "gfni": its Q5_0 or Q5_K kernels use it).
bool requires_feature(const PlanHeader& h, std::string_view feature);

// The side file name for a plan path: "<plan file name>.weights".
std::string default_weights_file(const std::string& plan_path);

using WriteTensorFn = std::function<Status(size_t i, uint8_t* dst)>;
using ProgressFn = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Validates the header and fills each tensor's mat_stride (when 0), nbytes and offset and the
// header's weights_bytes exactly as write_plan will, so a caller can size its writes first.
Status layout_tensors(PlanHeader* header);

// Writes the plan and its side file atomically. Both go to temporaries in the plan's folder
// and are renamed at the end (side file first); on any error, an exception from a callback,
// a failing write_tensor or SIGINT / SIGTERM during the write, both temporaries are removed.
// write_tensor(i, dst) fills tensor i's nbytes at dst (mapped side file, 64-byte aligned,
// zeroed); it is called once per tensor, in any order and from a thread per core at once, so it
// must be safe to call concurrently for different tensors (progress is called one call at a
// time, from those threads). header.weights_file empty = default_weights_file(path). Offsets, nbytes and
// weights_bytes are assigned here; every other field is validated first.
Status write_plan(const std::string& path, PlanHeader header, const WriteTensorFn& write_tensor,
                  const ProgressFn& progress = {});

// How the side file's weights reach memory. kMap maps the file (nothing copied, the first token
// comes soonest, 4 KiB pages); kCopy reads it into anonymous memory on transparent huge pages,
// which streams faster during decoding (fewer TLB misses, the hardware prefetcher is not
// stopped every 4 KiB); kAuto copies when the weights take under half of the available memory.
enum class WeightsLoad { kAuto, kMap, kCopy };

// A read plan and its side file, mapped or copied. Move-only.
class LoadedPlan {
 public:
  LoadedPlan() = default;
  LoadedPlan(LoadedPlan&&) noexcept;
  LoadedPlan& operator=(LoadedPlan&&) noexcept;
  ~LoadedPlan();

  PlanHeader header;
  std::string path;          // the plan file
  std::string weights_path;  // the side file

  const uint8_t* tensor_data(size_t i) const { return base_ + header.tensors[i].offset; }
  const uint8_t* matrix_data(size_t i, int64_t mat) const {
    return tensor_data(i) + static_cast<uint64_t>(mat) * header.tensors[i].mat_stride;
  }
  // Index of the tensor with this graph value name, or -1.
  int find_tensor(std::string_view name) const;
  const uint8_t* weights_base() const { return base_; }
  uint64_t weights_size() const { return size_; }
  bool weights_copied() const { return owned_ != nullptr; }

 private:
  friend Expected<LoadedPlan> read_plan(const std::string& path, WeightsLoad load);
  void release();
  const uint8_t* base_ = nullptr;  // the mapping, or owned_'s bytes
  uint64_t size_ = 0;
  std::shared_ptr<uint8_t> owned_;  // the copy (kCopy), else null
};

// Reads and validates everything: magic, version (refused before the rest is parsed), lengths,
// checksum, every field, kernel descriptors (validate()), the side file's header and every
// tensor's offset, size, alignment and packed layout against the side file's real size. Never
// reads out of bounds on a corrupt or truncated plan or side file; errors are one line naming
// the file.
Expected<LoadedPlan> read_plan(const std::string& path, WeightsLoad load = WeightsLoad::kMap);

// Whether this host can run the plan, refusing with one line that names the cause: another
// plan version, a CPU feature the kernels need and the host lacks, a missing GGUF (`gguf`
// null), or a GGUF whose tensor table changed since the compile.
Status check_plan_compatible(const PlanHeader& header, const isa::CpuFeatures& host,
                             const gguf::Model* gguf);

// Opens the plan's source GGUF (header.gguf_path) and runs check_plan_compatible against it:
// a missing file gives the "missing" refusal, an unreadable one the reader's error.
Expected<gguf::Model> open_plan_gguf(const PlanHeader& header, const isa::CpuFeatures& host);

}  // namespace zenmoe::plan
