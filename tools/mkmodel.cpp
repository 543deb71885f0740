#include "tools/mkmodel.h"

#include <sys/statvfs.h>

#include <filesystem>
#include <memory>

#include "runtime/tokenizer_hf.h"
#include "tools/mkmodel_fill.h"
#include "tools/mkmodel_progress.h"

namespace zenmoe::tools {
namespace {

constexpr uint64_t kAlignment = 32;

uint64_t pad(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Free bytes where `path` will be created; 0 if unknown (then no check is made).
uint64_t free_bytes_for(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

Expected<ModelLayout> layout_model(const ModelConfig& cfg, QuantMode quant) {
  ZENMOE_RETURN_IF_ERROR(validate_config(cfg));
  ModelLayout lay;
  lay.tensors = plan_tensors(cfg, quant);
  std::vector<TensorDesc> descs;
  for (const auto& t : lay.tensors) {
    ZENMOE_RETURN_IF_ERROR(check_fillable(t));
    TensorDesc d;
    d.name = t.name;
    d.type = t.type;
    for (size_t k = 0; k < t.dims.size(); ++k) d.ne[k] = t.dims[k];
    d.nbytes = t.nbytes();
    lay.data_bytes += pad(d.nbytes);
    descs.push_back(std::move(d));
  }
  auto st = compute_stats(descs, cfg.n_expert, cfg.n_expert_used);
  if (!st) return Error{st.error()};
  lay.stats = *st;
  return lay;
}

Expected<gguf::Metadata> tokenizer_metadata(int64_t n_vocab, const std::string& tokenizer_json,
                                            const std::string& tokenizer_config) {
  gguf::Metadata m;
  if (tokenizer_json.empty()) {
    auto v = make_builtin_vocab(n_vocab);
    if (!v) return Error{v.error()};
    add_vocab_metadata(*v, m);
    return m;
  }
  ZENMOE_RETURN_IF_ERROR(tok::hf_tokenizer_to_metadata(tokenizer_json, tokenizer_config, &m));
  return m;
}

gguf::Metadata model_metadata(const MkModelOptions& opt) {
  gguf::Metadata m;
  add_model_metadata(opt.cfg, opt.quant, m);
  for (const auto& [k, v] : opt.tokenizer.entries()) m.set(k, v);
  // Provenance of the synthetic weights (llama.cpp ignores unknown keys).
  m.set("zenmoe.mkmodel.preset", gguf::Value::string(opt.cfg.preset));
  m.set("zenmoe.mkmodel.quant", gguf::Value::string(quant_mode_name(opt.quant)));
  m.set("zenmoe.mkmodel.seed", gguf::Value::u64(opt.seed));
  return m;
}

Expected<ModelLayout> write_model(const MkModelOptions& opt_in, const std::string& path) {
  MkModelOptions opt = opt_in;
  const gguf::Value* toks = opt.tokenizer.find("tokenizer.ggml.tokens");
  if (!toks || toks->array_size() == 0) return Error{"no tokenizer vocabulary given"};
  opt.cfg.n_vocab = static_cast<int64_t>(toks->array_size());
  auto lay = layout_model(opt.cfg, opt.quant);
  if (!lay) return Error{lay.error()};

  const uint64_t free = free_bytes_for(path);
  const uint64_t need = lay->data_bytes + (64ull << 20);  // + metadata and slack
  if (free != 0 && free < need)
    return Error{path + ": the model needs " + gb(need) + " but only " + gb(free) +
                 " are free there (use --layers or smaller dimensions)"};

  gguf::Writer w;
  w.metadata() = model_metadata(opt);
  w.set_alignment(static_cast<uint32_t>(kAlignment));
  std::unique_ptr<ProgressBar> bar;
  if (opt.progress) bar = std::make_unique<ProgressBar>("mkmodel", lay->data_bytes);
  std::atomic<uint64_t>* counter = bar ? &bar->counter() : nullptr;
  for (const TensorPlan& t : lay->tensors) {
    auto fill = [&opt, t, counter](uint8_t* dst, uint64_t) {
      // Types were checked in layout_model, so filling cannot fail here.
      (void)fill_tensor(t, opt.seed, dst, opt.threads, counter);
    };
    ZENMOE_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, t.dims, fill));
  }
  Status s = w.write(path);
  if (bar) bar->finish();
  if (!s) return Error{s.message()};
  return lay;
}

}  // namespace zenmoe::tools
