#include "codegen/perf_map.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace zenmoe {

bool perf_map_enabled() {
  const char* v = std::getenv("ZENMOE_PERF_MAP");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

void perf_map_note(const void* code, size_t size, std::string_view name) {
  if (!perf_map_enabled() || code == nullptr || size == 0) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return;
  std::fprintf(f, "%zx %zx %.*s\n", reinterpret_cast<size_t>(code), size, static_cast<int>(name.size()), name.data());
  std::fclose(f);
}

}  // namespace zenmoe
