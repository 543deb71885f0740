// Measurement primitives shared by `zenmoe bench` and the Google Benchmark binary: cache
// sizes read from the machine, page-aligned buffers, a pinned thread team, the read-bandwidth
// kernel every GEMV figure is compared against, and robust (median of repetitions) timing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::tools {

// Data cache sizes in bytes as the OS reports them (sysfs). Under a hypervisor the L3 may be
// the whole socket's, shared with other guests; callers that need a "resident" budget cap it.
struct CacheSizes {
  int64_t l1d = 0;
  int64_t l2 = 0;
  int64_t l3 = 0;
  bool from_sysfs = false;  // false: sysfs unreadable, conservative defaults used
};
CacheSizes read_cache_sizes();

// Bytes the DRAM regime must stream through so caches cannot hold them: 4× L3 and at
// least 1 GiB.
int64_t dram_working_set_bytes(const CacheSizes& c);

// CPUs this process may run on, in ascending order (sched_getaffinity).
std::vector<int> allowed_cpus();

// A zero-initialised, 2 MiB-aligned allocation (transparent huge pages requested so TLB
// misses do not distort streaming figures). Pages are touched on creation.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  static Expected<AlignedBuffer> make(size_t bytes);
  uint8_t* data() { return ptr_.get(); }
  const uint8_t* data() const { return ptr_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> ptr_;
  size_t size_ = 0;
};

// A fixed team of threads, each pinned to its own CPU (from the list given, else the caller's
// allowed CPUs); the calling thread is member 0 (pinned while the team lives, its old affinity
// restored afterwards). run() releases all members on one job and returns when every member
// has finished it. Idle members spin briefly, then sleep on a futex, so a team does not burn a
// shared machine between jobs.
class ThreadTeam {
 public:
  // Thread i runs on cpus[i % size] (default: the CPUs the calling thread may use now; pass
  // the list taken before anything pinned the caller, e.g. an engine's pool).
  explicit ThreadTeam(int threads, std::vector<int> cpus = {});
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Lets the caller run on any allowed CPU (and threads it creates inherit that), for
  // libraries that start their own thread pools; pin_caller() pins it again.
  void unpin_caller();
  void pin_caller();
  template <class F>
  void run(F& fn) {
    run_raw([](void* ctx, int tid) { (*static_cast<F*>(ctx))(tid); }, &fn);
  }

 private:
  using RawFn = void (*)(void*, int);
  void run_raw(RawFn fn, void* ctx);
  void worker(int tid);

  int size_;
  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  RawFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int caller_cpu_ = 0;
  bool restore_affinity_ = false;
  std::vector<unsigned char> old_affinity_;  // cpu_set_t bytes of the caller before pinning
};

// The host features the measurement code needs (loads for the bandwidth kernel, the
// compiler-vectorised baseline loops), as the ISA model (codegen/isa.h) reports them.
struct HostIsa {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
};
HostIsa host_isa();

// Which load instructions the bandwidth kernel uses; chosen once from the ISA the host has
// (and the user allows), never an instruction the host lacks.
enum class LoadIsa { kScalar, kAvx2, kAvx512 };
const char* load_isa_name(LoadIsa isa);
// The widest loads the host supports, capped by `cap` (an ISA level name of codegen/isa.h;
// "" = ZENMOE_ISA or no cap). Error on an unknown cap name.
Expected<LoadIsa> choose_load_isa(const std::string& cap);

// Reads n bytes (n a multiple of 256 * streams, p 64-byte aligned) and folds them into a value
// so the loads cannot be optimised away. With streams > 1 the range is cut into that many
// equal parts read side by side, 256 bytes of each in turn. prefetch > 0: every line is also
// software-prefetched that many bytes ahead.
uint64_t read_bytes(LoadIsa isa, const uint8_t* p, size_t n, int streams = 1, size_t prefetch = 0);

struct BandwidthResult {
  int threads = 0;
  double median_gbps = 0;  // 1e9 bytes per second
  double min_gbps = 0;
  double max_gbps = 0;
  int64_t buffer_bytes = 0;
  int reps = 0;
  int streams = 1;  // side-by-side streams per thread of the best pattern
  int prefetch = 0;  // its software prefetch distance in bytes (0: the hardware's alone)
  LoadIsa isa = LoadIsa::kScalar;
};

// Read bandwidth over a buffer ≫ L3, each thread of the team streaming its own contiguous
// slice, as one stream and as kProbeStreams streams side by side (a core's prefetchers keep
// more lines in flight over several streams: a few percent on Zen 4), each with and without
// a software prefetch of every line kProbePrefetch bytes ahead, as the GEMV kernels do (on an
// Intel Xeon host the kernels prefetching so read faster than the probe did without it, and
// the probe's best pattern rose from 13.1-13.4 to 13.7-17.1 GB/s at one thread; `zenmoe bench
// bandwidth`, two runs each); the best pattern is the figure. Keeps the buffer so repeated
// measurements (right before each GEMV group) are cheap.
inline constexpr int kProbeStreams = 4;
inline constexpr int kProbePrefetch = 4096;
class BandwidthProbe {
 public:
  static Expected<BandwidthProbe> make(int64_t buffer_bytes, LoadIsa isa);
  // Per pattern one warm-up pass, then `reps` timed passes; the median, min and max of the
  // pattern with the higher median.
  BandwidthResult measure(ThreadTeam& team, int reps);
  int64_t buffer_bytes() const { return static_cast<int64_t>(buf_.size()); }

 private:
  AlignedBuffer buf_;
  LoadIsa isa_ = LoadIsa::kScalar;
};

// Monotonic seconds.
double now_seconds();

// The clock timed figures use. kWall: elapsed time. kCpu: this process's CPU time divided by
// the number of threads working, i.e. the time the work would take if its threads were never
// descheduled: on a machine oversubscribed by other jobs this isolates the kernel from the
// scheduler (memory stalls still count, they happen on the CPU).
enum class MeasureClock { kWall, kCpu };
void set_measure_clock(MeasureClock c);
MeasureClock measure_clock();
const char* measure_clock_name();
Expected<MeasureClock> parse_measure_clock(const std::string& s);
// Seconds on the chosen clock for work running on `threads` threads (differences only).
double measure_seconds(int threads);

// Median of a non-empty list (mean of the two middle values for an even count).
double median(std::vector<double> v);

// Times `fn` (one call = one unit of work) robustly on a noisy machine: calibrates the
// number of calls per repetition so one repetition lasts about min_time / reps, runs `reps`
// repetitions and returns the median seconds per call.
struct TimingResult {
  double median_s = 0;  // seconds per call
  double min_s = 0;
  double max_s = 0;
  int64_t calls_per_rep = 0;
  int reps = 0;
};
// min_calls_per_rep lets the caller ask for whole passes over rotating buffers.
// `threads`: how many threads one call keeps busy (for the CPU clock).
TimingResult time_calls(const std::function<void()>& fn, double min_time, int reps,
                        int64_t min_calls_per_rep, int threads = 1);

}  // namespace zenmoe::tools
