// The fast executor: runs a CompiledModel's graph node by node on the generated kernels with
// one pinned thread pool. Matrix products and attention are split across the threads; the
// light per-token ops (norms, quantisation, RoPE, router, residual adds) are split by tokens
// in a batch and run on the calling thread for a single token. Activations live in one arena
// laid out by ir::plan_memory; a long batch is evaluated in chunks of max_batch tokens.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/status.h"
#include "runtime/compiled_model.h"
#include "runtime/executor.h"

namespace zenmoe {

struct FastExecutorOptions {
  ExecutorOptions base;
  int max_batch = kDefaultMaxBatch;  // tokens per forward chunk (arena sized for it)
  bool pin = true;       // pin the pool's threads to cores
  // MLA in the decompressed form keeps the keys and values it decompressed across the chunks of
  // a prompt (and later prompts continuing it), so each position is decompressed once, while
  // all layers' kept rows fit in this many bytes (kMlaKeepAuto: a sixteenth of the physical
  // memory); past it, every chunk decompresses every position it sees again.
  static constexpr int64_t kMlaKeepAuto = -1;
  int64_t mla_keep_bytes = kMlaKeepAuto;
};

class FastExecutor : public Executor {
 public:
  // One line per matmul weight: the kernel that runs it (dispatch log).
  virtual std::vector<std::string> dispatch_log() const = 0;
  virtual const std::string& placement() const = 0;
  // Forward chunks that ran MLA attention in the decompressed form (see MlaForm), since creation.
  virtual int64_t decompressed_chunks() const = 0;
};

Expected<std::unique_ptr<FastExecutor>> make_fast_executor(std::shared_ptr<const CompiledModel> model,
                                                           const FastExecutorOptions& opts);

}  // namespace zenmoe
