// Output files written under temporary names and renamed into place at the end (plan files,
// prompt caches): a writer that fails, returns early or is interrupted by SIGINT, SIGTERM or
// SIGHUP leaves no partial file behind.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "kernels/status.h"

namespace zenmoe {

// Owns up to two temporaries (slots 0 and 1): removes those not committed when it goes out of
// scope, and installs a signal handler that removes them (then re-raises the signal) while it
// lives. One TempFiles exists at a time in a process; a second one waits for the first.
class TempFiles {
 public:
  TempFiles();
  ~TempFiles();
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  // Creates a new file beside `final_path` under a unique hidden name; returns its fd (the
  // caller closes it).
  Expected<int> create(int slot, const std::string& final_path);
  // Renames the temporary of `slot` to its final name; from then on it is no longer removed.
  Status commit(int slot, const std::string& final_path);

 private:
  std::unique_lock<std::mutex> lock_;
  std::string paths_[2];
};

// A stdio stream onto a temporary beside `path` (TempFiles slot 0), renamed to `path` by
// commit(); dropped before that, or after a failed write, it leaves nothing behind.
class TempOutput {
 public:
  Status open(const std::string& path);
  std::FILE* file() const { return file_; }
  // Flushes, syncs and closes the stream, then renames it into place; `what` names its
  // contents in the error ("the answers").
  Status commit(const std::string& what);
  ~TempOutput();

 private:
  std::string path_;
  TempFiles temps_;
  std::FILE* file_ = nullptr;
};

}  // namespace zenmoe
