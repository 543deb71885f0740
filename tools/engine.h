// Picks the forward-pass engine for the front ends (run, logits, bench): the fast executor on
// generated kernels by default, the scalar reference with --ref. A model path may name a GGUF
// (compiled in memory) or a plan from `zenmoe compile` (loaded without repacking).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "kernels/status.h"
#include "runtime/executor.h"
#include "runtime/gguf.h"
#include "runtime/plan_file.h"
#include "tools/args.h"


namespace zenmoe::tools {

enum class Engine {
  Best,       // the fastest engine that supports the model
  Reference,  // the scalar reference executor (--ref)
};

const char* engine_name(Engine e);

// A model named on the command line: a GGUF, or a plan and the GGUF it was compiled from
// (checked: plan version, CPU features, unchanged tensor table).
struct OpenedModel {
  gguf::Model gguf;
  std::shared_ptr<const plan::LoadedPlan> plan;  // null for a GGUF
};
Expected<OpenedModel> open_model(const std::string& path, plan::WeightsLoad load = plan::WeightsLoad::kAuto);

// The flags of every command that runs a model (run, logits, bench model): --mmap, --no-mmap
// (how a plan's weights reach memory), --ubatch-size (tokens per forward chunk) and --mla (the
// form of MLA attention over prompts, see MlaForm). Added to a command's list before its last
// entry (--help).
std::vector<FlagSpec> with_engine_flags(std::vector<FlagSpec> flags);
struct EngineFlags {
  plan::WeightsLoad load = plan::WeightsLoad::kAuto;
  int n_ubatch = ExecutorOptions{}.n_ubatch;
  MlaForm mla_form = MlaForm::kAuto;
  int64_t attn_prefetch_bytes = ExecutorOptions::kAttnPrefetchAuto;
  // Sets the executor options these flags choose (chunk size, MLA form, attention prefetch).
  void apply(ExecutorOptions& eo) const;
};
Expected<EngineFlags> parse_engine_flags(const Args& a);

// The model must outlive the executor.
Expected<std::unique_ptr<Executor>> make_engine(const OpenedModel& model, const ExecutorOptions& opts, Engine which);
Expected<std::unique_ptr<Executor>> make_engine(const gguf::Model& model, const ExecutorOptions& opts,
                                                Engine which);

// --cache-type-k / --cache-type-v (f16, f32, bf16 or q8_0; empty: f16, and v follows k): the KV
// cache element type. deepseek2 keeps one latent cache that is both keys and values, so the
// two must agree.
Expected<KvCacheType> kv_cache_type(const std::string& type_k, const std::string& type_v);

// The context size a front end runs with: `requested` when the user gave -c, else the smaller
// of `requested` (the default) and the context the model was trained for.
int context_size(const gguf::Model& model, int requested, bool given);

// The compile target of --target (znver5, znver4, host) capped by --isa / ZENMOE_ISA.
Expected<isa::Target> compile_target(const std::string& target_flag, const std::string& isa_flag);

}  // namespace zenmoe::tools
