// Reference executor on small in-memory models: prefill and decode agree bit for bit, the
// legacy kv_b form computes the same function as the absorbed MLA form, the context limit and
// bad tokens are clear errors, reset forgets the sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "kernels/ref/ops.h"
#include "runtime/ref_executor.h"
#include "runtime/ref_executor_numerics.h"
#include "tests/ir_test_model.h"

namespace zenmoe {
namespace {

using testing::TinySpec;

struct Built {
  testing::TinyWeights weights;
  std::unique_ptr<Executor> ex;
};

Built make(const TinySpec& s, uint32_t seed, int n_ctx = 64) {
  Built b;
  const ir::ModelInfo info = testing::tiny_info(s);
  b.weights = testing::tiny_weights(info, seed);
  auto g = ir::build_graph(info);
  EXPECT_TRUE(g.has_value()) << g.error();
  if (!g) return b;
  ExecutorOptions o;
  o.n_ctx = n_ctx;
  auto ex = make_reference_executor(std::move(*g), b.weights.table(), o);
  EXPECT_TRUE(ex.has_value()) << ex.error();
  if (ex) b.ex = std::move(*ex);
  return b;
}

std::vector<float> prefill(Executor& ex, const std::vector<int32_t>& toks) {
  std::vector<float> out(toks.size() * static_cast<size_t>(ex.n_vocab()));
  ex.reset();
  Status s = ex.eval(toks, out.data(), true);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out;
}

std::vector<float> decode(Executor& ex, const std::vector<int32_t>& toks) {
  const size_t V = static_cast<size_t>(ex.n_vocab());
  std::vector<float> out(toks.size() * V);
  ex.reset();
  for (size_t t = 0; t < toks.size(); ++t) {
    Status s = ex.eval({&toks[t], 1}, out.data() + t * V, false);
    EXPECT_TRUE(s.is_ok()) << s.message();
  }
  return out;
}

const std::vector<int32_t> kTokens = {3, 17, 17, 42, 0, 49, 8, 23, 11, 5, 30, 2};

TEST(RefExecutor, PrefillEqualsDecodeBitForBit) {
  for (GgmlType wt : {GgmlType::F32, GgmlType::F16}) {
    TinySpec s;
    s.wtype = wt;
    s.kb_type = wt;
    Built b = make(s, 7);
    ASSERT_TRUE(b.ex);
    EXPECT_EQ(b.ex->n_vocab(), 50);
    const auto p = prefill(*b.ex, kTokens);
    const auto d = decode(*b.ex, kTokens);
    ASSERT_EQ(p.size(), d.size());
    for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], d[i]) << type_name(wt) << " at " << i;
    // Logits are finite and not flat.
    float lo = p[0], hi = p[0];
    for (float v : p) {
      ASSERT_TRUE(std::isfinite(v));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GT(hi - lo, 1.0f);
  }
}

TEST(RefExecutor, QuantisedWeightsRun) {
  TinySpec s;
  s.D = 256, s.q_lora = 256, s.kv_lora = 256, s.nope = 32, s.dv = 128, s.Fe = 256, s.F = 256;
  s.vocab = 64;
  s.wtype = GgmlType::Q4_K;
  s.kb_type = GgmlType::Q5_0;
  Built b = make(s, 3);
  ASSERT_TRUE(b.ex);
  const std::vector<int32_t> toks = {1, 2, 3, 60, 5};
  const auto p = prefill(*b.ex, toks);
  const auto d = decode(*b.ex, toks);
  for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], d[i]) << i;
}

// Builds attn_kv_b {Rkv, H*(dn+dv)} from attn_k_b {dn, Rkv, H} and attn_v_b {Rkv, dv, H}.
std::vector<float> kv_b_from_split(const std::vector<float>& k_b, const std::vector<float>& v_b,
                                   const TinySpec& s) {
  const int64_t R = s.kv_lora, dn = s.nope, dv = s.dv, W = dn + dv;
  std::vector<float> kv(static_cast<size_t>(R * s.H * W));
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t d = 0; d < dn; ++d)
        kv[static_cast<size_t>((h * W + d) * R + r)] = k_b[static_cast<size_t>((h * R + r) * dn + d)];
      for (int64_t e = 0; e < dv; ++e)
        kv[static_cast<size_t>((h * W + dn + e) * R + r)] = v_b[static_cast<size_t>((h * dv + e) * R + r)];
    }
  return kv;
}

TEST(RefExecutor, LegacyKvBFormMatchesAbsorbedForm) {
  TinySpec s;
  const ir::ModelInfo info = testing::tiny_info(s);
  const testing::TinyWeights w = testing::tiny_weights(info, 11);
  TinySpec ls = s;
  ls.mla = false;
  const ir::ModelInfo linfo = testing::tiny_info(ls);
  testing::TinyWeights lw;
  for (const auto& t : linfo.tensors) {
    lw.names.push_back(t.name);
    std::vector<float> v;
    if (t.name.find("attn_kv_b") != std::string::npos) {
      const std::string pre = t.name.substr(0, t.name.find("attn_kv_b"));
      auto idx = [&](const std::string& n) {
        for (size_t i = 0; i < w.names.size(); ++i)
          if (w.names[i] == n) return i;
        return size_t{0};
      };
      v = kv_b_from_split(w.values[idx(pre + "attn_k_b.weight")], w.values[idx(pre + "attn_v_b.weight")], s);
    } else {
      for (size_t i = 0; i < w.names.size(); ++i)
        if (w.names[i] == t.name) v = w.values[i];
    }
    lw.bytes.push_back(testing::encode(t.type, v, t.dims[0]));
    lw.values.push_back(std::move(v));
  }
  ExecutorOptions o;
  auto ga = ir::build_graph(info);
  auto gl = ir::build_graph(linfo);
  ASSERT_TRUE(ga.has_value() && gl.has_value());
  auto ea = make_reference_executor(std::move(*ga), w.table(), o);
  auto el = make_reference_executor(std::move(*gl), lw.table(), o);
  ASSERT_TRUE(ea.has_value()) << ea.error();
  ASSERT_TRUE(el.has_value()) << el.error();
  const auto a = prefill(**ea, kTokens);
  const auto l = decode(**el, kTokens);
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - l[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
  }
  EXPECT_GT(max_abs, 1.0);
  EXPECT_LT(max_diff, 1e-4 * max_abs) << "max diff " << max_diff;
}

TEST(RefExecutor, ContextLimitAndBadTokens) {
  Built b = make(TinySpec{}, 5, /*n_ctx=*/4);
  ASSERT_TRUE(b.ex);
  EXPECT_EQ(b.ex->n_ctx(), 4);
  std::vector<float> out(5 * 50);
  const std::vector<int32_t> three = {1, 2, 3};
  ASSERT_TRUE(b.ex->eval(three, out.data(), true).is_ok());
  EXPECT_EQ(b.ex->n_past(), 3);
  const std::vector<int32_t> two = {4, 5};
  Status s = b.ex->eval(two, out.data(), true);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("context limit exceeded"), std::string::npos) << s.message();
  EXPECT_EQ(b.ex->n_past(), 3);  // a refused batch changes nothing
  ASSERT_TRUE(b.ex->eval({&two[0], 1}, out.data(), false).is_ok());
  EXPECT_EQ(b.ex->n_past(), 4);
  const std::vector<int32_t> bad = {50};
  b.ex->reset();
  s = b.ex->eval(bad, out.data(), true);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("token id 50"), std::string::npos) << s.message();
  s = b.ex->eval({}, out.data(), true);
  EXPECT_FALSE(s.is_ok());
}

TEST(RefExecutor, ResetAndLastRowOnly) {
  Built b = make(TinySpec{}, 9);
  ASSERT_TRUE(b.ex);
  const auto all = prefill(*b.ex, kTokens);
  std::vector<float> last(50);
  b.ex->reset();
  ASSERT_TRUE(b.ex->eval(kTokens, last.data(), false).is_ok());
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(last[i], all[(kTokens.size() - 1) * 50 + i]);
  EXPECT_EQ(prefill(*b.ex, kTokens), all);
}

TEST(RefExecutor, RejectsMissingOrMisSizedWeights) {
  const ir::ModelInfo info = testing::tiny_info(TinySpec{});
  testing::TinyWeights w = testing::tiny_weights(info, 1);
  auto g = ir::build_graph(info);
  ASSERT_TRUE(g.has_value());
  WeightTable t = w.table();
  t["blk.0.attn_q_a.weight"].nbytes -= 4;
  auto ex = make_reference_executor(*g, t, ExecutorOptions{});
  ASSERT_FALSE(ex.has_value());
  EXPECT_NE(ex.error().find("'blk.0.attn_q_a.weight' has 2044 bytes, expected 2048"), std::string::npos)
      << ex.error();
  t = w.table();
  t.erase("output.weight");
  ex = make_reference_executor(*g, t, ExecutorOptions{});
  ASSERT_FALSE(ex.has_value());
  EXPECT_NE(ex.error().find("no data for weight 'output.weight'"), std::string::npos) << ex.error();
  ExecutorOptions zero;
  zero.n_ctx = 0;
  ex = make_reference_executor(*g, w.table(), zero);
  EXPECT_FALSE(ex.has_value());
}

}  // namespace
}  // namespace zenmoe

namespace zenmoe {
namespace {

// Profile keys: the op kind, or op:name with the layer prefix "blk.N." dropped (only that).
TEST(RefExecutor, ProfileKeys) {
  ir::Graph g;
  for (const char* name : {"blk.12.q_lat", "blk.x.q", "output_norm", "blk.7", "blk..q", "blk.3.ffn.up"})
    g.values.push_back(ir::Value{.name = name});
  auto node = [](ir::OpKind op, int out) { return ir::Node{.op = op, .inputs = {}, .outputs = {out}, .attrs = {}}; };
  const ir::Node q_lat = node(ir::OpKind::MatMul, 0);
  EXPECT_EQ(profile_key(g, q_lat, ProfileBy::kOpKind), "matmul");
  EXPECT_EQ(profile_key(g, q_lat, ProfileBy::kNode), "matmul:q_lat");
  EXPECT_EQ(profile_key(g, node(ir::OpKind::Rope, 1), ProfileBy::kNode), "rope:blk.x.q");
  EXPECT_EQ(profile_key(g, node(ir::OpKind::RmsNorm, 2), ProfileBy::kNode), "rms_norm:output_norm");
  EXPECT_EQ(profile_key(g, node(ir::OpKind::Add, 3), ProfileBy::kNode), "add:blk.7");
  EXPECT_EQ(profile_key(g, node(ir::OpKind::Add, 4), ProfileBy::kNode), "add:blk..q");
  EXPECT_EQ(profile_key(g, node(ir::OpKind::MatMul, 5), ProfileBy::kNode), "matmul:ffn.up");
  ir::Node none{.op = ir::OpKind::Add, .inputs = {}, .outputs = {}, .attrs = {}};
  EXPECT_EQ(profile_key(g, none, ProfileBy::kNode), "add");
}

// Profiling by node sums the same node of every layer under one key.
TEST(RefExecutor, ProfileByNode) {
  const TinySpec s;
  const ir::ModelInfo info = testing::tiny_info(s);
  testing::TinyWeights weights = testing::tiny_weights(info, 5);
  auto g = ir::build_graph(info);
  ASSERT_TRUE(g.has_value()) << g.error();
  ExecutorOptions o;
  o.n_ctx = 16;
  o.profile = true;
  o.profile_by = ProfileBy::kNode;
  auto ex = make_reference_executor(*g, weights.table(), o);
  ASSERT_TRUE(ex.has_value()) << ex.error();
  std::vector<float> logits(static_cast<size_t>((*ex)->n_vocab()));
  ASSERT_TRUE((*ex)->eval(std::vector<int32_t>{1, 2, 3}, logits.data(), false));
  const auto p = (*ex)->profile();
  ASSERT_FALSE(p.empty());
  std::set<std::string> keys;
  for (const ir::Node& n : g->nodes) keys.insert(profile_key(*g, n, ProfileBy::kNode));
  std::set<std::string> seen;
  for (const auto& [key, seconds] : p) {
    EXPECT_TRUE(keys.count(key)) << key;
    EXPECT_EQ(key.find("blk."), std::string::npos) << key;
    EXPECT_NE(key.find(':'), std::string::npos) << key;
    EXPECT_GT(seconds, 0.0) << key;
    EXPECT_TRUE(seen.insert(key).second) << "reported twice: " << key;
  }
  EXPECT_LT(keys.size(), g->nodes.size());  // layers share keys
}

TEST(RefExecutorNumerics, GgmlExpIsCloseToExp) {
  for (float x = -100.0f; x < 88.0f; x += 0.37f) {
    const float a = refexec::ggml_expf(x), e = std::exp(x);
    EXPECT_NEAR(a, e, 4e-7f * e + 1e-38f) << x;
  }
  EXPECT_EQ(refexec::ggml_expf(0.0f), 1.0f);
  EXPECT_EQ(refexec::ggml_expf(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isinf(refexec::ggml_expf(1000.0f)));
}

TEST(RefExecutorNumerics, SoftmaxAndSwigluAgreeWithReference) {
  std::vector<float> x(37), a(37), b(37), u(37), ya(37), yb(37);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(static_cast<float>(i) * 1.7f) * 6.0f;
    u[i] = std::cos(static_cast<float>(i));
  }
  refexec::softmax_ggml(x.data(), a.data(), 37, 0.3f);
  ref::softmax(x.data(), b.data(), 37, 0.3f, 37);
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-6f);
    sum += a[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  refexec::swiglu_ggml(x.data(), u.data(), ya.data(), 37);
  ref::swiglu(x.data(), u.data(), yb.data(), 37);
  for (size_t i = 0; i < ya.size(); ++i) EXPECT_NEAR(ya[i], yb[i], 1e-6f * std::fabs(yb[i]) + 1e-7f);
}

TEST(RefExecutorNumerics, X86OrderDotsMatchReferenceDots) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 1024;
  std::vector<float> w(n), x(n);
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q4_0, GgmlType::Q8_0}) {
    const auto wq = testing::encode(t, w, n);
    const GgmlType at = format_traits(t)->vec_dot_type;
    const auto xq = testing::encode(at, x, n);
    const float ref_dot = ref::vec_dot_row(t, wq.data(), xq.data(), n);
    const float x86 = t == GgmlType::Q4_K ? refexec::dot_q4_K_x86(wq.data(), xq.data(), n)
                                          : refexec::dot_q8_0_family_x86(t, wq.data(), xq.data(), n);
    EXPECT_NEAR(x86, ref_dot, 2e-5f * std::fabs(ref_dot) + 1e-4f) << type_name(t);
    EXPECT_NE(x86, 0.0f);
  }
}

}  // namespace
}  // namespace zenmoe

namespace zenmoe {
namespace {

TEST(RefExecutorNumerics, F16DotIsBitIdenticalToReference) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> w(512), x(512);
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  const auto wh = testing::encode(GgmlType::F16, w, 512), xh = testing::encode(GgmlType::F16, x, 512);
  EXPECT_EQ(refexec::dot_f16_fast(wh.data(), xh.data(), 512), ref::vec_dot_f16(wh.data(), xh.data(), 512));
}

}  // namespace
}  // namespace zenmoe
