// zenmoe tokenize -m MODEL ["text"]: token ids as JSON (no BOS). Without text, one JSON string
// per stdin line in, one JSON array per line out.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/gguf.h"
#include "runtime/tokenizer.h"
#include "runtime/tokenizer_hf.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace zenmoe::tools {
namespace {

const std::vector<FlagSpec> kFlags = {
    {"model", "m", true, "model GGUF (or a Hugging Face tokenizer.json)"},
    {"no-special", "", false, "treat special-token texts as plain text"},
    {"help", "h", false, "show this help"},
};

// A GGUF's tokenizer, or a tokenizer.json converted on the fly (tokenizer_config.json beside it
// is used when present).
Expected<tok::Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::path(path).extension() == ".json") {
    const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    auto v = tok::hf_tokenizer_to_vocabulary(path, fs::exists(cfg, ec) ? cfg.string() : "");
    if (!v) return Error{v.error()};
    return tok::Tokenizer::create(*v);
  }
  auto model = gguf::Model::open(path);
  if (!model) return Error{model.error()};
  auto t = tok::Tokenizer::from_metadata(model->metadata());
  if (!t) return Error{path + ": " + t.error()};
  return t;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

int tokenize_stdin(const tok::Tokenizer& t, bool special) {
  std::string line;
  std::vector<int32_t> ids;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_string())
      return fail("stdin line " + std::to_string(n) + ": expected one JSON string");
    ids.clear();
    t.encode(j.get_ref<const std::string&>(), /*add_special=*/false, special, &ids);
    const std::string out = ids_json(ids) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);  // a caller may be waiting for this line before sending the next
  }
  return 0;
}

}  // namespace

int cmd_tokenize(int argc, char** argv, int first) {
  const std::string synopsis = "zenmoe tokenize -m MODEL [\"text\"]   (no text: JSON strings on stdin, one a line)";
  auto args = Args::parse(argc, argv, first, kFlags);
  if (!args) return fail(args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text(synopsis, kFlags).c_str());
    return 0;
  }
  if (!args->has("model")) return fail("tokenize: -m MODEL is required");
  if (args->positionals().size() > 1) return fail("tokenize: give the text as one argument (quote it)");
  auto t = load_tokenizer(args->get("model"));
  if (!t) return fail(t.error());
  const bool special = !args->has("no-special");
  if (args->positionals().empty()) return tokenize_stdin(*t, special);
  std::printf("%s\n", ids_json(t->encode(args->positionals()[0], false, special)).c_str());
  return 0;
}

}  // namespace zenmoe::tools
