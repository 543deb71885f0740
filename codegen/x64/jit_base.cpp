#include "codegen/x64/jit_base.h"

namespace zenmoe::x64 {

using namespace Xbyak;

namespace {

struct Q4KScaleConstants {
  alignas(64) int32_t v[24];
  Q4KScaleConstants() {
    for (int l = 0; l < 16; ++l) v[l] = 4 * (l / 2);
    for (int i = 16; i < 24; ++i) v[i] = 63;
  }
};
const Q4KScaleConstants kQ4KScaleConstants;

Q8KPrepIndex q8k_prep_tables() {
  Q8KPrepIndex t;
  for (int m = 0; m < 4; ++m)
    for (int l = 0; l < 16; ++l) t.idx[m][l] = 8 * (l % 4) + 2 * m + l / 8;
  for (int l = 0; l < 16; ++l) {
    t.widen[l] = l / 2;
    t.widen_hi[l] = 8 + l / 2;
  }
  return t;
}
const Q8KPrepIndex kQ8KPrepTables = q8k_prep_tables();

}  // namespace

const int32_t* JitKernelBase::q4k_scale_constants() { return kQ4KScaleConstants.v; }
const Q8KPrepIndex* JitKernelBase::q8k_prep_index() { return &kQ8KPrepTables; }

Status JitKernelBase::seal() {
  if (!setProtectModeRE(false)) return Error{"cannot make generated code executable (mprotect failed)"};
  fn_ = getCode<GemvFn>();
  return Status::ok();
}

void JitKernelBase::enter_frame(int64_t frame_bytes) {
  push(rbp);
  push(rbx);
  push(r12);
  push(r13);
  push(r14);
  push(r15);
  mov(rbp, rsp);
  // Touch each page while descending so large frames never skip the guard page.
  for (int64_t done = 0; done + 4096 < frame_bytes; done += 4096) {
    sub(rsp, 4096);
    or_(qword[rsp], 0);
  }
  mov(rsp, rbp);
  sub(rsp, static_cast<uint32_t>(frame_bytes));
  and_(rsp, -64);
}

void JitKernelBase::leave_frame() {
  mov(rsp, rbp);
  pop(r15);
  pop(r14);
  pop(r13);
  pop(r12);
  pop(rbx);
  pop(rbp);
  vzeroupper();
  ret();
}

void JitKernelBase::group_bounds(const Reg64& args, int row_block, const Reg64& group,
                                 const Reg64& group_end) {
  // rdx:rax division by the row block (at most once per call).
  mov(rax, qword[args + kArgR0]);
  xor_(edx, edx);
  mov(ecx, row_block);
  div(rcx);
  mov(group, rax);
  mov(rax, qword[args + kArgR1]);
  add(rax, row_block - 1);
  xor_(edx, edx);
  div(rcx);
  mov(group_end, rax);
}

void JitKernelBase::stream_groups(int streams, int64_t group_stride, const Reg64& group,
                                  const Reg64& group_end, const Reg64& delta, const Reg64& g, int64_t slot,
                                  const std::function<void(int)>& body,
                                  const std::function<void(int, const Reg64&)>& finish,
                                  const std::function<void(int)>& start) {
  // rax = run length for ns sides (also at rsp + slot); flags from testing it.
  auto run_length = [&](int ns) {
    mov(rax, group_end);
    sub(rax, group);
    shr(rax, ns == 2 ? 1 : 2);
    mov(qword[rsp + slot], rax);
    test(rax, rax);
  };
  // From the run length in rax: delta and the end of the first run.
  auto setup = [&] {
    imul(delta, rax, static_cast<int>(group_stride));
    add(rax, group);
    mov(qword[rsp + slot + 8], rax);
  };
  // The runs side by side, then group past the last run.
  auto walk = [&](int ns) {
    Label multi;
    L(multi);
    body(ns);
    for (int s = 0; s < ns; ++s) {
      mov(g, qword[rsp + slot]);
      imul(g, g, s);
      add(g, group);
      finish(s, g);
    }
    inc(group);
    cmp(group, qword[rsp + slot + 8]);
    jb(multi, T_NEAR);
    mov(rax, qword[rsp + slot]);
    imul(rax, rax, ns - 1);
    add(group, rax);
  };
  Label single, leftover, done;
  if (streams == 4) {
    // Four runs while there are at least 4 groups, then two while there are at least 2.
    Label two_first, two, two_walk;
    run_length(4);
    jz(two_first, T_NEAR);
    setup();
    if (start) start(4);
    walk(4);
    run_length(2);
    jz(leftover, T_NEAR);
    jmp(two, T_NEAR);
    L(two_first);
    run_length(2);
    jz(single, T_NEAR);
    if (start) {
      setup();
      start(2);
      jmp(two_walk, T_NEAR);
    }
    L(two);
    setup();
    L(two_walk);
    walk(2);
    jmp(leftover, T_NEAR);
  } else if (streams == 2) {
    run_length(2);
    jz(single, T_NEAR);
    setup();
    if (start) start(2);
    walk(2);
    jmp(leftover, T_NEAR);
  }
  L(single);
  if (start) {
    cmp(group, group_end);
    jae(done, T_NEAR);
    start(1);
  }
  L(leftover);
  cmp(group, group_end);
  jae(done, T_NEAR);
  Label single_loop;
  L(single_loop);
  body(1);
  mov(g, group);
  finish(0, g);
  inc(group);
  cmp(group, group_end);
  jb(single_loop, T_NEAR);
  L(done);
}

void JitKernelBase::group_row_bounds(const Reg64& args, const Reg64& group, int rows) {
  mov(rax, group);
  imul(rax, rax, rows);
  mov(rcx, qword[args + kArgR0]);
  sub(rcx, rax);
  xor_(r11d, r11d);
  cmp(rcx, 0);
  cmovl(rcx, r11);
  mov(rdx, qword[args + kArgR1]);
  sub(rdx, rax);
  mov(r11d, rows);
  cmp(rdx, r11);
  cmovg(rdx, r11);
}

void JitKernelBase::lanes_mask_k2() {
  // ((1 << hi) - 1) & ~((1 << lo) - 1)
  mov(r11d, 1);
  shlx(r11d, r11d, edx);
  dec(r11d);
  mov(edx, 1);
  shlx(edx, edx, ecx);
  dec(edx);
  andn(r11d, edx, r11d);
  kmovw(k2, r11d);
}

void JitKernelBase::write_rows(const Reg64& args, const Reg64& group, int row_block,
                               const Address& tmp_base, bool accumulate) {
  Label loop, done;
  // rax = first row of the group, rcx = first index to write, rdx = end index.
  group_row_bounds(args, group, row_block);
  mov(r11, qword[args + kArgY]);
  lea(r11, ptr[r11 + rax * 4]);
  lea(rax, tmp_base);
  if (accumulate) vmovss(xmm2, dword[args + kArgAlpha]);
  cmp(rcx, rdx);
  jge(done, T_NEAR);
  L(loop);
  vmovss(xmm0, dword[rax + rcx * 4]);
  if (accumulate) {
    vmovss(xmm1, dword[r11 + rcx * 4]);
    vfmadd231ss(xmm1, xmm0, xmm2);
    vmovss(dword[r11 + rcx * 4], xmm1);
  } else {
    vmovss(dword[r11 + rcx * 4], xmm0);
  }
  inc(rcx);
  cmp(rcx, rdx);
  jl(loop);
  L(done);
}

void JitKernelBase::store_lanes(const Reg64& args, const Reg64& group, int row_block, const Zmm& acc,
                                const Zmm& tmp, bool accumulate) {
  // rax = first row of the group; k2 = the lanes inside [r0, r1).
  group_row_bounds(args, group, row_block);
  lanes_mask_k2();
  mov(r11, qword[args + kArgY]);
  lea(r11, ptr[r11 + rax * 4]);
  if (accumulate) {
    vmovups(tmp | k2 | T_z, ptr[r11]);
    vfmadd231ps(tmp, acc, ptr_b[args + kArgAlpha]);
    vmovups(ptr[r11] | k2, tmp);
  } else {
    vmovups(ptr[r11] | k2, acc);
  }
}

}  // namespace zenmoe::x64
