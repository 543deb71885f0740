// `zenmoe bench <what>`: one function per subcommand, each taking the full argv and the index
// of its first own argument and returning the exit status.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::tools {

int bench_kernels(int argc, char** argv, int first);    // GEMV kernels vs read bandwidth
int bench_bandwidth(int argc, char** argv, int first);  // read bandwidth, 1..N threads
int bench_model(int argc, char** argv, int first);      // whole-model prefill / decode speed
int bench_compute(int argc, char** argv, int first);    // instruction issue rates, 1..N threads

// Splits "a,b,c" into its non-empty items.
std::vector<std::string> split_list(const std::string& s);
// "1,2" -> {1, 2}; every item an integer in [1, 1024].
Expected<std::vector<int>> parse_thread_list(const std::string& flag, const std::string& s,
                                             const char* what = "thread counts");

}  // namespace zenmoe::tools
