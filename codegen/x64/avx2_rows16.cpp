#include "codegen/x64/avx2_rows16.h"

namespace zenmoe::x64 {

using namespace Xbyak;

void emit_q80_sums(CodeGenerator& g, const Reg64& x, const Reg64& scr, const Reg64& cnt, int64_t nb, int bias) {
  // sum(q) of a block in AVX2: vpmaddubsw of ones (unsigned) with the codes (signed) gives 16
  // pair sums (|sum| <= 256, no saturation), vpmaddwd with ones 8 dword sums, then a
  // horizontal add. Exact integers; the blocks are independent, so they overlap in flight.
  const Ymm ones8 = g.ymm12, ones16 = g.ymm13, v = g.ymm14, t = g.ymm15;
  g.mov(g.eax, 0x01010101);
  g.vmovd(Xmm(ones8.getIdx()), g.eax);
  g.vpbroadcastd(ones8, Xmm(ones8.getIdx()));
  g.mov(g.eax, 0x00010001);
  g.vmovd(Xmm(ones16.getIdx()), g.eax);
  g.vpbroadcastd(ones16, Xmm(ones16.getIdx()));
  Label loop;
  g.mov(cnt, nb);
  g.L(loop);
  g.vmovdqu(v, g.ptr[x + 2]);
  g.vpmaddubsw(v, ones8, v);
  g.vpmaddwd(v, v, ones16);
  const Xmm vx(v.getIdx()), tx(t.getIdx());
  g.vextracti128(tx, v, 1);
  g.vpaddd(vx, vx, tx);
  g.vpshufd(tx, vx, 0x4E);
  g.vpaddd(vx, vx, tx);
  g.vpshufd(tx, vx, 0xB1);
  g.vpaddd(vx, vx, tx);
  g.vmovd(g.edx, vx);
  g.imul(g.edx, g.edx, bias);
  g.mov(g.dword[scr], g.edx);
  g.movzx(g.eax, g.word[x]);
  g.vmovd(g.xmm15, g.eax);
  g.vcvtph2ps(g.xmm15, g.xmm15);
  g.vmovss(g.dword[scr + 4], g.xmm15);
  g.add(x, 34);
  g.add(scr, 8);
  g.dec(cnt);
  g.jnz(loop, CodeGenerator::T_NEAR);
}

void Avx2Rows16Kernel::emit_kernel(int64_t scratch_bytes, int64_t group_stride) {
  const int64_t scratch = (scratch_bytes + 63) / 64 * 64;
  enter_frame(scratch + 64);
  Label groups, done;
  mov(rax, qword[rArgs + kArgR0]);
  cmp(rax, qword[rArgs + kArgR1]);
  jge(done, T_NEAR);
  prep();
  group_bounds(rArgs, kRows, rGroup, rGroupEnd);
  L(groups);
  mov(rP, rGroup);
  mov(rax, group_stride);
  imul(rP, rax);
  add(rP, qword[rArgs + kArgW]);
  mov(rPx, qword[rArgs + kArgX]);
  mov(rScr, rsp);
  for (const Ymm& a : yAcc) vxorps(a, a, a);
  group_body();
  vmovups(ptr[rsp + scratch], yAcc[0]);
  vmovups(ptr[rsp + scratch + 32], yAcc[1]);
  write_rows(rArgs, rGroup, kRows, ptr[rsp + scratch], acc_);
  inc(rGroup);
  cmp(rGroup, rGroupEnd);
  jb(groups, T_NEAR);
  L(done);
  leave_frame();
}

void Avx2Rows16Kernel::repeat(int64_t n, const std::function<void()>& body) {
  Label loop;
  mov(rCnt, n);
  L(loop);
  body();
  dec(rCnt);
  jnz(loop, T_NEAR);
}

void Avx2Rows16Kernel::repeat_blocks(int64_t n, const std::function<void(int)>& body) {
  if (n >= 2) repeat(n / 2, [&] {
      body(0);
      body(1);
    });
  if (n % 2 != 0) body(0);
}

void Avx2Rows16Kernel::broadcast_const(const Ymm& y, uint32_t v) {
  mov(eax, v);
  vmovd(Xmm(y.getIdx()), eax);
  vpbroadcastd(y, Xmm(y.getIdx()));
}

void Avx2Rows16Kernel::byte_pairs(const Ymm& dst, const Address& src, const Ymm& tmp) {
  vpmovzxbd(dst, src);
  vpslld(tmp, dst, 16);
  vpor(dst, dst, tmp);
}

void Avx2Rows16Kernel::add_scaled_block(int h, const Ymm& isum, const Address& d_f16, const Ymm& dx,
                                        const Ymm& tmp) {
  vcvtdq2ps(isum, isum);
  vcvtph2ps(tmp, d_f16);
  vmulps(tmp, tmp, dx);
  vfmadd231ps(yAcc[h], isum, tmp);
}

}  // namespace zenmoe::x64
