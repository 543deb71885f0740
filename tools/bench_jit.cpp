// Generated GEMV kernels (codegen registry) as benchmark runners: the descriptor zenmoe
// would use on this host, weights packed by the production packer, activations quantised
// by the reference quantiser of the kernel's activation format. Generation and packing
// happen before anything is timed.
#include <algorithm>
#include <cstring>

#include "codegen/isa.h"
#include "codegen/kernel.h"
#include "codegen/kernel_desc.h"
#include "codegen/registry.h"
#include "kernels/pack.h"
#include "tools/bench_gemv.h"
#include "tools/bench_weights.h"

namespace zenmoe::tools {
namespace {

class JitRunner final : public GemvRunner {
 public:
  JitRunner(std::shared_ptr<const Kernel> k, PackLayout layout)
      : kernel_(std::move(k)), layout_(layout), fused_(kernel_->desc().op == KernelOp::kGateUpSwiglu) {}
  std::string kernel() const override { return canonical_name(kernel_->desc()); }
  std::string format() const override { return type_name(kernel_->desc().weight); }
  std::string impl() const override { return kernel_->name(); }
  int64_t rows() const override { return layout_.rows; }
  int64_t cols() const override { return layout_.cols; }
  int64_t matrix_bytes() const override { return layout_.total_bytes; }
  // The fused kernel computes whole Q8_K blocks: 256 outputs = 512 packed rows.
  int64_t row_block() const override { return fused_ ? 512 : layout_.row_block; }

  Status prepare(int copies) override {
    const GgmlType w = kernel_->desc().weight;
    const int64_t src_bytes = row_bytes(w, layout_.cols) * layout_.rows;
    auto src = AlignedBuffer::make(static_cast<size_t>(src_bytes));
    if (!src) return Error{src.error()};
    ZENMOE_RETURN_IF_ERROR(fill_random_weights(w, src->data(), layout_.rows, layout_.cols, 42));
    const size_t one = static_cast<size_t>(layout_.total_bytes);
    auto buf = AlignedBuffer::make(one * static_cast<size_t>(copies));
    if (!buf) return Error{buf.error()};
    buf_ = std::move(*buf);
    ZENMOE_RETURN_IF_ERROR(pack_into(layout_, src->data(), static_cast<size_t>(src_bytes), buf_.data()));
    for (int c = 1; c < copies; ++c) std::memcpy(buf_.data() + c * one, buf_.data(), one);
    return quantise_activations();
  }

  void run(int copy, int64_t r0, int64_t r1) override {
    GemvCall c;
    c.w = buf_.data() + static_cast<size_t>(copy) * static_cast<size_t>(layout_.total_bytes);
    c.x = x_.data();
    c.y = y_.data();
    c.r0 = r0;
    c.r1 = r1;
    if (fused_) {  // packed rows [r0, r1) are outputs [r0 / 2, r1 / 2)
      c.r0 = r0 / 2;
      c.r1 = r1 / 2;
      c.q8_out = q8_.data();
    }
    (*kernel_)(c);
  }

 private:
  Status quantise_activations() {
    const GgmlType act = kernel_->desc().act;
    const FormatTraits* tr = format_traits(act);
    const int64_t xb = row_bytes(act, layout_.cols);
    if (!tr || !tr->from_float || xb < 0)
      return Error{std::string("no reference quantiser for activation format ") + type_name(act)};
    std::vector<float> x = random_activations(layout_.cols, 7);
    x_.assign(static_cast<size_t>(xb), 0);
    tr->from_float(x.data(), x_.data(), layout_.cols);
    y_.assign(static_cast<size_t>(layout_.rows), 0.0f);
    if (fused_) q8_.assign(static_cast<size_t>(layout_.rows / 512) * sizeof(BlockQ8_K), 0);
    return Status::ok();
  }

  std::shared_ptr<const Kernel> kernel_;
  PackLayout layout_;
  AlignedBuffer buf_;
  std::vector<uint8_t> x_;
  std::vector<float> y_;
  bool fused_;
  std::vector<uint8_t> q8_;
};

}  // namespace

namespace {

Expected<std::unique_ptr<GemvRunner>> make(const std::string& format, const std::string& isa_cap,
                                           int64_t rows, int64_t cols, KernelOp op) {
  GgmlType w;
  if (!type_from_name(format.c_str(), &w)) return Error{"unknown format '" + format + "'"};
  if (!pack_supported(w)) return Error{std::string("no generated GEMV kernel for ") + type_name(w) + " yet"};
  auto target = isa::resolve_target(isa_cap);
  if (!target) return Error{target.error()};
  if (cols <= 0 || cols > (int64_t{1} << 20)) return Error{"K out of range: " + std::to_string(cols)};
  if (op == KernelOp::kGateUpSwiglu && w != GgmlType::Q4_K)
    return Error{std::string("no fused gate+up+SwiGLU kernel for ") + type_name(w)};
  if (op == KernelOp::kGateUpSwiglu) rows = std::max<int64_t>(512, rows / 512 * 512);
  KernelDesc d = default_gemv_desc(w, static_cast<int32_t>(cols), *target, op);
  ZENMOE_RETURN_IF_ERROR(validate(d));
  auto layout = pack_layout(w, d.row_block, rows, cols);
  if (!layout) return Error{layout.error()};
  auto k = global_registry().get(d);  // generated here, once per descriptor
  if (!k) return Error{k.error()};
  return std::unique_ptr<GemvRunner>(new JitRunner(*k, *layout));
}

}  // namespace

Expected<std::unique_ptr<GemvRunner>> make_jit_runner(const std::string& format,
                                                       const std::string& isa_cap, int64_t rows,
                                                       int64_t cols) {
  return make(format, isa_cap, rows, cols, KernelOp::kGemv);
}

// Rows are rounded down to a multiple of 512 (whole Q8_K blocks of outputs), at least 512.
Expected<std::unique_ptr<GemvRunner>> make_jit_fused_runner(const std::string& format,
                                                             const std::string& isa_cap, int64_t rows,
                                                             int64_t cols) {
  return make(format, isa_cap, rows, cols, KernelOp::kGateUpSwiglu);
}

}  // namespace zenmoe::tools
