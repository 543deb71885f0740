// `zenmoe inspect`: what a GGUF model holds (metadata, tensor table, totals, split summary,
// MoE accounting) as a human table or JSON, and a tensor dequantised to float32.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/status.h"
#include "runtime/gguf.h"

namespace zenmoe::tools {

// The full report. Arrays in metadata list at most kInspectArrayValues values ("truncated"
// says when more exist).
inline constexpr size_t kInspectArrayValues = 64;
Expected<nlohmann::ordered_json> inspect_json(const gguf::Model& model);
Expected<std::string> inspect_text(const gguf::Model& model);

// FNV-1a 64 offset basis of the oracle `*.dequant.json` hashes: the standard basis
// 14695981039346656037 with its last digit lost. Used so hashes compare with the oracle.
inline constexpr uint64_t kOracleFnvBasis = 1469598103934665603ull;

// Statistics of a tensor's values dequantised to float32 in storage order. fnv1a64 hashes the
// little-endian float bytes (FNV-1a 64, basis kOracleFnvBasis, the oracle's convention).
struct TensorValueStats {
  uint64_t count = 0;
  double sum = 0.0, sumsq = 0.0;
  float min = 0.0f, max = 0.0f;
  uint64_t non_finite = 0;
  uint64_t fnv1a64 = 0;
  float first[8] = {};
};
Expected<TensorValueStats> tensor_value_stats(const gguf::TensorInfo& t);

// Writes tensor `name` dequantised to float32 (storage order, native little-endian) to
// `out_path`, atomically. Errors: unknown tensor, type without reference numerics, I/O.
Status dequantize_tensor_to_file(const gguf::Model& model, const std::string& name,
                                 const std::string& out_path);

}  // namespace zenmoe::tools
