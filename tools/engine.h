// Picks the forward-pass engine for the front ends (run, logits): the one place where a faster
// engine will be preferred over the scalar reference once it exists.
#pragma once

#include <memory>

#include "kernels/status.h"
#include "runtime/executor.h"

namespace zenmoe::gguf {
class Model;
}

namespace zenmoe::tools {

enum class Engine {
  Best,       // the fastest engine that supports the model
  Reference,  // the scalar reference executor (--ref)
};

const char* engine_name(Engine e);

// The model must outlive the executor.
Expected<std::unique_ptr<Executor>> make_engine(const gguf::Model& model, const ExecutorOptions& opts,
                                                Engine which);

}  // namespace zenmoe::tools
