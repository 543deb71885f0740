#include "runtime/temp_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <random>

namespace zenmoe {
namespace {

// A compile interrupted from the keyboard must not leave a multi-gigabyte temporary behind.
// The handler only calls async-signal-safe functions (unlink, sigaction, raise) on paths
// stored in fixed buffers, then re-raises the signal under the previous disposition.

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr size_t kMaxTempPath = 4096;
char g_temp_paths[2][kMaxTempPath];
struct sigaction g_old_actions[3];
std::atomic<bool> g_armed{false};
std::mutex g_write_mutex;  // one TempFiles at a time owns the handler and the path slots

void on_signal(int sig) {
  if (g_armed.load()) {
    for (auto& p : g_temp_paths)
      if (p[0] != '\0') ::unlink(p);
  }
  for (size_t i = 0; i < std::size(kSignals); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_old_actions[i], nullptr);
  ::raise(sig);  // delivered when this handler returns, under the previous disposition
}

}  // namespace

TempFiles::TempFiles() : lock_(g_write_mutex) {
  for (auto& p : g_temp_paths) p[0] = '\0';
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    ::sigaction(kSignals[i], nullptr, &g_old_actions[i]);
    // An ignored signal (SIGHUP under nohup) stays ignored: the write must go on.
    if (g_old_actions[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &sa, nullptr);
  }
  g_armed.store(true);
}

TempFiles::~TempFiles() {
  for (int slot = 0; slot < 2; ++slot)
    if (!paths_[slot].empty()) ::unlink(paths_[slot].c_str());
  g_armed.store(false);
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &g_old_actions[i], nullptr);
  for (auto& p : g_temp_paths) p[0] = '\0';
}

Expected<int> TempFiles::create(int slot, const std::string& final_path) {
  const std::filesystem::path p(final_path);
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, ".tmp-%d-%08x", static_cast<int>(::getpid()), rd());
    std::string name = ".";
    name.append(p.filename().string()).append(suffix);
    const std::string tmp = (p.parent_path() / name).string();
    if (tmp.size() >= kMaxTempPath) return Error{final_path + ": path is too long"};
    std::memcpy(g_temp_paths[slot], tmp.c_str(), tmp.size() + 1);  // before the file exists
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      paths_[slot] = tmp;
      return fd;
    }
    g_temp_paths[slot][0] = '\0';
    if (errno != EEXIST) return Error{final_path + ": cannot create a temporary file: " + std::strerror(errno)};
  }
  return Error{final_path + ": cannot find a free temporary file name"};
}

Status TempFiles::commit(int slot, const std::string& final_path) {
  if (::rename(paths_[slot].c_str(), final_path.c_str()) != 0)
    return Error{final_path + ": cannot rename the temporary into place: " + std::strerror(errno)};
  g_temp_paths[slot][0] = '\0';
  paths_[slot].clear();
  return Status::ok();
}

Status TempOutput::open(const std::string& path) {
  path_ = path;
  auto fd = temps_.create(0, path);
  if (!fd) return Error{fd.error()};
  file_ = ::fdopen(*fd, "wb");
  if (file_ == nullptr) {
    ::close(*fd);
    return Error{path + ": cannot open for writing"};
  }
  return Status::ok();
}

Status TempOutput::commit(const std::string& what) {
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok) return Error{path_ + ": cannot write " + what + " to disk"};
  return temps_.commit(0, path_);
}

TempOutput::~TempOutput() {
  if (file_ != nullptr) std::fclose(file_);
}

}  // namespace zenmoe
