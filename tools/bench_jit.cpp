// Generated GEMV kernels (codegen registry) as benchmark runners.
#include "tools/bench_gemv.h"

namespace zenmoe::tools {

Expected<std::unique_ptr<GemvRunner>> make_jit_runner(const std::string& format,
                                                       const std::string& isa_cap, int64_t rows,
                                                       int64_t cols) {
  (void)isa_cap;
  (void)rows;
  (void)cols;
  return Error{"no generated GEMV kernel for " + format + " in this build (codegen registry not present yet)"};
}

}  // namespace zenmoe::tools
