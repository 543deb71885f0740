// The oracle tiny model compiled in memory for the host and for the scalar target, for suites
// that make many executors of it, and random token ids to feed them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "runtime/compiled_model.h"
#include "runtime/gguf.h"

namespace zenmoe::testing_cli {

struct TinyCompiled {
  gguf::Model model;
  std::shared_ptr<const CompiledModel> host, scalar;  // the scalar target: no generated kernels
};

// Null, with the reason in *error, when the model does not open or compile.
inline std::unique_ptr<TinyCompiled> load_tiny_compiled(std::string* error) {
  auto m = gguf::Model::open(std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf");
  if (!m) {
    *error = m.error();
    return nullptr;
  }
  auto t = std::make_unique<TinyCompiled>(TinyCompiled{std::move(*m), nullptr, nullptr});
  for (isa::IsaLevel level : {isa::host_level(), isa::IsaLevel::kScalar}) {
    CompileOptions co;
    co.target = {level, isa::host_tuning()};
    auto cm = compile_in_memory(t->model, co);
    if (!cm) {
      *error = cm.error();
      return nullptr;
    }
    (level == isa::IsaLevel::kScalar ? t->scalar : t->host) = std::make_shared<const CompiledModel>(std::move(*cm));
  }
  return t;
}

// n ids below n_vocab, the same for the same seed.
inline std::vector<int32_t> random_tokens(int n, unsigned seed, int n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<unsigned>(n_vocab));
  return t;
}

// A parameterised suite whose tests share one TinyCompiled (tiny_), loaded once per suite.
template <typename Param>
class TinyCompiledSuite : public ::testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    tiny_ = load_tiny_compiled(&error).release();
    ASSERT_NE(tiny_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete tiny_;
    tiny_ = nullptr;
  }
  static inline TinyCompiled* tiny_ = nullptr;
};

}  // namespace zenmoe::testing_cli
