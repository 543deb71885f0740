#include "tools/args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace zenmoe::tools {
namespace {

const FlagSpec* find_spec(const std::vector<FlagSpec>& specs, const std::string& name, bool is_short) {
  for (const auto& s : specs)
    if ((is_short ? s.short_name : s.name) == name && !name.empty()) return &s;
  return nullptr;
}

}  // namespace

Expected<Args> Args::parse(int argc, char** argv, int first, const std::vector<FlagSpec>& specs) {
  Args a;
  bool only_positionals = false;
  for (int i = first; i < argc; ++i) {
    std::string tok = argv[i];
    if (only_positionals || tok.size() < 2 || tok[0] != '-' || (tok[1] >= '0' && tok[1] <= '9')) {
      a.positionals_.push_back(tok);
      continue;
    }
    if (tok == "--") {
      only_positionals = true;
      continue;
    }
    bool is_long = tok.rfind("--", 0) == 0;
    std::string body = tok.substr(is_long ? 2 : 1);
    std::string inline_value;
    bool has_inline = false;
    if (size_t eq = body.find('='); is_long && eq != std::string::npos) {
      inline_value = body.substr(eq + 1);
      body = body.substr(0, eq);
      has_inline = true;
    }
    const FlagSpec* spec = find_spec(specs, body, !is_long);
    if (!spec) return Error{"unknown flag '" + tok + "'"};
    if (a.values_.count(spec->name) && !spec->repeatable) return Error{"flag --" + spec->name + " given twice"};
    if (!spec->takes_value) {
      if (has_inline) return Error{"flag --" + spec->name + " takes no value"};
      a.values_[spec->name] = "1";
      continue;
    }
    if (has_inline) {
      a.values_[spec->name] = inline_value;
    } else {
      if (i + 1 >= argc) return Error{"flag " + tok + " needs a value"};
      a.values_[spec->name] = argv[++i];
    }
    a.all_[spec->name].push_back(a.values_[spec->name]);
  }
  return a;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

Expected<int64_t> Args::get_int(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    return Error{"--" + name + " expects an integer, got '" + s + "'"};
  if (v < lo || v > hi)
    return Error{"--" + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], got " + s};
  return static_cast<int64_t>(v);
}

Expected<double> Args::get_double(const std::string& name, double def, double lo, double hi) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || v != v)
    return Error{"--" + name + " expects a number, got '" + s + "'"};
  if (v < lo || v > hi)
    return Error{"--" + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], got " + s};
  return v;
}

std::string usage_text(const std::string& synopsis, const std::vector<FlagSpec>& specs) {
  std::string out = "usage: zenmoe " + synopsis + "\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.short_name.empty() ? "" : ", -" + s.short_name) +
                       (s.takes_value ? " V" : "");
    if (left.size() < 26) left.resize(26, ' ');
    out += left + " " + s.help + "\n";
  }
  return out;
}

Expected<std::string> read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot open " + what + " " + path};
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error{"cannot read " + what + " " + path};
  return ss.str();
}

int fail(const std::string& message) {
  std::fprintf(stderr, "zenmoe: %s\n", message.c_str());
  return 1;
}

}  // namespace zenmoe::tools
