// Tensor values of `zenmoe inspect --tensor`: statistics and the float32 dump.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/ref/quant.h"
#include "tools/inspect.h"

namespace zenmoe::tools {
namespace {

// Calls fn(row_floats, n) for every row of t, dequantised in storage order.
template <class Fn>
Status for_each_row(const gguf::TensorInfo& t, Fn&& fn) {
  const int64_t n = t.ne[0];
  if (Status s = ref::check_row(t.type, n); !s) return Error{"tensor '" + t.name + "': " + s.message()};
  const int64_t rb = row_bytes(t.type, n);
  const int64_t rows = n ? t.n_elements() / n : 0;
  if (rb < 0 || static_cast<uint64_t>(rb) * static_cast<uint64_t>(rows) != t.nbytes)
    return Error{"tensor '" + t.name + "': byte size does not match its shape"};
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    ref::dequantize_row(t.type, t.data + static_cast<uint64_t>(r) * static_cast<uint64_t>(rb), row.data(), n);
    ZENMOE_RETURN_IF_ERROR(fn(row.data(), n));
  }
  return Status::ok();
}

}  // namespace

Expected<TensorValueStats> tensor_value_stats(const gguf::TensorInfo& t) {
  TensorValueStats st;
  st.fnv1a64 = kOracleFnvBasis;
  bool first_finite = true;
  Status s = for_each_row(t, [&](const float* x, int64_t n) -> Status {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      if (st.count < 8) st.first[st.count] = v;
      ++st.count;
      unsigned char b[4];
      std::memcpy(b, &v, 4);
      for (unsigned char c : b) {
        st.fnv1a64 ^= c;
        st.fnv1a64 *= 0x100000001B3ull;
      }
      if (!std::isfinite(v)) {
        ++st.non_finite;
        continue;
      }
      st.sum += v;
      st.sumsq += static_cast<double>(v) * v;
      if (first_finite || v < st.min) st.min = v;
      if (first_finite || v > st.max) st.max = v;
      first_finite = false;
    }
    return Status::ok();
  });
  if (!s) return Error{s.message()};
  return st;
}

Status dequantize_tensor_to_file(const gguf::Model& model, const std::string& name,
                                 const std::string& out_path) {
  const gguf::TensorInfo* t = model.find_tensor(name);
  if (!t) return Error{"no tensor named '" + name + "' in " + model.files().front().path()};
  const std::string tmp = out_path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Error{out_path + ": cannot create: " + std::strerror(errno)};
  Status s = for_each_row(*t, [&](const float* x, int64_t n) -> Status {
    if (std::fwrite(x, sizeof(float), static_cast<size_t>(n), f) != static_cast<size_t>(n))
      return Error{out_path + ": write failed: " + std::strerror(errno)};
    return Status::ok();
  });
  if (std::fclose(f) != 0 && s) s = Error{out_path + ": write failed: " + std::strerror(errno)};
  if (s && std::rename(tmp.c_str(), out_path.c_str()) != 0)
    s = Error{out_path + ": cannot rename: " + std::strerror(errno)};
  if (!s) std::remove(tmp.c_str());
  return s;
}

}  // namespace zenmoe::tools
