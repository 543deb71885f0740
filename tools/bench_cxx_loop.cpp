// The compiler-vectorised baseline: one plain C++ dequantise-and-dot loop per format,
// compiled three times (AVX-512, AVX2+FMA, baseline x86-64) and chosen from the host ISA.
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/formats.h"
#include "tools/bench_cxx_loop.h"
#include "tools/bench_gemv.h"
#include "tools/bench_weights.h"

namespace zenmoe::tools {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,prefer-vector-width=512")
namespace loop_avx512 {
#include "tools/bench_cxx_loop_body.inc"
}  // namespace loop_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace loop_avx2 {
#include "tools/bench_cxx_loop_body.inc"
}  // namespace loop_avx2
#pragma GCC pop_options

namespace loop_base {
#include "tools/bench_cxx_loop_body.inc"
}  // namespace loop_base

// Short format tag used in kernel names: q4_K -> q4k, q8_0 -> q8_0, f32 -> f32.
std::string short_tag(GgmlType t) {
  std::string n = type_name(t), out;
  for (char c : n) out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (out.size() > 2 && out.compare(out.size() - 2, 2, "_k") == 0) out.erase(out.size() - 2, 1);
  return out;
}

class CxxLoopRunner final : public GemvRunner {
 public:
  CxxLoopRunner(GgmlType t, GemvRowsFn fn, LoadIsa isa, int64_t rows, int64_t cols)
      : type_(t), fn_(fn), isa_(isa), rows_(rows), cols_(cols), row_bytes_(row_bytes(t, cols)) {}
  std::string kernel() const override { return "cxx_loop_" + short_tag(type_); }
  std::string format() const override { return type_name(type_); }
  std::string impl() const override { return load_isa_name(isa_); }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  int64_t matrix_bytes() const override { return rows_ * row_bytes_; }

  Status prepare(int copies) override {
    const size_t one = static_cast<size_t>(matrix_bytes());
    auto buf = AlignedBuffer::make(one * static_cast<size_t>(copies));
    if (!buf) return Error{buf.error()};
    buf_ = std::move(*buf);
    ZENMOE_RETURN_IF_ERROR(fill_random_weights(type_, buf_.data(), rows_, cols_, 42));
    for (int c = 1; c < copies; ++c) std::memcpy(buf_.data() + c * one, buf_.data(), one);
    x_ = random_activations(cols_, 7);
    y_.assign(static_cast<size_t>(rows_), 0.0f);
    return Status::ok();
  }

  void run(int copy, int64_t r0, int64_t r1) override {
    fn_(buf_.data() + static_cast<size_t>(copy) * static_cast<size_t>(matrix_bytes()), row_bytes_,
        x_.data(), y_.data(), cols_, r0, r1);
  }

 private:
  GgmlType type_;
  GemvRowsFn fn_;
  LoadIsa isa_;
  int64_t rows_, cols_, row_bytes_;
  AlignedBuffer buf_;
  std::vector<float> x_, y_;
};

}  // namespace

Expected<GemvRowsFn> cxx_loop_rows_fn(GgmlType t, LoadIsa isa) {
  GemvRowsFn fn = isa == LoadIsa::kAvx512 ? loop_avx512::select(t)
                  : isa == LoadIsa::kAvx2 ? loop_avx2::select(t)
                                          : loop_base::select(t);
  if (!fn) return Error{std::string("no C++ loop baseline for ") + type_name(t)};
  return fn;
}

Expected<std::unique_ptr<GemvRunner>> make_cxx_loop_runner(const std::string& format,
                                                            const std::string& isa_cap,
                                                            int64_t rows, int64_t cols) {
  GgmlType t;
  if (!type_from_name(format.c_str(), &t)) return Error{"unknown format '" + format + "'"};
  auto isa = choose_load_isa(isa_cap);
  if (!isa) return Error{isa.error()};
  auto fn = cxx_loop_rows_fn(t, *isa);
  if (!fn) return Error{fn.error()};
  const int64_t block = type_geometry(t)->block_elems;
  if (cols <= 0 || rows <= 0 || cols % block != 0 || cols % 16 != 0)
    return Error{std::string(type_name(t)) + " needs a positive column count that is a multiple of " +
                 std::to_string(block > 16 ? block : 16) + ", got " + std::to_string(cols)};
  return std::unique_ptr<GemvRunner>(new CxxLoopRunner(t, *fn, *isa, rows, cols));
}

}  // namespace zenmoe::tools
