#include "tools/mkmodel_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace zenmoe::tools {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)),
      total_(total),
      tty_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (shown_) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    draw(std::min(done_.load(), total_), s);
    if (tty_) std::fputc('\n', stderr);
  }
}

void ProgressBar::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // A terminal gets a live bar; a log file a line every few seconds.
    cv_.wait_for(lock, std::chrono::milliseconds(tty_ ? 250 : 5000));
    if (stop_) break;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s < 1.0) continue;
    shown_ = true;
    draw(std::min(done_.load(), total_), s);
  }
}

void ProgressBar::draw(uint64_t done, double seconds) {
  constexpr int kWidth = 30;
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int fill = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int k = 0; k < kWidth; ++k) bar[k] = k < fill ? '#' : '.';
  bar[kWidth] = '\0';
  std::fprintf(stderr, "%s%s [%s] %5.1f%%  %.0f / %.0f MB  %.1f s%s", tty_ ? "\r" : "",
               label_.c_str(), bar, 100.0 * frac, static_cast<double>(done) / 1e6,
               static_cast<double>(total_) / 1e6, seconds, tty_ ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace zenmoe::tools
