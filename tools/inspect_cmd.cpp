// The `zenmoe inspect` command line. Each output mode is one function below; a new mode is
// one FlagSpec in inspect_flags() plus one branch in cmd_inspect.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "ir/printer.h"
#include "runtime/ref_executor_model.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/inspect.h"

namespace zenmoe::tools {
namespace {

using json = nlohmann::ordered_json;

std::vector<FlagSpec> inspect_flags() {
  return {
      {"json", "", false, "machine-readable report on stdout"},
      {"tensor", "", true, "one tensor: its info and value statistics"},
      {"dequant", "", true, "with --tensor: write it dequantised to float32 (storage order)"},
      {"ir", "", false, "print the forward-pass graph (IR text) built from the model"},
      {"help", "h", false, "show this help"},
  };
}

std::string dump(const json& j, int indent = 2) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

int report(const gguf::Model& model, bool as_json) {
  if (as_json) {
    auto j = inspect_json(model);
    if (!j) return fail("inspect: " + j.error());
    std::printf("%s\n", dump(*j).c_str());
    return 0;
  }
  auto text = inspect_text(model);
  if (!text) return fail("inspect: " + text.error());
  std::fputs(text->c_str(), stdout);
  return 0;
}

int tensor_report(const gguf::Model& model, const std::string& name, bool as_json) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (!t) return fail("inspect: no tensor named '" + name + "' in " + model.files().front().path());
  auto st = tensor_value_stats(*t);
  if (!st) return fail("inspect: " + st.error());
  json shape = json::array();
  for (int k = 0; k < std::max(1, t->n_dims); ++k) shape.push_back(t->ne[k]);
  const double n = st->count ? static_cast<double>(st->count) : 1.0;
  const double mean = st->sum / n;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016" PRIx64, st->fnv1a64);
  json j{{"name", t->name}, {"type", type_name(t->type)}, {"shape", shape}, {"bytes", t->nbytes},
         {"count", st->count}, {"fnv1a64_f32", hash}, {"sum", st->sum}, {"sumsq", st->sumsq},
         {"mean", mean}, {"std", std::sqrt(std::max(0.0, st->sumsq / n - mean * mean))},
         {"min", st->min}, {"max", st->max}, {"non_finite", st->non_finite},
         {"first", std::vector<float>(st->first, st->first + std::min<uint64_t>(8, st->count))}};
  if (as_json) {
    std::printf("%s\n", dump(j).c_str());
    return 0;
  }
  for (const auto& [k, v] : j.items()) std::printf("%-12s %s\n", k.c_str(), dump(v, -1).c_str());
  return 0;
}

int ir_report(const gguf::Model& model) {
  auto g = build_graph_from_gguf(model);
  if (!g) return fail("inspect: " + g.error());
  std::fputs(ir::print_graph(*g).c_str(), stdout);
  return 0;
}

}  // namespace

int cmd_inspect(int argc, char** argv, int first) {
  const auto specs = inspect_flags();
  auto args = Args::parse(argc, argv, first, specs);
  if (!args) return fail("inspect: " + args.error());
  if (args->has("help")) {
    std::printf("%s", usage_text("inspect MODEL.gguf [--json] [--tensor NAME [--dequant OUT.f32]] [--ir]", specs).c_str());
    return 0;
  }
  if (args->positionals().size() != 1)
    return fail("inspect: expected one MODEL.gguf argument (got " +
                std::to_string(args->positionals().size()) + ")");
  if (args->has("dequant") && !args->has("tensor")) return fail("inspect: --dequant needs --tensor NAME");
  auto model = gguf::Model::open(args->positionals()[0]);
  if (!model) return fail(model.error());
  const bool as_json = args->has("json");
  if (args->has("dequant")) {
    Status s = dequantize_tensor_to_file(*model, args->get("tensor"), args->get("dequant"));
    if (!s) return fail("inspect: " + s.message());
    return tensor_report(*model, args->get("tensor"), as_json);
  }
  if (args->has("tensor")) return tensor_report(*model, args->get("tensor"), as_json);
  if (args->has("ir")) return ir_report(*model);
  return report(*model, as_json);
}

}  // namespace zenmoe::tools
