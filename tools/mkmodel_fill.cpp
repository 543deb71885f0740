#include "tools/mkmodel_fill.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/ref/quant.h"

namespace zenmoe::tools {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser: a bijective, well-mixed hash
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Rows [r0, r1) of t into dst (which points at row r0).
void fill_rows(const TensorPlan& t, uint64_t key, int64_t r0, int64_t r1, uint8_t* dst,
               std::atomic<uint64_t>* done) {
  const int64_t n = t.row_length();
  const uint64_t rb = static_cast<uint64_t>(row_bytes(t.type, n));
  std::vector<float> row(static_cast<size_t>(n));
  uint64_t pending = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * static_cast<uint64_t>(n);
    for (int64_t i = 0; i < n; ++i)
      row[i] = t.mean + t.stddev * synthetic_normal(key, base + static_cast<uint64_t>(i));
    if (t.type == GgmlType::F32)
      std::memcpy(dst, row.data(), rb);
    else
      ref::quantize_row(t.type, row.data(), dst, n);
    dst += rb;
    pending += rb;
    if (done && pending >= (4u << 20)) {
      done->fetch_add(pending, std::memory_order_relaxed);
      pending = 0;
    }
  }
  if (done) done->fetch_add(pending, std::memory_order_relaxed);
}

}  // namespace

uint64_t tensor_stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name, then mixed with the seed
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(seed + 0x9E3779B97F4A7C15ull));
}

float synthetic_normal(uint64_t key, uint64_t index) {
  const uint64_t h = mix64(key + index * 0x9E3779B97F4A7C15ull);
  const uint32_t s = static_cast<uint32_t>(h & 0xFFFF) + static_cast<uint32_t>((h >> 16) & 0xFFFF) +
                     static_cast<uint32_t>((h >> 32) & 0xFFFF) + static_cast<uint32_t>(h >> 48);
  // Sum of 4 uniforms on [0,1): mean 2, variance 4/12; rescale to unit variance.
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  return (static_cast<float>(s) - 2.0f * 65535.0f) * kScale;
}

Status check_fillable(const TensorPlan& t) {
  if (t.dims.empty()) return Error{"tensor '" + t.name + "' has no dimensions"};
  if (t.type == GgmlType::F32) return Status::ok();
  Status s = ref::check_row(t.type, t.row_length(), true);
  if (!s) return Error{"tensor '" + t.name + "': " + s.message()};
  return Status::ok();
}

Status fill_tensor(const TensorPlan& t, uint64_t seed, uint8_t* dst, int threads,
                   std::atomic<uint64_t>* done_bytes) {
  ZENMOE_RETURN_IF_ERROR(check_fillable(t));
  const uint64_t key = tensor_stream_key(seed, t.name);
  const int64_t rows = t.rows();
  const uint64_t rb = static_cast<uint64_t>(row_bytes(t.type, t.row_length()));
  // Small tensors are not worth a thread start.
  const int64_t min_rows_per_thread = std::max<int64_t>(1, (1 << 18) / std::max<int64_t>(1, t.row_length()));
  const int64_t n_threads =
      std::clamp<int64_t>(std::min<int64_t>(threads, rows / min_rows_per_thread), 1, 256);
  if (n_threads == 1) {
    fill_rows(t, key, 0, rows, dst, done_bytes);
    return Status::ok();
  }
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < n_threads; ++k) {
    const int64_t r0 = rows * k / n_threads, r1 = rows * (k + 1) / n_threads;
    pool.emplace_back(fill_rows, std::cref(t), key, r0, r1, dst + static_cast<uint64_t>(r0) * rb,
                      done_bytes);
  }
  for (auto& th : pool) th.join();
  return Status::ok();
}

}  // namespace zenmoe::tools
