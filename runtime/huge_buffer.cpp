#include "runtime/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace zenmoe {

Expected<std::shared_ptr<uint8_t>> alloc_huge_buffer(uint64_t bytes, const char* what) {
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  const uint64_t len = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align the start
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Error{std::string(what) + ": cannot allocate " + std::to_string(bytes >> 20) + " MiB"};
  auto* base = static_cast<uint8_t*>(p);
  const uint64_t skip = (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
  ::madvise(base + skip, len - skip, MADV_HUGEPAGE);  // a hint: without it only TLB misses grow
  return std::shared_ptr<uint8_t>(base + skip, [base, len](uint8_t*) { ::munmap(base, len); });
}

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace zenmoe
