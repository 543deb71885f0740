#include "codegen/x64/throughput_loop.h"

#include <xbyak/xbyak.h>

#include <string>

namespace zenmoe::x64 {

namespace {

using namespace Xbyak;

constexpr ThroughputInfo kOps[] = {
    {ThroughputOp::kFmaYmm, "vfmadd231ps ymm", "flop", 16, isa::IsaLevel::kAvx2},
    {ThroughputOp::kCvtPh2PsYmm, "vcvtph2ps ymm, m128", "element", 8, isa::IsaLevel::kAvx2},
    {ThroughputOp::kFmaZmm, "vfmadd231ps zmm", "flop", 32, isa::IsaLevel::kAvx512},
    {ThroughputOp::kFmaZmmBcast, "vfmadd231ps zmm, m32bcst", "flop", 32, isa::IsaLevel::kAvx512},
    {ThroughputOp::kCvtPh2PsZmm, "vcvtph2ps zmm, m256", "element", 16, isa::IsaLevel::kAvx512},
    {ThroughputOp::kVnniZmm, "vpdpbusd zmm", "int op", 128, isa::IsaLevel::kAvx512Vnni},
    {ThroughputOp::kBf16DotZmm, "vdpbf16ps zmm", "flop", 64, isa::IsaLevel::kAvx512Bf16},
};

constexpr int kDests = 12;
static_assert(kThroughputInstrs % kDests == 0);

const ThroughputInfo* info_of(ThroughputOp op) {
  for (const ThroughputInfo& i : kOps)
    if (i.op == op) return &i;
  return nullptr;
}

// void loop(int64_t iterations, const void* buffer): rdi, rsi (System V).
class Generator : public CodeGenerator {
 public:
  explicit Generator(ThroughputOp op) : CodeGenerator(4096, DontSetProtectRWE) {
    const bool zmm = op != ThroughputOp::kFmaYmm && op != ThroughputOp::kCvtPh2PsYmm;
    // Sources 12 and 13 hold zeros: no operand is a denormal or a NaN.
    if (zmm) {
      vpxord(zmm12, zmm12, zmm12);
      vpxord(zmm13, zmm13, zmm13);
    } else {
      vxorps(ymm12, ymm12, ymm12);
      vxorps(ymm13, ymm13, ymm13);
    }
    for (int i = 0; i < kDests; ++i) {
      if (zmm)
        vpxord(Zmm(i), Zmm(i), Zmm(i));
      else
        vxorps(Ymm(i), Ymm(i), Ymm(i));
    }
    mov(rcx, rdi);
    Label loop;
    L(loop);
    for (int i = 0; i < kThroughputInstrs; ++i) {
      const int d = i % kDests;
      switch (op) {
        case ThroughputOp::kFmaYmm: vfmadd231ps(Ymm(d), ymm12, ymm13); break;
        case ThroughputOp::kCvtPh2PsYmm: vcvtph2ps(Ymm(d), ptr[rsi + 16 * i]); break;
        case ThroughputOp::kFmaZmm: vfmadd231ps(Zmm(d), zmm12, zmm13); break;
        case ThroughputOp::kFmaZmmBcast: vfmadd231ps(Zmm(d), zmm12, ptr_b[rsi + 4 * i]); break;
        case ThroughputOp::kCvtPh2PsZmm: vcvtph2ps(Zmm(d), ptr[rsi + 32 * i]); break;
        case ThroughputOp::kVnniZmm: vpdpbusd(Zmm(d), zmm12, zmm13); break;
        case ThroughputOp::kBf16DotZmm: vdpbf16ps(Zmm(d), zmm12, zmm13); break;
      }
    }
    dec(rcx);
    jnz(loop, T_NEAR);
    vzeroupper();
    ret();
  }
};

}  // namespace

std::vector<ThroughputInfo> throughput_ops(isa::IsaLevel level) {
  std::vector<ThroughputInfo> out;
  for (const ThroughputInfo& i : kOps)
    if (i.level <= level) out.push_back(i);
  return out;
}

struct ThroughputLoop::Code {
  Generator gen;
  void (*fn)(int64_t, const void*) = nullptr;
  explicit Code(ThroughputOp op) : gen(op) {}
};

ThroughputLoop::ThroughputLoop(std::unique_ptr<Code> code) : code_(std::move(code)) {}
ThroughputLoop::~ThroughputLoop() = default;

Expected<std::unique_ptr<ThroughputLoop>> ThroughputLoop::make(ThroughputOp op, isa::IsaLevel level) {
  const ThroughputInfo* info = info_of(op);
  if (info == nullptr) return Error{"unknown instruction form"};
  if (info->level > level)
    return Error{std::string(info->name) + " needs the " + isa::level_name(info->level) + " level, the limit is " +
                 isa::level_name(level)};
  std::unique_ptr<Code> code;
  try {
    code = std::make_unique<Code>(op);
  } catch (const Xbyak::Error& e) {
    return Error{std::string("generating the ") + info->name + " loop: " + e.what()};
  }
  if (!code->gen.setProtectModeRE(false)) return Error{"cannot make generated code executable (mprotect failed)"};
  code->fn = code->gen.getCode<void (*)(int64_t, const void*)>();
  return std::unique_ptr<ThroughputLoop>(new ThroughputLoop(std::move(code)));
}

void ThroughputLoop::run(int64_t iterations, const void* buffer) const { code_->fn(iterations < 1 ? 1 : iterations, buffer); }

}  // namespace zenmoe::x64
