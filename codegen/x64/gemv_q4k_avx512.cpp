// Q4_K x Q8_K GEMV for AVX-512 (with or without VNNI), over the packed layout of
// kernels/pack.h. Per row group of R rows and per super-block:
//   * activations were transposed once per call into V[j] (j = 0..7, 32 bytes each): lane s
//     holds the dword j of sub-block s. Per super-block each is widened by one vpermd into
//     W[j], lane l = 2s + h holding V[j] lane s, matching the packed codes' lanes. With the
//     bsum pairs and d, also prepared once, a super-block's activations take 324 bytes of
//     L1 instead of 804 (W[j] stored whole and the Q8_K block read in place): at K = 7168
//     they stay in L1 while the weights stream through it;
//   * per row pair, 4 chunk loads give 8 code vectors (low and high nibbles); vpdpbusd
//     (codes unsigned, activations signed) sums them into one int32 vector whose lanes each
//     belong to a single (row, sub-block); the pair's 6-bit scales and mins are unpacked
//     from their 24 bytes (5 operations), vpmulld applies the scales, vpmaddwd the mins
//     against the bsum pairs; both are converted and FMA'd into a float accumulator with
//     d_x * d_y and dmin_x * d_y. Against scales and mins stored a byte each this is 11 %
//     more vector operations and 2.7 % fewer weight bytes: from memory the GEMV did 2.7-4.4 %
//     more work per second at 1 thread and 1.2-5.0 % at 2, cache-resident 8-10 % less.
// High nibbles are masked with 0xF0 instead of shifted (16x the code) and the product is
// shifted back once per super-block: exact, and one instruction less per chunk.
// With desc.streams = 2 or 4 the kernel walks that many row groups side by side, a
// super-block of each in turn, sharing the widened activations: one core reads DRAM faster
// from several sequential streams than from one. Each group sums in the same order either
// way, so every stream count gives the same bits.
// The plain GEMV first prefetches the lines its super-block loop's prefetches skip (the first
// `prefetch` bytes of each side): short calls, such as one attention head's 37 KB of v_b, no
// longer start on one demand miss after another (bench model --profile-nodes, bench preset:
// matmul:o_heads 3.1-3.2 % -> 2.7-2.8 % of decode time at 1 and 2 threads, others unchanged).
// The fused gate+up kernel walks its blocks in runs, one per stream (generate_gate_up), and
// prefetches the start of each stream the same way when a run or a split block begins. Before,
// each block of 256 outputs was split between the streams, so every stream restarted cold at
// every block. bench kernels --formats q4_K --kernels fused --regimes dram, three rounds of two
// binaries in turn, medians of the fraction of the read probe: runs against split blocks, 1
// thread, 2048x1024 (the bench expert) 91.0 -> 95.2 %, 2048x4608 91.9 -> 94.5 %, 7168x2048
// 93.7 -> 98.9 % (2 threads within the noise); then the start prefetch against none, 1 thread,
// 86.2 -> 97.3 %, 88.5 -> 96.8 % and 97.9 -> 96.4 %, and 2 threads at 2048x1024 (one split
// block each) 84.6 -> 90.2 %.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "codegen/x64/generators.h"
#include "codegen/x64/jit_base.h"
#include "codegen/x64/swiglu_q8k.h"
#include "kernels/pack.h"

namespace zenmoe::x64 {
namespace {

using namespace Xbyak;

constexpr int kQ8KBytes = 292;
// Scratch per super-block: V[0..7] (256 bytes), then the 16 bsum-pair dwords (64 bytes);
// the super-blocks' d follow all of them as S floats.
constexpr int kScratchPerSb = 320, kScratchBsums = 256;

class GemvQ4KAvx512 : public JitKernelBase {
 public:
  explicit GemvQ4KAvx512(const KernelDesc& d)
      : JitKernelBase(64 * 1024, d.prefetch_hint), d_(d), R_(d.row_block), P_(d.row_block / 2), S_(d.cols / 256),
        vnni_(d.isa >= isa::IsaLevel::kAvx512Vnni), acc_(d.op == KernelOp::kGemvAccumulate),
        fused_(d.op == KernelOp::kGateUpSwiglu), ns_(d.streams) {}
  void generate();
  // Calls of several tokens: passes of a few tokens each over the same weights (the few-token
  // kernel, on AVX-512 VNNI with row block 8), else one GEMV per token.
  void run_gemm(const GemmCall& c) const override {
    if (!few_ || c.n < 2) return KernelCode::run_gemm(c);
    if (fused_) return gate_up_tokens(c);
    few_->run_gemm(c);
  }
  bool several_tokens() const override { return few_ != nullptr; }
  Status attach_few_tokens();

 private:
  // Registers, named once. rdi holds the call record throughout.
  // rPc: stream 0's record; stream s > 0 reads at rPc + s * rD (rPc2 = rPc + 2 * rD).
  const Reg64 rArgs = rdi, rGroup = rbx, rGroupEnd = r12, rPc = r13, rD = r14, rPc2 = r15;
  const Reg64 rPx = r8, rPw = r9, rCnt = r10, rW = rsi;
  const Zmm zW[8] = {zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7};
  const Zmm zBS = zmm8, zDY = zmm9, zM0F = zmm10, zMF0 = zmm11;
  const Zmm zAcc[8] = {zmm12, zmm13, zmm14, zmm15, zmm16, zmm17, zmm18, zmm19};
  const Zmm zV = zmm20, zLo = zmm21, zHi = zmm22, zIlo = zmm23, zIhi = zmm24, zS = zmm25;
  const Zmm zM = zmm26, zDd = zmm27, zDm = zmm28, zT = zmm29, zOnes = zmm30, zWiden = zmm31;

  // The activations' d (S floats) from here on, after the super-blocks' V and bsum pairs.
  int64_t d_offset() const { return int64_t{S_} * kScratchPerSb; }
  int64_t scratch_bytes() const { return d_offset() + (int64_t{S_} * 4 + 63) / 64 * 64; }
  void generate_gemv();
  void generate_gate_up();
  void constants();
  void frame_layout(int64_t base);
  void group_pointers(int ns);
  void start_streams(int ns);
  void group_body(int ns);
  void prep_activations();
  void superblock(int ns);
  void pair(int s, int p);
  void dot(const Zmm& acc, const Zmm& u, const Zmm& s);
  void reduce_stream(int s, const Reg64& base, int64_t offset);
  void reduce_pair(int a, const Reg64& base, int64_t offset);
  Address rec(int s, int64_t off) const;
  int64_t group_stride() const { return (int64_t{S_} * R_ * kQ4KPackedRowBytes + 63) / 64 * 64; }
  bool acc_in_regs() const { return ns_ * P_ <= 8; }

  void gate_up_tokens(const GemmCall& c) const;

  std::unique_ptr<KernelCode> few_;   // the few-token kernel of the plain GEMV op
  SwigluQ8KFn epilogue_ = nullptr;    // fused op: the epilogue as a function
  KernelDesc d_;
  int R_, P_, S_;
  bool vnni_, acc_, fused_;
  int ns_;
  // Streams (desc.streams): ns_ row groups side by side share each super-block's
  // activations. Their accumulators stay in registers up to 8 of them, else on the stack at
  // rsp + acc_mem_. Row block 8: a super-block's d and dmin of stream s's rows, times d_x, as
  // 16 floats at rsp + dsc_ + 64 s; each pair broadcasts its two rows' values from there.
  // At rsp + cst_: q4k_scale_constants() (the min shifts, then the scale mask).
  int64_t dsc_ = -1, acc_mem_ = 0, slot_ = 0, cst_ = 0;
};

Status GemvQ4KAvx512::attach_few_tokens() {
  if (!vnni_ || R_ != 8) return Status::ok();
  KernelDesc plain = d_;
  if (fused_) {
    plain.op = KernelOp::kGemv;
    auto fn = generated_swiglu_quantize_q8k();
    if (!fn) return Error{fn.error()};
    epilogue_ = *fn;
  }
  // The passes walk the row groups as one stream. On Zen 5 they prefetch as many bytes ahead as
  // the GEMV's streams have in flight together (2 x 3072): zenmoe_bench
  // gemv_loop_q4k_dram/2048x512 (weights from memory), two rounds, 2 / 4 / 8 tokens 21.1-21.5 /
  // 29.3-30.3 / 53.7-56.1 us at 3072 bytes ahead, 20.4-20.9 / 23.8-25.1 / 47.2-47.4 at 6144
  // (12288: 24.5 / 27.8 / 51); bench model -t 1 -np 32, bench preset, three rounds in turn:
  // 250-256 -> 266-284 tok/s. Zen 4's passes, bound by their loads, keep the GEMV's distance.
  if (plain.tuning == isa::Tuning::kZen5) plain.prefetch *= plain.streams;
  auto few = generate_gemv_q4k_few_avx512(plain);
  if (!few) return Error{few.error()};
  few_ = std::move(*few);
  return Status::ok();
}

// Fused gate+up over several tokens: the few-token passes write every token's gate and up
// sums of the call's rows (packed rows 2 r0 .. 2 r1, interleaved), and the fused GEMV's own
// epilogue turns each block of 256 outputs into a Q8_K block of the token's output row: the
// bits the fused GEMV gives each token alone (its sums are the plain GEMV's).
void GemvQ4KAvx512::gate_up_tokens(const GemmCall& c) const {
  if (c.r0 >= c.r1) return;
  const int64_t rows = 2 * (c.r1 - c.r0);
  thread_local std::vector<float> buf;
  const auto need = static_cast<size_t>(c.n * rows + 16);
  if (buf.size() < need) buf.resize(need);
  float* gu = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
  GemmCall f = c;
  f.w = c.w + 2 * c.r0 / R_ * group_stride();
  f.r0 = 0;
  f.r1 = rows;
  f.y = gu;
  f.y_stride = rows;
  f.y_rows = nullptr;
  f.alpha = nullptr;
  f.q8_out = nullptr;
  few_->run_gemm(f);
  for (int64_t t = 0; t < c.n; ++t) {
    auto* out = static_cast<uint8_t*>(gemm_q8_row(c, t));
    for (int64_t b = c.r0 / 256; b < c.r1 / 256; ++b)
      epilogue_(gu + t * rows + 512 * (b - c.r0 / 256), out + b * kQ8KBytes);
  }
}

void GemvQ4KAvx512::generate() {
  if (fused_) {
    generate_gate_up();
  } else {
    generate_gemv();
  }
}

void GemvQ4KAvx512::constants() {
  mov(rW, qword[rArgs + kArgW]);
  mov(rax, reinterpret_cast<uintptr_t>(q8k_prep_index()->widen));
  vmovdqa32(zWiden, ptr[rax]);
  mov(eax, 0x0F0F0F0F);
  vpbroadcastd(zM0F, eax);
  mov(eax, 0xF0F0F0F0);
  vpbroadcastd(zMF0, eax);
  if (!vnni_) {
    mov(eax, 0x00010001);
    vpbroadcastd(zOnes, eax);
  }
  if (P_ == 4) {
    mov(eax, 0x3333);
    kmovw(k3, eax);
  }
  mov(rax, reinterpret_cast<uintptr_t>(q4k_scale_constants()));
  vmovdqa32(zT, ptr[rax]);
  vmovdqu32(ptr[rsp + cst_], zT);
  vmovdqa32(Ymm(zT.getIdx()), ptr[rax + 64]);
  vmovdqu32(ptr[rsp + cst_ + 64], Ymm(zT.getIdx()));
}

// The frame: scratch (activations), then 64 bytes of row sums, then the per-stream d/dmin
// floats (dsc_), the memory accumulators (acc_mem_), two qwords (slot_) and the scale
// constants (cst_, 96 bytes).
void GemvQ4KAvx512::frame_layout(int64_t base) {
  dsc_ = R_ == 8 ? base : -1;
  acc_mem_ = base + 64 * ns_;
  slot_ = acc_mem_ + (acc_in_regs() ? 0 : 64 * ns_ * P_);
  cst_ = slot_ + 64;
}

void GemvQ4KAvx512::generate_gemv() {
  frame_layout(scratch_bytes() + 64);
  enter_frame(cst_ + 128);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_activations();
  group_bounds(rArgs, R_, rGroup, rGroupEnd);
  constants();
  stream_groups(
      ns_, group_stride(), rGroup, rGroupEnd, rD, rPx, slot_, [&](int ns) { group_body(ns); },
      [&](int s, const Reg64& g) {
        reduce_stream(s, rsp, scratch_bytes());
        store_lanes(rArgs, g, R_, zV, zT, acc_);
      },
      d_.prefetch > 0 ? std::function<void(int)>([&](int ns) { start_streams(ns); }) : std::function<void(int)>());
  L(done);
  leave_frame();
}

// Fused expert gate + up: groups of interleaved gate/up rows fill 512 floats (256 outputs),
// then the epilogue writes one Q8_K block of silu(gate) * up. With ns streams and at least
// that many blocks, the blocks are cut into ns runs and each stream walks its run's groups
// in order, block after block, so it reads one sequential run of memory for the whole call;
// the blocks left over (fewer than ns) are each split between the streams.
void GemvQ4KAvx512::generate_gate_up() {
  const int gpb = 512 / R_;                        // row groups per Q8_K block of outputs
  const int64_t hbuf = scratch_bytes();            // per stream 512 floats: gate/up interleaved
  const int64_t blk = hbuf + 2048 * int64_t{ns_};  // record, block, block end, run, run end
  frame_layout(blk + 64);
  enter_frame(cst_ + 128);
  Label done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep_activations();
  mov(qword[rsp + blk], rArgs);
  mov(rax, qword[rArgs + kArgR0]);
  shr(rax, 8);
  mov(qword[rsp + blk + 8], rax);
  mov(rax, qword[rArgs + kArgR1]);
  shr(rax, 8);
  mov(qword[rsp + blk + 16], rax);
  // rGroup = the first row group of the block at rsp + blk + 8.
  auto block_start = [&] {
    mov(rGroup, qword[rsp + blk + 8]);
    imul(rGroup, rGroup, gpb);
  };
  // On to the next block; back to `loop` while it is below the bound at rsp + blk + `end`.
  auto next_block = [&](int end, Label& loop) {
    mov(rax, qword[rsp + blk + 8]);
    inc(rax);
    mov(qword[rsp + blk + 8], rax);
    cmp(rax, qword[rsp + blk + end]);
    jb(loop, T_NEAR);
  };
  // The epilogue of the block at rsp + blk + 8 plus `ahead` (a register or none) from stream
  // s's 512 floats.
  auto epilogue = [&](int s, const Reg64* ahead) {
    mov(rW, qword[rsp + blk + 8]);
    if (ahead) add(rW, *ahead);
    imul(rW, rW, kQ8KBytes);
    add(rW, qword[rArgs + kArgQ8Out]);
    lea(rPw, ptr[rsp + hbuf + 2048 * s]);
    emit_swiglu_quantize_q8k(*this, rPw, rW);
  };
  // `run` groups from rGroup, ns side by side rD apart; stream s's row sums go to its place in
  // the buffer at hbuf + s * buf_step.
  auto groups = [&](int ns, int run, int64_t buf_step) {
    Label loop;
    mov(rGroupEnd, rGroup);
    add(rGroupEnd, run);
    L(loop);
    group_body(ns);
    for (int s = 0; s < ns; ++s) {
      mov(rax, rGroup);
      and_(rax, gpb - 1);
      imul(rax, rax, R_ * 4);
      lea(rax, ptr[rsp + rax + hbuf + s * buf_step]);
      // The same reduction as the plain GEMV, so fused and unfused outputs agree bit for bit.
      reduce_stream(s, rax, 0);
    }
    inc(rGroup);
    cmp(rGroup, rGroupEnd);
    jb(loop, T_NEAR);
  };
  // Runs: ns runs of L blocks while there are at least ns blocks (L at rsp + blk + 24, the end
  // of the first run at rsp + blk + 32). Stream s's block is the current block + s * L.
  auto runs = [&](int ns) {
    Label none, loop;
    mov(rax, qword[rsp + blk + 16]);
    sub(rax, qword[rsp + blk + 8]);
    shr(rax, ns == 2 ? 1 : 2);
    jz(none, T_NEAR);
    mov(qword[rsp + blk + 24], rax);
    add(rax, qword[rsp + blk + 8]);
    mov(qword[rsp + blk + 32], rax);
    mov(rD, gpb * group_stride());
    imul(rD, qword[rsp + blk + 24]);
    if (d_.prefetch > 0) {
      mov(rW, qword[rArgs + kArgW]);
      block_start();
      start_streams(ns);
    }
    L(loop);
    constants();
    block_start();
    groups(ns, gpb, 2048);
    mov(rGroup, qword[rsp + blk + 24]);  // L, in a register the epilogue keeps
    for (int s = 0; s < ns; ++s) {
      if (s > 0) imul(rCnt, rGroup, s);
      epilogue(s, s > 0 ? &rCnt : nullptr);
    }
    next_block(32, loop);
    // Past the runs: the blocks of runs 1 .. ns-1 are done too.
    mov(rax, qword[rsp + blk + 24]);
    imul(rax, rax, ns - 1);
    add(qword[rsp + blk + 8], rax);
    L(none);
  };
  if (ns_ == 4) runs(4);
  if (ns_ >= 2) runs(2);
  // Leftover blocks: each split into ns_ runs of groups side by side.
  const int run = gpb / ns_;
  Label blocks;
  mov(rax, qword[rsp + blk + 8]);
  cmp(rax, qword[rsp + blk + 16]);
  jae(done, T_NEAR);
  if (ns_ > 1) mov(rD, run * group_stride());
  L(blocks);
  constants();
  block_start();
  if (d_.prefetch > 0) start_streams(ns_);
  groups(ns_, run, int64_t{run} * R_ * 4);
  epilogue(0, nullptr);
  next_block(16, blocks);
  L(done);
  leave_frame();
}

// Stream s's row sums. Row block 8: folded into lanes 0..7 of zV, and stored to base + offset
// unless base is rsp. Other row blocks: stored pair by pair to base + offset, then (base rsp)
// loaded into zV.
void GemvQ4KAvx512::reduce_stream(int s, const Reg64& base, int64_t offset) {
  if (!acc_in_regs())
    for (int p = 0; p < P_; ++p) vmovaps(zAcc[p], ptr[rsp + acc_mem_ + 64 * (s * P_ + p)]);
  const int a0 = acc_in_regs() ? s * P_ : 0;
  if (P_ == 4) {
    fold_four_pairs(&zAcc[a0], zV, {zLo, zHi, zIlo, zIhi, zT});
    if (base != rsp) vmovups(ptr[base + offset], Ymm(zV.getIdx()));
  } else {
    for (int p = 0; p < P_; ++p) reduce_pair(a0 + p, base, offset + 8 * p);
    if (base == rsp) vmovups(zV, ptr[rsp + offset]);
  }
}

Address GemvQ4KAvx512::rec(int s, int64_t off) const { return stream_addr(rPc, rPc2, rD, s, off); }

// The records of the ns row groups (rGroup + s * rD / group_stride) side by side.
void GemvQ4KAvx512::group_pointers(int ns) {
  mov(rPc, rGroup);
  imul(rPc, rPc, static_cast<int>(group_stride()));
  add(rPc, rW);
  if (ns > 2) lea(rPc2, ptr[rPc + rD * 2]);
}

// Before the first group: the lines the super-block loop's prefetches skip, the first
// `prefetch` bytes of each side (at most 8 KiB), all at once instead of as demand misses one
// after another.
void GemvQ4KAvx512::start_streams(int ns) {
  group_pointers(ns);
  const int64_t bytes = std::min<int64_t>(d_.prefetch, 8192);
  for (int s = 0; s < ns; ++s)
    for (int64_t off = 0; off < bytes; off += 64) prefetch_weights(rec(s, off));
}

// ns row groups side by side: pointers, zeroed accumulators, the super-block loop.
void GemvQ4KAvx512::group_body(int ns) {
  group_pointers(ns);
  lea(rPx, ptr[rsp + d_offset()]);
  mov(rPw, rsp);
  if (acc_in_regs()) {
    for (int a = 0; a < ns * P_; ++a) vpxord(zAcc[a], zAcc[a], zAcc[a]);
  } else {
    vpxord(zT, zT, zT);
    for (int a = 0; a < ns * P_; ++a) vmovaps(ptr[rsp + acc_mem_ + 64 * a], zT);
  }
  Label sb;
  mov(rCnt, S_);
  L(sb);
  superblock(ns);
  add(rPc, R_ * kQ4KPackedRowBytes);
  if (ns > 2) add(rPc2, R_ * kQ4KPackedRowBytes);
  add(rPx, 4);
  add(rPw, kScratchPerSb);
  dec(rCnt);
  jnz(sb, T_NEAR);
}

void GemvQ4KAvx512::prep_activations() {
  const Zmm zX[4] = {zmm20, zmm21, zmm22, zmm23};
  const Zmm zV4[4] = {zmm24, zmm27, zmm28, zmm29};
  const Zmm zT0 = zmm25, zT1 = zmm26;
  mov(eax, 0xF0F0);
  kmovw(k1, eax);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rPw, rsp);
  lea(rdx, ptr[rsp + d_offset()]);
  mov(rax, reinterpret_cast<uintptr_t>(&q8k_prep_index()->idx[0][0]));
  mov(rCnt, S_);
  Label loop;
  L(loop);
  q8k_transpose(rPx, rax, zX, zV4, zT0, zT1);
  for (int m = 0; m < 4; ++m) vmovdqa32(ptr[rPw + 64 * m], zV4[m]);
  q8k_bsum_pairs_and_d(rPx, ptr[rPw + kScratchBsums], dword[rdx], zT0, zT1);
  add(rPx, kQ8KBytes);
  add(rPw, kScratchPerSb);
  add(rdx, 4);
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void GemvQ4KAvx512::superblock(int ns) {
  for (int j = 0; j < 8; ++j) {
    vmovdqa32(Ymm(zW[j].getIdx()), ptr[rPw + 32 * j]);
    vpermd(zW[j], zWiden, zW[j]);
  }
  vmovdqa32(zBS, ptr[rPw + kScratchBsums]);
  vbroadcastss(zDY, ptr[rPx]);
  if (dsc_ >= 0) {
    for (int s = 0; s < ns; ++s) {
      vcvtph2ps(zDd, rec(s, q4k_d_offset(R_)));  // d of rows 0..7, then dmin of rows 0..7
      vmulps(zDd, zDd, zDY);
      vmovaps(ptr[rsp + dsc_ + 64 * s], zDd);
    }
  }
  // One sequential stream per group (super-block records): the record's lines a fixed
  // distance ahead, a share before each row pair (a share per chunk measured the same).
  const int lines = static_cast<int>((R_ * kQ4KPackedRowBytes + 63) / 64);
  for (int s = 0; s < ns; ++s)
    for (int p = 0; p < P_; ++p) {
      prefetch_share([&](int64_t off) { return rec(s, off); }, d_.prefetch, lines, p, P_);
      pair(s, p);
    }
}

void GemvQ4KAvx512::dot(const Zmm& acc, const Zmm& u, const Zmm& s) {
  if (vnni_) {
    vpdpbusd(acc, u, s);
  } else {
    vpmaddubsw(zT, u, s);
    vpmaddwd(zT, zT, zOnes);
    vpaddd(acc, acc, zT);
  }
}

void GemvQ4KAvx512::pair(int s, int p) {
  vpxord(zIlo, zIlo, zIlo);
  if (vnni_) vpxord(zIhi, zIhi, zIhi);
  for (int c = 0; c < 4; ++c) {
    vmovdqu32(zV, rec(s, p * 256 + 64 * c));
    vpandd(zLo, zV, zM0F);
    dot(zIlo, zLo, zW[c]);
    if (vnni_) {
      vpandd(zHi, zV, zMF0);
      dot(zIhi, zHi, zW[c + 4]);
    } else {
      // Without VNNI the 16x-scaled high nibble would saturate vpmaddubsw: shift instead.
      vpsrlw(zHi, zV, 4);
      vpandd(zHi, zHi, zM0F);
      dot(zIlo, zHi, zW[c + 4]);
    }
  }
  if (vnni_) {
    vpsrad(zIhi, zIhi, 4);
    vpaddd(zIlo, zIlo, zIhi);
  }
  // Scales and mins (kernels/pack.h): sc = a & 63, m = (a >> 6 | (word h >> 4s) << 2) & 63.
  const int64_t sc_at = q4k_scales_offset(R_) + kQ4KPairScaleBytes * p;
  vpmovzxbd(zS, rec(s, sc_at));
  vpsrld(zLo, zS, 6);
  vpandd(zS, zS, ptr_b[rsp + cst_ + 64]);
  vpmulld(zIlo, zIlo, zS);
  vpbroadcastq(zM, rec(s, sc_at + 16));
  vpsrlvd(zM, zM, ptr[rsp + cst_]);
  vpslld(zM, zM, 2);
  vpternlogd(zM, zLo, ptr_b[rsp + cst_ + 64], ternlog_imm([](int a, int b, int c) { return (a | b) & c; }));
  vpmaddwd(zM, zM, zBS);  // m * bsum pair: both fit in 16 bits, the lanes' high words are 0 / sign
  if (dsc_ >= 0) {
    vbroadcastsd(zDd, ptr[rsp + dsc_ + 64 * s + 8 * p]);
    vbroadcastsd(zDm, ptr[rsp + dsc_ + 64 * s + 32 + 8 * p]);
  } else {
    vpbroadcastd(Ymm(zDd.getIdx()), rec(s, q4k_d_offset(R_) + 4 * p));
    vcvtph2ps(zDd, Ymm(zDd.getIdx()));
    vmulps(zDd, zDd, zDY);
    vpbroadcastd(Ymm(zDm.getIdx()), rec(s, q4k_d_offset(R_) + 2 * R_ + 4 * p));
    vcvtph2ps(zDm, Ymm(zDm.getIdx()));
    vmulps(zDm, zDm, zDY);
  }
  vcvtdq2ps(zIlo, zIlo);
  vcvtdq2ps(zM, zM);
  if (acc_in_regs()) {
    vfmadd231ps(zAcc[s * P_ + p], zIlo, zDd);
    vfnmadd231ps(zAcc[s * P_ + p], zM, zDm);
  } else {
    const Address a = ptr[rsp + acc_mem_ + 64 * (s * P_ + p)];
    vmovaps(zT, a);
    vfmadd231ps(zT, zIlo, zDd);
    vfnmadd231ps(zT, zM, zDm);
    vmovaps(a, zT);
  }
}

void GemvQ4KAvx512::reduce_pair(int a, const Reg64& base, int64_t offset) {
  // Even lanes are row 2p, odd lanes row 2p+1: fold to lanes 0 and 1.
  const Zmm& acc = zAcc[a];
  vpermilps(zT, acc, 0x4E);
  vaddps(acc, acc, zT);
  vshuff32x4(zT, acc, acc, 0x4E);
  vaddps(acc, acc, zT);
  vshuff32x4(zT, acc, acc, 0xB1);
  vaddps(acc, acc, zT);
  vmovlps(ptr[base + offset], Xmm(acc.getIdx()));
}

}  // namespace

Expected<std::unique_ptr<KernelCode>> generate_gemv_q4k_avx512(const KernelDesc& d) {
  auto k = std::make_unique<GemvQ4KAvx512>(d);
  k->generate();
  ZENMOE_RETURN_IF_ERROR(k->seal());
  ZENMOE_RETURN_IF_ERROR(k->attach_few_tokens());
  return std::unique_ptr<KernelCode>(std::move(k));
}

}  // namespace zenmoe::x64
