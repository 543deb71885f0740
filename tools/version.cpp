#include <cstdio>

#include "tools/args.h"
#include "tools/commands.h"

namespace zenmoe::tools {

int cmd_version(int argc, char** argv, int first) {
  auto args = Args::parse(argc, argv, first, {});
  if (!args) return fail(args.error());
  std::printf("zenmoe 0.1.0\n");
  return 0;
}

}  // namespace zenmoe::tools
