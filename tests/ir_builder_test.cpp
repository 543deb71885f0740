// deepseek2 graph builder and verifier: hyper-parameters as llama.cpp derives them, the graph
// shape of each form (absorbed MLA, legacy kv_b, fused gate/up, tied head), clear errors.
#include <gtest/gtest.h>

#include <string>

#include "ir/builder.h"
#include "ir/builder_deepseek2.h"
#include "ir/verifier.h"
#include "kernels/ref/ops.h"
#include "tests/ir_test_model.h"

namespace zenmoe {
namespace {

using testing::TinySpec;
using testing::tiny_info;

int count_ops(const ir::Graph& g, ir::OpKind op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op == op;
  return n;
}

const ir::Node* producer(const ir::Graph& g, const std::string& name) {
  const int id = g.find(name);
  for (const auto& n : g.nodes)
    for (int o : n.outputs)
      if (o == id) return &n;
  return nullptr;
}

std::string build_error(const ir::ModelInfo& info) {
  auto g = ir::build_graph(info);
  return g ? std::string("(no error)") : g.error();
}

TEST(IrBuilder, KimiScalesMatchSpecAndReferenceOps) {
  // Kimi-K2: factor 32, mscale_all_dim 1, head_k 192 (spec §4.3, §4.5).
  TinySpec s;
  s.nope = 128;
  s.rope = 64;
  auto p = ir::deepseek2_params(tiny_info(s));
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_NEAR(p->kq_scale, 0.130860800, 1e-7);
  EXPECT_NEAR(p->attn_factor, 0.742625585, 1e-7);
  EXPECT_TRUE(p->is_mla);
  EXPECT_EQ(p->head_k, 192);
  EXPECT_EQ(p->beta_fast, 32.0f);  // GGUF beta keys are ignored, as llama.cpp does
  ref::YarnMeta m;
  m.yarn = true;
  m.factor = 32.0f;
  m.mscale_all_dim = 1.0f;
  EXPECT_EQ(p->kq_scale, ref::deepseek2_kq_scale(m, 192));
  EXPECT_EQ(p->attn_factor, ref::yarn_attn_factor(m));
}

TEST(IrBuilder, DeepSeekV3Scale) {
  TinySpec s;
  s.nope = 128;
  s.rope = 64;
  ir::ModelInfo info = tiny_info(s);
  info.set_float("deepseek2.rope.scaling.factor", 40.0);
  auto p = ir::deepseek2_params(info);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_NEAR(p->kq_scale, 0.135233779, 1e-7);
  EXPECT_NEAR(p->attn_factor, 0.730519984, 1e-7);
}

TEST(IrBuilder, DefaultsWhenOptionalKeysAreAbsent) {
  ir::ModelInfo info = tiny_info(TinySpec{});
  for (const char* k : {"expert_gating_func", "expert_group_count", "expert_group_used_count",
                        "expert_weights_scale", "expert_weights_norm", "rope.freq_base",
                        "rope.scaling.type", "rope.scaling.factor", "vocab_size"})
    info.meta.erase(std::string("deepseek2.") + k);
  auto p = ir::deepseek2_params(info);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(p->gating_func, 1);  // softmax when missing
  EXPECT_EQ(p->n_expert_groups, 1);
  EXPECT_EQ(p->expert_weights_scale, 0.0f);
  EXPECT_FALSE(p->expert_weights_norm);
  EXPECT_EQ(p->freq_base, 10000.0f);
  EXPECT_FALSE(p->yarn);
  EXPECT_EQ(p->ext_factor, 0.0f);
  EXPECT_EQ(p->freq_scale, 1.0f);
  EXPECT_NEAR(p->kq_scale, 1.0f / std::sqrt(24.0f), 1e-7);
  EXPECT_EQ(p->n_vocab, 50);  // from token_embd
}

TEST(IrBuilder, AbsorbedGraphShape) {
  TinySpec s;
  auto g = ir::build_graph(tiny_info(s));
  ASSERT_TRUE(g.has_value()) << g.error();
  EXPECT_EQ(count_ops(*g, ir::OpKind::MlaAttention), 2);
  EXPECT_EQ(count_ops(*g, ir::OpKind::MhaAttention), 0);
  EXPECT_EQ(count_ops(*g, ir::OpKind::Router), 1);
  EXPECT_EQ(count_ops(*g, ir::OpKind::MatMulId), 3);
  EXPECT_EQ(count_ops(*g, ir::OpKind::Rope), 4);
  // F32 weights take F32 activations: no quantize node.
  EXPECT_EQ(count_ops(*g, ir::OpKind::Quantize), 0);
  const ir::Node* q_lat = producer(*g, "blk.0.q_lat");
  ASSERT_NE(q_lat, nullptr);
  EXPECT_EQ(g->values[static_cast<size_t>(q_lat->inputs[0])].name, "blk.0.attn_k_b.weight");
  const int cache = g->find("blk.1.kv_cache");
  ASSERT_GE(cache, 0);
  EXPECT_EQ(g->values[static_cast<size_t>(cache)].shape, (std::vector<int64_t>{40, ir::kDimContext}));
}

TEST(IrBuilder, ActivationFormatsFollowTheWeightType) {
  TinySpec s;
  s.D = 256, s.q_lora = 256, s.kv_lora = 256, s.nope = 32, s.dv = 128, s.H = 2, s.Fe = 256;
  s.F = 256, s.vocab = 64;
  s.wtype = GgmlType::Q4_K;
  s.kb_type = GgmlType::Q5_0;  // rows of 32: the Q4_K_S fallback
  auto g = ir::build_graph(tiny_info(s));
  ASSERT_TRUE(g.has_value()) << g.error();
  const int q8k = g->find("blk.0.attn_in.q8_K");
  ASSERT_GE(q8k, 0);
  EXPECT_EQ(g->values[static_cast<size_t>(q8k)].type, GgmlType::Q8_K);
  const int q80 = g->find("blk.0.q_nope.q8_0");
  ASSERT_GE(q80, 0);
  EXPECT_EQ(g->values[static_cast<size_t>(q80)].type, GgmlType::Q8_0);
  // The router stays F32 x F32 and the norm output is quantised once for gate/up/shexp.
  const ir::Node* logits = producer(*g, "blk.1.router_logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(g->values[static_cast<size_t>(logits->inputs[1])].name, "blk.1.ffn_in");
  int quantize_ffn_in = 0;
  for (const auto& v : g->values) quantize_ffn_in += v.name.rfind("blk.1.ffn_in.", 0) == 0;
  EXPECT_EQ(quantize_ffn_in, 1);
}

TEST(IrBuilder, LegacyFusedTiedGroupedSoftmax) {
  TinySpec s;
  s.mla = false, s.tied_output = true, s.fused_gate_up = true, s.exp_probs_b = false;
  s.E = 8, s.used = 2, s.groups = 4, s.group_used = 2, s.gating = 1;
  auto g = ir::build_graph(tiny_info(s));
  ASSERT_TRUE(g.has_value()) << g.error();
  EXPECT_EQ(count_ops(*g, ir::OpKind::MhaAttention), 2);
  EXPECT_EQ(count_ops(*g, ir::OpKind::MlaAttention), 0);
  EXPECT_EQ(count_ops(*g, ir::OpKind::MatMulId), 2);  // fused gate/up + down
  const ir::Node* r = producer(*g, "blk.1.expert_ids");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->attr_str("gating"), "softmax");
  EXPECT_EQ(r->attr_int("n_groups"), 4);
  const ir::Node* head = producer(*g, "logits");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(g->values[static_cast<size_t>(head->inputs[0])].name, "token_embd.weight");
}

TEST(IrBuilder, ClearErrors) {
  ir::ModelInfo info = tiny_info(TinySpec{});
  info.set_string("general.architecture", "llama");
  EXPECT_NE(build_error(info).find("architecture 'llama' is not supported"), std::string::npos);

  info = tiny_info(TinySpec{});
  for (size_t i = 0; i < info.tensors.size(); ++i)
    if (info.tensors[i].name == "blk.0.attn_q_a.weight") info.tensors.erase(info.tensors.begin() + static_cast<long>(i));
  EXPECT_NE(build_error(info).find("tensor 'blk.0.attn_q_a.weight' is missing"), std::string::npos)
      << build_error(info);

  info = tiny_info(TinySpec{});
  for (auto& t : info.tensors)
    if (t.name == "blk.1.ffn_down_exps.weight") t.dims = {16, 32, 3};
  EXPECT_NE(build_error(info).find("'blk.1.ffn_down_exps.weight' has shape {16, 32, 3}, expected {16, 32, 4}"),
            std::string::npos) << build_error(info);

  info = tiny_info(TinySpec{});
  info.add_tensor("blk.0.attn_kv_b.weight", GgmlType::F32, {32, 64});
  EXPECT_NE(build_error(info).find("unexpected tensor 'blk.0.attn_kv_b.weight'"), std::string::npos);

  info = tiny_info(TinySpec{});
  info.meta.erase("deepseek2.attention.kv_lora_rank");
  EXPECT_NE(build_error(info).find("'deepseek2.attention.kv_lora_rank' is missing"), std::string::npos);

  info = tiny_info(TinySpec{});
  info.set_int("deepseek2.expert_group_count", 3);
  EXPECT_NE(build_error(info).find("expert_count % expert_group_count"), std::string::npos);

  info = tiny_info(TinySpec{});
  info.set_string("deepseek2.attention.head_count", "8");
  EXPECT_NE(build_error(info).find("is a string, expected an integer"), std::string::npos);

  TinySpec bad;
  bad.wtype = GgmlType::Q2_K;
  EXPECT_NE(build_error(tiny_info(bad)).find("cannot multiply"), std::string::npos) << build_error(tiny_info(bad));
}

TEST(IrVerifier, CatchesBrokenGraphs) {
  auto built = ir::build_graph(tiny_info(TinySpec{}));
  ASSERT_TRUE(built.has_value()) << built.error();
  const ir::Graph good = *built;
  ASSERT_TRUE(ir::verify(good).is_ok());

  ir::Graph g = good;  // a weight with the wrong shape
  g.values[static_cast<size_t>(g.find("blk.0.attn_q_a.weight"))].shape = {32, 15};
  Status s = ir::verify(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("blk.0.q"), std::string::npos) << s.message();

  g = good;  // a weight in the wrong role
  for (auto& n : g.nodes)
    if (n.op == ir::OpKind::RmsNorm) {
      n.inputs[1] = g.find("blk.0.ffn_norm.weight");
      break;
    }
  s = ir::verify(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("blk.0.attn_norm.weight is never used"), std::string::npos) << s.message();

  g = good;  // use before definition
  std::swap(g.nodes[1], g.nodes[2]);
  s = ir::verify(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("used before it is defined"), std::string::npos) << s.message();

  g = good;  // a projection weight fed to rms_norm
  for (auto& n : g.nodes)
    if (n.op == ir::OpKind::RmsNorm) {
      n.inputs[1] = g.find("blk.0.attn_q_a.weight");
      break;
    }
  s = ir::verify(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not expected as input 1 of rms_norm"), std::string::npos) << s.message();

  g = good;  // router asking for more experts than exist
  for (auto& n : g.nodes)
    if (n.op == ir::OpKind::Router) n.attrs[1].value = int64_t{9};
  s = ir::verify(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("router sizes"), std::string::npos) << s.message();
}

TEST(IrVerifier, MatmulNeedsTheWeightsActivationFormat) {
  TinySpec s;
  s.D = 256, s.q_lora = 256, s.kv_lora = 256, s.nope = 32, s.dv = 128, s.Fe = 256, s.F = 256;
  s.wtype = GgmlType::Q8_0;
  s.kb_type = GgmlType::Q8_0;
  auto built = ir::build_graph(tiny_info(s));
  ASSERT_TRUE(built.has_value()) << built.error();
  ir::Graph g = *built;
  // Feed the f32 norm output straight to a Q8_0 matmul.
  for (auto& n : g.nodes)
    if (n.op == ir::OpKind::MatMul) {
      n.inputs[1] = g.find("blk.0.attn_in");
      break;
    }
  Status st = ir::verify(g);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("is f32, expected q8_0"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace zenmoe
