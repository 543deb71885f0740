#pragma once
// Names for generated code in sampling profiles. With ZENMOE_PERF_MAP=1 in the environment, each
// generated kernel (xbyak GEMV / GEMM, LLVM glue) is appended as "address size name" to
// /tmp/perf-PID.map, the file `perf report` reads to name samples in anonymous executable
// memory. Off (the default), nothing is written. Kernels are noted when first generated or
// loaded in the process.

#include <cstddef>
#include <string_view>

namespace zenmoe {

// Whether ZENMOE_PERF_MAP asks for the map (set, not empty and not "0").
bool perf_map_enabled();
// Appends one line for [code, code + size) if enabled; a failed write is ignored (profiling aid).
void perf_map_note(const void* code, size_t size, std::string_view name);

}  // namespace zenmoe
