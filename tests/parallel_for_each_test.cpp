// parallel_for_each (runtime/thread_pool.h): every index once, the lowest failure, exceptions.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/thread_pool.h"

namespace zenmoe {
namespace {

TEST(ParallelForEach, VisitsEveryIndexOnce) {
  for (int threads : {1, 2, 5, 64})
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      std::vector<std::atomic<int>> seen(n);
      Status s = parallel_for_each(threads, n, [&](size_t i) {
        seen[i].fetch_add(1);
        return Status::ok();
      });
      ASSERT_TRUE(s.is_ok()) << s.message();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << threads << " threads, index " << i;
    }
}

TEST(ParallelForEach, ReportsTheLowestFailureAndStops) {
  for (int rep = 0; rep < 20; ++rep)
    for (int threads : {1, 3, 8}) {
      std::atomic<size_t> calls{0};
      Status s = parallel_for_each(threads, 10000, [&](size_t i) {
        calls.fetch_add(1);
        return i >= 37 && i % 2 == 1 ? Status(Error{"bad " + std::to_string(i)}) : Status::ok();
      });
      ASSERT_FALSE(s.is_ok());
      EXPECT_EQ(s.message(), "bad 37");
      EXPECT_LT(calls.load(), size_t{10000}) << "kept taking work after the failure";
    }
}

TEST(ParallelForEach, RethrowsAnExceptionAfterAllStop) {
  std::atomic<int> running{0};
  EXPECT_THROW(parallel_for_each(4, 100,
                                 [&](size_t i) -> Status {
                                   running.fetch_add(1);
                                   if (i == 5) {
                                     running.fetch_sub(1);
                                     throw std::runtime_error("boom");
                                   }
                                   running.fetch_sub(1);
                                   return Status::ok();
                                 }),
               std::runtime_error);
  EXPECT_EQ(running.load(), 0);
}

}  // namespace
}  // namespace zenmoe
