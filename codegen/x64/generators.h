// Entry points of the xbyak generators (internal to codegen/).
#pragma once

#include <memory>

#include "codegen/kernel.h"
#include "kernels/status.h"

namespace zenmoe::x64 {

// Generates machine code for a validated descriptor whose ISA the host supports.
Expected<std::unique_ptr<KernelCode>> generate_gemv(const KernelDesc& d);

// Per-format generators (one file each).
Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k(const KernelDesc& d);

}  // namespace zenmoe::x64
