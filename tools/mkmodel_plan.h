// What a synthetic deepseek2 file contains: its metadata keys (spec §4.1, mirroring the
// files llama.cpp's converter writes), its tensors with names and shapes (spec §4.2), the
// type of each tensor under a quantisation mode (spec §3) and how its values are drawn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/status.h"
#include "runtime/gguf.h"
#include "tools/mkmodel_config.h"

namespace zenmoe::tools {

// --quant values. Q4_K_S is llama-quantize's mix; the others are pure (every quantisable
// matrix in that type, with the row-length fallbacks of spec §3 rule 8).
enum class QuantMode { Q4_K_S, F16, BF16, Q8_0, Q4_K };
Expected<QuantMode> parse_quant_mode(const std::string& s);  // "q4_k_s", "f16", ...
const char* quant_mode_name(QuantMode m);
uint32_t quant_file_type(QuantMode m);  // general.file_type (llama_ftype)

// The type llama-quantize would give tensor `name` with shape `dims` (ggml order) under
// `mode`: 1-D tensors, norms and the router stay F32; Q4_K_S gives output Q6_K, ffn_down of
// blocks < n_layer/8 Q5_K, attn_output Q5_K when n_expert == 8, everything else Q4_K; a row
// length that is not a multiple of the block falls back (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0,
// then F16).
GgmlType choose_tensor_type(QuantMode mode, const std::string& name,
                            const std::vector<int64_t>& dims, int64_t n_layer, int64_t n_expert);

// How a tensor's values are drawn: value = mean + stddev * N(0,1)-like noise.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;  // ggml order, ne0 first
  GgmlType type = GgmlType::F32;
  float mean = 0.0f;
  float stddev = 1.0f;
  int64_t row_length() const { return dims[0]; }
  int64_t rows() const;
  uint64_t nbytes() const;
};

// Every tensor of the model in the order llama.cpp's converter writes them: token_embd,
// then per block attention, FFN (dense or router + experts + shared expert), then
// output_norm and output. Scales: matrices N(0,1)/sqrt(row length) so each projection keeps
// unit variance, norms 1 ± 0.05, embedding N(0,1), router bias N(0, 0.05²), output head with
// gain kOutputGain so the next-token distribution is peaked rather than flat.
std::vector<TensorPlan> plan_tensors(const ModelConfig& cfg, QuantMode mode);
inline constexpr float kOutputGain = 3.0f;

// general.* and deepseek2.* keys, with the same names, order and value types as
// llama.cpp-made deepseek2 files (the oracle tiny files).
void add_model_metadata(const ModelConfig& cfg, QuantMode mode, gguf::Metadata& meta);

}  // namespace zenmoe::tools
