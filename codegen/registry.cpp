#include "codegen/registry.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "codegen/perf_map.h"
#include "codegen/x64/generators.h"
#include "kernels/pack.h"

namespace zenmoe {
namespace {

// IsaLevel::kScalar: the packed-layout reference from kernels/pack.h.
class ScalarKernel : public KernelCode {
 public:
  explicit ScalarKernel(const KernelDesc& d) : d_(d) {}
  void run(const GemvCall& c) const override {
    if (c.r0 >= c.r1) return;
    if (d_.op == KernelOp::kGateUpSwiglu) return run_gate_up(c);
    Expected<PackLayout> L = pack_layout(d_.weight, d_.row_block, c.r1, d_.cols);
    if (!L) return;  // unreachable: the descriptor was validated before construction
    const bool acc = d_.op == KernelOp::kGemvAccumulate || d_.op == KernelOp::kGemmAccumulate;
    (void)gemv_packed_ref(*L, c.w, c.x, c.y, c.r0, c.r1, acc, c.alpha);
  }
  // GEMM reference: the packed-layout GEMV reference once per token.
  void run_gemm(const GemmCall& c) const override {
    if (!is_gemm(d_.op)) return KernelCode::run_gemm(c);
    if (c.r0 >= c.r1) return;
    Expected<PackLayout> L = pack_layout(d_.weight, d_.row_block, c.r1, d_.cols);
    if (!L) return;
    const bool acc = d_.op == KernelOp::kGemmAccumulate;
    for (int64_t t = 0; t < c.n; ++t)
      (void)gemv_packed_ref(*L, c.w, gemm_x_row(c, t), gemm_y_row(c, t), c.r0, c.r1, acc, acc ? c.alpha[t] : 1.0f);
  }
  const uint8_t* code() const override { return nullptr; }
  size_t code_size() const override { return 0; }

 private:
  // Interleaved gate/up rows 2r, 2r+1 -> 512 floats per Q8_K block of h -> epilogue.
  void run_gate_up(const GemvCall& c) const {
    Expected<PackLayout> L = pack_layout(d_.weight, d_.row_block, 2 * c.r1, d_.cols);
    if (!L) return;
    float gu[512];
    for (int64_t b = c.r0 / 256; b < c.r1 / 256; ++b) {
      std::vector<float> tmp(static_cast<size_t>(2 * c.r1));
      (void)gemv_packed_ref(*L, c.w, c.x, tmp.data(), 512 * b, 512 * (b + 1));
      std::copy(tmp.begin() + 512 * b, tmp.begin() + 512 * (b + 1), gu);
      x64::swiglu_quantize_q8k(gu, static_cast<uint8_t*>(c.q8_out) + b * sizeof(BlockQ8_K));
    }
  }

  KernelDesc d_;
};

Expected<std::unique_ptr<KernelCode>> make_code(const KernelDesc& d) {
  ZENMOE_RETURN_IF_ERROR(validate(d));
  if (!pack_supported(d.weight))
    return Error{canonical_name(d) + ": weight format has no packed layout yet"};
  if (!isa::host_supports(d.isa))
    return Error{canonical_name(d) + ": needs " + isa::level_name(d.isa) + " but the host runs at most " +
                 isa::level_name(isa::host_level())};
  if (d.gfni && !isa::host_features().gfni) return Error{canonical_name(d) + ": needs GFNI, which the host lacks"};
  if (d.isa == isa::IsaLevel::kScalar) return std::unique_ptr<KernelCode>(new ScalarKernel(d));
  if (is_gemm(d.op)) return x64::generate_gemm(d);
  return x64::generate_gemv(d);
}

}  // namespace

Expected<std::shared_ptr<const Kernel>> Registry::get(const KernelDesc& d) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = slots_[d];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::call_once(slot->once, [&] {
    Expected<std::unique_ptr<KernelCode>> code = make_code(d);
    std::lock_guard<std::mutex> lock(mu_);
    ++generated_;
    if (code) {
      slot->kernel = std::make_shared<const Kernel>(d, std::move(*code));
      perf_map_note(slot->kernel->code(), slot->kernel->code_size(), slot->kernel->name());
    } else {
      slot->error = code.error();
    }
  });
  if (!slot->kernel) return Error{slot->error};
  return slot->kernel;
}

std::vector<std::shared_ptr<const Kernel>> Registry::kernels() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const Kernel>> out;
  for (const auto& [desc, slot] : slots_)
    if (slot->kernel) out.push_back(slot->kernel);
  return out;
}

int Registry::generated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generated_;
}

Expected<int> Registry::dump(const std::string& dir) const {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return Error{"dump: cannot create directory " + dir + ": " + std::strerror(errno)};
  int written = 0;
  for (const auto& k : kernels()) {
    if (k->code() == nullptr) continue;  // the scalar reference has no machine code
    const std::string path = dir + "/" + k->name() + ".bin";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return Error{"dump: cannot write " + path + ": " + std::strerror(errno)};
    const size_t n = std::fwrite(k->code(), 1, k->code_size(), f);
    const bool ok = std::fclose(f) == 0 && n == k->code_size();
    if (!ok) return Error{"dump: short write to " + path};
    ++written;
  }
  return written;
}

std::vector<isa::IsaLevel> implemented_levels(GgmlType weight) {
  using isa::IsaLevel;
  if (!pack_supported(weight)) return {};
  std::vector<IsaLevel> out = {IsaLevel::kScalar};
  for (IsaLevel l : x64::generated_levels(weight)) out.push_back(l);
  return out;
}

std::vector<isa::IsaLevel> implemented_gemm_levels(GgmlType weight) {
  if (!pack_supported(weight)) return {};
  std::vector<isa::IsaLevel> out = {isa::IsaLevel::kScalar};
  for (isa::IsaLevel l : x64::gemm_levels(weight)) out.push_back(l);
  return out;
}

Registry& global_registry() {
  static Registry r;
  return r;
}

}  // namespace zenmoe
