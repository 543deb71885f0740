// libFuzzer target for the prompt cache reader (runtime/prompt_cache.h): any input is refused
// with one line naming the file, the executor left empty, or restores a run of the prompt no
// longer than the file's tokens, the prompt less its last token and the context, with the
// file's rows. The checksum at the end is recomputed first, so mutations reach the fields
// behind it instead of stopping there.
//
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a seed corpus of caches
// saved by the writer; scripts/fuzz.sh uses this.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/prompt_cache.h"
#include "tests/fuzz/prompt_cache_fake.h"

namespace {

using namespace zenmoe;
using fuzz::FakeExecutor;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

std::vector<int32_t> prompt() {
  std::vector<int32_t> p(40);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i * 7 % 100);
  return p;
}

void write_seeds(const std::string& dir) {
  const std::vector<int32_t> p = prompt();
  for (int n : {0, 1, 5, 20, FakeExecutor::kCtx}) {
    FakeExecutor ex;
    const std::vector<int32_t> toks(p.begin(), p.begin() + n);
    if (n > 0 && !ex.eval(toks, nullptr, false).is_ok()) std::exit(1);
    Status s = save_prompt_cache(dir + "/seed-" + std::to_string(n) + ".cache", fuzz::kFakeModelId, ex, toks);
    if (!s) {
      std::fprintf(stderr, "seed %d: %s\n", n, s.message().c_str());
      std::exit(1);
    }
  }
}

int g_fd = -1;
std::string g_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seeds = std::getenv("ZENMOE_FUZZ_SEED_DIR")) write_seeds(seeds);
  g_fd = ::memfd_create("fuzz-prompt-cache", 0);
  if (g_fd < 0) std::abort();
  g_path = "/proc/self/fd/" + std::to_string(g_fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= 8) {
    const uint64_t sum = prompt_cache_checksum(bytes.data(), size - 8);
    std::memcpy(bytes.data() + size - 8, &sum, 8);
  }
  require(::ftruncate(g_fd, 0) == 0);
  require(::pwrite(g_fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  FakeExecutor ex;
  const std::vector<int32_t> p = prompt();
  Expected<PromptCacheLoad> r = load_prompt_cache(g_path, fuzz::kFakeModelId, ex, p);
  if (!r) {
    require(r.error().rfind("prompt cache " + g_path + ": ", 0) == 0);
    require(r.error().find('\n') == std::string::npos);
    require(ex.n_past() == 0);
    return 0;
  }
  const auto m = static_cast<size_t>(r->restored);
  require(ex.n_past() == r->restored);
  require(m <= r->saved.size() && m + 1 <= p.size() && m <= static_cast<size_t>(FakeExecutor::kCtx));
  for (size_t i = 0; i < m; ++i) require(r->saved[i] == p[i]);
  // Accepted: the layout is the fake's (32-byte head, two 38-byte descriptors), so each cache's
  // restored rows are the file's bytes at a known place.
  const size_t n = r->saved.size(), row = FakeExecutor::kRow * 2;
  require(size == 32 + 2 * 38 + 4 * n + 2 * n * row + 8);
  const std::vector<KvCacheRows> caches = ex.kv_caches();
  for (size_t c = 0; c < caches.size(); ++c)
    require(std::memcmp(caches[c].data, bytes.data() + 32 + 2 * 38 + 4 * n + c * n * row, m * row) == 0);
  return 0;
}
