#include "tools/engine.h"

#include <cstring>
#include <fstream>

#include "runtime/compiled_model.h"
#include "runtime/fast_executor.h"
#include "runtime/plan_file.h"
#include "runtime/ref_executor.h"

namespace zenmoe::tools {

namespace {

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Expected<std::unique_ptr<Executor>> fast_engine(CompiledModel cm, const ExecutorOptions& opts) {
  FastExecutorOptions fo;
  fo.base = opts;
  fo.max_batch = opts.n_ubatch;
  auto ex = make_fast_executor(std::make_shared<const CompiledModel>(std::move(cm)), fo);
  if (!ex) return Error{ex.error()};
  return std::unique_ptr<Executor>(std::move(*ex));
}

}  // namespace

const char* engine_name(Engine e) { return e == Engine::Reference ? "reference" : "best"; }

std::vector<FlagSpec> with_engine_flags(std::vector<FlagSpec> flags) {
  const std::vector<FlagSpec> engine = {
      {"ubatch-size", "ub", true, "tokens per forward chunk of a long prompt (default 512)"},
      {"mla", "", true, "MLA attention over prompts: auto (default), absorbed or decompressed"},
      {"attn-prefetch", "", true,
       "KiB of the next weights each thread prefetches during decode attention "
       "(default: its L2 less the cache rows it reads, on Zen 4 up to 4096, none with AMX attention; 0: none)"},
      {"mmap", "", false, "map a plan's weights instead of copying them (starts sooner, decodes slower)"},
      {"no-mmap", "", false, "copy a plan's weights into huge-page memory (default when under half of free memory)"},
  };
  flags.insert(flags.empty() ? flags.end() : flags.end() - 1, engine.begin(), engine.end());
  return flags;
}

Expected<EngineFlags> parse_engine_flags(const Args& a) {
  EngineFlags f;
  if (a.has("mmap") && a.has("no-mmap")) return Error{"give --mmap or --no-mmap, not both"};
  if (a.has("mmap")) f.load = plan::WeightsLoad::kMap;
  if (a.has("no-mmap")) f.load = plan::WeightsLoad::kCopy;
  auto ub = a.get_int("ubatch-size", f.n_ubatch, 1, 1 << 16);
  if (!ub) return Error{ub.error()};
  f.n_ubatch = static_cast<int>(*ub);
  const std::string mla = a.get("mla", "auto");
  if (mla == "absorbed") f.mla_form = MlaForm::kAbsorbed;
  else if (mla == "decompressed") f.mla_form = MlaForm::kDecompressed;
  else if (mla != "auto") return Error{"--mla must be auto, absorbed or decompressed, got '" + mla + "'"};
  if (a.has("attn-prefetch")) {
    auto kib = a.get_int("attn-prefetch", 0, 0, int64_t{1} << 30);
    if (!kib) return Error{kib.error()};
    f.attn_prefetch_bytes = *kib * 1024;
  }
  return f;
}

void EngineFlags::apply(ExecutorOptions& eo) const {
  eo.n_ubatch = n_ubatch;
  eo.mla_form = mla_form;
  eo.attn_prefetch_bytes = attn_prefetch_bytes;
}

Expected<OpenedModel> open_model(const std::string& path, plan::WeightsLoad load) {
  if (starts_with_gguf_magic(path) || path.size() < 6 || path.compare(path.size() - 6, 6, ".zplan") != 0) {
    auto m = gguf::Model::open(path);
    if (!m) return Error{m.error()};
    return OpenedModel{std::move(*m), nullptr};
  }
  auto loaded = plan::read_plan(path, load);
  if (!loaded) return Error{loaded.error()};
  auto g = plan::open_plan_gguf(loaded->header, isa::host_features());
  if (!g) return Error{g.error()};
  auto shared = std::make_shared<const plan::LoadedPlan>(std::move(*loaded));
  return OpenedModel{std::move(*g), std::move(shared)};
}

Expected<std::unique_ptr<Executor>> make_engine(const OpenedModel& model, const ExecutorOptions& opts, Engine which) {
  if (which == Engine::Reference || model.plan == nullptr) return make_engine(model.gguf, opts, which);
  auto cm = compiled_from_plan(model.plan, model.gguf);
  if (!cm) return Error{cm.error()};
  return fast_engine(std::move(*cm), opts);
}

Expected<std::unique_ptr<Executor>> make_engine(const gguf::Model& model, const ExecutorOptions& opts,
                                                Engine which) {
  if (which == Engine::Reference) return make_reference_executor(model, opts);
  auto target = isa::resolve_target("");  // ZENMOE_ISA caps it
  if (!target) return Error{target.error()};
  CompileOptions co;
  co.target = *target;
  auto cm = compile_in_memory(model, co);
  if (!cm) return Error{cm.error()};
  return fast_engine(std::move(*cm), opts);
}

int context_size(const gguf::Model& model, int requested, bool given) {
  const std::string arch = model.metadata().get_string_or("general.architecture", "");
  const uint64_t trained = model.metadata().get_uint_or(arch + ".context_length", 0);
  return !given && trained > 0 && trained < static_cast<uint64_t>(requested) ? static_cast<int>(trained) : requested;
}

Expected<KvCacheType> kv_cache_type(const std::string& type_k, const std::string& type_v) {
  // F16 unless told otherwise, as llama.cpp-class tools keep their KV caches.
  const std::string k = type_k.empty() ? "f16" : type_k, v = type_v.empty() ? k : type_v;
  for (const std::string* t : {&k, &v})
    if (*t != "f32" && *t != "f16" && *t != "bf16" && *t != "q8_0")
      return Error{"unknown cache type '" + *t + "' (accepted: f32, f16, bf16, q8_0)"};
  if (k != v)
    return Error{"--cache-type-k " + k + " and --cache-type-v " + v +
                 " differ: MLA keeps one latent cache for keys and values"};
  return k == "f16" ? KvCacheType::F16 : k == "bf16" ? KvCacheType::BF16 : k == "q8_0" ? KvCacheType::Q8_0 : KvCacheType::F32;
}

Expected<isa::Target> compile_target(const std::string& target_flag, const std::string& isa_flag) {
  auto t = isa::resolve_target(isa_flag);
  if (!t) return Error{t.error()};
  if (target_flag.empty() || target_flag == "host") return *t;
  if (target_flag == "znver5") t->tuning = isa::Tuning::kZen5;
  else if (target_flag == "znver4") t->tuning = isa::Tuning::kZen4;
  else return Error{"unknown --target '" + target_flag + "' (znver5, znver4, host)"};
  return *t;
}

}  // namespace zenmoe::tools
