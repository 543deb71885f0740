#include "tools/engine.h"

#include "codegen/isa.h"
#include "runtime/compiled_model.h"
#include "runtime/fast_executor.h"
#include "runtime/ref_executor.h"

namespace zenmoe::tools {

const char* engine_name(Engine e) { return e == Engine::Reference ? "reference" : "best"; }

Expected<std::unique_ptr<Executor>> make_engine(const gguf::Model& model, const ExecutorOptions& opts,
                                                Engine which) {
  if (which == Engine::Reference) return make_reference_executor(model, opts);
  auto target = isa::resolve_target("");  // ZENMOE_ISA caps it
  if (!target) return Error{target.error()};
  CompileOptions co;
  co.target = *target;
  auto cm = compile_in_memory(model, co);
  if (!cm) return Error{cm.error()};
  FastExecutorOptions fo;
  fo.base = opts;
  auto ex = make_fast_executor(std::make_shared<const CompiledModel>(std::move(*cm)), fo);
  if (!ex) return Error{ex.error()};
  return std::unique_ptr<Executor>(std::move(*ex));
}

}  // namespace zenmoe::tools
