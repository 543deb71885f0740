// libFuzzer target for the tokenizer: the property and the input format are in
// tests/fuzz/tokenizer_property.h; a broken property traps, so it counts as a crash.
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize writes the seeds there (scripts/fuzz.sh).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/tokenizer_property.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("ZENMOE_FUZZ_SEED_DIR");
  if (dir == nullptr) return 0;
  const auto seeds = zenmoe::fuzz::tokenizer_fuzz_seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(dir) + "/seed-" + std::to_string(i);
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(seeds[i].data(), 1, seeds[i].size(), f);
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!zenmoe::fuzz::check_tokenizer_input(data, size).empty()) __builtin_trap();
  return 0;
}
