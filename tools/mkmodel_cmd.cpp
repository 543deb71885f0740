// The `zenmoe mkmodel` command line.
#include <cstdio>
#include <filesystem>
#include <thread>

#include "tools/args.h"
#include "tools/commands.h"
#include "tools/mkmodel.h"

namespace zenmoe::tools {
namespace {

std::vector<FlagSpec> mkmodel_flags() {
  std::vector<FlagSpec> s = {
      {"preset", "", true, "tiny | small | bench | kimi-k2 (default tiny)"},
      {"output", "o", true, "output GGUF path (required)"},
      {"quant", "q", true, "q4_k_s (default) | f16 | bf16 | q8_0 | q4_k"},
      {"seed", "s", true, "weight seed (default 1)"},
      {"threads", "t", true, "generation threads (default: all cores)"},
      {"tokenizer", "", true, "Hugging Face tokenizer.json to embed (default: built-in vocabulary)"},
      {"tokenizer-config", "", true, "its tokenizer_config.json (default: the one beside it, if any)"},
      {"dry-run", "", false, "print the model's size and bytes per token without writing it"},
      {"help", "h", false, "show this help"},
  };
  for (const auto& f : dimension_flags()) s.push_back(f);
  return s;
}

void print_summary(const std::string& what, const MkModelOptions& opt, const ModelLayout& lay) {
  const ModelStats& st = lay.stats;
  std::printf("%s: deepseek2 %s, %s, %zu tensors, %.2f MB of weights\n", what.c_str(),
              opt.cfg.preset.c_str(), quant_mode_name(opt.quant), lay.tensors.size(),
              static_cast<double>(st.total_bytes) / 1e6);
  std::printf("parameters: %.3f M total, %.3f M active per token; %.2f MB read per decoded token\n",
              static_cast<double>(st.total_params) / 1e6, static_cast<double>(st.active_params) / 1e6,
              static_cast<double>(st.active_bytes) / 1e6);
}

}  // namespace

int cmd_mkmodel(int argc, char** argv, int first) {
  const auto specs = mkmodel_flags();
  auto args = Args::parse(argc, argv, first, specs);
  if (!args) return fail("mkmodel: " + args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("mkmodel --preset NAME -o OUT.gguf [options]", specs).c_str());
    return 0;
  }
  if (!args->positionals().empty())
    return fail("mkmodel: unexpected argument '" + args->positionals()[0] + "'");
  const bool dry_run = args->has("dry-run");
  if (!args->has("output") && !dry_run) return fail("mkmodel: -o OUT.gguf is required");

  auto cfg = preset_config(args->get("preset", "tiny"));
  if (!cfg) return fail("mkmodel: " + cfg.error());
  MkModelOptions opt;
  opt.cfg = *cfg;
  if (Status s = apply_dimension_flags(*args, opt.cfg); !s) return fail("mkmodel: " + s.message());
  auto quant = parse_quant_mode(args->get("quant", "q4_k_s"));
  if (!quant) return fail("mkmodel: " + quant.error());
  opt.quant = *quant;
  auto seed = args->get_int("seed", 1, 0, INT64_MAX);
  if (!seed) return fail("mkmodel: " + seed.error());
  opt.seed = static_cast<uint64_t>(*seed);
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  auto threads = args->get_int("threads", cores, 1, 256);
  if (!threads) return fail("mkmodel: " + threads.error());
  opt.threads = static_cast<int>(*threads);
  opt.progress = true;

  std::string config = args->get("tokenizer-config");
  if (args->has("tokenizer") && !args->has("tokenizer-config")) {
    const auto beside = std::filesystem::path(args->get("tokenizer")).parent_path() / "tokenizer_config.json";
    if (std::filesystem::exists(beside)) config = beside.string();
  }
  if (args->has("tokenizer-config") && !args->has("tokenizer"))
    return fail("mkmodel: --tokenizer-config needs --tokenizer");
  auto tok = tokenizer_metadata(opt.cfg.n_vocab, args->get("tokenizer"), config);
  if (!tok) return fail("mkmodel: " + tok.error());
  opt.tokenizer = std::move(*tok);

  if (dry_run) {
    const gguf::Value* toks = opt.tokenizer.find("tokenizer.ggml.tokens");
    if (!toks) return fail("mkmodel: the tokenizer has no tokenizer.ggml.tokens");
    opt.cfg.n_vocab = static_cast<int64_t>(toks->array_size());
    auto lay = layout_model(opt.cfg, opt.quant);
    if (!lay) return fail("mkmodel: " + lay.error());
    print_summary("would write", opt, *lay);
    return 0;
  }
  const std::string path = args->get("output");
  auto lay = write_model(opt, path);
  if (!lay) return fail("mkmodel: " + lay.error());
  print_summary("wrote " + path, opt, *lay);
  return 0;
}

}  // namespace zenmoe::tools
