// `zenmoe inspect --ir MODEL.gguf` prints the graph: the golden text for the oracle model, and
// one clear error line for a file whose graph cannot be built.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace zenmoe {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(ZENMOE_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}

TEST(IrInspect, PrintsTheGoldenGraph) {
  CliRun r = run("inspect --ir " + std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf");
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(std::string(ZENMOE_SOURCE_DIR) + "/tests/golden/deepseek2_tiny_q4ks.ir");
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(r.out, golden.str());
}

TEST(IrInspect, F16ModelBuildsToo) {
  CliRun r = run("inspect --ir " + std::string(ZENMOE_ORACLE_DIR) + "/tiny-f16.gguf");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("%blk.0.q_nope.f16 : f16[128,8,T] = quantize(%blk.0.q_nope)"), std::string::npos);
  EXPECT_NE(r.out.find("output %logits"), std::string::npos);
}

}  // namespace
}  // namespace zenmoe
