// Log-probability files as llama.cpp's perplexity tool writes and reads them (its
// "KL-divergence base"): the tokens of n_chunk chunks of n_ctx tokens and, for the second half
// of each chunk, every position's log-probabilities over the vocabulary in 16 bits. Little-endian:
//   "_logits_", uint32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx],
//   then per chunk scored_positions(n_ctx) records of record_u16(n_vocab) uint16: float32
//   scale, float32 min_log_prob, then n_vocab codes (padded to an even count), code q standing
//   for the log-probability scale * q + min_log_prob. Record r of a chunk belongs to position
//   n_ctx/2 + r, which predicts token n_ctx/2 + r + 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.h"

namespace zenmoe::logprob {

// uint16 words of one position's record.
inline size_t record_u16(int n_vocab) { return 2 * ((static_cast<size_t>(n_vocab) + 1) / 2) + 4; }

// Positions a chunk of n_ctx tokens scores.
inline int scored_positions(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }

// Bytes before the tokens: the magic and the three sizes.
inline constexpr uint64_t kHeaderBytes = 20;

// A file's header and tokens, checked against its size: the records of chunk c start at
// records_offset + c * chunk_bytes and the last ends at the end of the file.
struct Header {
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0, n_chunk = 0;
  std::vector<int32_t> tokens;  // n_chunk * n_ctx, each in [0, n_vocab)
  uint64_t records_offset = 0, chunk_bytes = 0;
};

// Reads `path`'s header and tokens. Errors are one line, "log-probability file PATH: ...",
// naming what is wrong (no such file, not such a file, sizes out of range, truncated or
// longer than its sizes say, a token outside its vocabulary).
Expected<Header> read_header(const std::string& path);

}  // namespace zenmoe::logprob
