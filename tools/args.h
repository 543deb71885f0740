// Small command-line parser shared by every zenmoe subcommand: GNU-style `--flag value`,
// `--flag=value`, short aliases, positionals; every problem is one clear error line.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::tools {

struct FlagSpec {
  std::string name;        // long name without dashes, e.g. "threads"
  std::string short_name;  // e.g. "t" (may be empty)
  bool takes_value;        // false for switches such as --json
  std::string help;
  bool repeatable = false;  // a flag with a value that may be given more than once (get_all)
};

class Args {
 public:
  // Parses argv[first..argc). Unknown flags, missing values and repeated flags (unless
  // repeatable) are errors.
  static Expected<Args> parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& def = "") const;  // the last value
  // Every value of a repeatable flag, in the order given.
  std::vector<std::string> get_all(const std::string& name) const;
  Expected<int64_t> get_int(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  Expected<double> get_double(const std::string& name, double def, double lo, double hi) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;
  std::vector<std::string> positionals_;
};

// "usage: zenmoe <cmd> ..." followed by one line per flag.
std::string usage_text(const std::string& synopsis, const std::vector<FlagSpec>& specs);

// The whole of a file; errors name it as `what` (e.g. "prompt file").
Expected<std::string> read_text_file(const std::string& path, const std::string& what);

// Prints "zenmoe: <message>" on stderr and returns 1 (the CLI's error exit status).
int fail(const std::string& message);

}  // namespace zenmoe::tools
