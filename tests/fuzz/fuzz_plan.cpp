// libFuzzer target for the plan file reader (runtime/plan_file.h): any input must be rejected
// with one error line or parse into a header whose every field passes validation and whose
// tensors all lie inside the side file it names. When the input's section lengths are
// consistent, its checksum and weights id are recomputed first, so mutations reach the JSON
// document and the field checks instead of stopping at the checksum.
//
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a seed corpus of plans
// made by the writer; scripts/fuzz.sh uses this.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "runtime/plan_file.h"
#include "runtime/plan_file_internal.h"

namespace {

using namespace zenmoe;
using namespace zenmoe::plan;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void fix_up_checksums(std::vector<uint8_t>& b) {
  if (b.size() < detail::kPlanHeaderBytes) return;
  const uint64_t doc_n = detail::get_u64(b.data() + 8), kern_n = detail::get_u64(b.data() + 16);
  const uint64_t body = b.size() - detail::kPlanHeaderBytes;
  if (doc_n > body || kern_n != body - doc_n) return;
  const uint8_t* doc = b.data() + detail::kPlanHeaderBytes;
  const uint64_t id = fnv1a(doc, doc_n);
  const uint64_t sum = fnv1a(doc + doc_n, kern_n, id);
  std::memcpy(b.data() + 24, &id, 8);
  std::memcpy(b.data() + 32, &sum, 8);
}

void check_header(const PlanHeader& h) {
  require(detail::validate_fields(h, "fuzz").is_ok());
  require(detail::validate_placement(h, "fuzz").is_ok());
  for (const PlanTensor& t : h.tensors) {
    require(t.offset % kWeightsAlign == 0 && t.offset >= kWeightsAlign);
    require(t.offset + t.nbytes <= h.weights_bytes && t.offset + t.nbytes >= t.offset);
  }
  // What was read writes back to the same document.
  PlanHeader again;
  require(detail::decode_json(detail::encode_json(h), "fuzz", &again).is_ok());
  require(again.graph_text == h.graph_text && again.tensors.size() == h.tensors.size());
  // No GGUF given: the answer is a refusal, never a crash.
  require(!check_plan_compatible(h, isa::host_features(), nullptr).is_ok());
}

// --- seed corpus -------------------------------------------------------------------------

void seed(const std::string& dir, const std::string& name, const PlanHeader& h) {
  const std::string tmp_dir = dir + "/.seed-tmp";
  std::filesystem::create_directories(tmp_dir);
  Status s = write_plan(tmp_dir + "/" + name, h, [](size_t, uint8_t*) { return Status::ok(); });
  if (!s) {
    std::fprintf(stderr, "seed %s: %s\n", name.c_str(), s.message().c_str());
    std::exit(1);
  }
  std::filesystem::rename(tmp_dir + "/" + name, dir + "/" + name);  // the plan only, no weights
  std::filesystem::remove_all(tmp_dir);
}

void write_seeds(const std::string& dir) {
  PlanHeader h;
  h.target_level = "avx512vnni";
  h.target_tuning = "zen4";
  h.cpu_features = required_features(isa::IsaLevel::kAvx512Vnni);
  h.n_threads = 2;
  h.gguf_path = "/models/m.gguf";
  h.gguf_checksum = 42;
  h.graph_text = "graph deepseek2 {\n  input %tokens : i32[T]\n  output %logits\n}\n";
  const isa::Target t{isa::IsaLevel::kAvx512Vnni, isa::Tuning::kZen4};
  h.kernels.push_back(default_gemv_desc(GgmlType::Q4_K, 256, t));
  h.kernels.push_back(default_gemv_desc(GgmlType::Q6_K, 256, t));
  h.tensors.push_back({"a", GgmlType::Q4_K, 8, 16, 256, 1, kPackWeights, 0, 0, 0});
  h.tensors.push_back({"b.exps", GgmlType::Q4_K, 8, 32, 256, 4, kPackGateUp, 0, 0, 0});
  h.tensors.push_back({"c", GgmlType::F16, 16, 3, 32, 1, kPackWeights, 0, 0, 0});
  seed(dir, "three-tensors.zplan", h);
  h.tensors.clear();
  h.kernels.clear();
  h.target_level = "scalar";
  h.cpu_features = "";
  seed(dir, "empty.zplan", h);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seeds = std::getenv("ZENMOE_FUZZ_SEED_DIR")) write_seeds(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  fix_up_checksums(bytes);
  uint64_t id = 0;
  Expected<PlanHeader> h = detail::parse_plan(bytes.data(), bytes.size(), "fuzz.zplan", &id);
  if (!h) {
    require(h.error().rfind("fuzz.zplan: ", 0) == 0);
    require(h.error().find('\n') == std::string::npos);
  } else {
    check_header(*h);
  }
  // The side file header check on the input's first bytes: reads at most the 24 it is given.
  PlanHeader any;
  any.weights_bytes = size < 24 ? size : 24;
  Status s = detail::check_weights_header(data, any.weights_bytes, any, id, "fuzz.weights");
  require(s.is_ok() || s.message().find('\n') == std::string::npos);
  return 0;
}
