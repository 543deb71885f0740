// Entry points of the xbyak generators (internal to codegen/).
#pragma once

#include <memory>
#include <vector>

#include "codegen/kernel.h"
#include "kernels/status.h"

namespace zenmoe::x64 {

// Generates machine code for a validated descriptor whose ISA the host supports.
Expected<std::unique_ptr<KernelCode>> generate_gemv(const KernelDesc& d);

// ISA levels (above scalar) that have a generator for this weight format.
std::vector<isa::IsaLevel> generated_levels(GgmlType weight);

// Per-format generators (one file each).

}  // namespace zenmoe::x64
