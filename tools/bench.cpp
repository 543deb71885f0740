#include "tools/bench.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/args.h"
#include "tools/commands.h"

namespace zenmoe::tools {
namespace {

struct Subcommand {
  const char* name;
  int (*fn)(int, char**, int);
  const char* help;
};

constexpr Subcommand kSubcommands[] = {
    {"kernels", bench_kernels, "GEMV kernels and baselines as fractions of the measured read bandwidth"},
    {"bandwidth", bench_bandwidth, "read bandwidth over a buffer much larger than L3, 1..N threads"},
    {"model", bench_model, "prefill and decode tok/s of a model, and its decode traffic vs read bandwidth"},
    {"compute", bench_compute, "issue rates of the kernels' instruction forms (FMA, VNNI, BF16 dot, F16 widening)"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: zenmoe bench <what> [options]\n\n");
  for (const auto& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.help);
}

}  // namespace

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Expected<std::vector<int>> parse_thread_list(const std::string& flag, const std::string& s, const char* what) {
  std::vector<int> out;
  for (const auto& item : split_list(s)) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 1024)
      return Error{"--" + flag + " expects " + what + " in [1, 1024] separated by commas, got '" + s + "'"};
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return Error{"--" + flag + " is empty"};
  return out;
}

int cmd_bench(int argc, char** argv, int first) {
  if (first >= argc) {
    print_usage(stderr);
    return 1;
  }
  const char* what = argv[first];
  if (!std::strcmp(what, "-h") || !std::strcmp(what, "--help")) {
    print_usage(stdout);
    return 0;
  }
  for (const auto& s : kSubcommands)
    if (!std::strcmp(what, s.name)) return s.fn(argc, argv, first + 1);
  return fail(std::string("unknown benchmark '") + what + "' (expected kernels, bandwidth, model or compute)");
}

}  // namespace zenmoe::tools
