// The light per-token ops of the fast executor (norms, quantisation, SwiGLU, residual adds,
// expert sums, RoPE, router) on generated glue kernels (codegen/glue.h, LLVM ORC). An op the
// glue library does not cover (or whose numerics the reference defines differently, such as
// the x86 Q8_0 activation quantiser) stays on the reference interpreter.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "ir/graph.h"
#include "runtime/ref_executor_ops.h"

namespace zenmoe {

class LightGlue {
 public:
  // Null when the node stays on the reference path; an error when generation fails.
  static Expected<std::unique_ptr<LightGlue>> create(const ir::Node& n, const ir::Graph& g, isa::Target target);
  // Runs tokens [t0, t1) of the node (token dimension last in every per-token value).
  void run(int64_t t0, int64_t t1, std::span<refexec::Tensor* const> in, std::span<refexec::Tensor* const> out) const;
  const std::string& name() const { return name_; }

 private:
  ir::OpKind op_ = ir::OpKind::Add;
  GlueFn fn_ = nullptr;
  std::string name_;
  int64_t rope_dims_ = 0;
};

GlueCpu glue_cpu_for(isa::Tuning t);

}  // namespace zenmoe
