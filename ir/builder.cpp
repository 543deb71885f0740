#include "ir/builder.h"

#include "ir/builder_deepseek2.h"
#include "ir/verifier.h"

namespace zenmoe::ir {

Expected<Graph> build_graph(const ModelInfo& info) {
  auto arch = info.get_string("general.architecture");
  if (!arch) return Error{arch.error()};
  if (*arch != "deepseek2")
    return Error{info.source + ": architecture '" + *arch +
                 "' is not supported (zenmoe builds deepseek2 graphs)"};
  auto g = build_deepseek2(info);
  if (!g) return g;
  ZENMOE_RETURN_IF_ERROR(verify(*g));
  return g;
}

}  // namespace zenmoe::ir
