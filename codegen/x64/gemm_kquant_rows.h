// Shared GEMM skeleton for K-quant weights (Q4_K, Q5_K) on AVX-512 VNNI (prefill).
//
// Once per row block of 16 rows (and token block) the format's subclass transcodes the
// block's weights into a stack buffer with one row per 32-bit lane:
//   per sub-block u (K/32 of them), 640 bytes: codes [8 chunks j][16 rows][4 bytes] as bytes
//   0..31 (byte t of chunk j = code of weight 32u + 4j + t), then d * sc[16 rows] and
//   dmin * m[16 rows] as floats (exact: an 11-bit mantissa times a 6-bit integer).
// The tile's activations are copied once per token into records of 40 bytes per sub-block:
// the 32 codes, bsum (of the two halves) and d_x, so every activation dword is an
// embedded-broadcast operand. Per sub-block j of a super-block and token:
//   I_j = sum of 8 vpdpbusd (codes unsigned, activations signed; exact int32)
//   s += float(I_j) * (d * sc_j)  -  (dmin * m_j) * bsum_j          (two FMAs)
// and acc += s * d_x once per super-block: the GEMV's products, grouped and rounded in
// another order. Token tiles of N = 9 (three accumulators each); a token block holds up to
// 10 tiles, so a transcoded row block serves up to 90 tokens.
#pragma once

#include "codegen/x64/gemm_jit.h"

namespace zenmoe::x64 {

class GemmKQuantRows : public JitGemmBase {
 public:
  explicit GemmKQuantRows(const KernelDesc& d);
  void generate() { emit(); }

 protected:
  static constexpr int kWRec = 640, kWDsc = 512, kWDmm = 576;  // weight record per sub-block
  // Row-block scratch: 256 bytes free for the subclass, then the weight records.
  static constexpr int kWBase = 256;
  const Xbyak::Reg64 rW = Xbyak::util::r13;  // the super-block's first weight record
  const Xbyak::Reg64 rSb = Xbyak::util::r14;  // super-blocks left (transcode loop)

  Xbyak::Address scr(int64_t off) { return ptr[rsp + tbuf_offset() + off]; }
  // Once per row block, before the super-block loop.
  virtual void setup() = 0;
  // The 8 weight records of one super-block at rW (rW and rSb must survive; zmm and the other
  // scratch registers are free), then the step to the next super-block.
  virtual void transcode() = 0;
  virtual void advance() = 0;

  int S_;

 private:
  const Xbyak::Reg64 rPa = Xbyak::util::r15, rCnt = Xbyak::util::r10;
  void prep() override;
  void row_block_prep() override;
  void body(int m) override;
};

}  // namespace zenmoe::x64
