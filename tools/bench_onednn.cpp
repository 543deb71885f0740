// oneDNN matmul baselines at M = 1 (f32, bf16, f16, u8×s8): the weights in the layout oneDNN
// picks for itself (format_tag::any), so each row is oneDNN's best M = 1 path on this CPU.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <string>

#include "tools/bench_gemv.h"
#include "tools/bench_weights.h"

namespace zenmoe::tools {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// oneDNN's CPU runtime here is OpenMP (Debian builds it against libgomp); its thread count
// is set through the OpenMP runtime already loaded with libdnnl.
bool set_omp_threads(int n) {
  using Fn = void (*)(int);
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (!fn) return false;
  fn(n);
  return true;
}

struct Types {
  dt src, wei, dst;
};

class OneDnnRunner final : public GemvRunner {
 public:
  OneDnnRunner(std::string fmt, Types ty, int64_t rows, int64_t cols)
      : fmt_(std::move(fmt)), ty_(ty), rows_(rows), cols_(cols) {}

  // Creates the primitive; oneDNN reports unsupported combinations by throwing.
  Status create() {
    try {
      eng_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
      stream_ = dnnl::stream(eng_);
      dnnl::memory::desc src_md({1, cols_}, ty_.src, tag::ab);
      dnnl::memory::desc wei_md({cols_, rows_}, ty_.wei, tag::any);
      dnnl::memory::desc dst_md({1, rows_}, ty_.dst, tag::ab);
      dnnl::primitive_attr attr;
      // Per-output-channel scales, as a quantised model would carry them.
      if (ty_.wei == dt::s8) attr.set_output_scales(1 << 1, std::vector<float>(rows_, 0.01f));
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng_);
      impl_ = pd.impl_info_str();
      wei_md_ = pd.weights_desc();
      prim_ = dnnl::matmul(pd);
      src_ = dnnl::memory(src_md, eng_);
      dst_ = dnnl::memory(dst_md, eng_);
    } catch (const dnnl::error& e) {
      return Error{"oneDNN matmul " + fmt_ + " (M=1, K=" + std::to_string(cols_) + ", N=" +
                   std::to_string(rows_) + "): " + e.what()};
    }
    return Status::ok();
  }

  std::string kernel() const override { return "onednn_" + fmt_ + "_m1"; }
  std::string format() const override { return fmt_; }
  std::string impl() const override { return impl_; }
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  int64_t matrix_bytes() const override { return static_cast<int64_t>(wei_md_.get_size()); }
  bool self_threaded() const override { return true; }
  void set_threads(int threads) override { set_omp_threads(threads); }

  Status prepare(int copies) override {
    const size_t one = wei_md_.get_size();
    auto buf = AlignedBuffer::make(one * static_cast<size_t>(copies));
    if (!buf) return Error{buf.error()};
    buf_ = std::move(*buf);
    fill_typed(buf_.data(), one, ty_.wei);  // whole elements, so any blocked layout holds valid values
    for (int c = 1; c < copies; ++c) std::memcpy(buf_.data() + c * one, buf_.data(), one);
    fill_typed(static_cast<uint8_t*>(src_.get_data_handle()), src_.get_desc().get_size(), ty_.src);
    try {
      for (int c = 0; c < copies; ++c) wei_.emplace_back(wei_md_, eng_, buf_.data() + c * one);
    } catch (const dnnl::error& e) {
      return Error{std::string("oneDNN weights memory: ") + e.what()};
    }
    return Status::ok();
  }

  void run(int copy, int64_t, int64_t) override {
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_[static_cast<size_t>(copy)]},
                            {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  // Valid values of the data type over the whole buffer, generated in chunks so a
  // multi-GB matrix needs no float copy of itself.
  static void fill_typed(uint8_t* p, size_t bytes, dt type) {
    const size_t esize = type == dt::f32 ? 4 : (type == dt::bf16 || type == dt::f16) ? 2 : 1;
    const size_t chunk = size_t{1} << 20;  // elements
    for (size_t e0 = 0, k = 0; e0 * esize < bytes; e0 += chunk, ++k) {
      const size_t n = std::min(chunk, bytes / esize - e0);
      std::vector<float> v = random_activations(static_cast<int64_t>(n), 11 + k);
      uint8_t* q = p + e0 * esize;
      for (size_t i = 0; i < n; ++i) {
        if (type == dt::f32) {
          std::memcpy(q + 4 * i, &v[i], 4);
        } else if (type == dt::bf16 || type == dt::f16) {
          uint16_t b = type == dt::bf16 ? f32_to_bf16_bits(v[i]) : f32_to_f16_bits(v[i]);
          std::memcpy(q + 2 * i, &b, 2);
        } else {
          q[i] = static_cast<uint8_t>(static_cast<int>(v[i] * 127.0f));
        }
      }
    }
  }

  std::string fmt_;
  Types ty_;
  int64_t rows_, cols_;
  std::string impl_;
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::memory::desc wei_md_;
  dnnl::matmul prim_;
  dnnl::memory src_, dst_;
  std::vector<dnnl::memory> wei_;
  AlignedBuffer buf_;
};

}  // namespace

Expected<std::unique_ptr<GemvRunner>> make_onednn_runner(const std::string& format, int64_t rows,
                                                          int64_t cols) {
  Types ty;
  if (format == "f32") ty = {dt::f32, dt::f32, dt::f32};
  else if (format == "bf16") ty = {dt::bf16, dt::bf16, dt::f32};
  else if (format == "f16") ty = {dt::f16, dt::f16, dt::f32};
  else if (format == "s8") ty = {dt::u8, dt::s8, dt::f32};
  else return Error{"no oneDNN baseline for '" + format + "' (expected f32, bf16, f16 or s8)"};
  if (rows <= 0 || cols <= 0) return Error{"oneDNN baseline needs a positive shape"};
  auto r = std::make_unique<OneDnnRunner>(format, ty, rows, cols);
  ZENMOE_RETURN_IF_ERROR(r->create());
  return std::unique_ptr<GemvRunner>(std::move(r));
}

bool onednn_can_set_threads() { return set_omp_threads(1); }

}  // namespace zenmoe::tools
