// Test models made from the oracle files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/gguf.h"

namespace zenmoe::testing_cli {

// Copies the model at `src_path` into dir/name with tokenizer.chat_template set to `tmpl`, so
// chat formatting has something to recognise; "" on failure.
inline std::string model_with_template(const std::string& src_path, const std::filesystem::path& dir,
                                       const std::string& name, const std::string& tmpl) {
  auto src = gguf::Model::open(src_path);
  if (!src) return "";
  gguf::Writer w;
  for (const auto& [k, v] : src->metadata().entries()) w.metadata().set(k, v);
  w.metadata().set("tokenizer.chat_template", gguf::Value::string(tmpl));
  for (const auto& t : src->tensors()) {
    std::vector<int64_t> dims(t.ne, t.ne + t.n_dims);
    if (!w.add_tensor(t.name, t.type, dims, t.data).is_ok()) return "";
  }
  const std::string path = (dir / name).string();
  return w.write(path).is_ok() ? path : "";
}

}  // namespace zenmoe::testing_cli
