// The zenmoe subcommands. Each takes the full argv and the index of its first own argument,
// and returns the process exit status (0 ok, 1 error with one line on stderr).
#pragma once

namespace zenmoe::tools {

int cmd_version(int argc, char** argv, int first);
int cmd_mkmodel(int argc, char** argv, int first);
int cmd_inspect(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_logits(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_compile(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);
int cmd_batch(int argc, char** argv, int first);
int cmd_perplexity(int argc, char** argv, int first);

}  // namespace zenmoe::tools
