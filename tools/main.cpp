#include <cstdio>
#include <cstring>

#include "tools/args.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**, int);
  const char* help;
};

constexpr Command kCommands[] = {
    {"version", zenmoe::tools::cmd_version, "print the version"},
    {"mkmodel", zenmoe::tools::cmd_mkmodel, "write a synthetic deepseek2 GGUF model"},
    {"inspect", zenmoe::tools::cmd_inspect, "show what a GGUF model holds"},
    {"tokenize", zenmoe::tools::cmd_tokenize, "print the token ids of a text (JSON)"},
    {"compile", zenmoe::tools::cmd_compile, "lower a GGUF model to a plan with repacked weights (.zplan)"},
    {"run", zenmoe::tools::cmd_run, "generate text from a prompt"},
    {"serve", zenmoe::tools::cmd_serve, "serve a model over HTTP (OpenAI-compatible completions and chat)"},
    {"batch", zenmoe::tools::cmd_batch, "answer a file of completion / chat requests (JSON lines) with one model load"},
    {"logits", zenmoe::tools::cmd_logits, "write the logits of every position of a token sequence"},
    {"perplexity", zenmoe::tools::cmd_perplexity, "perplexity over a text, KL divergence from saved log-probabilities"},
    {"bench", zenmoe::tools::cmd_bench, "measure kernels and memory bandwidth (kernels, bandwidth)"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: zenmoe <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 1;
  }
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    print_usage(stdout);
    return 0;
  }
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.fn(argc, argv, 2);
  return zenmoe::tools::fail(std::string("unknown command '") + argv[1] + "' (try zenmoe --help)");
}
