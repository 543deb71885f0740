// Kernel registry: descriptor → generated kernel, generated at most once per descriptor,
// safe to call from any thread. Kernels live as long as the registry (or longer, while a
// caller holds the shared_ptr).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/kernel.h"
#include "codegen/kernel_desc.h"
#include "kernels/status.h"

namespace zenmoe {

class Registry {
 public:
  // The kernel for `d`: validates it, refuses an ISA level the host lacks (the generator
  // never emits an instruction the host cannot run), generates it on first use.
  // IsaLevel::kScalar gives the scalar reference of the packed layout.
  Expected<std::shared_ptr<const Kernel>> get(const KernelDesc& d);

  // Writes every generated kernel as DIR/<instance_name>.bin (raw machine code, for
  // `objdump -D -b binary -m i386:x86-64 FILE`). Returns the number of files written.
  Expected<int> dump(const std::string& dir) const;

  int generated() const;  // how many generations ran (tests check "at most once per key")
  std::vector<std::shared_ptr<const Kernel>> kernels() const;

 private:
  struct Slot {
    std::once_flag once;
    std::shared_ptr<const Kernel> kernel;
    std::string error;
  };
  mutable std::mutex mu_;
  std::unordered_map<KernelDesc, std::shared_ptr<Slot>, KernelDescHash> slots_;
  int generated_ = 0;
};

// ISA levels with a kernel for this weight format (scalar reference included), lowest first.
// Tests run every one of them that the host supports.
std::vector<isa::IsaLevel> implemented_levels(GgmlType weight);
// The same for the GEMM ops (KernelOp::kGemm, kGemmAccumulate).
std::vector<isa::IsaLevel> implemented_gemm_levels(GgmlType weight);

// The process-wide registry used by the runtime, the CLI and the benchmarks.
Registry& global_registry();

}  // namespace zenmoe
