// `zenmoe mkmodel`: writes a synthetic deepseek2 GGUF (random but deterministic weights with
// real shapes, keys and formats), the stand-in for real checkpoints in tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.h"
#include "runtime/gguf.h"
#include "tools/builtin_vocab.h"
#include "tools/mkmodel_config.h"
#include "tools/mkmodel_plan.h"
#include "tools/model_stats.h"

namespace zenmoe::tools {

struct MkModelOptions {
  ModelConfig cfg;
  QuantMode quant = QuantMode::Q4_K_S;
  uint64_t seed = 1;
  int threads = 1;             // generation threads
  bool progress = false;       // progress bar on stderr (shown only after 1 s)
  gguf::Metadata tokenizer;    // tokenizer.* keys; its token count overrides cfg.n_vocab
};

// The tokenizer keys of a model: the built-in vocabulary of n_vocab tokens, or, when
// `tokenizer_json` is set, a Hugging Face tokenizer.json (+ tokenizer_config.json for the
// special ids and chat template; "" = none).
Expected<gguf::Metadata> tokenizer_metadata(int64_t n_vocab, const std::string& tokenizer_json,
                                            const std::string& tokenizer_config);

// Everything about the file before it is written.
struct ModelLayout {
  std::vector<TensorPlan> tensors;
  ModelStats stats;
  uint64_t data_bytes = 0;  // tensor data incl. alignment padding
};

// Plans the tensors, checks every type can be produced and computes the stats.
Expected<ModelLayout> layout_model(const ModelConfig& cfg, QuantMode quant);

// All metadata of the file: general.*, deepseek2.*, tokenizer.*, zenmoe.mkmodel.*.
gguf::Metadata model_metadata(const MkModelOptions& opt);

// Plans, generates and writes the model to `path` atomically. Errors name the problem
// (bad dimensions, not enough disk space, write failure) and leave no file behind.
Expected<ModelLayout> write_model(const MkModelOptions& opt, const std::string& path);

}  // namespace zenmoe::tools
