// ZENMOE_PERF_MAP: generated kernels are named in /tmp/perf-PID.map for sampling profilers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "codegen/kernel_desc.h"
#include "codegen/perf_map.h"
#include "codegen/registry.h"

namespace zenmoe {
namespace {

struct MapLine {
  uint64_t addr = 0, size = 0;
};

// The line naming `name` in the map, if any.
bool find_line(const std::string& path, const std::string& name, MapLine* out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string addr, size, n;
    if (!(ls >> addr >> size >> n) || n != name) continue;
    out->addr = std::stoull(addr, nullptr, 16);
    out->size = std::stoull(size, nullptr, 16);
    return true;
  }
  return false;
}

TEST(PerfMap, NamesGeneratedKernelsOnlyWhenAsked) {
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::remove(path.c_str());
  ::unsetenv("ZENMOE_PERF_MAP");
  EXPECT_FALSE(perf_map_enabled());
  // Shapes no other test generates, so these calls generate (or load) them here.
  auto before = global_registry().get(default_gemv_desc(GgmlType::Q8_0, 32 * 41, isa::Target{isa::host_level(), isa::host_tuning()}));
  ASSERT_TRUE(before) << before.error();
  EXPECT_FALSE(std::ifstream(path).good()) << "map written while off";

  ::setenv("ZENMOE_PERF_MAP", "0", 1);
  EXPECT_FALSE(perf_map_enabled());
  ::setenv("ZENMOE_PERF_MAP", "1", 1);
  EXPECT_TRUE(perf_map_enabled());
  auto k = global_registry().get(default_gemv_desc(GgmlType::Q8_0, 32 * 43, isa::Target{isa::host_level(), isa::host_tuning()}));
  ASSERT_TRUE(k) << k.error();
  const GlueDesc gd = glue_add_desc(1237, isa::host_level());
  auto fn = glue_kernel(gd);
  ASSERT_TRUE(fn) << fn.error();
  ::unsetenv("ZENMOE_PERF_MAP");

  MapLine line;
  if ((*k)->code() != nullptr) {  // the scalar reference has no machine code
    ASSERT_TRUE(find_line(path, (*k)->name(), &line)) << (*k)->name() << " not in " << path;
    EXPECT_EQ(line.addr, reinterpret_cast<uintptr_t>((*k)->code()));
    EXPECT_EQ(line.size, (*k)->code_size());
  }
  ASSERT_TRUE(find_line(path, glue_name(gd), &line)) << glue_name(gd) << " not in " << path;
  EXPECT_EQ(line.addr, reinterpret_cast<uintptr_t>(*fn));
  EXPECT_GT(line.size, 16u);
  EXPECT_LT(line.size, 1u << 20);
  EXPECT_FALSE(find_line(path, (*before)->name(), &line)) << "a kernel generated while off was named";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zenmoe
