// An executor with KV caches and no model, for fuzzing the prompt cache reader and replaying
// its findings: two caches of F16 rows of 64 elements over a 32-position context, the layout
// the seeds are saved with (the rows hold a position's index, so restored rows are checkable).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/executor.h"

namespace zenmoe::fuzz {

inline constexpr uint64_t kFakeModelId = 42;

class FakeExecutor final : public Executor {
 public:
  static constexpr int kCtx = 32, kRow = 64;
  FakeExecutor() : rows_(2, std::vector<uint8_t>(size_t{kCtx} * kRow * 2)) {}
  int n_vocab() const override { return 100; }
  int n_ctx() const override { return kCtx; }
  int n_past() const override { return n_past_; }
  Status eval(std::span<const int32_t> tokens, float*, bool) override {
    ZENMOE_RETURN_IF_ERROR(check_eval_tokens(tokens, n_past_, kCtx, n_vocab()));
    for (size_t t = 0; t < tokens.size(); ++t)
      for (auto& r : rows_) std::memset(r.data() + (n_past_ + t) * kRow * 2, tokens[t] & 0xff, kRow * 2);
    n_past_ += static_cast<int>(tokens.size());
    return Status::ok();
  }
  void reset() override { n_past_ = 0; }
  std::vector<KvCacheRows> kv_caches() override {
    return {{"blk.0.kv_cache", GgmlType::F16, kRow, kRow * 2, rows_[0].data()},
            {"blk.1.kv_cache", GgmlType::F16, kRow, kRow * 2, rows_[1].data()}};
  }
  Status rewind(int n) override {
    if (n < 0 || n > n_past_) return Error{"rewind past the sequence"};
    n_past_ = n;
    return Status::ok();
  }
  Status restore(int n) override {
    if (n < 0 || n > kCtx) return Error{"restore past the context"};
    n_past_ = n;
    return Status::ok();
  }

 private:
  std::vector<std::vector<uint8_t>> rows_;
  int n_past_ = 0;
};

}  // namespace zenmoe::fuzz
