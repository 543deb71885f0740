// Q6_K x Q8_K GEMV for AVX-512 VNNI over the row-block-16 Q6_K layout of kernels/pack.h:
// the 16 rows of a group are the 16 dword lanes, so each activation dword is a broadcast
// memory operand and each sub-block's int8 scales are one vpmovsxbd.
// Per super-block and sub-block s: its three chunks give the first 12 codes (0..63) with one
// mask each and the last 4 from their top bits (JitKernelBase::q6k_last_codes); four
// vpdpbusd (codes unsigned) accumulate onto -32 * sum(x) of the sub-block (the bias of the
// codes, from the bsums once per call), the scale is applied with vpmulld, and the
// super-block's int32 sum converted and FMA'd with d_w * d_y: lane = row, no horizontal
// reduction.
#include <memory>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kRows = 16, kQ8KBytes = 292;

class GemvQ6KAvx512 : public JitKernelBase {
 public:
  explicit GemvQ6KAvx512(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d), S_(d.cols / 256), acc_(d.op == KernelOp::kGemvAccumulate) {}
  void generate();
  // Calls of several tokens: passes of up to 4 tokens over the weights (the few-token kernel).
  void run_gemm(const GemmCall& c) const override {
    if (!few_ || c.n < 2) return KernelCode::run_gemm(c);
    few_->run_gemm(c);
  }
  bool several_tokens() const override { return few_ != nullptr; }
  std::unique_ptr<KernelCode> few_;

 private:
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPlo = r13;
  const Reg64 rPd = r9, rPx = r8, rScr = rsi, rCnt = r10;
  const Zmm zAccF = zmm0, zSb = zmm1, zI = zmm2, zCa = zmm3, zCb = zmm4, zCc = zmm5, zA = zmm6;
  const Zmm zB = zmm7, zT = zmm8, zS = zmm9, zD = zmm10, zM03 = zmm11, zM0F = zmm12, zM3F = zmm13;
  const Zmm zC = zmm14, zL = zmm15;

  int64_t group_stride() const { return int64_t{S_} * 3392; }
  void prep_bsums();
  void superblock();
  void subblock(int s);

  KernelDesc d_;
  int S_;
  bool acc_;
};

void GemvQ6KAvx512::generate() {
  enter_frame(int64_t{S_} * 64 + 64);
  Label groups, done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_bsums();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  q6k_masks(zM03, zM0F, zM3F);
  L(groups);
  mov(rPlo, rGroup);
  imul(rPlo, rPlo, static_cast<int>(group_stride()));
  add(rPlo, qword[rArgs + kArgW]);
  lea(rPd, ptr[rPlo + kQ6KDOffset]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  vpxord(zAccF, zAccF, zAccF);
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock();
  dec(rCnt);
  jnz(sb, T_NEAR);
  store_lanes16(rArgs, rGroup, zAccF, zT, acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

// -32 * bsums[s] as int32, 16 per super-block (the bias of the 6-bit codes).
void GemvQ6KAvx512::prep_bsums() {
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  q6k_code_biases(rPx, rScr, rCnt, S_, zS, zT);
}

void GemvQ6KAvx512::superblock() {
  vpxord(zSb, zSb, zSb);
  for (int s = 0; s < 16; ++s) subblock(s);
  vcvtdq2ps(zSb, zSb);
  vcvtph2ps(zD, ptr[rPd]);
  vmulps(zD, zD, ptr_b[rPx]);
  vfmadd231ps(zAccF, zSb, zD);
  add(rPlo, 3392);
  add(rPd, 3392);
  add(rPx, kQ8KBytes);
  add(rScr, 64);
}

void GemvQ6KAvx512::subblock(int s) {
  // One sequential stream: the record's 53 lines a fixed distance ahead, a share per step.
  prefetch_share(rPlo, d_.prefetch, 3392 / 64, s, 16);
  const Zmm chunk[3] = {zCa, zCb, zCc}, code[3] = {zA, zB, zC};
  for (int m = 0; m < 3; ++m) vmovdqu32(chunk[m], ptr[rPlo + q6k_chunk_offset(s, m)]);
  vpbroadcastd(zI, ptr[rScr + 4 * s]);
  for (int m = 0; m < 3; ++m) {
    vpandd(code[m], chunk[m], zM3F);
    vpdpbusd(zI, code[m], ptr_b[rPx + 4 + 16 * s + 4 * m]);
  }
  q6k_last_codes(zL, zCa, zCb, zCc, zT, zM03, zM0F, zM3F);
  vpdpbusd(zI, zL, ptr_b[rPx + 4 + 16 * s + 12]);
  vpmovsxbd(zS, ptr[rPlo + q6k_scale_offset(s)]);
  vpmulld(zI, zI, zS);
  vpaddd(zSb, zSb, zI);
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q6k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ6KAvx512>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  if (d.op == KernelOp::kGemv || d.op == KernelOp::kGemvAccumulate) {
    auto few = generate_gemv_q6k_few_avx512(d);
    if (!few) return Error{few.error()};
    k->few_ = std::move(*few);
  }
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
