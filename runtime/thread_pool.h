// One persistent pool of worker threads pinned to cores (hwloc), used by the fast executor:
// thread i to the i-th core this process may run on (its affinity mask), round robin.
// run() hands the same function to every thread (the caller is thread 0) and returns when all
// have finished: one barrier per call. Idle workers spin briefly, then sleep, so a pool costs
// nothing while the front end samples or waits for input.
// The barrier's shared state sits on cache lines of its own: the job and its generation (written
// by the caller, read by every worker), and one line per worker for the generation it finished
// (written by that worker, read by the caller). No line is written by more than one thread, so
// a call costs each worker one line from the caller and the caller one line from each worker,
// asked for together, instead of every worker's decrement of one shared counter in turn.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/status.h"

namespace zenmoe {

struct ThreadPoolOptions {
  int n_threads = 1;      // threads including the caller; at least 1
  bool pin = true;        // bind thread i to the i-th allowed core (hwloc); skipped when the
                          // topology is unknown
  int spin_us = 200;      // how long an idle worker spins before it sleeps
};

class ThreadPool {
 public:
  static Expected<std::unique_ptr<ThreadPool>> create(const ThreadPoolOptions& opts);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(thread_index) on every thread (0 = the caller) and waits for all of them.
  // Not reentrant: fn must not call run() again.
  void run(const std::function<void(int)>& fn);
  // With timing on, run() adds up how long the caller, done with its own part, waited for
  // the other threads: the cost of uneven shares and late starts (bench model --profile).
  void set_timing(bool on) { timing_ = on; }
  double caller_wait_seconds() const { return caller_wait_s_; }
  // Where the threads were bound, e.g. "pinned to cores 0,1" or "not pinned (...)".
  const std::string& placement() const { return placement_; }

 private:
  explicit ThreadPool(const ThreadPoolOptions& opts);
  void worker(int index);

  int n_threads_ = 1;
  int spin_us_ = 200;
  std::vector<std::thread> threads_;
  // The job and its generation: one line, written by the caller only.
  struct alignas(64) Publish {
    const std::function<void(int)>* job = nullptr;
    std::atomic<uint64_t> generation{0};
  };
  // The generation worker i last finished: a line per worker, written by that worker only.
  struct alignas(64) Done {
    std::atomic<uint64_t> generation{0};
  };
  Publish pub_;
  std::unique_ptr<Done[]> done_;
  std::atomic<bool> stop_{false};
  alignas(64) std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::string placement_;
  bool timing_ = false;
  double caller_wait_s_ = 0;

 public:
  struct Topology;  // hwloc's view of the machine (thread_pool.cpp)

 private:
  std::unique_ptr<Topology> topo_;
};

// Splits [0, n) into `parts` contiguous ranges in units of `unit` (the last may be short);
// returns part `i`'s range. Empty ranges when n is small.
struct Range {
  int64_t begin = 0, end = 0;
};
Range split_range(int64_t n, int parts, int i, int64_t unit = 1);

// Units [0, n) dealt out in contiguous shares and claimed as the threads go: each thread takes
// from the front of its own share half of what is left of it (at least `grain` units, and
// with `run_end` not past run_end(first unit), e.g. the end of one matrix's blocks), and once
// that is empty, `grain` units from the back of the share with the most left. A thread that
// finishes early thus takes the last units of a slower one instead of waiting for it at the
// barrier, while every thread starts on its own share in order, in long runs first. Every
// unit is claimed exactly once. reset() before the threads start (the pool's publication
// orders it before their claims); next() from the threads.
class WorkQueue {
 public:
  // shares[t]: thread t's units, as split_range or cost_shares deal them (nth entries).
  void reset(const std::vector<Range>& shares);
  // Thread tid's next run of units; false when no unit is left anywhere.
  bool next(int tid, int64_t grain, Range& r, const std::function<int64_t(int64_t)>* run_end = nullptr);

 private:
  // begin << 32 | end of a share's unclaimed units, a cache line each.
  struct alignas(64) Slot {
    std::atomic<uint64_t> v{0};
  };
  std::vector<Slot> slots_;
};

// The thread count a command uses unless told otherwise: the cores this process may run on
// (hwloc; SMT siblings count once, as memory-bound decoding gains nothing from them), else the
// CPUs the system reports, at least 1 and at most 1024.
int default_thread_count();

// fn(i) for every i in [0, n) on up to `threads` threads, the caller's included (one-off work
// such as packing, writing or loading weights, not the decode pool). The i are taken in turn
// from a counter, so a helper thread that cannot be started leaves nothing undone. After a
// failure no further i are taken; the result is the failure of the lowest failing i (the same
// whatever the timing: every i below a taken one was taken too). An exception from fn counts as
// a failure and is rethrown once every thread has stopped.
Status parallel_for_each(int threads, size_t n, const std::function<Status(size_t)>& fn);

// Data cache sizes of the first core as the machine reports them (hwloc); 0 when unknown.
struct CacheSizes {
  int64_t l1d = 0, l2 = 0, l3 = 0;
};
CacheSizes detect_cache_sizes();

}  // namespace zenmoe
