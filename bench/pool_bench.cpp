// The thread pool's barrier: one run() of a job that does nothing, so the time per call is the
// publish and the wait for every worker. Decode runs one such call per step (35-40 per layer).
#include <benchmark/benchmark.h>

#include <thread>

#include "runtime/thread_pool.h"

namespace zenmoe {
namespace {

void BM_PoolBarrier(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  if (n > static_cast<int>(std::thread::hardware_concurrency())) {
    state.SkipWithError("more threads than CPUs");
    return;
  }
  auto pool = ThreadPool::create({n, true, 200});
  if (!pool) {
    state.SkipWithError(pool.error().c_str());
    return;
  }
  int sink[64] = {};
  const std::function<void(int)> job = [&](int tid) { benchmark::DoNotOptimize(sink[tid] += 1); };
  for (auto _ : state) (*pool)->run(job);
}
BENCHMARK(BM_PoolBarrier)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime();

}  // namespace
}  // namespace zenmoe
