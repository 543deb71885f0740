// A progress bar on stderr for long jobs: silent for the first second (quick jobs print
// nothing), then redrawn a few times a second from a background thread that reads an atomic
// byte counter the workers bump. When stderr is not a terminal it prints a plain line every
// few seconds instead of redrawing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace zenmoe::tools {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();  // finishes if still running
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  std::atomic<uint64_t>& counter() { return done_; }
  // Stops the thread; if the bar was shown, draws it at its final state and ends the line.
  void finish();

 private:
  void run();
  void draw(uint64_t done, double seconds);

  std::string label_;
  uint64_t total_;
  bool tty_;
  std::atomic<uint64_t> done_{0};
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool shown_ = false;
  std::thread thread_;
};

}  // namespace zenmoe::tools
