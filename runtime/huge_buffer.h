// Large read-mostly buffers for packed weights. Anonymous memory asked to use transparent huge
// pages: weights are streamed once per token, and with 4 KiB pages every 4 KiB of a stream costs
// a TLB miss and stops the hardware prefetcher at the page boundary.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/status.h"

namespace zenmoe {

// `bytes` of zeroed memory, 2 MiB aligned, freed when the last owner goes.
Expected<std::shared_ptr<uint8_t>> alloc_huge_buffer(uint64_t bytes, const char* what);

// The machine's physical memory in bytes (0 when the system does not say).
uint64_t physical_memory_bytes();

}  // namespace zenmoe
