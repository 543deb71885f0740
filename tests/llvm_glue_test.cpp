// LLVM ORC glue kernels (codegen/glue.h) against kernels/ref: every op over awkward sizes,
// row counts and unaligned pointers at every ISA level the host runs; the descriptor hash;
// the on-disk object cache; the target feature bound.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codegen/glue.h"
#include "codegen/isa.h"
#include "kernels/formats.h"
#include "kernels/ref/fp16.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

using isa::IsaLevel;

// One in-memory session (no disk cache) shared by the numeric tests.
GlueSession& session() {
  static GlueSession s("");
  return s;
}

GlueFn kernel(const GlueDesc& d) {
  Expected<GlueFn> fn = session().get(d);
  EXPECT_TRUE(fn.has_value()) << (fn ? "" : fn.error());
  return fn ? *fn : nullptr;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A float buffer whose data starts one float past a 64-byte boundary (never vector aligned).
struct Unaligned {
  explicit Unaligned(const std::vector<float>& v) : buf(v.size() + 17) {
    std::memcpy(data(), v.data(), v.size() * sizeof(float));
  }
  explicit Unaligned(size_t n) : buf(n + 17, -7.0f) {}
  float* data() {
    auto p = reinterpret_cast<uintptr_t>(buf.data());
    return reinterpret_cast<float*>((p + 63) / 64 * 64) + 1;
  }
  std::vector<float> get(size_t n) { return std::vector<float>(data(), data() + n); }
  std::vector<float> buf;
};

// Relative distance in units of float epsilon, with a floor for values near zero.
double ulps(float a, float b, float floor) {
  return std::fabs(double(a) - double(b)) / (std::max(std::fabs(double(b)), double(floor)) * 1.1920929e-7);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double max_ulps, float floor,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double u = ulps(got[i], want[i], floor);
    if (!(u <= worst)) {
      worst = u;
      at = i;
    }
  }
  EXPECT_LE(worst, max_ulps) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}

const std::vector<int> kSizes = {1, 7, 256, 512, 2048, 7168};
const std::vector<int> kBlockSizes = {256, 512, 2048, 7168};

// Every level the host runs from avx2 up, plus scalar (the SSE2 baseline) for the small sizes.
// The levels glue kernels are made for (above avx512bf16 they are the avx512bf16 ones).
std::vector<IsaLevel> levels() {
  std::vector<IsaLevel> out;
  for (IsaLevel l : isa::host_levels())
    if (l == isa::kernel_level(l)) out.push_back(l);
  return out;
}

int rows_for(int n) { return n >= 2048 ? 2 : 1 + n % 5; }

TEST(LlvmGlue, RmsNormMatchesReference) {
  for (IsaLevel l : levels())
    for (int n : kSizes)
      for (bool weight : {true, false}) {
        const int rows = rows_for(n) + 2;
        const float eps = 1e-6f;
        std::vector<float> x = random_floats(size_t(rows) * n, 10 + n, 3.0f);
        std::vector<float> w = random_floats(n, 20 + n);
        Unaligned ux(x), uw(w), uy(size_t(rows) * n);
        GlueCall c;
        c.x = ux.data();
        c.w = weight ? uw.data() : nullptr;
        c.y = uy.data();
        c.n_rows = rows;
        GlueFn fn = kernel(glue_rms_norm_desc(n, eps, weight, true, GlueQuant::kNone, l));
        ASSERT_NE(fn, nullptr);
        fn(&c);
        std::vector<float> want(x.size());
        for (int r = 0; r < rows; ++r) ref::rms_norm(&x[size_t(r) * n], weight ? w.data() : nullptr, &want[size_t(r) * n], n, eps);
        expect_close(uy.get(want.size()), want, 2.0, 1e-30f,
                     "rms_norm n=" + std::to_string(n) + " " + isa::level_name(l));
      }
}

TEST(LlvmGlue, RmsNormQ8KIsTheReferenceQuantiserOfItsRow) {
  for (IsaLevel l : levels())
    for (int n : kBlockSizes) {
      const int rows = rows_for(n);
      std::vector<float> x = random_floats(size_t(rows) * n, 30 + n, 2.0f);
      std::vector<float> w = random_floats(n, 40 + n);
      const size_t qrow = row_bytes(GgmlType::Q8_K, n);
      Unaligned ux(x), uw(w), uy(size_t(rows) * n);
      std::vector<uint8_t> q_both(rows * qrow + 1), q_only(rows * qrow + 1);
      GlueCall c;
      c.x = ux.data();
      c.w = uw.data();
      c.y = uy.data();
      c.q = q_both.data() + 1;  // blocks need no alignment
      c.n_rows = rows;
      kernel(glue_rms_norm_desc(n, 1e-5f, true, true, GlueQuant::kQ8K, l))(&c);
      c.y = nullptr;
      c.q = q_only.data() + 1;
      kernel(glue_rms_norm_desc(n, 1e-5f, true, false, GlueQuant::kQ8K, l))(&c);
      const std::vector<float> y = uy.get(x.size());
      std::vector<float> want(x.size());
      for (int r = 0; r < rows; ++r) ref::rms_norm(&x[size_t(r) * n], w.data(), &want[size_t(r) * n], n, 1e-5f);
      expect_close(y, want, 2.0, 1e-30f, "rms_norm+q8k f32");
      std::vector<uint8_t> q_ref(rows * qrow);
      for (int r = 0; r < rows; ++r) ref::quantize_row(GgmlType::Q8_K, &y[size_t(r) * n], &q_ref[r * qrow], n);
      EXPECT_EQ(0, std::memcmp(q_both.data() + 1, q_ref.data(), q_ref.size())) << "n=" << n << " " << isa::level_name(l);
      EXPECT_EQ(0, std::memcmp(q_only.data() + 1, q_ref.data(), q_ref.size())) << "n=" << n << " " << isa::level_name(l);
    }
}

void check_quantize(GgmlType t, GlueQuant gq, int n, IsaLevel l, std::vector<float> x) {
  const int rows = int(x.size()) / n;
  const size_t qrow = row_bytes(t, n);
  Unaligned ux(x);
  std::vector<uint8_t> got(rows * qrow + 3, 0xAB), want(rows * qrow);
  GlueCall c;
  c.x = ux.data();
  c.q = got.data() + 3;
  c.n_rows = rows;
  kernel(glue_quantize_desc(n, gq, l))(&c);
  for (int r = 0; r < rows; ++r) ref::quantize_row(t, &x[size_t(r) * n], &want[r * qrow], n);
  EXPECT_EQ(0, std::memcmp(got.data() + 3, want.data(), want.size()))
      << type_name(t) << " n=" << n << " " << isa::level_name(l);
}

TEST(LlvmGlue, QuantizersAreBitExact) {
  for (IsaLevel l : levels()) {
    for (int n : kBlockSizes) {
      const int rows = rows_for(n);
      check_quantize(GgmlType::Q8_K, GlueQuant::kQ8K, n, l, random_floats(size_t(rows) * n, 50 + n));
      check_quantize(GgmlType::Q8_0, GlueQuant::kQ80, n, l, random_floats(size_t(rows) * n, 60 + n, 0.01f));
    }
    check_quantize(GgmlType::Q8_0, GlueQuant::kQ80, 32, l, random_floats(32 * 5, 7));
    check_quantize(GgmlType::Q8_0, GlueQuant::kQ80, 96, l, random_floats(96 * 3, 8));
  }
}

TEST(LlvmGlue, QuantizersHandleZerosTiesAndExtremes) {
  for (IsaLevel l : levels()) {
    std::vector<float> x(256 * 4, 0.0f);  // block 0: all zero
    for (int j = 0; j < 256; ++j) x[256 + j] = float(j % 7) - 3.0f;  // block 1: +3 and -3 tie, -3 first
    for (int j = 0; j < 256; ++j) x[512 + j] = (j % 2 ? 1.0f : -1.0f) * 0.5f;  // block 2: -0.5 first
    for (int j = 0; j < 256; ++j) x[768 + j] = j == 200 ? 3e38f : 1e-30f * j;  // block 3: huge and tiny
    x[512 + 3] = 0.5f;
    check_quantize(GgmlType::Q8_K, GlueQuant::kQ8K, 256, l, x);
    check_quantize(GgmlType::Q8_0, GlueQuant::kQ80, 32, l, x);
    std::vector<float> halves(64);  // exact .5 products exercise the rounding rule
    for (int j = 0; j < 64; ++j) halves[j] = (j % 2 ? -1.0f : 1.0f) * (float(j) + 0.5f);
    halves[10] = 127.0f;
    halves[40] = -127.0f;
    check_quantize(GgmlType::Q8_0, GlueQuant::kQ80, 32, l, halves);
  }
}

TEST(LlvmGlue, SwigluMatchesReference) {
  for (IsaLevel l : levels())
    for (int n : kSizes) {
      const int rows = rows_for(n);
      std::vector<float> g = random_floats(size_t(rows) * n, 70 + n, 4.0f), u = random_floats(size_t(rows) * n, 80 + n);
      if (n == 7) g[3] = -120.0f, g[4] = 95.0f;  // exp overflow on both sides
      Unaligned ug(g), uu(u), uy(g.size());
      GlueCall c;
      c.x = ug.data();
      c.x2 = uu.data();
      c.y = uy.data();
      c.n_rows = rows;
      kernel(glue_swiglu_desc(n, true, GlueQuant::kNone, l))(&c);
      std::vector<float> want(g.size());
      ref::swiglu(g.data(), u.data(), want.data(), int64_t(g.size()));
      expect_close(uy.get(g.size()), want, 4.0, 1e-30f, "swiglu n=" + std::to_string(n));
      if (n % 256 != 0) continue;
      const size_t qrow = row_bytes(GgmlType::Q8_K, n);
      std::vector<uint8_t> q(rows * qrow), q_ref(rows * qrow);
      c.q = q.data();
      kernel(glue_swiglu_desc(n, true, GlueQuant::kQ8K, l))(&c);
      const std::vector<float> y = uy.get(g.size());
      for (int r = 0; r < rows; ++r) ref::quantize_row(GgmlType::Q8_K, &y[size_t(r) * n], &q_ref[r * qrow], n);
      EXPECT_EQ(0, std::memcmp(q.data(), q_ref.data(), q.size())) << "swiglu+q8k n=" << n;
    }
}

TEST(LlvmGlue, AddAndWeightedSumAreExact) {
  for (IsaLevel l : levels())
    for (int n : kSizes) {
      const int rows = rows_for(n);
      std::vector<float> a = random_floats(size_t(rows) * n, 90 + n), b = random_floats(size_t(rows) * n, 91 + n);
      Unaligned ua(a), ub(b);
      GlueCall c;
      c.x = ua.data();
      c.x2 = ub.data();
      c.y = ua.data();  // in place, as the residual add runs
      c.n_rows = rows;
      kernel(glue_add_desc(n, l))(&c);
      std::vector<float> want(a.size());
      ref::add(a.data(), b.data(), want.data(), int64_t(a.size()));
      EXPECT_EQ(ua.get(a.size()), want) << "add n=" << n;
      for (int terms : {1, 3, 8}) {
        const int64_t stride = n + 5;
        std::vector<float> xs = random_floats(size_t(rows) * terms * stride, 92 + n + terms);
        std::vector<float> ws = random_floats(size_t(rows) * terms, 93 + terms);
        Unaligned ux(xs), uy(size_t(rows) * n);
        GlueCall s;
        s.x = ux.data();
        s.w = ws.data();
        s.y = uy.data();
        s.n_rows = rows;
        s.stride = stride;
        kernel(glue_weighted_sum_desc(n, terms, l))(&s);
        std::vector<float> ref_y(size_t(rows) * n, 0.0f);
        for (int r = 0; r < rows; ++r)
          for (int t = 0; t < terms; ++t)
            ref::axpy(ws[r * terms + t], &xs[(size_t(r) * terms + t) * stride], &ref_y[size_t(r) * n], n);
        EXPECT_EQ(uy.get(ref_y.size()), ref_y) << "weighted sum n=" << n << " terms=" << terms;
      }
    }
}

TEST(LlvmGlue, RopeMatchesReference) {
  ref::YarnMeta yarn;
  yarn.yarn = true;
  yarn.factor = 32.0f;
  yarn.mscale_all_dim = 1.0f;
  const ref::RopeParams k2 = ref::deepseek2_rope_params(yarn, 64, 50000.0f, 4096);
  ref::RopeParams plain;
  plain.n_dims = 6;
  for (IsaLevel l : levels())
    for (const ref::RopeParams& p : {k2, plain})
      for (int64_t pos : {0, 1, 17, 4095, 131071}) {
        const int heads = 5;
        const int64_t stride = 192 + 1;
        std::vector<float> x = random_floats(size_t(heads) * stride, 100 + pos);
        std::vector<float> want = x;
        ref::rope_norm(p, pos, want.data(), heads, stride);
        Unaligned ux(x);
        GlueCall c;
        c.x = ux.data();
        c.y = ux.data();
        c.n_rows = heads;
        c.stride = stride;
        c.pos = pos;
        kernel(glue_rope_desc(p, l))(&c);
        expect_close(ux.get(x.size()), want, 8.0, 1e-3f,
                     "rope dims=" + std::to_string(p.n_dims) + " pos=" + std::to_string(pos));
      }
}

TEST(LlvmGlue, SoftmaxMatchesReference) {
  for (IsaLevel l : levels())
    for (int n : {1, 7, 33, 256, 1000, 4097})
      for (int64_t visible : {int64_t(1), int64_t(n + 1) / 2, int64_t(n)}) {
        const int rows = 3;
        const int64_t stride = n + 3;
        const float scale = 0.0721f;
        std::vector<float> x = random_floats(size_t(rows) * stride, 110 + n, 20.0f);
        Unaligned ux(x), uy(x.size());
        GlueCall c;
        c.x = ux.data();
        c.y = uy.data();
        c.n_rows = rows;
        c.stride = stride;
        c.n = n;
        c.n_visible = visible;
        kernel(glue_softmax_desc(scale, l))(&c);
        const std::vector<float> got = uy.get(x.size());
        for (int r = 0; r < rows; ++r) {
          std::vector<float> want(n);
          ref::softmax(&x[size_t(r) * stride], want.data(), n, scale, visible);
          std::vector<float> row(got.begin() + r * stride, got.begin() + r * stride + n);
          expect_close(row, want, 8.0, 1e-37f, "softmax n=" + std::to_string(n));
          for (int64_t i = visible; i < n; ++i) ASSERT_EQ(row[i], 0.0f);
          EXPECT_EQ(got[r * stride + n], -7.0f) << "wrote past the row";  // untouched gap
        }
      }
}

void check_router(const ref::RouterConfig& cfg, bool bias, IsaLevel l, int tokens, uint32_t seed) {
  std::vector<float> logits = random_floats(size_t(tokens) * cfg.n_expert, seed, 2.0f);
  std::vector<float> b = random_floats(cfg.n_expert, seed + 1, 0.3f);
  std::vector<int32_t> ids(size_t(tokens) * cfg.n_expert_used, -1);
  Unaligned uw(size_t(tokens) * cfg.n_expert_used), ul(logits);
  GlueCall c;
  c.x = ul.data();
  c.x2 = bias ? b.data() : nullptr;
  c.y = uw.data();
  c.ids = ids.data();
  c.n_rows = tokens;
  kernel(glue_router_desc(cfg, bias, l))(&c);
  const std::vector<float> w = uw.get(ids.size());
  for (int t = 0; t < tokens; ++t) {
    std::vector<int32_t> want_ids(cfg.n_expert_used);
    std::vector<float> want_w(cfg.n_expert_used);
    ASSERT_TRUE(ref::route(cfg, &logits[size_t(t) * cfg.n_expert], bias ? b.data() : nullptr, want_ids.data(),
                           want_w.data()).is_ok());
    const std::vector<int32_t> got_ids(ids.begin() + t * cfg.n_expert_used, ids.begin() + (t + 1) * cfg.n_expert_used);
    EXPECT_EQ(got_ids, want_ids) << "router E=" << cfg.n_expert << " k=" << cfg.n_expert_used << " token " << t;
    const std::vector<float> got_w(w.begin() + t * cfg.n_expert_used, w.begin() + (t + 1) * cfg.n_expert_used);
    expect_close(got_w, want_w, 8.0, 1e-30f, "router weights");
  }
}

TEST(LlvmGlue, RouterMatchesReference) {
  for (IsaLevel l : levels()) {
    ref::RouterConfig k2{384, 8, 1, 1, 2, true, 2.827f};  // Kimi-K2
    check_router(k2, true, l, 3, 1);
    check_router(k2, false, l, 1, 2);
    ref::RouterConfig v3{256, 8, 8, 4, 2, true, 2.5f};  // DeepSeek-V3 group-limited routing
    check_router(v3, true, l, 2, 3);
    ref::RouterConfig v2{64, 6, 1, 1, 1, false, 1.0f};  // softmax gating, no norm
    check_router(v2, false, l, 2, 4);
    ref::RouterConfig tiny{7, 7, 1, 1, 2, true, 0.0f};  // every expert, odd count
    check_router(tiny, true, l, 1, 5);
  }
}

TEST(LlvmGlue, RouterTiesKeepTheLowerIndex) {
  ref::RouterConfig cfg{40, 5, 1, 1, 2, true, 1.0f};
  std::vector<float> logits(40, 0.25f);
  logits[33] = 1.0f;
  std::vector<int32_t> ids(5);
  std::vector<float> w(5);
  GlueCall c;
  c.x = logits.data();
  c.y = w.data();
  c.ids = ids.data();
  c.n_rows = 1;
  kernel(glue_router_desc(cfg, false, isa::host_level()))(&c);
  EXPECT_EQ(ids, (std::vector<int32_t>{33, 0, 1, 2, 3}));
}

TEST(LlvmGlue, DescHashChangesWithEveryByteAndField) {
  const GlueDesc base = glue_rms_norm_desc(7168, 1e-6f, true, true, GlueQuant::kQ8K, IsaLevel::kAvx512);
  unsigned char bytes[sizeof(GlueDesc)];
  std::memcpy(bytes, &base, sizeof bytes);
  for (size_t i = 0; i < sizeof bytes; ++i) {
    GlueDesc d;
    bytes[i] ^= 1;
    std::memcpy(&d, bytes, sizeof bytes);
    bytes[i] ^= 1;
    EXPECT_NE(glue_hash(d), glue_hash(base)) << "byte " << i;
    EXPECT_NE(d, base);
  }
  std::vector<void (*)(GlueDesc&)> edits = {
      [](GlueDesc& d) { d.op = GlueOp::kSwiglu; },      [](GlueDesc& d) { d.quant = GlueQuant::kQ80; },
      [](GlueDesc& d) { d.write_f32 = 0; },             [](GlueDesc& d) { d.flags = 0; },
      [](GlueDesc& d) { d.isa = IsaLevel::kAvx2; },     [](GlueDesc& d) { d.cpu = GlueCpu::kZnver5; },
      [](GlueDesc& d) { d.gating = 1; },                [](GlueDesc& d) { d.kv_type = 1; },
      [](GlueDesc& d) { d.n = 256; },                   [](GlueDesc& d) { d.eps = 1e-5f; },
      [](GlueDesc& d) { d.scale = 2.0f; },              [](GlueDesc& d) { d.top_k = 8; },
      [](GlueDesc& d) { d.n_groups = 8; },              [](GlueDesc& d) { d.n_group_used = 4; },
      [](GlueDesc& d) { d.rope_dims = 64; },            [](GlueDesc& d) { d.freq_base = 5e4f; },
      [](GlueDesc& d) { d.freq_scale = 0.03125f; },     [](GlueDesc& d) { d.n_ctx_orig = 4096; },
      [](GlueDesc& d) { d.ext_factor = 1.0f; },         [](GlueDesc& d) { d.attn_factor = 0.7f; },
      [](GlueDesc& d) { d.beta_fast = 32.0f; },         [](GlueDesc& d) { d.beta_slow = 1.0f; },
      [](GlueDesc& d) { d.heads = 16; },                [](GlueDesc& d) { d.v_width = 512; },
      [](GlueDesc& d) { d.version = kGlueGeneratorVersion + 1; }, [](GlueDesc& d) { d.reserved1 = 1; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    GlueDesc d = base;
    edits[i](d);
    EXPECT_NE(glue_hash(d), glue_hash(base)) << "edit " << i;
  }
}

TEST(LlvmGlue, ValidationNamesTheProblem) {
  EXPECT_TRUE(validate(glue_rms_norm_desc(7168, 1e-6f, true, true, GlueQuant::kQ8K, IsaLevel::kAvx2)).is_ok());
  Status s = validate(glue_rms_norm_desc(100, 1e-6f, true, true, GlueQuant::kQ8K, IsaLevel::kAvx2));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("multiple of 256"), std::string::npos) << s.message();
  GlueDesc d = glue_add_desc(64, IsaLevel::kAvx2);
  d.eps = 1.0f;  // unused by add
  EXPECT_NE(validate(d).message().find("not at its default"), std::string::npos);
  ref::RouterConfig bad{10, 11, 1, 1, 2, true, 1.0f};
  EXPECT_NE(validate(glue_router_desc(bad, false, IsaLevel::kAvx2)).message().find("experts used"), std::string::npos);
  EXPECT_FALSE(session().get(glue_quantize_desc(48, GlueQuant::kQ80, IsaLevel::kAvx2)).has_value());
  // Decode attention: AVX-512 only, a value width within the row, a known cache type, whole
  // Q8_0 blocks, a finite scale.
  EXPECT_TRUE(validate(glue_attn_decode_desc(16, 576, 512, 3, 0.07f, IsaLevel::kAvx512)).is_ok());
  const std::pair<GlueDesc, const char*> bad_attn[] = {
      {glue_attn_decode_desc(16, 576, 512, 1, 0.07f, IsaLevel::kAvx2), "needs AVX-512"},
      {glue_attn_decode_desc(16, 576, 600, 1, 0.07f, IsaLevel::kAvx512), "value width"},
      {glue_attn_decode_desc(0, 576, 512, 1, 0.07f, IsaLevel::kAvx512), "heads"},
      {glue_attn_decode_desc(16, 576, 512, 4, 0.07f, IsaLevel::kAvx512), "cache type"},
      {glue_attn_decode_desc(16, 72, 64, 3, 0.07f, IsaLevel::kAvx512), "multiple of 32"},
      {glue_attn_decode_desc(16, 576, 512, 1, std::numeric_limits<float>::infinity(), IsaLevel::kAvx512), "finite"},
  };
  for (const auto& [desc, needle] : bad_attn) {
    const Status st = validate(desc);
    ASSERT_FALSE(st.is_ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_FALSE(session().get(desc).has_value()) << needle;
  }
  EXPECT_FALSE(parse_glue_cpu("znver3").has_value());
  EXPECT_EQ(*parse_glue_cpu("znver5"), GlueCpu::kZnver5);
  if (!isa::host_supports(IsaLevel::kAvx512Bf16)) {
    Expected<GlueFn> fn = session().get(glue_add_desc(64, IsaLevel::kAvx512Bf16));
    ASSERT_FALSE(fn.has_value());
    EXPECT_NE(fn.error().find("host runs at most"), std::string::npos);
  }
}

// znver4 / znver5 scheduling with the host's instruction set only: the feature string turns
// off everything the host lacks, and the kernels run here.
TEST(LlvmGlue, ZenTargetsStayWithinHostFeatures) {
  const isa::CpuFeatures& h = isa::host_features();
  for (GlueCpu cpu : {GlueCpu::kZnver4, GlueCpu::kZnver5}) {
    const GlueDesc d = glue_rms_norm_desc(7168, 1e-6f, true, true, GlueQuant::kQ8K, isa::host_level(), cpu);
    Expected<std::string> t = session().target_description(d);
    ASSERT_TRUE(t.has_value()) << t.error();
    EXPECT_EQ(t->rfind(glue_cpu_name(cpu), 0), 0u) << *t;
    const std::string f = "," + t->substr(t->find(' ') + 1) + ",";
    EXPECT_NE(f.find(h.avx512bf16 ? ",+avx512bf16," : ",-avx512bf16,"), std::string::npos) << f;
    if (isa::host_supports(IsaLevel::kAvx512)) {
      EXPECT_NE(f.find(",+avx512f,"), std::string::npos);
    }
    if (!h.gfni) {
      EXPECT_EQ(f.find(",+gfni,"), std::string::npos);
    }
    std::vector<float> x = random_floats(7168, 5), w = random_floats(7168, 6), y(7168), want(7168);
    std::vector<uint8_t> q(row_bytes(GgmlType::Q8_K, 7168)), q_ref(q.size());
    GlueCall c;
    c.x = x.data();
    c.w = w.data();
    c.y = y.data();
    c.q = q.data();
    c.n_rows = 1;
    kernel(d)(&c);
    ref::rms_norm(x.data(), w.data(), want.data(), 7168, 1e-6f);
    expect_close(y, want, 2.0, 1e-30f, glue_cpu_name(cpu));
    ref::quantize_row(GgmlType::Q8_K, y.data(), q_ref.data(), 7168);
    EXPECT_EQ(q, q_ref);
  }
  const GlueDesc avx2 = glue_add_desc(64, IsaLevel::kAvx2, GlueCpu::kZnver5);
  Expected<std::string> t = session().target_description(avx2);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(("," + t->substr(t->find(' ') + 1) + ",").find(",+avx512f,"), std::string::npos);
}

TEST(LlvmGlue, DumpsVectorIr) {
  const GlueDesc d = glue_swiglu_desc(2048, false, GlueQuant::kQ8K, isa::host_level());
  Expected<std::string> ir = session().ir_text(d, true);
  ASSERT_TRUE(ir.has_value()) << ir.error();
  EXPECT_NE(ir->find("define void @zenmoe_glue_"), std::string::npos);
  const char* vec = isa::host_supports(IsaLevel::kAvx512) ? "<16 x float>" : "<8 x float>";
  EXPECT_NE(ir->find(vec), std::string::npos);
  EXPECT_NE(glue_name(d).find("glue_swiglu_q8k_n2048__"), std::string::npos);
}

// Many threads asking for the same new descriptor get one generation and one function.
TEST(LlvmGlue, ConcurrentRequestsGenerateOnce) {
  GlueSession s("");
  const GlueDesc d = glue_add_desc(4242, isa::host_level());
  std::vector<GlueFn> got(4, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Expected<GlueFn> fn = s.get(d);
      if (fn) got[t] = *fn;
    });
  for (auto& th : threads) th.join();
  for (GlueFn fn : got) EXPECT_EQ(fn, got[0]);
  ASSERT_NE(got[0], nullptr);
  EXPECT_EQ(s.stats().generated, 1);
  EXPECT_EQ(s.stats().loaded, 0);
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/zenmoe_glue_cacheXXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs the add kernel of `s` once and checks it adds.
void expect_adds(GlueSession& s, const GlueDesc& d) {
  Expected<GlueFn> fn = s.get(d);
  ASSERT_TRUE(fn.has_value()) << fn.error();
  std::vector<float> a = random_floats(d.n, 1), b = random_floats(d.n, 2), y(d.n), want(d.n);
  GlueCall c;
  c.x = a.data();
  c.x2 = b.data();
  c.y = y.data();
  c.n_rows = 1;
  (*fn)(&c);
  ref::add(a.data(), b.data(), want.data(), d.n);
  EXPECT_EQ(y, want);
}

TEST(LlvmGlue, DiskCacheSkipsGenerationAndRejectsCorruptFiles) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const GlueDesc d = glue_add_desc(1000, isa::host_level());
  std::string file;
  {
    GlueSession first(dir.path());
    expect_adds(first, d);
    expect_adds(first, d);
    EXPECT_EQ(first.stats().generated, 1);
    EXPECT_EQ(first.stats().loaded, 0);
    EXPECT_EQ(first.stats().reused, 1);
    Expected<std::string> name = first.cache_file_name(d);
    ASSERT_TRUE(name.has_value());
    file = dir.path() + "/" + *name;
    EXPECT_NE(name->find("llvm19"), std::string::npos);
  }
  ASSERT_TRUE(std::filesystem::exists(file));
  {
    GlueSession second(dir.path());
    expect_adds(second, d);
    EXPECT_EQ(second.stats().generated, 0);
    EXPECT_EQ(second.stats().loaded, 1);
  }
  // Flip one byte of the object: the checksum rejects it and the kernel is regenerated.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5A);
    f.seekp(-5, std::ios::end);
    f.write(&c, 1);
  }
  {
    GlueSession third(dir.path());
    expect_adds(third, d);
    EXPECT_EQ(third.stats().generated, 1);
    EXPECT_EQ(third.stats().cache_rejected, 1);
  }
  std::filesystem::resize_file(file, 40);  // truncated
  {
    GlueSession fourth(dir.path());
    expect_adds(fourth, d);
    EXPECT_EQ(fourth.stats().generated, 1);
  }
  {
    GlueSession fifth(dir.path());  // the regenerated file is whole again
    expect_adds(fifth, d);
    EXPECT_EQ(fifth.stats().loaded, 1);
    EXPECT_EQ(fifth.stats().generated, 0);
  }
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary left behind";
}

TEST(LlvmGlue, DumpDirReceivesGeneratedIr) {
  TempDir dir;
  GlueSession s("");
  s.set_dump_dir(dir.path());
  const GlueDesc d = glue_softmax_desc(0.5f, isa::host_level());
  ASSERT_TRUE(s.get(d).has_value());
  std::ifstream in(dir.path() + "/" + glue_name(d) + ".ll");
  ASSERT_TRUE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("define void @zenmoe_glue_"), std::string::npos);
}

TEST(LlvmGlue, DefaultCacheDirFollowsTheEnvironment) {
  const char* old = std::getenv("ZENMOE_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("ZENMOE_CACHE_DIR", "/tmp/zenmoe-x", 1);
  EXPECT_EQ(glue_default_cache_dir(), "/tmp/zenmoe-x");
  ::unsetenv("ZENMOE_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) {
    EXPECT_EQ(glue_default_cache_dir(), std::string(xdg) + "/zenmoe");
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    EXPECT_EQ(glue_default_cache_dir(), std::string(home) + "/.cache/zenmoe");
  }
  if (old) ::setenv("ZENMOE_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace zenmoe
