// Helpers shared by the GGUF reader, split loader and writer (not part of the public API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/status.h"

namespace zenmoe::gguf {

// GGML_MAX_NAME: tensor names are at most 63 bytes.
inline constexpr size_t kMaxTensorName = 64;
// Arrays of arrays deeper than this are rejected (bounds recursion on hostile input).
inline constexpr int kMaxArrayDepth = 8;

// `s` made safe for a one-line error message: non-printable bytes as \xNN, cut at max_len.
std::string printable(std::string_view s, size_t max_len = 80);

// Byte size of a tensor of ggml type `type_id` and dims `ne` (all four, unused ones 1).
// Errors: unknown/removed type, ne0 not a block multiple, element count or size overflow.
Expected<uint64_t> tensor_nbytes(int32_t type_id, const int64_t ne[4]);

}  // namespace zenmoe::gguf
