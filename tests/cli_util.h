// Running the built `zenmoe` binary from tests: one helper shared by the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace zenmoe::testing_cli {

struct CliResult {
  int status = -1;  // exit status, -1 when killed by a signal
  std::string out, err;
};

inline std::string slurp_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file of float32 values (a `zenmoe logits` output), as many whole values as it holds.
inline std::vector<float> read_f32(const std::filesystem::path& p) {
  const std::string bytes = slurp_file(p);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// A directory private to this process and `tag`, created on first use and removed with its
// contents when the process exits (not by a forked child), so repeated test runs leave
// nothing behind in the temporary directory.
inline std::filesystem::path process_scratch_dir(const std::string& tag) {
  struct Dir {
    std::filesystem::path path;
    pid_t owner = ::getpid();
    explicit Dir(const std::string& name)
        : path(std::filesystem::temp_directory_path() / ("zenmoe_" + name + "_" + std::to_string(::getpid()))) {
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      if (::getpid() == owner) std::filesystem::remove_all(path, ec);
    }
  };
  static std::mutex mu;
  static std::map<std::string, Dir> dirs;
  std::lock_guard<std::mutex> lock(mu);
  return dirs.try_emplace(tag, tag).first->second.path;
}

// Runs `zenmoe <args>` (args already shell-quoted where needed) with stdout and stderr captured
// in files under `scratch` (a directory private to the calling test).
inline CliResult run_zenmoe(const std::string& args, const std::filesystem::path& scratch) {
  const auto out = scratch / "cli_stdout", err = scratch / "cli_stderr";
  const std::string cmd = std::string("'") + ZENMOE_BINARY + "' " + args + " >'" + out.string() + "' 2>'" +
                          err.string() + "' </dev/null";
  const int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp_file(out);
  r.err = slurp_file(err);
  return r;
}

// Bad input: exit status 1 and exactly one "zenmoe: ..." line on stderr that names `needle`.
inline void expect_one_line_error(const CliResult& r, const std::string& args, const std::string& needle) {
  EXPECT_EQ(r.status, 1) << args;
  EXPECT_EQ(r.err.rfind("zenmoe: ", 0), 0u) << args << " -> " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << " -> " << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << " -> " << r.err;
}

}  // namespace zenmoe::testing_cli
