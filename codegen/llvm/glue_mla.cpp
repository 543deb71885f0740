// MLA decode attention (absorbed form) with the heads in the vector lanes: kAttnDecode.
//
// One token's query rows (one per head) are transposed once (16 x 16 blocks in registers), so
// that lane k of a vector is head k. The cache rows are then walked once, in tiles of
// kGlueAttnTileRows; per tile:
//   widen    kScoreRows rows at a time to f32 (f16 by vcvtph2ps, bf16 by a shift, q8_0 blocks
//            by their scale), each group scored at once while it is still in L1;
//   scores   S[j][k] = q_k · row_j: each row element is one broadcast multiplied into every
//            head's lane at once, with no horizontal sums (sums added in runs of kScoreRun
//            terms: one long chain of single additions loses more to rounding); up to 32 heads
//            a call's last, partial group of rows is scored kTailRows rows at a time, so rows
//            past the cache are scored (as zeros) only up to the next multiple of kTailRows, not
//            of kScoreRows (a share of 32 positions of a split decode scored 36 rows before, 32
//            now);
//   softmax  online: the running maxima, sums and rescale factors are vectors over the heads;
//   values   Y[k][c] = Y[k][c] * alpha[k] + sum_j P[j][k] * row_j[c] with the columns in the
//            lanes instead: blocks of 4 heads by 6 vectors of 16 columns, so a row step loads the
//            row's 6 vectors and broadcasts 4 probabilities once for 24 FMAs (with the heads in
//            the lanes every FMA needed its own broadcast of a row element: MlaDecode, 16 heads,
//            f16 rows, 512 positions 179-183 -> 165-167 us, 4096 positions 1452-1457 ->
//            1309-1342 us; 64 heads unchanged); each row step also prefetches a few lines of
//            the next tile (spread over the work: a burst of prefetches fills the core's miss
//            buffers and stalls it until they land). The column blocks are the outer loop and
//            the head blocks the inner one, so a block's columns of the tile's rows (18 KB of
//            the 110 KB tile at 576-wide f32 rows) come from L2 once and from L1 for every
//            other head block (heads outer read the whole tile from L2 once per head block:
//            MlaDecode, f32, f16 and q8_0 rows, 16 and 64 heads, 512 and 4096 positions, three
//            rounds in turn: 0.89-0.96x the time; 4 heads, one block, 0.98-1.01x).
// Finally Y is divided by the sums into y.
// The row width, value width, lane groups and scale are constants of the descriptor, so every
// row offset in the register blocks is an immediate.
//
// The bf16 dot form (glue_attn_bf16_dot: BF16 rows, AVX512_BF16) multiplies in bf16 pairs with
// vdpbf16ps, 32 products per instruction against 16 for an f32 FMA:
//   queries  transposed as pairs: lane k of qt[dd/2] holds q_k[dd], q_k[dd+1] rounded to bf16;
//   scores   each row dword (row_j[dd], row_j[dd+1]) is broadcast straight from the cache, no
//            widening; rows past the cache read the last row (their scores are never used);
//   values   Yt[c][k] (columns by heads, transposed into y at the end): the probabilities of
//            rows 2i and 2i+1 are rounded to bf16 and paired per lane, and the tile's value
//            columns interleaved per row pair (row_2i[c], row_2i+1[c]), so one broadcast dword
//            times one pair vector adds two rows' terms to every head's lane; an odd last row
//            pairs with a zero row and a zero probability.
// The softmax itself (maxima, exponentials, sums) stays in f32.
//
// The int8 score form (glue_attn_q8_dot: Q8_0 rows on an AVX-512 VNNI level) scores in integers
// as llama.cpp's q8_0 dot product does:
//   queries  quantised head by head to q8_0 blocks (ggml's activation quantiser); qt holds each
//            head's codes plus 128 as unsigned bytes, four per lane (dword dd: codes 4 dd ..
//            4 dd + 3), then the blocks' d per lane;
//   scores   per block of 32 and row, each dword of the row's codes is broadcast from the cache
//            into two vpdpbusd: one against every head's query dword (64 products per
//            instruction), one against 128 in every byte; their difference is the block's exact
//            int32 dot product, converted and added times the query's d and the row's d (MlaDecode,
//            Zen 5: 0.74-0.87x the widening form's time over the same cache);
//   values   as in the f32 form, over rows widened only where the values read them.
#include <algorithm>
#include <limits>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "codegen/llvm/glue_ir.h"

namespace zenmoe::glue_ir {

using llvm::Value;

namespace {

constexpr int64_t kTileRows = kGlueAttnTileRows;
constexpr int64_t kScoreRows = 12;  // rows widened and scored together (12 x 576 f32: 27 KB)
constexpr int64_t kScoreRun = 64;
// Rows a partial group of kScoreRows (the last of a call) scores at a time.
constexpr int kTailRows = 4;
// Side stream lines a step may ask for, at most (spread over the step's advance). One line a
// step read the next products' weights at about half the memory's pace during a long
// attention; two: bench model -t 1 -p 512 -n 64, bench preset, Zen 4 host, three rounds of
// the old and new binary in turn, decode 76.1-80.6 -> 81.4-83.6 tok/s (the products after the
// attention: matmul 141-149 -> 125-135 ms a run, matmul_add 93 -> 78-84), 1-token prompts
// unchanged (91-97 -> 93-98 tok/s).
constexpr int kSideLinesPerStep = 2;
// f32 form's value blocks: heads by vectors of 16 columns (24 accumulators).
constexpr int kValueHeads = 4, kValueVecs = 6;
static_assert(kTileRows % kScoreRows == 0);

class Flash {
 public:
  Flash(Kit& kit, const GlueDesc& desc, const Args& args)
      : k(kit), b(kit.b), d(desc), a(args), L(glue_attn_layout(desc)), W(desc.n), V(desc.v_width),
        lanes(L.lanes), ng(L.lanes / 16), dot(glue_attn_bf16_dot(desc)), i8(glue_attn_q8_dot(desc)),
        vr(glue_attn_pair_dwords(desc)) {
    qt = k.at(k.f32, a.q, k.ci64(L.qt));
    if (i8) {
      dqt = k.at(k.f32, a.q, k.ci64(L.qt + W / 4 * lanes));
      dpbusd_fn = llvm::Intrinsic::getDeclaration(k.fn->getParent(), llvm::Intrinsic::x86_avx512_vpdpbusd_512);
    }
    tile = k.at(k.f32, a.q, k.ci64(L.tile));
    s = k.at(k.f32, a.q, k.ci64(L.s));
    pairs = k.at(k.f32, a.q, k.ci64(L.pairs));
    if (dot) {
      llvm::Module* m = k.fn->getParent();
      dp_fn = llvm::Intrinsic::getDeclaration(m, llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512);
      cvt_fn = llvm::Intrinsic::getDeclaration(m, llvm::Intrinsic::x86_avx512bf16_cvtneps2bf16_512);
    }
    yt = k.at(k.f32, a.q, k.ci64(L.yt));
    mx = k.at(k.f32, a.q, k.ci64(L.stats));
    sum = k.at(k.f32, a.q, k.ci64(L.stats + lanes));
    inv = k.at(k.f32, a.q, k.ci64(L.stats + 2 * lanes));
    pf_at = k.slot(k.i64, 1, "pf_at");
    pf_left = k.slot(k.i64, 1, "pf_left");
    side_r = k.slot(k.i64, 1, "side_r");
    side_at = k.slot(k.i64, 1, "side_at");
    side_base = k.slot(k.ptr, 1, "side_base");
    side_last = k.slot(k.i64, 1, "side_last");
    side_rate = k.slot(k.i64, 1, "side_rate");
  }

  void emit() {
    side_init();
    transpose_queries();
    for (int64_t g = 0; g < ng; ++g) {
      vstore(k.splat(-std::numeric_limits<float>::infinity()), mx, k.ci64(16 * g));
      vstore(k.splat(0.0f), sum, k.ci64(16 * g));
    }
    k.loop(k.ci64(0), k.ci64(V), 1, [&](Value* c) {
      Value* row = b.CreateMul(c, k.ci64(lanes));
      for (int64_t g = 0; g < ng; ++g) vstore(k.splat(0.0f), yt, b.CreateAdd(row, k.ci64(16 * g)));
    });
    k.loop(k.ci64(0), a.n, kTileRows, [&](Value* j0) { tile_pass(j0); });
    finish();
  }

 private:
  Kit& k;
  llvm::IRBuilder<>& b;
  const GlueDesc& d;
  const Args& a;
  const GlueAttnLayout L;
  const int64_t W, V, lanes, ng;
  const bool dot;      // the bf16 dot form
  const bool i8;       // the int8 score form (glue_attn_q8_dot)
  const int64_t vr;    // bf16 dot form: value columns rounded up to 32 (dwords per interleaved row pair)
  Value *qt, *tile, *s, *pairs, *yt, *mx, *sum, *inv;
  Value* dqt = nullptr;  // int8 form: the query blocks' d, after the codes in the query region
  llvm::Function *dp_fn = nullptr, *cvt_fn = nullptr;  // vdpbf16ps, vcvtneps2bf16 (512-bit)
  llvm::Function* dpbusd_fn = nullptr;                 // vpdpbusd (512-bit)
  llvm::AllocaInst *pf_at, *pf_left;  // next tile: byte offset of the next line to ask for, lines left
  // Side stream: the range being fetched, the offset reached in it (in 1/256 bytes), its start,
  // the offset of its last byte, and the advance per step (in 1/256 bytes).
  llvm::AllocaInst *side_r, *side_at, *side_base, *side_last, *side_rate;
  int64_t pf_per = 1;                  // lines per value row step

  Value* vload(Value* base, Value* idx) { return k.load(base, idx, nullptr); }
  void vstore(Value* v, Value* base, Value* idx) { k.store(v, base, idx, nullptr); }
  Value* min64(Value* x, Value* y) { return b.CreateSelect(b.CreateICmpSLT(x, y), x, y); }
  Value* fma(Value* x, Value* y, Value* z) { return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {k.vf32}, {x, y, z}); }
  // The 32-bit element at p (an f32, or a bf16 pair) in every lane.
  Value* bcast32(Value* p) {
    Value* w = b.CreateAlignedLoad(k.i32, p, llvm::Align(dot ? 2 : 4));
    return b.CreateBitCast(b.CreateVectorSplat(k.vf, w), k.vf32);
  }
  // acc + broadcast e times lane vector v: an f32 FMA, or two bf16 products (the dot form).
  Value* madd(Value* acc, Value* v, Value* e) { return dot ? dot2(acc, v, e) : fma(e, v, acc); }
  // Lanes 16 g .. 16 g + 15 as i32 indices, and those below the query rows.
  Value* lane_ids(int64_t g) { return b.CreateAdd(k.iota(), k.splat_i32(static_cast<int32_t>(16 * g))); }
  Value* live_lanes(int64_t g) {
    return b.CreateICmpSLT(lane_ids(g), b.CreateVectorSplat(k.vf, b.CreateTrunc(a.n_rows, k.i32)));
  }
  // The transpose of 16 vectors of 16 floats: four stages, each swapping the off-diagonal h x h
  // blocks of every 2h x 2h block (h = 8, 4, 2, 1), two two-source shuffles per pair of vectors.
  std::vector<Value*> transpose16(std::vector<Value*> r) {
    for (int h = 8; h >= 1; h /= 2) {
      std::vector<int> lo(16), hi(16);
      for (int l = 0; l < 16; ++l) {
        lo[static_cast<size_t>(l)] = (l & h) == 0 ? l : 16 + l - h;
        hi[static_cast<size_t>(l)] = (l & h) == 0 ? l + h : 16 + l;
      }
      for (int i = 0; i < 16; ++i) {
        if ((i & h) != 0) continue;
        Value *x = r[static_cast<size_t>(i)], *y = r[static_cast<size_t>(i + h)];
        r[static_cast<size_t>(i)] = b.CreateShuffleVector(x, y, lo);
        r[static_cast<size_t>(i + h)] = b.CreateShuffleVector(x, y, hi);
      }
    }
    return r;
  }
  // The first `cnt` lanes (a constant 1..16) on, or nullptr for all 16.
  Value* first_lanes(int64_t cnt) {
    if (cnt >= 16) return nullptr;
    return b.CreateICmpSLT(k.iota(), k.splat_i32(static_cast<int32_t>(cnt)));
  }
  // Index of lane h0 (the first head of a lane group) in row `row` of a [..][lanes] piece.
  Value* lane_at(Value* row, Value* h0) { return b.CreateAdd(b.CreateMul(row, k.ci64(lanes)), h0); }
  // Lanes on where head `head` (i64) is a query row, and-ed with `cols` (nullptr: all).
  Value* head_mask(Value* head, Value* cols) {
    Value* live = b.CreateVectorSplat(k.vf, b.CreateICmpSLT(head, a.n_rows));
    return cols ? b.CreateAnd(live, cols) : live;
  }
  // The row a masked load or store of head `head` addresses: the head itself while it is a query
  // row, else row 0 (its mask is all off). An address past the rows may lie on a page that is
  // not mapped, and masked accesses there, though no lane faults, made a whole call 4-5x slower
  // on Zen 5 (a pool worker's 8 heads of 16: 50 against 12 us where its heap arena ended).
  Value* head_row(Value* head) { return b.CreateSelect(b.CreateICmpSLT(head, a.n_rows), head, k.ci64(0)); }

  // The queries transposed, a block of 16 heads by 16 columns at a time (masked loads of the
  // rows, transposed in registers; heads past n_rows are zeros): qt[dd][k] = x[k * W + dd], or
  // in the bf16 dot form qt[dd / 2][k] = the bf16 pair of columns dd, dd + 1.
  void transpose_queries() {
    if (i8) return quantize_queries();
    auto block = [&](Value* d0, int64_t cnt) {
      k.loop(k.ci64(0), k.ci64(ng), 1, [&](Value* g) {
        Value* h0 = b.CreateMul(g, k.ci64(16));
        std::vector<Value*> rows;
        for (int64_t r = 0; r < 16; ++r) {
          Value* head = b.CreateAdd(h0, k.ci64(r));
          rows.push_back(
              k.load(a.x, b.CreateAdd(b.CreateMul(head_row(head), k.ci64(W)), d0), head_mask(head, first_lanes(cnt))));
        }
        const std::vector<Value*> t = transpose16(rows);
        if (!dot) {
          for (int64_t l = 0; l < cnt; ++l)
            vstore(t[static_cast<size_t>(l)], qt, lane_at(b.CreateAdd(d0, k.ci64(l)), h0));
          return;
        }
        Value* p0 = b.CreateLShr(d0, k.ci64(1));  // d0 and cnt are even
        for (int64_t i = 0; i < cnt / 2; ++i)
          vstore(bf16_pairs(t[static_cast<size_t>(2 * i)], t[static_cast<size_t>(2 * i + 1)]), qt,
                 lane_at(b.CreateAdd(p0, k.ci64(i)), h0));
      });
    };
    const int64_t whole = W / 16 * 16;
    k.loop(k.ci64(0), k.ci64(whole), 16, [&](Value* d0) { block(d0, 16); });
    if (whole < W) block(k.ci64(whole), W - whole);
  }

  // Cache row `j` (i64) widened into dst (W floats).
  void widen_row(Value* j, Value* dst) {
    Value* src = k.at_bytes(a.x2, b.CreateMul(j, a.stride));
    if (d.kv_type == 3) {  // q8_0: per block of 32, an f16 scale then 32 signed bytes
      // The int8 form widens only the value columns' blocks (its scores read the codes).
      k.loop(k.ci64(0), k.ci64(i8 ? (V + 31) / 32 : W / 32), 1, [&](Value* blk) {
        Value* base = k.at_bytes(src, b.CreateMul(blk, k.ci64(34)));
        Value* scale = b.CreateFPExt(b.CreateAlignedLoad(b.getHalfTy(), base, llvm::Align(1)), k.f32);
        Value* sv = b.CreateVectorSplat(k.vf, scale);
        for (int64_t h = 0; h < 2; ++h) {
          Value* q8 = b.CreateAlignedLoad(k.vi8, k.at_bytes(base, k.ci64(2 + 16 * h)), llvm::Align(1));
          Value* f = b.CreateSIToFP(b.CreateSExt(q8, k.vi32), k.vf32);
          vstore(b.CreateFMul(f, sv), dst, b.CreateAdd(b.CreateMul(blk, k.ci64(32)), k.ci64(16 * h)));
        }
      });
      return;
    }
    k.vec_loop(k.ci64(W), [&](Value* i, Value* mask) {
      Value* v = nullptr;
      if (d.kv_type == 0) {
        v = k.load(src, i, mask);
      } else {  // 16-bit elements: f16 converted, bf16 the high half of its f32
        llvm::Type* et = d.kv_type == 1 ? b.getHalfTy() : k.i16;
        auto* vt = llvm::FixedVectorType::get(et, k.vf);
        Value* p = k.at(et, src, i);
        Value* h = mask ? b.CreateMaskedLoad(vt, p, llvm::Align(2), mask, llvm::Constant::getNullValue(vt))
                        : static_cast<Value*>(b.CreateAlignedLoad(vt, p, llvm::Align(2)));
        v = d.kv_type == 1 ? b.CreateFPExt(h, k.vf32)
                           : b.CreateBitCast(b.CreateShl(b.CreateZExt(h, k.vi32), k.splat_i32(16)), k.vf32);
      }
      k.store(v, dst, i, mask);
    });
  }

  // Scores of JB rows for GB lane groups from g0, added into out[j][g] (zeroed before) in runs of
  // kScoreRun terms. Row j's 32-bit elements start at rows[j]: f32 widened rows, or in the bf16
  // dot form the cache rows' bf16 pairs.
  void scores_block(int GB, int JB, const std::vector<Value*>& rows, int64_t g0, Value* out) {
    if (i8) return scores_block_i8(GB, JB, rows, g0, out);
    const int64_t terms = dot ? W / 2 : W, run = dot ? kScoreRun / 2 : kScoreRun;
    k.loop(k.ci64(0), k.ci64(terms), run, [&](Value* d0) {
      side_advance();
      Value* d1 = min64(b.CreateAdd(d0, k.ci64(run)), k.ci64(terms));
      std::vector<llvm::AllocaInst*> acc;
      for (int i = 0; i < JB * GB; ++i) {
        acc.push_back(k.slot(k.vf32, 1, "sacc"));
        b.CreateStore(k.splat(0.0f), acc.back());
      }
      k.loop(d0, d1, 1, [&](Value* dd) {
        side_step();
        std::vector<Value*> qv;
        Value* qrow = b.CreateMul(dd, k.ci64(lanes));
        for (int g = 0; g < GB; ++g) qv.push_back(vload(qt, b.CreateAdd(qrow, k.ci64(16 * (g0 + g)))));
        for (int j = 0; j < JB; ++j) {
          Value* e = bcast32(k.at(k.i32, rows[static_cast<size_t>(j)], dd));
          for (int g = 0; g < GB; ++g) {
            llvm::AllocaInst* slot = acc[static_cast<size_t>(j * GB + g)];
            b.CreateStore(madd(b.CreateLoad(k.vf32, slot), qv[static_cast<size_t>(g)], e), slot);
          }
        }
      });
      for (int j = 0; j < JB; ++j)
        for (int g = 0; g < GB; ++g) {
          Value* idx = k.ci64(j * lanes + 16 * (g0 + g));
          vstore(b.CreateFAdd(vload(out, idx), b.CreateLoad(k.vf32, acc[static_cast<size_t>(j * GB + g)])), out, idx);
        }
    });
  }

  // ---- int8 score form ----

  // The queries as ggml's q8_0 activations (ref::from_float_q8_0_x86), head by head: qt's
  // dword [dd][k] holds head k's codes 4 dd .. 4 dd + 3 plus 128 (unsigned bytes, as vpdpbusd
  // takes its first operand), dqt[blk][k] the block's d (binary16, widened). Lanes past the
  // query rows get codes 0 and d 0.
  void quantize_queries() {
    auto* v16i8 = llvm::FixedVectorType::get(k.i8, 16);
    auto* v32i8 = llvm::FixedVectorType::get(k.i8, 32);
    auto* v8i32 = llvm::FixedVectorType::get(k.i32, 8);
    std::vector<int> cat(32);
    for (int i = 0; i < 32; ++i) cat[static_cast<size_t>(i)] = i;
    k.loop(k.ci64(0), k.ci64(lanes), 1, [&](Value* h) {
      Value* mask = head_mask(h, nullptr);
      Value* row = b.CreateMul(head_row(h), k.ci64(W));
      k.loop(k.ci64(0), k.ci64(W / 32), 1, [&](Value* blk) {
        Value* at = b.CreateAdd(row, b.CreateMul(blk, k.ci64(32)));
        Value* x0 = k.load(a.x, at, mask);
        Value* x1 = k.load(a.x, b.CreateAdd(at, k.ci64(16)), mask);
        auto fabs = [&](Value* v) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v); };
        Value* amax = k.hmax(k.vmax(fabs(x0), fabs(x1)));
        Value* d = b.CreateFPExt(b.CreateFPTrunc(b.CreateFDiv(amax, k.cf(127.0f)), b.getHalfTy()), k.f32);
        Value* id = b.CreateSelect(b.CreateFCmpUNE(amax, k.cf(0.0f)), b.CreateFDiv(k.cf(127.0f), amax), k.cf(0.0f));
        Value* vid = b.CreateVectorSplat(k.vf, id);
        auto codes = [&](Value* x) { return b.CreateTrunc(k.nearest_int(b.CreateFMul(x, vid)), v16i8); };
        Value* bytes = b.CreateXor(b.CreateShuffleVector(codes(x0), codes(x1), cat),
                                   llvm::ConstantInt::get(v32i8, 0x80));  // + 128 (mod 256)
        Value* dw = b.CreateBitCast(bytes, v8i32);
        for (int64_t i = 0; i < 8; ++i) {
          Value* idx = b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(blk, k.ci64(8)), k.ci64(i)), k.ci64(lanes)), h);
          b.CreateAlignedStore(b.CreateExtractElement(dw, k.ci64(i)), k.at(k.i32, qt, idx), llvm::Align(4));
        }
        k.store_f32(d, dqt, b.CreateAdd(b.CreateMul(blk, k.ci64(lanes)), h));
      });
    });
  }
  // acc + the sums of four u8 x s8 products per dword (vpdpbusd).
  Value* dpbusd(Value* acc, Value* u8s, Value* s8s) { return b.CreateCall(dpbusd_fn, {acc, u8s, s8s}); }
  // Scores of JB cache rows (their Q8_0 blocks from rows[j]) for GB lane groups from g0, added
  // into out[j][g], a block at a time: per dword of the block, the four codes of each row (one
  // broadcast) times every head's four query codes plus 128, summed in int32 (vpdpbusd), and
  // the row's codes times 128 likewise (the same in every lane); their difference is the
  // block's exact integer dot product, added in f32 times the query's and the row's d.
  void scores_block_i8(int GB, int JB, const std::vector<Value*>& rows, int64_t g0, Value* out) {
    std::vector<llvm::AllocaInst*> acc;
    for (int i = 0; i < JB * GB; ++i) {
      acc.push_back(k.slot(k.vf32, 1, "sacc"));
      b.CreateStore(k.splat(0.0f), acc.back());
    }
    Value* zero = llvm::Constant::getNullValue(k.vi32);
    Value* c128 = k.splat_i32(static_cast<int32_t>(0x80808080u));
    k.loop(k.ci64(0), k.ci64(W / 32), 1, [&](Value* blk) {
      side_advance();
      Value* boff = b.CreateMul(blk, k.ci64(34));
      std::vector<Value*> ia(static_cast<size_t>(JB * GB), zero), corr(static_cast<size_t>(JB), zero);
      for (int64_t i = 0; i < 8; ++i) {
        side_step();
        Value* qrow = b.CreateMul(b.CreateAdd(b.CreateMul(blk, k.ci64(8)), k.ci64(i)), k.ci64(lanes));
        std::vector<Value*> qv;
        for (int g = 0; g < GB; ++g)
          qv.push_back(b.CreateAlignedLoad(k.vi32, k.at(k.i32, qt, b.CreateAdd(qrow, k.ci64(16 * (g0 + g)))),
                                           llvm::Align(64)));
        for (int j = 0; j < JB; ++j) {
          Value* p = k.at_bytes(rows[static_cast<size_t>(j)], b.CreateAdd(boff, k.ci64(2 + 4 * i)));
          Value* e = b.CreateVectorSplat(k.vf, b.CreateAlignedLoad(k.i32, p, llvm::Align(1)));
          corr[static_cast<size_t>(j)] = dpbusd(corr[static_cast<size_t>(j)], c128, e);
          for (int g = 0; g < GB; ++g) {
            Value*& x = ia[static_cast<size_t>(j * GB + g)];
            x = dpbusd(x, qv[static_cast<size_t>(g)], e);
          }
        }
      }
      std::vector<Value*> dq;
      for (int g = 0; g < GB; ++g)
        dq.push_back(vload(dqt, b.CreateAdd(b.CreateMul(blk, k.ci64(lanes)), k.ci64(16 * (g0 + g)))));
      for (int j = 0; j < JB; ++j) {
        Value* dr = b.CreateFPExt(
            b.CreateAlignedLoad(b.getHalfTy(), k.at_bytes(rows[static_cast<size_t>(j)], boff), llvm::Align(1)), k.f32);
        Value* drv = b.CreateVectorSplat(k.vf, dr);
        for (int g = 0; g < GB; ++g) {
          llvm::AllocaInst* slot = acc[static_cast<size_t>(j * GB + g)];
          Value* exact = b.CreateSub(ia[static_cast<size_t>(j * GB + g)], corr[static_cast<size_t>(j)]);
          Value* scale = b.CreateFMul(dq[static_cast<size_t>(g)], drv);
          b.CreateStore(fma(b.CreateSIToFP(exact, k.vf32), scale, b.CreateLoad(k.vf32, slot)), slot);
        }
      }
    });
    for (int j = 0; j < JB; ++j)
      for (int g = 0; g < GB; ++g) {
        Value* idx = k.ci64(j * lanes + 16 * (g0 + g));
        vstore(b.CreateFAdd(vload(out, idx), b.CreateLoad(k.vf32, acc[static_cast<size_t>(j * GB + g)])), out, idx);
      }
  }

  // One prefetch step: pf_per lines of the next tile while any are left.
  void prefetch_step() {
    Value* left = b.CreateLoad(k.i64, pf_left);
    k.if_then(b.CreateICmpSGT(left, k.ci64(0)), [&] {
      Value* at = b.CreateLoad(k.i64, pf_at);
      for (int64_t i = 0; i < pf_per; ++i)  // a plain address: it may lie past the cache
        b.CreateIntrinsic(llvm::Intrinsic::prefetch, {k.ptr},
                          {b.CreateGEP(k.i8, a.x2, b.CreateAdd(at, k.ci64(64 * i))), k.ci32(0), k.ci32(3), k.ci32(1)});
      b.CreateStore(b.CreateAdd(at, k.ci64(64 * pf_per)), pf_at);
      b.CreateStore(b.CreateSub(left, k.ci64(pf_per)), pf_left);
    });
  }

  // Score steps (iterations of the scores_block inner loop) per kScoreRows cache rows.
  int64_t score_steps_per_block() const {
    const int64_t terms = dot ? W / 2 : i8 ? W / 4 : W;
    int64_t steps = 0, g = 0;
    for (; g + 4 <= ng; g += 4) steps += kScoreRows / score_rows(4) * terms;
    if (g < ng) steps += kScoreRows / score_rows(static_cast<int>(ng - g)) * terms;
    return steps;
  }
  // f32 form: the heads the value blocks cover, the query rows rounded up to whole blocks (the
  // lanes past them hold no head: a quarter-used vector sums a quarter of the values; the next
  // tile's prefetch keeps its rate for all lanes, so such a call asks for part of the next tile
  // ahead: a rate set per call from its value steps, bursts of up to 4 lines, was 12 % slower
  // from memory at 4 heads, MlaDecode).
  Value* value_heads() {
    Value* rows = b.CreateAnd(b.CreateAdd(a.n_rows, k.ci64(kValueHeads - 1)), k.ci64(-kValueHeads));
    return min64(rows, k.ci64(lanes));
  }
  // Value row steps per row for the call's query rows.
  Value* value_steps_live() {
    if (dot) return k.ci64(value_steps_per_row());
    return b.CreateMul(b.CreateSDiv(value_heads(), k.ci64(kValueHeads)), k.ci64(col_blocks()));
  }
  int64_t col_blocks() const { return (V + 16 * kValueVecs - 1) / (16 * kValueVecs); }
  // Value row steps (iterations of the values_block / values_cols row loop) per row, or per row
  // pair in the bf16 dot form.
  int64_t value_steps_per_row() const {
    if (!dot) return lanes / kValueHeads * col_blocks();
    auto per = [&](int GB) { return V / value_cols(GB) + V % value_cols(GB); };
    int64_t steps = 0, g = 0;
    for (; g + 4 <= ng; g += 4) steps += per(4);
    if (g < ng) steps += per(static_cast<int>(ng - g));
    return steps;
  }
  // The side stream (a.w: a.n_visible pairs of address and byte count, fetched in order) is
  // spread evenly over the call's score and value steps, at most a line per step (issued all at
  // once, prefetches fill the core's miss buffers and stall the arithmetic); without ranges the
  // queries' first line, in L1 all along, stands in for it.
  void side_init() {
    llvm::AllocaInst* total = k.slot(k.i64, 1, "side_total");
    b.CreateStore(k.ci64(0), total);
    k.loop(k.ci64(0), a.n_visible, 1, [&](Value* r) {
      Value* bytes = b.CreateLoad(k.i64, k.at(k.i64, a.w, b.CreateAdd(b.CreateMul(r, k.ci64(2)), k.ci64(1))));
      b.CreateStore(b.CreateAdd(b.CreateLoad(k.i64, total), bytes), total);
    });
    Value* blocks = b.CreateSDiv(b.CreateAdd(a.n, k.ci64(kScoreRows - 1)), k.ci64(kScoreRows));
    Value* value_rows = dot ? b.CreateSDiv(b.CreateAdd(a.n, k.ci64(1)), k.ci64(2)) : a.n;
    Value* steps = b.CreateAdd(b.CreateMul(blocks, k.ci64(score_steps_per_block())),
                               b.CreateMul(value_rows, value_steps_live()));
    Value* rate = b.CreateSDiv(b.CreateShl(b.CreateLoad(k.i64, total), k.ci64(8)), steps);
    b.CreateStore(min64(b.CreateAdd(rate, k.ci64(1)), k.ci64(kSideLinesPerStep * 64 << 8)), side_rate);
    b.CreateStore(k.ci64(-1), side_r);
    b.CreateStore(k.ci64(1 << 8), side_at);  // past the stand-in's last byte: the first run takes range 0
    b.CreateStore(qt, side_base);
    b.CreateStore(k.ci64(0), side_last);
  }
  // Once the current side range is passed, the next one, if any.
  void side_advance() {
    Value* r = b.CreateAdd(b.CreateLoad(k.i64, side_r), k.ci64(1));
    Value* at = b.CreateAShr(b.CreateLoad(k.i64, side_at), k.ci64(8));
    Value* passed = b.CreateICmpSGT(at, b.CreateLoad(k.i64, side_last));
    k.if_then(b.CreateAnd(passed, b.CreateICmpSLT(r, a.n_visible)), [&] {
      Value* pair = k.at(k.i64, a.w, b.CreateMul(r, k.ci64(2)));
      b.CreateStore(b.CreateIntToPtr(b.CreateLoad(k.i64, pair), k.ptr), side_base);
      b.CreateStore(b.CreateSub(b.CreateLoad(k.i64, k.at(k.i64, pair, k.ci64(1))), k.ci64(1)), side_last);
      b.CreateStore(k.ci64(0), side_at);
      b.CreateStore(r, side_r);
    });
  }
  // The line at the stream's offset into L2, then the offset advanced; past the range's end, its
  // last line again (no branch in the step loops).
  void side_step() {
    Value* at = b.CreateLoad(k.i64, side_at);
    Value* rate = b.CreateLoad(k.i64, side_rate);
    Value* last = b.CreateLoad(k.i64, side_last);
    Value* base = b.CreateLoad(k.ptr, side_base);
    for (int i = 0; i < kSideLinesPerStep; ++i) {  // evenly over the step's advance
      Value* part = b.CreateSDiv(b.CreateMul(rate, k.ci64(i)), k.ci64(kSideLinesPerStep));
      Value* off = min64(b.CreateAShr(b.CreateAdd(at, part), k.ci64(8)), last);
      b.CreateIntrinsic(llvm::Intrinsic::prefetch, {k.ptr},
                        {b.CreateGEP(k.i8, base, off), k.ci32(0), k.ci32(2), k.ci32(1)});
    }
    b.CreateStore(b.CreateAdd(at, rate), side_at);
  }

  // Value sums of CB columns from c0 for GB lane groups from g0 over `steps` row steps of the
  // tile: its nj rows (probabilities in s, widened rows in tile), or in the bf16 dot form its
  // row pairs (probability pairs in pairs, interleaved value columns in tile).
  void values_block(int GB, int CB, Value* c0, int64_t g0, Value* steps) {
    Value* probs = dot ? pairs : s;
    const int64_t row_elems = dot ? vr : W;  // 32-bit elements between row steps in tile
    std::vector<Value*> alpha;
    for (int g = 0; g < GB; ++g) alpha.push_back(vload(inv, k.ci64(16 * (g0 + g))));
    std::vector<llvm::AllocaInst*> acc;
    auto yt_idx = [&](int c, int g) {
      return b.CreateAdd(b.CreateMul(b.CreateAdd(c0, k.ci64(c)), k.ci64(lanes)), k.ci64(16 * (g0 + g)));
    };
    side_advance();
    for (int c = 0; c < CB; ++c)
      for (int g = 0; g < GB; ++g) {
        acc.push_back(k.slot(k.vf32, 1, "vacc"));
        b.CreateStore(b.CreateFMul(vload(yt, yt_idx(c, g)), alpha[static_cast<size_t>(g)]), acc.back());
      }
    k.loop(k.ci64(0), steps, 1, [&](Value* j) {
      prefetch_step();
      side_step();
      std::vector<Value*> pv;
      Value* prow = b.CreateMul(j, k.ci64(lanes));
      for (int g = 0; g < GB; ++g) pv.push_back(vload(probs, b.CreateAdd(prow, k.ci64(16 * (g0 + g)))));
      Value* row = b.CreateAdd(b.CreateMul(j, k.ci64(row_elems)), c0);
      for (int c = 0; c < CB; ++c) {
        Value* e = bcast32(k.at(k.i32, tile, b.CreateAdd(row, k.ci64(c))));
        for (int g = 0; g < GB; ++g) {
          llvm::AllocaInst* slot = acc[static_cast<size_t>(c * GB + g)];
          b.CreateStore(madd(b.CreateLoad(k.vf32, slot), pv[static_cast<size_t>(g)], e), slot);
        }
      }
    });
    for (int c = 0; c < CB; ++c)
      for (int g = 0; g < GB; ++g) vstore(b.CreateLoad(k.vf32, acc[static_cast<size_t>(c * GB + g)]), yt, yt_idx(c, g));
  }

  // f32 form: value sums of nv vectors of 16 columns from c0 (the last one masked by last, or
  // whole when last is nullptr) for the kValueHeads heads from h0, over `steps` rows of the tile.
  // Each row step loads the row's vectors once and broadcasts each head's probability once:
  // kValueHeads x nv FMAs for nv + kValueHeads loads.
  void values_cols(Value* h0, int nv, Value* c0, Value* last, Value* steps) {
    auto mask_of = [&](int v) { return v == nv - 1 ? last : nullptr; };
    auto y_idx = [&](int h, int v) {
      return b.CreateAdd(b.CreateMul(b.CreateAdd(h0, k.ci64(h)), k.ci64(V)), b.CreateAdd(c0, k.ci64(16 * v)));
    };
    side_advance();
    std::vector<llvm::AllocaInst*> acc;
    for (int h = 0; h < kValueHeads; ++h) {
      Value* alpha = b.CreateVectorSplat(k.vf, k.load_f32(inv, b.CreateAdd(h0, k.ci64(h))));
      for (int v = 0; v < nv; ++v) {
        acc.push_back(k.slot(k.vf32, 1, "cacc"));
        b.CreateStore(b.CreateFMul(k.load(yt, y_idx(h, v), mask_of(v)), alpha), acc.back());
      }
    }
    k.loop(k.ci64(0), steps, 1, [&](Value* j) {
      prefetch_step();
      side_step();
      Value* row = b.CreateAdd(b.CreateMul(j, k.ci64(W)), c0);
      std::vector<Value*> t;
      for (int v = 0; v < nv; ++v) t.push_back(k.load(tile, b.CreateAdd(row, k.ci64(16 * v)), mask_of(v)));
      Value* prow = b.CreateAdd(b.CreateMul(j, k.ci64(lanes)), h0);
      for (int h = 0; h < kValueHeads; ++h) {
        Value* p = b.CreateVectorSplat(k.vf, k.load_f32(s, b.CreateAdd(prow, k.ci64(h))));
        for (int v = 0; v < nv; ++v) {
          llvm::AllocaInst* slot = acc[static_cast<size_t>(h * nv + v)];
          b.CreateStore(fma(p, t[static_cast<size_t>(v)], b.CreateLoad(k.vf32, slot)), slot);
        }
      }
    });
    for (int h = 0; h < kValueHeads; ++h)
      for (int v = 0; v < nv; ++v)
        k.store(b.CreateLoad(k.vf32, acc[static_cast<size_t>(h * nv + v)]), yt, y_idx(h, v), mask_of(v));
  }

  // fn(GB, g0) over the lane groups, four at a time, then the rest as one block.
  template <typename Fn>
  void by_lane_groups(Fn&& fn) {
    int64_t g = 0;
    for (; g + 4 <= ng; g += 4) fn(4, g);
    if (g < ng) fn(static_cast<int>(ng - g), g);
  }
  // Register blocks: rows per score block and columns per value block for GB lane groups.
  // The int8 form takes fewer rows: through a block it holds, per row, an int32 sum for every
  // lane group, the row's correction and an f32 sum for every lane group.
  int score_rows(int GB) const {
    if (i8) return GB == 1 ? 6 : GB == 2 ? 4 : GB == 3 ? 3 : 2;
    return GB <= 2 ? 12 : 6;
  }
  static int value_cols(int GB) { return GB == 1 ? 16 : GB == 4 ? 4 : 8; }

  // Scales the tile's scores, folds them into the running maxima and sums and turns the nj
  // rows into probabilities relative to the new maxima; the rescale factors go to inv.
  void online_softmax(Value* nj) {
    const float scale = d.scale;
    for (int64_t g = 0; g < ng; ++g) {
      llvm::AllocaInst* mt = k.slot(k.vf32, 1, "tmax");
      b.CreateStore(k.splat(-std::numeric_limits<float>::infinity()), mt);
      k.loop(k.ci64(0), nj, 1, [&](Value* j) {
        Value* idx = b.CreateAdd(b.CreateMul(j, k.ci64(lanes)), k.ci64(16 * g));
        Value* v = b.CreateFMul(vload(s, idx), k.splat(scale));
        vstore(v, s, idx);
        b.CreateStore(k.vmax(b.CreateLoad(k.vf32, mt), v), mt);
      });
      Value* m_old = vload(mx, k.ci64(16 * g));
      Value* m_new = k.vmax(m_old, b.CreateLoad(k.vf32, mt));
      // On the first tile the old maximum is -inf: the factor is 0 and scales sums still 0.
      Value* alpha = k.exp(b.CreateFSub(m_old, m_new));
      llvm::AllocaInst* total = k.slot(k.vf32, 1, "tsum");
      b.CreateStore(b.CreateFMul(vload(sum, k.ci64(16 * g)), alpha), total);
      k.loop(k.ci64(0), nj, 1, [&](Value* j) {
        Value* idx = b.CreateAdd(b.CreateMul(j, k.ci64(lanes)), k.ci64(16 * g));
        Value* p = k.exp(b.CreateFSub(vload(s, idx), m_new));
        vstore(p, s, idx);
        b.CreateStore(b.CreateFAdd(b.CreateLoad(k.vf32, total), p), total);
      });
      vstore(m_new, mx, k.ci64(16 * g));
      vstore(b.CreateLoad(k.vf32, total), sum, k.ci64(16 * g));
      vstore(alpha, inv, k.ci64(16 * g));
    }
  }

  // Tile of rows [j0, j0 + nj): scored kScoreRows at a time (widened first, or in the bf16 dot
  // form straight from the cache), softmax, in the dot form probabilities and value columns
  // paired, values.
  void tile_pass(Value* j0) {
    Value* nj = min64(k.ci64(kTileRows), b.CreateSub(a.n, j0));
    Value* after = b.CreateAdd(j0, nj);
    Value* next_rows = min64(k.ci64(kTileRows), b.CreateSub(a.n, after));
    b.CreateStore(b.CreateMul(after, a.stride), pf_at);
    b.CreateStore(b.CreateSDiv(b.CreateAdd(b.CreateMul(next_rows, a.stride), k.ci64(63)), k.ci64(64)), pf_left);
    // Group of rows from jj: kScoreRows of them, or the call's last, partial group (`tail`).
    auto group = [&](Value* jj, bool tail) {
      Value* sub = k.at(k.f32, tile, b.CreateMul(jj, k.ci64(W)));
      Value* out = k.at(k.f32, s, b.CreateMul(jj, k.ci64(lanes)));
      Value* cnt = min64(k.ci64(kScoreRows), b.CreateSub(nj, jj));  // a run-time count either way
      // A partial group is scored kTailRows rows at a time (up to 32 heads; with more, whose
      // kernels ran 1-2 % slower over long caches with a second copy of the group's code, in
      // whole blocks): rows past the cache up to the next multiple of it (or of kScoreRows)
      // score zeros (their scores are never read).
      const bool by_tail_rows = tail && ng <= 2;
      Value* scored = by_tail_rows ? b.CreateAnd(b.CreateAdd(cnt, k.ci64(kTailRows - 1)), k.ci64(-kTailRows))
                                   : k.ci64(kScoreRows);
      if (!dot) {
        k.loop(k.ci64(0), cnt, 1, [&](Value* r) {
          widen_row(b.CreateAdd(b.CreateAdd(j0, jj), r), k.at(k.f32, sub, b.CreateMul(r, k.ci64(W))));
        });
        if (tail && !i8) {
          Value* past = k.at(k.f32, sub, b.CreateMul(cnt, k.ci64(W)));
          k.vec_loop(b.CreateMul(b.CreateSub(scored, cnt), k.ci64(W)),
                     [&](Value* i, Value* mask) { k.store(k.splat(0.0f), past, i, mask); });
        }
      }
      for (int64_t i = 0; i < kScoreRows * lanes; i += 16) vstore(k.splat(0.0f), out, k.ci64(i));
      // Rows from `first` (i64, within the group) as scores_block takes them.
      auto rows_at = [&](Value* first, int JB) {
        if (dot || i8) return cache_rows(b.CreateAdd(b.CreateAdd(j0, jj), first), JB);
        std::vector<Value*> rows;
        for (int64_t r = 0; r < JB; ++r)
          rows.push_back(k.at(k.f32, sub, b.CreateMul(b.CreateAdd(first, k.ci64(r)), k.ci64(W))));
        return rows;
      };
      by_lane_groups([&](int GB, int64_t g0) {
        if (by_tail_rows) {
          k.loop(k.ci64(0), scored, kTailRows, [&](Value* j) {
            scores_block(GB, kTailRows, rows_at(j, kTailRows), g0, k.at(k.f32, out, b.CreateMul(j, k.ci64(lanes))));
          });
          return;
        }
        const int JB = score_rows(GB);
        for (int64_t j = 0; j < kScoreRows; j += JB)
          scores_block(GB, JB, rows_at(k.ci64(j), JB), g0, k.at(k.f32, out, k.ci64(j * lanes)));
      });
    };
    if (ng <= 2) {  // whole groups, then the partial one in kTailRows rows
      Value* groups_end = b.CreateMul(b.CreateSDiv(nj, k.ci64(kScoreRows)), k.ci64(kScoreRows));
      k.loop(k.ci64(0), groups_end, kScoreRows, [&](Value* jj) { group(jj, false); });
      k.if_then(b.CreateICmpSLT(groups_end, nj), [&] { group(groups_end, true); });
    } else {  // one loop, every group scored whole (a partial one padded with zero rows)
      k.loop(k.ci64(0), nj, kScoreRows, [&](Value* jj) { group(jj, true); });
    }
    online_softmax(nj);
    Value* steps = nj;  // value row steps: rows, or in the dot form row pairs
    if (dot) {
      steps = b.CreateSDiv(b.CreateAdd(nj, k.ci64(1)), k.ci64(2));
      pair_probabilities(nj, steps);
      interleave_values(j0, nj, steps);
    }
    if (!dot) {
      const int64_t per = 16 * kValueVecs, whole = V / per * per;
      k.loop(k.ci64(0), k.ci64(whole), per, [&](Value* c0) {
        k.loop(k.ci64(0), value_heads(), kValueHeads,
               [&](Value* h0) { values_cols(h0, kValueVecs, c0, nullptr, steps); });
      });
      if (whole < V) {
        const int64_t rest = V - whole, nv = (rest + 15) / 16;
        k.loop(k.ci64(0), value_heads(), kValueHeads, [&](Value* h0) {
          values_cols(h0, static_cast<int>(nv), k.ci64(whole), first_lanes(rest - 16 * (nv - 1)), steps);
        });
      }
      return;
    }
    by_lane_groups([&](int GB, int64_t g0) {
      const int CB = value_cols(GB);
      const int64_t whole = V / CB * CB;
      k.loop(k.ci64(0), k.ci64(whole), CB, [&](Value* c0) { values_block(GB, CB, c0, g0, steps); });
      k.loop(k.ci64(whole), k.ci64(V), 1, [&](Value* c0) { values_block(GB, 1, c0, g0, steps); });
    });
  }

  // ---- bf16 dot form ----

  // lo and hi rounded to bf16 (vcvtneps2bf16) and paired: lane i = bf16(lo[i]) | bf16(hi[i]) << 16.
  Value* bf16_pairs(Value* lo, Value* hi) {
    auto* v16 = llvm::FixedVectorType::get(k.i16, 16);
    auto half = [&](Value* v) { return b.CreateZExt(b.CreateBitCast(b.CreateCall(cvt_fn, {v}), v16), k.vi32); };
    return b.CreateBitCast(b.CreateOr(half(lo), b.CreateShl(half(hi), k.splat_i32(16))), k.vf32);
  }
  // acc + pair products of x and y (vdpbf16ps): lane i += x.lo * y.lo + x.hi * y.hi.
  Value* dot2(Value* acc, Value* x, Value* y) {
    llvm::FunctionType* ft = dp_fn->getFunctionType();
    return b.CreateCall(dp_fn, {acc, b.CreateBitCast(x, ft->getParamType(1)), b.CreateBitCast(y, ft->getParamType(2))});
  }
  // Pointers to the n cache rows from row `first` (i64); rows past the cache give the last one.
  std::vector<Value*> cache_rows(Value* first, int n) {
    Value* last = b.CreateSub(a.n, k.ci64(1));
    std::vector<Value*> rows;
    for (int j = 0; j < n; ++j)
      rows.push_back(k.at_bytes(a.x2, b.CreateMul(min64(b.CreateAdd(first, k.ci64(j)), last), a.stride)));
    return rows;
  }

  // pairs[i][k] = the probabilities of rows 2i and 2i+1 (0 past the tile's nj rows) as a bf16 pair.
  void pair_probabilities(Value* nj, Value* npairs) {
    k.loop(k.ci64(0), npairs, 1, [&](Value* i) {
      Value* r0 = b.CreateMul(i, k.ci64(2));
      Value* has_r1 = b.CreateICmpSLT(b.CreateAdd(r0, k.ci64(1)), nj);
      for (int64_t g = 0; g < ng; ++g) {
        Value* lo = vload(s, b.CreateAdd(b.CreateMul(r0, k.ci64(lanes)), k.ci64(16 * g)));
        // Row 2i+1 lies inside the score buffer even past nj (nj < kTileRows when it is odd).
        Value* hi = vload(s, b.CreateAdd(b.CreateMul(r0, k.ci64(lanes)), k.ci64(lanes + 16 * g)));
        hi = b.CreateSelect(has_r1, hi, k.splat(0.0f));
        vstore(bf16_pairs(lo, hi), pairs, b.CreateAdd(b.CreateMul(i, k.ci64(lanes)), k.ci64(16 * g)));
      }
    });
  }

  // tile (as dwords) [i][c] = (row_{j0+2i}[c], row_{j0+2i+1}[c]) for c < vr: columns past v_width
  // and a missing row 2i+1 are zeros.
  void interleave_values(Value* j0, Value* nj, Value* npairs) {
    auto* v32 = llvm::FixedVectorType::get(k.i16, 32);
    llvm::Constant* zero = llvm::Constant::getNullValue(v32);
    std::vector<int> lo_idx, hi_idx;
    for (int i = 0; i < 16; ++i) {
      lo_idx.insert(lo_idx.end(), {i, 32 + i});
      hi_idx.insert(hi_idx.end(), {16 + i, 48 + i});
    }
    Value* last = b.CreateSub(nj, k.ci64(1));
    k.loop(k.ci64(0), npairs, 1, [&](Value* i) {
      Value* r0 = b.CreateMul(i, k.ci64(2));
      Value* has_r1 = b.CreateICmpSLT(b.CreateAdd(r0, k.ci64(1)), nj);
      Value* p0 = k.at_bytes(a.x2, b.CreateMul(b.CreateAdd(j0, r0), a.stride));
      Value* p1 = k.at_bytes(a.x2, b.CreateMul(b.CreateAdd(j0, min64(b.CreateAdd(r0, k.ci64(1)), last)), a.stride));
      Value* dst = k.at(k.i32, tile, b.CreateMul(i, k.ci64(vr)));
      k.loop(k.ci64(0), k.ci64(vr), 32, [&](Value* c) {
        Value* mask = nullptr;
        if (V % 32 != 0) {
          std::vector<llvm::Constant*> ids;
          for (int t = 0; t < 32; ++t) ids.push_back(k.ci32(t));
          Value* cols = b.CreateAdd(llvm::ConstantVector::get(ids), b.CreateVectorSplat(32, b.CreateTrunc(c, k.i32)));
          mask = b.CreateICmpSLT(cols, b.CreateVectorSplat(32, k.ci32(static_cast<int32_t>(V))));
        }
        auto load = [&](Value* row) -> Value* {
          Value* p = k.at(k.i16, row, c);
          return mask ? b.CreateMaskedLoad(v32, p, llvm::Align(2), mask, zero)
                      : static_cast<Value*>(b.CreateAlignedLoad(v32, p, llvm::Align(2)));
        };
        Value* x0 = load(p0);
        Value* x1 = b.CreateSelect(has_r1, load(p1), zero);
        Value* out = k.at(k.i32, dst, c);
        b.CreateAlignedStore(b.CreateShuffleVector(x0, x1, lo_idx), out, llvm::Align(4));
        b.CreateAlignedStore(b.CreateShuffleVector(x0, x1, hi_idx), k.at(k.i32, out, k.ci64(16)), llvm::Align(4));
      });
    });
  }

  // inv = 1 / sums (0 for padding lanes); y[k][c] = yt[c][k] * inv[k] for the query rows, a block
  // of 16 columns by 16 heads at a time transposed in registers.
  void finish() {
    for (int64_t g = 0; g < ng; ++g) {
      Value* r = b.CreateFDiv(k.splat(1.0f), vload(sum, k.ci64(16 * g)));
      vstore(b.CreateSelect(live_lanes(g), r, k.splat(0.0f)), inv, k.ci64(16 * g));
    }
    if (!dot) {  // Y is [heads][V] already: scaled by each head's 1 / sum
      k.loop(k.ci64(0), a.n_rows, 1, [&](Value* h) {
        Value* scale = b.CreateVectorSplat(k.vf, k.load_f32(inv, h));
        Value* row = b.CreateMul(h, k.ci64(V));
        k.vec_loop(k.ci64(V), [&](Value* i, Value* mask) {
          Value* idx = b.CreateAdd(row, i);
          k.store(b.CreateFMul(k.load(yt, idx, mask), scale), a.y, idx, mask);
        });
      });
      return;
    }
    auto block = [&](Value* c0, int64_t cnt) {
      k.loop(k.ci64(0), k.ci64(ng), 1, [&](Value* g) {
        Value* h0 = b.CreateMul(g, k.ci64(16));
        Value* scale = vload(inv, h0);
        std::vector<Value*> rows;
        for (int64_t l = 0; l < 16; ++l)
          rows.push_back(l < cnt ? b.CreateFMul(vload(yt, lane_at(b.CreateAdd(c0, k.ci64(l)), h0)), scale)
                                 : static_cast<Value*>(k.splat(0.0f)));
        const std::vector<Value*> t = transpose16(rows);
        for (int64_t r = 0; r < 16; ++r) {
          Value* head = b.CreateAdd(h0, k.ci64(r));
          k.store(t[static_cast<size_t>(r)], a.y, b.CreateAdd(b.CreateMul(head_row(head), k.ci64(V)), c0),
                  head_mask(head, first_lanes(cnt)));
        }
      });
    };
    const int64_t whole = V / 16 * 16;
    k.loop(k.ci64(0), k.ci64(whole), 16, [&](Value* c0) { block(c0, 16); });
    if (whole < V) block(k.ci64(whole), V - whole);
  }

 public:
  // Lines per value row step: a whole next tile over the fewest row steps a full tile takes.
  void set_prefetch_rate() {
    const int64_t row_bytes = d.kv_type == 0 ? 4 * W : d.kv_type == 3 ? W / 32 * 34 : 2 * W;
    const int64_t lines = (kTileRows * row_bytes + 63) / 64;
    const int64_t steps = dot ? kTileRows / 2 * ((ng + 3) / 4) * std::max<int64_t>(1, V / 16)
                              : kTileRows * value_steps_per_row();
    pf_per = std::max<int64_t>(1, (lines + steps - 1) / steps);
  }
};

}  // namespace

void emit_attn_decode(Kit& k, const GlueDesc& d, const Args& a) {
  Flash f(k, d, a);
  f.set_prefetch_rate();
  f.emit();
}

}  // namespace zenmoe::glue_ir
