// Hugging Face tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.* metadata, the way
// convert_hf_to_gguf.py lays it out for a byte-level BPE model (spec §6.1).
#pragma once

#include <string>

#include "kernels/status.h"
#include "runtime/gguf.h"
#include "runtime/tokenizer.h"

namespace zenmoe::tok {

struct HfConvertOptions {
  // tokenizer.ggml.pre to write instead of the name detected from the pre_tokenizer section
  // (needed for pre-tokenizers this converter does not recognise).
  std::string pre_override;
};

// Reads tokenizer.json: model.vocab + added_tokens in id order (holes become "[PAD<id>]",
// type UNUSED), token types (added special -> CONTROL, other added -> USER_DEFINED, else
// NORMAL), merges ("a b" strings or [a, b] pairs), pre-tokenizer name (deepseek-v3 and gpt2
// are recognised). From tokenizer_config.json (optional, "" = none): bos / eos / pad / unk
// ids, add_bos_token / add_eos_token, chat_template. Errors name the file and the problem.
Expected<Vocabulary> hf_tokenizer_to_vocabulary(const std::string& tokenizer_json_path,
                                                const std::string& tokenizer_config_path_or_empty,
                                                const HfConvertOptions& options = {});

// The same, written into `out` as tokenizer.ggml.* and tokenizer.chat_template.
Status hf_tokenizer_to_metadata(const std::string& tokenizer_json_path,
                                const std::string& tokenizer_config_path_or_empty,
                                gguf::Metadata* out);
Status hf_tokenizer_to_metadata(const std::string& tokenizer_json_path,
                                const std::string& tokenizer_config_path_or_empty,
                                const HfConvertOptions& options, gguf::Metadata* out);

}  // namespace zenmoe::tok
