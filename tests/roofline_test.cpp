// The read-bandwidth kernel: every load pattern reads every byte once.
#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <cstring>
#include <random>

#include "tools/roofline.h"

namespace zenmoe::tools {
namespace {

// The XOR of all 8-byte words: what every pattern folds the bytes into.
uint64_t xor_words(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return acc;
}

TEST(Roofline, EveryIsaAndStreamCountReadsEveryByteOnce) {
  auto buf = AlignedBuffer::make(64 << 10);
  ASSERT_TRUE(buf.has_value()) << buf.error();
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < buf->size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(buf->data() + i, &v, 8);
  }
  const HostIsa host = host_isa();
  std::vector<LoadIsa> isas = {LoadIsa::kScalar};
  if (host.avx2) isas.push_back(LoadIsa::kAvx2);
  if (host.avx512) isas.push_back(LoadIsa::kAvx512);
  for (size_t n : {size_t{1024}, size_t{12} << 10, buf->size()}) {
    const uint64_t want = xor_words(buf->data(), n);
    for (LoadIsa isa : isas)
      for (int streams : {1, 2, 4}) {
        if (n % (256 * static_cast<size_t>(streams)) != 0) continue;
        // Software prefetch changes nothing read (its hints past the buffer never fault).
        for (size_t prefetch : {size_t{0}, size_t{kProbePrefetch}})
          EXPECT_EQ(read_bytes(isa, buf->data(), n, streams, prefetch), want)
              << load_isa_name(isa) << ", " << streams << " streams, prefetch " << prefetch << ", " << n << " bytes";
      }
  }
  // A flipped bit in the last word changes the fold (the tail is read).
  const uint64_t before = read_bytes(isas.back(), buf->data(), buf->size(), kProbeStreams);
  buf->data()[buf->size() - 1] ^= 0x80;
  EXPECT_NE(read_bytes(isas.back(), buf->data(), buf->size(), kProbeStreams), before);
}

TEST(Roofline, ProbeReportsThePatternItChose) {
  auto probe = BandwidthProbe::make(8 << 20, LoadIsa::kScalar);
  ASSERT_TRUE(probe.has_value()) << probe.error();
  ThreadTeam team(1);
  const BandwidthResult r = probe->measure(team, 2);
  EXPECT_TRUE(r.streams == 1 || r.streams == kProbeStreams) << r.streams;
  EXPECT_TRUE(r.prefetch == 0 || r.prefetch == kProbePrefetch) << r.prefetch;
  EXPECT_GT(r.median_gbps, 0);
  EXPECT_EQ(r.reps, 2);
  EXPECT_EQ(r.buffer_bytes % (int64_t{4096} * kProbeStreams), 0);
}

// bench model probes while an engine's pool has pinned the calling thread to one core: the team
// must spread over the CPUs taken before that, and give the caller its pinning back.
TEST(Roofline, TeamUsesTheCpusItIsGivenWhenTheCallerIsPinned) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU";
  cpu_set_t old, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(old), &old), 0);
  CPU_ZERO(&one);
  CPU_SET(cpus[0], &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<int> where[2] = {-1, -1};
  auto record = [&](int tid) { where[tid] = sched_getcpu(); };
  {
    ThreadTeam team(2, cpus);
    team.run(record);
  }
  EXPECT_EQ(where[0].load(), cpus[0]);
  EXPECT_EQ(where[1].load(), cpus[1]);
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &one)) << "the caller's pinning is given back";
  {
    ThreadTeam team(2);  // without the list: confined to the caller's one CPU
    team.run(record);
  }
  EXPECT_EQ(where[1].load(), cpus[0]);
  sched_setaffinity(0, sizeof(old), &old);
}

}  // namespace
}  // namespace zenmoe::tools
