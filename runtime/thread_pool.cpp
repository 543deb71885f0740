#include "runtime/thread_pool.h"

#include <hwloc.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace zenmoe {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

// The hwloc topology, kept for the pool's lifetime so threads can bind themselves.
struct ThreadPool::Topology {
  hwloc_topology_t topo = nullptr;
  int n_cores = 0;
  hwloc_cpuset_t caller_set = nullptr;  // where the creating thread could run before the pool
  ~Topology() {
    if (caller_set != nullptr) hwloc_bitmap_free(caller_set);
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
  // Remembers the calling thread's binding so the pool can give it back.
  void save_caller() {
    caller_set = hwloc_bitmap_alloc();
    if (caller_set != nullptr && hwloc_get_cpubind(topo, caller_set, HWLOC_CPUBIND_THREAD) != 0) {
      hwloc_bitmap_free(caller_set);
      caller_set = nullptr;
    }
  }
  void restore_caller() const {
    if (caller_set != nullptr) hwloc_set_cpubind(topo, caller_set, HWLOC_CPUBIND_THREAD);
  }
  // The cores with a CPU in this process's affinity mask (taskset, a cpuset), as hwloc's
  // logical indices; every core when the mask cannot be read.
  std::vector<unsigned> cores;
  bool load() {
    if (hwloc_topology_init(&topo) != 0) return false;
    if (hwloc_topology_load(topo) != 0) return false;
    const int all = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_cpuset_t allowed = hwloc_bitmap_alloc();
    const bool masked = allowed != nullptr && hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) == 0;
    for (int i = 0; i < all; ++i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
      if (core != nullptr && core->cpuset != nullptr && (!masked || hwloc_bitmap_intersects(core->cpuset, allowed)))
        cores.push_back(static_cast<unsigned>(i));
    }
    if (allowed != nullptr) hwloc_bitmap_free(allowed);
    n_cores = static_cast<int>(cores.size());
    return n_cores > 0;
  }
  // The cores the first `threads` threads are bound to: "a..b" when consecutive, else a list.
  std::string describe(int threads) const {
    const size_t n = static_cast<size_t>(std::min(threads, n_cores));
    bool run = true;
    for (size_t i = 1; i < n; ++i) run = run && cores[i] == cores[i - 1] + 1;
    if (run) return std::to_string(cores[0]) + ".." + std::to_string(cores[n - 1]);
    std::string s;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) s += ',';
      s += std::to_string(cores[i]);
    }
    return s;
  }
  // Binds the calling thread to the allowed core `index % n_cores`. False when hwloc refuses.
  bool bind(int index) const {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, cores[static_cast<size_t>(index % n_cores)]);
    if (core == nullptr || core->cpuset == nullptr) return false;
    hwloc_cpuset_t set = hwloc_bitmap_dup(core->cpuset);
    hwloc_bitmap_singlify(set);  // one PU of the core: no migration between SMT siblings
    const int rc = hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(set);
    return rc == 0;
  }
};

ThreadPool::ThreadPool(const ThreadPoolOptions& opts)
    : n_threads_(opts.n_threads), spin_us_(opts.spin_us), done_(new Done[static_cast<size_t>(opts.n_threads)]) {}

Expected<std::unique_ptr<ThreadPool>> ThreadPool::create(const ThreadPoolOptions& opts) {
  if (opts.n_threads < 1 || opts.n_threads > 1024)
    return Error{"thread pool: thread count " + std::to_string(opts.n_threads) + " is not in 1..1024"};
  std::unique_ptr<ThreadPool> pool(new ThreadPool(opts));
  bool pinned = false;
  if (opts.pin) {
    auto topo = std::make_unique<Topology>();
    if (topo->load()) {
      pool->topo_ = std::move(topo);
      pool->topo_->save_caller();
      pinned = pool->topo_->bind(0);
    }
  }
  if (pinned) {
    pool->placement_ = "pinned to cores " + pool->topo_->describe(opts.n_threads);
    if (opts.n_threads > pool->topo_->n_cores)
      pool->placement_ += " (" + std::to_string(pool->topo_->n_cores) + " cores: threads share cores)";
  } else {
    pool->placement_ = opts.pin ? "not pinned (hwloc could not bind threads)" : "not pinned";
    pool->topo_.reset();
  }
  for (int i = 1; i < opts.n_threads; ++i) pool->threads_.emplace_back(&ThreadPool::worker, pool.get(), i);
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    pub_.generation.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  // The caller was thread 0: give it back the CPUs it had, so a later pool or measurement in
  // the same thread is not confined to core 0.
  if (topo_) topo_->restore_caller();
}

void ThreadPool::worker(int index) {
  if (topo_) topo_->bind(index);
  uint64_t seen = 0;
  for (;;) {
    // Spin first: between the ops of one forward pass the next job arrives within microseconds.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    uint64_t g = pub_.generation.load(std::memory_order_acquire);
    // The clock is read once per 64 polls; the generation after every pause, so a job starts
    // within a pause or two of its publication (a PAUSE costs tens of cycles on Zen).
    while (g == seen && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 64 && g == seen; ++i) {
        cpu_relax();
        g = pub_.generation.load(std::memory_order_acquire);
      }
    }
    if (g == seen) {
      // Sequentially consistent: either run() sees this sleeper and wakes it under the lock,
      // or the predicate, read after the count went up, sees run()'s new generation.
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return pub_.generation.load() != seen; });
      sleepers_.fetch_sub(1);
      g = pub_.generation.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    (*pub_.job)(index);
    done_[static_cast<size_t>(index)].generation.store(g, std::memory_order_release);
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  pub_.job = &fn;
  const uint64_t g = pub_.generation.fetch_add(1) + 1;  // sequentially consistent (worker())
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // a sleeper past its predicate is now waiting
    cv_.notify_all();
  }
  fn(0);
  // Waits for the workers in order; while one is not done, the lines of those after it are asked
  // for too, so they arrive together instead of one after another.
  const auto finished = [&](int i) {
    return done_[static_cast<size_t>(i)].generation.load(std::memory_order_acquire) == g;
  };
  const auto wait_all = [&] {
    for (int first = 1;;) {
      while (first < n_threads_ && finished(first)) ++first;
      if (first == n_threads_) return;
      for (int i = first + 1; i < n_threads_; ++i) __builtin_prefetch(&done_[static_cast<size_t>(i)]);
      cpu_relax();
    }
  };
  if (!timing_) return wait_all();
  const auto done = std::chrono::steady_clock::now();
  wait_all();
  caller_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - done).count();
}

Range split_range(int64_t n, int parts, int i, int64_t unit) {
  if (unit < 1) unit = 1;
  const int64_t units = (n + unit - 1) / unit;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t u0 = i * per + (i < extra ? i : extra);
  const int64_t u1 = u0 + per + (i < extra ? 1 : 0);
  Range r{u0 * unit, u1 * unit};
  if (r.begin > n) r.begin = n;
  if (r.end > n) r.end = n;
  return r;
}

namespace {

uint64_t pack_range(int64_t b, int64_t e) { return static_cast<uint64_t>(b) << 32 | static_cast<uint64_t>(e); }
int64_t range_begin(uint64_t v) { return static_cast<int64_t>(v >> 32); }
int64_t range_end(uint64_t v) { return static_cast<int64_t>(v & 0xFFFFFFFFu); }

}  // namespace

void WorkQueue::reset(const std::vector<Range>& shares) {
  if (slots_.size() != shares.size()) slots_ = std::vector<Slot>(shares.size());
  for (size_t t = 0; t < shares.size(); ++t)
    slots_[t].v.store(pack_range(shares[t].begin, std::max(shares[t].begin, shares[t].end)), std::memory_order_relaxed);
}

bool WorkQueue::next(int tid, int64_t grain, Range& r, const std::function<int64_t(int64_t)>* run_end) {
  grain = std::max<int64_t>(grain, 1);
  std::atomic<uint64_t>& own = slots_[static_cast<size_t>(tid)].v;
  for (uint64_t v = own.load(std::memory_order_acquire); range_begin(v) < range_end(v);) {
    const int64_t b = range_begin(v), e = range_end(v);
    int64_t take = std::max(grain, (e - b) / 2);
    if (run_end != nullptr) take = std::min(take, std::max(grain, (*run_end)(b) - b));
    take = std::min(take, e - b);
    if (own.compare_exchange_weak(v, pack_range(b + take, e), std::memory_order_acq_rel)) {
      r = Range{b, b + take};
      return true;
    }
  }
  for (;;) {
    size_t victim = slots_.size();
    int64_t most = 0;
    for (size_t t = 0; t < slots_.size(); ++t) {
      const uint64_t v = slots_[t].v.load(std::memory_order_acquire);
      if (range_end(v) - range_begin(v) > most) {
        most = range_end(v) - range_begin(v);
        victim = t;
      }
    }
    if (victim == slots_.size()) return false;
    std::atomic<uint64_t>& other = slots_[victim].v;
    uint64_t v = other.load(std::memory_order_acquire);
    const int64_t b = range_begin(v), e = range_end(v);
    if (b >= e) continue;
    const int64_t take = std::min(grain, e - b);
    if (other.compare_exchange_weak(v, pack_range(b, e - take), std::memory_order_acq_rel)) {
      r = Range{e - take, e};
      return true;
    }
  }
}

Status parallel_for_each(int threads, size_t n, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  size_t failed_at = n;
  Status failure = Status::ok();
  std::exception_ptr thrown;
  auto work = [&] {
    for (size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) {
      Status s = Status::ok();
      std::exception_ptr e;
      try {
        s = fn(i);
      } catch (...) {
        e = std::current_exception();
      }
      if (s && !e) continue;
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      if (i < failed_at) {
        failed_at = i;
        failure = std::move(s);
        thrown = e;
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t helpers = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), n) - (n > 0);
  for (size_t t = 0; t < helpers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  if (thrown) std::rethrow_exception(thrown);
  return failure;
}

int default_thread_count() {
  static const int n = [] {
    ThreadPool::Topology t;
    int cores = t.load() ? t.n_cores : 0;
    if (cores < 1) cores = static_cast<int>(std::thread::hardware_concurrency());
    return std::clamp(cores, 1, 1024);
  }();
  return n;
}

CacheSizes detect_cache_sizes() {
  static const CacheSizes sizes = [] {
    CacheSizes c;
    ThreadPool::Topology t;
    if (!t.load()) return c;
    hwloc_obj_t pu = hwloc_get_obj_by_type(t.topo, HWLOC_OBJ_PU, 0);
    for (hwloc_obj_t o = pu; o != nullptr; o = o->parent) {
      if (o->attr == nullptr || !hwloc_obj_type_is_dcache(o->type)) continue;
      const auto bytes = static_cast<int64_t>(o->attr->cache.size);
      if (o->attr->cache.depth == 1) c.l1d = bytes;
      if (o->attr->cache.depth == 2) c.l2 = bytes;
      if (o->attr->cache.depth == 3) c.l3 = bytes;
    }
    return c;
  }();
  return sizes;
}

}  // namespace zenmoe
