#include "tools/engine.h"

#include "runtime/ref_executor.h"

namespace zenmoe::tools {

const char* engine_name(Engine e) { return e == Engine::Reference ? "reference" : "best"; }

Expected<std::unique_ptr<Executor>> make_engine(const gguf::Model& model, const ExecutorOptions& opts,
                                                Engine which) {
  // The scalar reference executor is today's only engine, so Best resolves to it as well.
  (void)which;
  return make_reference_executor(model, opts);
}

}  // namespace zenmoe::tools
