// Prompt cache files (`zenmoe run --prompt-cache FILE`): the tokens of a sequence and the KV
// cache rows an engine made for them, so a later run whose prompt starts with the same tokens
// restores those positions instead of evaluating them again (a long shared system prompt or
// document, evaluated once for a night of runs).
//
// Layout (little-endian), every field checked on load:
//    0  char[8] magic "ZMPCACHE"
//    8  u32     version (kPromptCacheVersion)
//   12  u32     n_caches
//   16  u64     model id (plan::gguf_table_checksum of the model)
//   24  u32     n_tokens
//   28  u32     0
//   32  per cache: u32 name length, name, i32 element type, i64 elements per row, i64 row bytes
//       then i32 tokens[n_tokens]
//       then per cache, in the same order: rows [0, n_tokens) (n_tokens x row bytes)
//  end  u64     checksum of every byte before it
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/status.h"
#include "runtime/executor.h"

namespace zenmoe {

inline constexpr uint32_t kPromptCacheVersion = 1;

// Writes tokens (the sequence ex holds: tokens.size() == ex.n_past()) and their cache rows to
// `path` through a temporary renamed into place, so a failed or interrupted save leaves no file
// (an existing one stays as it was).
Status save_prompt_cache(const std::string& path, uint64_t model_id, Executor& ex, std::span<const int32_t> tokens);

struct PromptCacheLoad {
  int restored = 0;            // positions restored into the executor
  std::vector<int32_t> saved;  // the tokens the file holds
};

// Reads `path`, made for the model `model_id` with the cache layout of ex, and restores into ex
// (reset first) the longest run of the file's tokens that `prompt` starts with, at most
// prompt.size() - 1 of them: the last prompt token is evaluated again for its logits. The whole
// file is read and its checksum checked; any mismatch (another model, another KV cache type or
// engine, a truncated or damaged file) is an error, and ex is left empty.
Expected<PromptCacheLoad> load_prompt_cache(const std::string& path, uint64_t model_id, Executor& ex,
                                            std::span<const int32_t> prompt);

// The checksum a prompt cache file ends with, of the n bytes before it.
uint64_t prompt_cache_checksum(const void* data, size_t n);

}  // namespace zenmoe
