// libFuzzer target for the log-probability file reader (runtime/logprob_file.h): any input is
// refused with one line naming the file, or accepted with sizes that account for every byte
// and tokens inside the vocabulary.
//
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a seed corpus of small valid
// files; scripts/fuzz.sh uses this.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/logprob_file.h"

namespace {

using namespace zenmoe;

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void write_seeds(const std::string& dir) {
  for (uint32_t n_ctx : {4u, 9u}) {
    for (int32_t n_vocab : {1, 6, 7}) {
      for (int32_t n_chunk : {1, 2}) {
        std::ofstream f(dir + "/seed-" + std::to_string(n_ctx) + "-" + std::to_string(n_vocab) + "-" +
                            std::to_string(n_chunk) + ".kld",
                        std::ios::binary);
        f.write("_logits_", 8);
        f.write(reinterpret_cast<const char*>(&n_ctx), 4);
        f.write(reinterpret_cast<const char*>(&n_vocab), 4);
        f.write(reinterpret_cast<const char*>(&n_chunk), 4);
        for (uint32_t i = 0; i < n_ctx * static_cast<uint32_t>(n_chunk); ++i) {
          const int32_t t = static_cast<int32_t>(i % static_cast<uint32_t>(n_vocab));
          f.write(reinterpret_cast<const char*>(&t), 4);
        }
        const size_t words = logprob::record_u16(n_vocab) * static_cast<size_t>(logprob::scored_positions(n_ctx)) *
                             static_cast<size_t>(n_chunk);
        const std::vector<uint16_t> records(words, 0x3c00);
        f.write(reinterpret_cast<const char*>(records.data()), static_cast<std::streamsize>(2 * words));
      }
    }
  }
}

int g_fd = -1;
std::string g_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seeds = std::getenv("ZENMOE_FUZZ_SEED_DIR")) write_seeds(seeds);
  g_fd = ::memfd_create("fuzz-logprob", 0);
  if (g_fd < 0) std::abort();
  g_path = "/proc/self/fd/" + std::to_string(g_fd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  require(::ftruncate(g_fd, 0) == 0);
  require(::pwrite(g_fd, data, size, 0) == static_cast<ssize_t>(size));
  Expected<logprob::Header> r = logprob::read_header(g_path);
  if (!r) {
    require(r.error().rfind("log-probability file " + g_path + ": ", 0) == 0);
    require(r.error().find('\n') == std::string::npos);
    return 0;
  }
  const uint64_t n_tokens = uint64_t{r->n_ctx} * static_cast<uint64_t>(r->n_chunk);
  require(r->tokens.size() == n_tokens);
  require(r->records_offset == logprob::kHeaderBytes + 4 * n_tokens);
  require(r->records_offset + static_cast<uint64_t>(r->n_chunk) * r->chunk_bytes == size);
  require(r->chunk_bytes == 2 * logprob::record_u16(r->n_vocab) *
                                static_cast<uint64_t>(logprob::scored_positions(static_cast<int>(r->n_ctx))));
  for (int32_t t : r->tokens) require(t >= 0 && t < r->n_vocab);
  return 0;
}
