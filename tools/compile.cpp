// zenmoe compile MODEL.gguf -o MODEL.zplan: lowers the model and writes a plan plus a side file
// of repacked weights that `zenmoe run` maps without repacking.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/glue.h"
#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "ir/printer.h"
#include "runtime/compiled_model.h"
#include "runtime/plan_file.h"
#include "runtime/ref_executor_model.h"
#include "runtime/thread_pool.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/engine.h"
#include "tools/mkmodel_progress.h"
#include "ir/pipeline.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = {
    {"output", "o", true, "plan file to write (default: MODEL with .zplan)"},
    {"target", "", true, "CPU to tune for: znver5, znver4 or host (default host)"},
    {"isa", "", true, "highest instruction set to use (scalar, avx2, avx512, avx512vnni, avx512bf16, amx)"},
    {"threads", "t", true, "threads the plan is laid out for (default 1)"},
    {"dump-after", "", true, "print the IR after this pass ('all' for every pass)"},
    {"help", "h", false, "show this help"},
};

const char* kSynopsis = "compile MODEL.gguf [-o MODEL.zplan] [--target znver5|znver4|host] [--threads N]";

std::string default_output(const std::string& model) {
  std::filesystem::path p(model);
  p.replace_extension(".zplan");
  return p.string();
}

// The plan header of `g` lowered for `target`; the tensors follow pack_requests order.
plan::PlanHeader make_header(const ir::Graph& g, const std::vector<PackRequest>& reqs, isa::Target target,
                             int threads, const std::string& gguf_path, uint64_t checksum) {
  plan::PlanHeader h;
  h.target_level = isa::level_name(target.level);
  h.target_tuning = isa::tuning_name(target.tuning);
  h.n_threads = threads;
  h.gguf_path = std::filesystem::absolute(gguf_path).string();
  h.gguf_checksum = checksum;
  h.graph_text = ir::print_graph(g);
  for (const PackRequest& r : reqs) {
    plan::PlanTensor t;
    t.name = r.name;
    t.format = r.packed;
    t.row_block = r.row_block;
    t.rows = r.rows;
    t.cols = r.cols;
    t.n_mats = r.n_mats;
    t.kind = r.kind == PackKind::kGateUp ? plan::kPackGateUp : plan::kPackWeights;
    t.mat_stride = r.mat_stride;
    h.tensors.push_back(t);
    KernelDesc d = default_gemv_desc(r.packed, static_cast<int32_t>(r.cols), target,
                                     r.kind == PackKind::kGateUp ? KernelOp::kGateUpSwiglu : KernelOp::kGemv);
    d.row_block = static_cast<uint16_t>(r.row_block);
    if (validate(d)) h.kernels.push_back(d);
  }
  h.cpu_features = plan::required_features(target.level, h.kernels);
  return h;
}

// Generates the glue kernels a run of the plan at `path` needs (for every KV cache type, on the
// plan's thread count and on the one `run` takes by default: the decode attention kernels
// depend on it) into the disk cache, so that the first `zenmoe run` of the plan generates
// nothing. Returns how many were generated (0 without a disk cache, or when the plan is for CPU
// features this machine lacks: it cannot run here).
Expected<int> warm_glue_cache(const std::string& path, int threads, isa::Target target) {
  if (glue_session().cache_dir().empty() || !isa::host_supports(target.level)) return 0;
  const int before = glue_session().stats().generated;
  auto m = open_model(path, plan::WeightsLoad::kMap);
  if (!m) return Error{m.error()};
  std::vector<int> counts = {threads};
  if (default_thread_count() != threads) counts.push_back(default_thread_count());
  for (int n : counts)
    for (KvCacheType kv : {KvCacheType::F16, KvCacheType::F32, KvCacheType::BF16, KvCacheType::Q8_0}) {
      ExecutorOptions o;
      o.n_threads = n;
      o.kv_type = kv;
      auto e = make_engine(*m, o, Engine::Best);
      if (!e) return Error{e.error()};
    }
  return glue_session().stats().generated - before;
}

}  // namespace

int cmd_compile(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::fputs(usage_text(kSynopsis, kFlags).c_str(), stdout);
    return 0;
  }
  if (args->positionals().size() != 1) return fail("compile takes one model file (usage: zenmoe " + std::string(kSynopsis) + ")");
  const std::string model_path = args->positionals()[0];
  const std::string out = args->has("output") ? args->get("output") : default_output(model_path);
  auto threads = args->get_int("threads", 1, 1, 1024);
  if (!threads) return fail(threads.error());
  auto target = compile_target(args->get("target"), args->get("isa"));
  if (!target) return fail(target.error());
  auto model = gguf::Model::open(model_path);
  if (!model) return fail(model.error());
  auto g = build_graph_from_gguf(*model);
  if (!g) return fail(g.error());
  ir::PipelineOptions po = pipeline_options(*target, static_cast<int>(*threads));
  po.dump_after = args->get("dump-after");
  po.dump = [](const std::string& pass, const std::string& text) {
    std::fprintf(stderr, "; IR after %s\n%s", pass.c_str(), text.c_str());
  };
  Status st = ir::run_pipeline(*g, po);
  if (!st) return fail(st.message());
  const std::vector<PackRequest> reqs = pack_requests(*g, *target);
  plan::PlanHeader h = make_header(*g, reqs, *target, static_cast<int>(*threads), model_path,
                                   plan::gguf_table_checksum(*model));
  uint64_t total = 0;
  for (const PackRequest& r : reqs) total += r.nbytes;
  ProgressBar bar("compile", total);
  st = plan::write_plan(out, h, [&](size_t i, uint8_t* dst) -> Status {
    const PackRequest& r = reqs[i];
    const bool pair = r.kind == PackKind::kGateUp;
    const auto* t = model->find_tensor(pair ? r.gate : r.name);
    const auto* up = pair ? model->find_tensor(r.up) : nullptr;
    if (t == nullptr || (pair && up == nullptr)) return Error{"no tensor '" + r.name + "' in " + model_path};
    const WeightBytes up_bytes = pair ? WeightBytes{up->data, up->nbytes} : WeightBytes{};
    ZENMOE_RETURN_IF_ERROR(pack_into_request(r, WeightBytes{t->data, t->nbytes}, dst, pair ? &up_bytes : nullptr));
    bar.counter() += r.nbytes;
    return Status::ok();
  });
  bar.finish();
  if (!st) return fail(st.message());
  std::fprintf(stderr, "wrote %s: %zu packed weights, %.2f MB, target %s/%s, %lld thread(s)\n", out.c_str(),
               reqs.size(), static_cast<double>(total) / 1e6, isa::level_name(target->level),
               isa::tuning_name(target->tuning), static_cast<long long>(*threads));
  // The plan is complete; a failure here only means the first run generates the kernels itself.
  auto warmed = warm_glue_cache(out, static_cast<int>(*threads), *target);
  if (!warmed)
    std::fprintf(stderr, "note: glue kernels not generated ahead of the first run: %s\n", warmed.error().c_str());
  else if (*warmed > 0)
    std::fprintf(stderr, "generated %d glue kernels into %s\n", *warmed, glue_session().cache_dir().c_str());
  return 0;
}

}  // namespace zenmoe::tools
