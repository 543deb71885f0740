#include "runtime/logprob_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace zenmoe::logprob {

Expected<Header> read_header(const std::string& path) {
  const std::string where = "log-probability file " + path + ": ";
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return Error{where + ec.message()};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{where + "cannot open it"};
  char magic[8];
  Header f;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(&f.n_ctx), sizeof f.n_ctx);
  in.read(reinterpret_cast<char*>(&f.n_vocab), sizeof f.n_vocab);
  in.read(reinterpret_cast<char*>(&f.n_chunk), sizeof f.n_chunk);
  if (!in || std::memcmp(magic, "_logits_", 8) != 0) return Error{where + "not such a file (no \"_logits_\" header)"};
  if (f.n_ctx < 4 || f.n_ctx > (1u << 24))
    return Error{where + "context size " + std::to_string(f.n_ctx) + " is out of range (4 to 16777216)"};
  if (f.n_vocab < 1 || f.n_vocab > (1 << 24))
    return Error{where + "vocabulary size " + std::to_string(f.n_vocab) + " is out of range"};
  if (f.n_chunk < 1) return Error{where + "chunk count " + std::to_string(f.n_chunk) + " is out of range"};
  const uint64_t n_tokens = uint64_t{f.n_ctx} * static_cast<uint64_t>(f.n_chunk);
  f.records_offset = kHeaderBytes + 4 * n_tokens;
  f.chunk_bytes = uint64_t(scored_positions(static_cast<int>(f.n_ctx))) * record_u16(f.n_vocab) * 2;
  // n_tokens < 2^55 and 0 < chunk_bytes < 2^49: the product is formed only once it fits the size.
  const uint64_t chunks = static_cast<uint64_t>(f.n_chunk);
  const bool fits = f.records_offset <= size && (size - f.records_offset) / f.chunk_bytes >= chunks;
  if (!fits || size - f.records_offset != chunks * f.chunk_bytes)
    return Error{where + "truncated or damaged: " + std::to_string(size) + " bytes where " +
                 std::to_string(f.n_chunk) + " chunks of " + std::to_string(f.n_ctx) + " tokens take " +
                 (fits ? std::to_string(f.records_offset + chunks * f.chunk_bytes) : std::string("more"))};
  f.tokens.resize(n_tokens);
  in.read(reinterpret_cast<char*>(f.tokens.data()), static_cast<std::streamsize>(4 * n_tokens));
  if (!in) return Error{where + "cannot read its tokens"};
  for (size_t i = 0; i < f.tokens.size(); ++i)
    if (f.tokens[i] < 0 || f.tokens[i] >= f.n_vocab)
      return Error{where + "token " + std::to_string(i) + " (" + std::to_string(f.tokens[i]) +
                   ") is outside its vocabulary of " + std::to_string(f.n_vocab)};
  return f;
}

}  // namespace zenmoe::logprob
