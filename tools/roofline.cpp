#include "tools/roofline.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "codegen/isa.h"

namespace zenmoe::tools {
namespace {

// Parses sysfs sizes such as "48K", "2048K", "32M".
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (v <= 0) return 0;
  if (*end == 'K') return v << 10;
  if (*end == 'M') return v << 20;
  if (*end == 'G') return v << 30;
  return v;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

CacheSizes read_cache_sizes() {
  CacheSizes c;
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    std::string type = read_line(dir + "type");
    if (type == "Instruction") continue;
    int64_t size = parse_size(read_line(dir + "size"));
    if (level == "1") c.l1d = size;
    if (level == "2") c.l2 = size;
    if (level == "3") c.l3 = size;
  }
  c.from_sysfs = c.l2 > 0 && c.l3 > 0;
  // Defaults of a Zen 4 core when the OS does not say (containers without sysfs).
  if (c.l1d <= 0) c.l1d = 32 << 10;
  if (c.l2 <= 0) c.l2 = 1 << 20;
  if (c.l3 <= 0) c.l3 = 32 << 20;
  return c;
}

int64_t dram_working_set_bytes(const CacheSizes& c) {
  return std::max<int64_t>(4 * c.l3, int64_t{1} << 30);
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

Expected<AlignedBuffer> AlignedBuffer::make(size_t bytes) {
  constexpr size_t kAlign = size_t{2} << 20;
  size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) return Error{"cannot allocate " + std::to_string(bytes >> 20) + " MiB for a benchmark buffer"};
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs TLB misses
  std::memset(p, 0, rounded);          // fault every page in before anything is timed
  AlignedBuffer b;
  b.ptr_.reset(static_cast<uint8_t*>(p));
  b.size_ = bytes;
  return b;
}

namespace {

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort: an unpinned team still measures
}

}  // namespace

ThreadTeam::ThreadTeam(int threads, std::vector<int> cpus) : size_(std::max(1, threads)) {
  if (cpus.empty()) cpus = allowed_cpus();
  cpu_set_t old;
  CPU_ZERO(&old);
  if (sched_getaffinity(0, sizeof(old), &old) == 0) {
    old_affinity_.assign(reinterpret_cast<unsigned char*>(&old),
                         reinterpret_cast<unsigned char*>(&old) + sizeof(old));
    restore_affinity_ = true;
  }
  caller_cpu_ = cpus[0];
  pin_to(caller_cpu_);
  for (int t = 1; t < size_; ++t) {
    int cpu = cpus[static_cast<size_t>(t) % cpus.size()];
    workers_.emplace_back([this, t, cpu] {
      pin_to(cpu);
      worker(t);
    });
  }
}

ThreadTeam::~ThreadTeam() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
  unpin_caller();
}

void ThreadTeam::unpin_caller() {
  if (!restore_affinity_) return;
  cpu_set_t old;
  std::memcpy(&old, old_affinity_.data(), sizeof(old));
  sched_setaffinity(0, sizeof(old), &old);
}

void ThreadTeam::pin_caller() { pin_to(caller_cpu_); }

void ThreadTeam::run_raw(RawFn fn, void* ctx) {
  if (size_ == 1) {
    fn(ctx, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(ctx, 0);
  while (done_.load(std::memory_order_acquire) != size_ - 1) _mm_pause();
}

void ThreadTeam::worker(int tid) {
  uint32_t seen = 0;
  for (;;) {
    // Spin first: between back-to-back timed calls the next job comes within microseconds.
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 200000; ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    fn_(ctx_, tid);
    done_.fetch_add(1, std::memory_order_release);
  }
}

HostIsa host_isa() {
  const isa::CpuFeatures& f = isa::host_features();
  HostIsa h;
  h.avx2 = isa::host_supports(isa::IsaLevel::kAvx2);
  h.avx512 = isa::host_supports(isa::IsaLevel::kAvx512);
  h.avx512_vnni = isa::host_supports(isa::IsaLevel::kAvx512Vnni);
  h.avx512_bf16 = h.avx512 && f.avx512bf16;
  return h;
}

const char* load_isa_name(LoadIsa isa) {
  switch (isa) {
    case LoadIsa::kAvx512: return "avx512";
    case LoadIsa::kAvx2: return "avx2";
    case LoadIsa::kScalar: return "scalar";
  }
  return "?";
}

Expected<LoadIsa> choose_load_isa(const std::string& cap) {
  // The ISA model folds in the cap (or ZENMOE_ISA) and never goes above the host.
  auto t = isa::resolve_target(cap);
  if (!t) return Error{t.error()};
  if (t->level >= isa::IsaLevel::kAvx512) return LoadIsa::kAvx512;
  if (t->level >= isa::IsaLevel::kAvx2) return LoadIsa::kAvx2;
  return LoadIsa::kScalar;
}

namespace {

// Software prefetch of the lines `ahead` bytes past q (0: none). A prefetch past the end of
// the buffer is only a hint: it never faults. The address is computed as an integer, since a
// pointer that far past the buffer may not be formed.
inline void prefetch_ahead(const uint8_t* q, size_t ahead) {
  if (ahead == 0) return;
  const uintptr_t at = reinterpret_cast<uintptr_t>(q) + ahead;
  for (uintptr_t b = 0; b < 256; b += 64) _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T0);
}

// Each pass of the loops reads 256 bytes from each of the `streams` parts of [p, p + n).
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n, int streams, size_t ahead) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const size_t per = n / static_cast<size_t>(streams);
  for (size_t i = 0; i < per; i += 256)
    for (int s = 0; s < streams; ++s) {
      const uint8_t* q = p + static_cast<size_t>(s) * per + i;
      prefetch_ahead(q, ahead);
      a0 = _mm512_xor_si512(a0, _mm512_load_si512(q));
      a1 = _mm512_xor_si512(a1, _mm512_load_si512(q + 64));
      a2 = _mm512_xor_si512(a2, _mm512_load_si512(q + 128));
      a3 = _mm512_xor_si512(a3, _mm512_load_si512(q + 192));
    }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a0);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ lanes[4] ^ lanes[5] ^ lanes[6] ^ lanes[7];
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n, int streams, size_t ahead) {
  __m256i a[8];
  for (auto& v : a) v = _mm256_setzero_si256();
  const size_t per = n / static_cast<size_t>(streams);
  for (size_t i = 0; i < per; i += 256)
    for (int s = 0; s < streams; ++s) {
      const uint8_t* q = p + static_cast<size_t>(s) * per + i;
      prefetch_ahead(q, ahead);
      for (int j = 0; j < 8; ++j)
        a[j] = _mm256_xor_si256(a[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * j)));
    }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_xor_si256(a[0], a[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a[0]);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}

uint64_t read_scalar(const uint8_t* p, size_t n, int streams, size_t ahead) {
  uint64_t acc[8] = {};
  const size_t per = n / static_cast<size_t>(streams);
  for (size_t i = 0; i < per; i += 256)
    for (int s = 0; s < streams; ++s) {
      prefetch_ahead(p + static_cast<size_t>(s) * per + i, ahead);
      for (size_t b = 0; b < 256; b += 64)
        for (int j = 0; j < 8; ++j) {
          uint64_t v;
          std::memcpy(&v, p + static_cast<size_t>(s) * per + i + b + 8 * j, 8);
          acc[j] ^= v;
        }
    }
  return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

}  // namespace

uint64_t read_bytes(LoadIsa isa, const uint8_t* p, size_t n, int streams, size_t prefetch) {
  streams = std::max(1, streams);
  switch (isa) {
    case LoadIsa::kAvx512: return read_avx512(p, n, streams, prefetch);
    case LoadIsa::kAvx2: return read_avx2(p, n, streams, prefetch);
    case LoadIsa::kScalar: break;
  }
  return read_scalar(p, n, streams, prefetch);
}

Expected<BandwidthProbe> BandwidthProbe::make(int64_t buffer_bytes, LoadIsa isa) {
  if (buffer_bytes < (int64_t{1} << 20)) return Error{"bandwidth buffer must be at least 1 MiB"};
  auto buf = AlignedBuffer::make(static_cast<size_t>(buffer_bytes));
  if (!buf) return Error{buf.error()};
  BandwidthProbe p;
  p.buf_ = std::move(*buf);
  // Non-zero content so nothing in the memory system can special-case zero pages.
  for (size_t i = 0; i < p.buf_.size(); i += 4096) p.buf_.data()[i] = static_cast<uint8_t>(i >> 12);
  p.isa_ = isa;
  return p;
}

BandwidthResult BandwidthProbe::measure(ThreadTeam& team, int reps) {
  const int t = team.size();
  // Slices are whole 4 KiB pages so every thread streams its own contiguous range; a multiple
  // of kProbeStreams pages so the streams of a slice are equal.
  const size_t pages = buf_.size() / 4096 / static_cast<size_t>(t) / kProbeStreams * kProbeStreams;
  std::vector<uint64_t> sink(static_cast<size_t>(t) * 8);
  const double bytes = static_cast<double>(pages * 4096) * t;
  BandwidthResult res;
  for (const auto& [streams, ahead] : {std::pair{1, 0}, std::pair{kProbeStreams, 0}, std::pair{1, kProbePrefetch},
                                      std::pair{kProbeStreams, kProbePrefetch}}) {
    auto pass = [&](int tid) {
      const uint8_t* p = buf_.data() + static_cast<size_t>(tid) * pages * 4096;
      sink[static_cast<size_t>(tid) * 8] += read_bytes(isa_, p, pages * 4096, streams, ahead);
    };
    team.run(pass);  // warm-up: TLB, frequency ramp
    std::vector<double> gbps;
    for (int r = 0; r < std::max(1, reps); ++r) {
      double t0 = measure_seconds(t);
      team.run(pass);
      gbps.push_back(bytes / std::max(1e-9, measure_seconds(t) - t0) / 1e9);
    }
    const double med = median(gbps);
    if (med <= res.median_gbps) continue;
    res.median_gbps = med;
    res.min_gbps = *std::min_element(gbps.begin(), gbps.end());
    res.max_gbps = *std::max_element(gbps.begin(), gbps.end());
    res.reps = static_cast<int>(gbps.size());
    res.streams = streams;
    res.prefetch = ahead;
  }
  volatile uint64_t keep = sink[0];
  (void)keep;
  res.threads = t;
  res.buffer_bytes = static_cast<int64_t>(bytes);
  res.isa = isa_;
  return res;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {
std::atomic<MeasureClock> g_clock{MeasureClock::kWall};
}  // namespace

void set_measure_clock(MeasureClock c) { g_clock.store(c); }
MeasureClock measure_clock() { return g_clock.load(); }
const char* measure_clock_name() { return measure_clock() == MeasureClock::kCpu ? "cpu" : "wall"; }

Expected<MeasureClock> parse_measure_clock(const std::string& s) {
  if (s == "wall") return MeasureClock::kWall;
  if (s == "cpu") return MeasureClock::kCpu;
  return Error{"unknown clock '" + s + "' (expected wall or cpu)"};
}

double measure_seconds(int threads) {
  if (measure_clock() == MeasureClock::kWall) return now_seconds();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)) / std::max(1, threads);
}

TimingResult time_calls(const std::function<void()>& fn, double min_time, int reps,
                        int64_t min_calls_per_rep, int threads) {
  reps = std::max(1, reps);
  min_calls_per_rep = std::max<int64_t>(1, min_calls_per_rep);
  // Calibrate with one untimed batch (also the warm-up).
  double t0 = measure_seconds(threads);
  for (int64_t i = 0; i < min_calls_per_rep; ++i) fn();
  double per_call =
      std::max(1e-9, (measure_seconds(threads) - t0) / static_cast<double>(min_calls_per_rep));
  int64_t calls = std::max<int64_t>(min_calls_per_rep,
                                    static_cast<int64_t>(min_time / reps / per_call));
  calls = (calls + min_calls_per_rep - 1) / min_calls_per_rep * min_calls_per_rep;
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    double s = measure_seconds(threads);
    for (int64_t i = 0; i < calls; ++i) fn();
    per.push_back(std::max(1e-12, measure_seconds(threads) - s) / static_cast<double>(calls));
  }
  TimingResult res;
  res.median_s = median(per);
  res.min_s = *std::min_element(per.begin(), per.end());
  res.max_s = *std::max_element(per.begin(), per.end());
  res.calls_per_rep = calls;
  res.reps = reps;
  return res;
}

}  // namespace zenmoe::tools
