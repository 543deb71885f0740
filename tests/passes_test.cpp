// The compile passes (ir/pipeline): the fusion rewrites on a tiny two-layer graph (counts,
// verifier, dumps, reference numerics unchanged), the memory plan's in-place accumulation,
// and the fast executor running the fused kernels against the unfused graph.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "codegen/isa.h"
#include "ir/builder.h"
#include "ir/fusion.h"
#include "ir/memory_plan.h"
#include "ir/memplan.h"
#include "ir/parser.h"
#include "ir/partition.h"
#include "ir/pipeline.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "runtime/compiled_model.h"
#include "runtime/fast_executor.h"
#include "runtime/gguf.h"
#include "runtime/plan_file.h"
#include "runtime/ref_executor.h"
#include "tests/cli_util.h"
#include "tests/ir_test_model.h"

namespace zenmoe {
namespace {

namespace fs = std::filesystem;

// Q8_0 matrices (every width a multiple of 32) so each matmul has a quantize feeding it.
testing::TinySpec q8_spec() {
  testing::TinySpec s;
  s.wtype = GgmlType::Q8_0;
  s.D = 64;
  s.q_lora = 32;
  s.F = 64;
  s.Fe = 32;
  return s;
}

ir::PipelineOptions fuse_all() {
  ir::PipelineOptions o;
  o.gate_up_kernel = [](GgmlType, int64_t, int64_t, GgmlType) { return true; };
  o.fuse_residual = true;
  o.fuse_moe_sum = true;
  return o;
}

int count(const ir::Graph& g, ir::OpKind op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

TEST(FusionPass, TwoLayerGraphGetsTheFusedOps) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value()) << g.error();
  const ir::Graph plain = *g;
  ASSERT_TRUE(ir::run_pipeline(*g, fuse_all()).is_ok());
  // Gate/up: the dense FFN of layer 0 and the shared expert of layer 1; the routed experts
  // of layer 1 get the per-slot form.
  EXPECT_EQ(count(*g, ir::OpKind::GateUpSwiGlu), 2);
  EXPECT_EQ(count(*g, ir::OpKind::GateUpSwiGluId), 1);
  EXPECT_EQ(count(*g, ir::OpKind::MatMulId), 0);
  EXPECT_EQ(count(*g, ir::OpKind::SwiGlu), count(plain, ir::OpKind::SwiGlu) - 3);
  // Residuals: both attention outputs, layer 0's FFN down, layer 1's shared-expert down
  // (accumulating the routed experts); layer 1's final add has no plain matmul operand.
  EXPECT_EQ(count(*g, ir::OpKind::MatMulAdd), 4);
  EXPECT_EQ(count(*g, ir::OpKind::Add), count(plain, ir::OpKind::Add) - 4);
  // The routed experts' down projection takes in their weighted sum (layer 1).
  EXPECT_EQ(count(*g, ir::OpKind::MatMulIdSum), 1);
  EXPECT_EQ(count(*g, ir::OpKind::WeightedSum), 0);
  EXPECT_EQ(g->nodes.size(), plain.nodes.size() - 3 * 3 - 4 - 1);
  EXPECT_TRUE(ir::verify(*g).is_ok());
  // The shared expert's gate/up runs right before the routed experts' over the same activations.
  for (size_t k = 0; k < g->nodes.size(); ++k) {
    if (g->nodes[k].op != ir::OpKind::GateUpSwiGluId) continue;
    ASSERT_GT(k, 0u);
    EXPECT_EQ(g->nodes[k - 1].op, ir::OpKind::GateUpSwiGlu);
    EXPECT_EQ(g->nodes[k - 1].inputs[2], g->nodes[k].inputs[2]);
    EXPECT_NE(g->values[static_cast<size_t>(g->nodes[k - 1].inputs[0])].name.find("shexp"), std::string::npos);
  }
  // The fused graph prints and parses back to the same text (plan files hold it).
  auto back = ir::parse_graph(ir::print_graph(*g));
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(ir::print_graph(*back), ir::print_graph(*g));
}

// A broken gate_up_swiglu_id node (as a hand-edited plan could hold) is refused with one line
// that names what does not fit.
TEST(FusionPass, VerifierRefusesBrokenRoutedGateUp) {
  auto built = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(built.has_value());
  ASSERT_TRUE(ir::run_pipeline(*built, fuse_all()).is_ok());
  const ir::Graph good = *built;
  auto node = [](ir::Graph& g) -> ir::Node& {
    return *std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.op == ir::OpKind::GateUpSwiGluId; });
  };
  auto error = [](const ir::Graph& g) {
    Status s = ir::verify(g);
    return s.is_ok() ? std::string("(accepted)") : s.message();
  };
  std::vector<std::string> errors;
  ir::Graph g = good;  // ids that are not i32
  g.values[static_cast<size_t>(node(g).inputs[3])].type = GgmlType::F32;
  errors.push_back(error(g));
  EXPECT_NE(errors.back().find("expected i32"), std::string::npos) << errors.back();
  g = good;  // up weight of another shape than gate
  g.values[static_cast<size_t>(node(g).inputs[1])].shape[1] *= 2;
  errors.push_back(error(g));
  EXPECT_NE(errors.back().find("expected"), std::string::npos) << errors.back();
  g = good;  // three inputs: the ids are missing
  node(g).inputs.pop_back();
  errors.push_back(error(g));
  EXPECT_NE(errors.back(), "(accepted)");
  g = good;  // an output that is not one row per slot
  g.values[static_cast<size_t>(node(g).outputs[0])].shape[1] += 1;
  errors.push_back(error(g));
  EXPECT_NE(errors.back().find("expected"), std::string::npos) << errors.back();
  for (const std::string& e : errors) EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(FusionPass, DefaultOptionsChangeNothingAndKernelPredicateIsHonoured) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  const std::string before = ir::print_graph(*g);
  ASSERT_TRUE(ir::run_pipeline(*g).is_ok());
  EXPECT_EQ(ir::print_graph(*g), before);
  ir::PipelineOptions o;
  o.gate_up_kernel = [](GgmlType, int64_t, int64_t F, GgmlType) { return F == 64; };  // dense FFN only
  ASSERT_TRUE(ir::fuse(*g, o).is_ok());
  EXPECT_EQ(count(*g, ir::OpKind::GateUpSwiGlu), 1);
  EXPECT_EQ(count(*g, ir::OpKind::MatMulAdd), 0);
  EXPECT_EQ(count(*g, ir::OpKind::MatMulIdSum), 0);
}

TEST(FusionPass, ReferenceLogitsOfFusedGraphAreBitIdentical) {
  const ir::ModelInfo info = testing::tiny_info(q8_spec());
  const testing::TinyWeights w = testing::tiny_weights(info, 11);
  auto plain = ir::build_graph(info);
  ASSERT_TRUE(plain.has_value());
  ir::Graph fused = *plain;
  ASSERT_TRUE(ir::run_pipeline(fused, fuse_all()).is_ok());
  ExecutorOptions o;
  o.n_ctx = 32;
  auto a = make_reference_executor(std::move(*plain), w.table(), o);
  auto b = make_reference_executor(std::move(fused), w.table(), o);
  ASSERT_TRUE(a.has_value() && b.has_value());
  const std::vector<int32_t> toks = {3, 17, 42, 8, 1};
  std::vector<float> la(toks.size() * 50), lb(la.size());
  ASSERT_TRUE((*a)->eval(toks, la.data(), true).is_ok());
  ASSERT_TRUE((*b)->eval(toks, lb.data(), true).is_ok());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(FusionPass, NormQuantizeKeepsTheF32NormOnlyWhenRead) {
  const ir::ModelInfo info = testing::tiny_info(q8_spec());
  auto plain = ir::build_graph(info);
  ASSERT_TRUE(plain.has_value());
  ir::Graph g = *plain;
  ir::PipelineOptions o;
  o.norm_quantize_kernel = [](GgmlType) { return true; };
  ASSERT_TRUE(ir::run_pipeline(g, o).is_ok());
  // attn_norm and q_a_norm of both layers, ffn_in of both, result_norm; kv_c_norm feeds
  // attention in f32 and keeps its rms_norm.
  EXPECT_EQ(count(g, ir::OpKind::RmsNormQuantize), 7);
  EXPECT_EQ(count(g, ir::OpKind::RmsNorm), 2);
  EXPECT_EQ(count(g, ir::OpKind::Quantize), count(*plain, ir::OpKind::Quantize) - 7);
  int both = 0;
  for (const ir::Node& n : g.nodes)
    if (n.op == ir::OpKind::RmsNormQuantize && n.outputs.size() == 2) {
      ++both;  // the MoE layer's ffn_in: the router reads the f32 norm
      EXPECT_EQ(g.values[static_cast<size_t>(n.outputs[1])].name, "blk.1.ffn_in");
    }
  EXPECT_EQ(both, 1);
  auto back = ir::parse_graph(ir::print_graph(g));
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_EQ(ir::print_graph(*back), ir::print_graph(g));
  const testing::TinyWeights w = testing::tiny_weights(info, 3);
  ExecutorOptions eo;
  eo.n_ctx = 16;
  auto a = make_reference_executor(std::move(*plain), w.table(), eo);
  auto b = make_reference_executor(std::move(g), w.table(), eo);
  ASSERT_TRUE(a.has_value() && b.has_value());
  const std::vector<int32_t> toks = {4, 9, 33};
  std::vector<float> la(toks.size() * 50), lb(la.size());
  ASSERT_TRUE((*a)->eval(toks, la.data(), true).is_ok());
  ASSERT_TRUE((*b)->eval(toks, lb.data(), true).is_ok());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(Pipeline, DumpAfterFusionAndUnknownPass) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  ir::PipelineOptions o = fuse_all();
  std::vector<std::string> seen;
  std::string text;
  o.dump_after = "fusion";
  o.dump = [&](const std::string& pass, const std::string& t) {
    seen.push_back(pass);
    text = t;
  };
  ir::Graph copy = *g;
  ASSERT_TRUE(ir::run_pipeline(copy, o).is_ok());
  ASSERT_EQ(seen, std::vector<std::string>{"fusion"});
  EXPECT_NE(text.find("= gate_up_swiglu(%blk.0.ffn_gate.weight, %blk.0.ffn_up.weight, %blk.0.ffn_in.q8_0)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("= matmul_add(%blk.0.attn_output.weight"), std::string::npos);
  o.dump_after = "fuse";
  Status s = ir::run_pipeline(*g, o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("unknown pass 'fuse'"), std::string::npos);
}

TEST(MemoryPlanPass, MatMulAddAccumulatesInItsAccumulatorsSlot) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  ASSERT_TRUE(ir::run_pipeline(*g, fuse_all()).is_ok());
  auto p = ir::plan_memory(*g, 4);
  ASSERT_TRUE(p.has_value()) << p.error();
  int in_place = 0;
  for (const ir::Node& n : g->nodes)
    if (n.op == ir::OpKind::MatMulAdd) {
      EXPECT_EQ(p->offset[static_cast<size_t>(n.outputs[0])], p->offset[static_cast<size_t>(n.inputs[2])]);
      ++in_place;
    }
  EXPECT_EQ(in_place, 4);
  // No other live value overlaps a slot while it is in use: the fused graph still runs on the
  // reference engine with the planned offsets checked by the fast executor tests below.
  EXPECT_GT(p->arena_bytes, 0);
  EXPECT_LE(p->arena_bytes, p->naive_bytes);
}

TEST(MemoryPlanPass, RecordsTheArenaLayoutAndReadsItBack) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  ir::PipelineOptions o = fuse_all();
  o.max_tokens = 16;
  std::string text;
  o.dump_after = "memplan";
  o.dump = [&](const std::string&, const std::string& t) { text = t; };
  ASSERT_TRUE(ir::run_pipeline(*g, o).is_ok());
  EXPECT_NE(text.find("  attrs {max_tokens=16, arena_bytes="), std::string::npos) << text.substr(0, 200);
  EXPECT_NE(text.find("arena.tokens=0"), std::string::npos);
  auto fresh = ir::plan_memory(*g, 16);
  ASSERT_TRUE(fresh.has_value());
  // Parsed back from text (as a plan file holds it), the layout is the one the pass made.
  auto back = ir::parse_graph(ir::print_graph(*g));
  ASSERT_TRUE(back.has_value()) << back.error();
  auto rec = ir::recorded_memory_plan(*back, 8);
  ASSERT_TRUE(rec.has_value()) << rec.error();
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->arena_bytes, fresh->arena_bytes);
  EXPECT_EQ((*rec)->max_tokens, 16);
  int placed = 0;
  for (size_t i = 0; i < back->values.size(); ++i) {  // the parser numbers values in text order
    const int id = g->find(back->values[i].name);
    ASSERT_GE(id, 0);
    EXPECT_EQ((*rec)->offset[i], fresh->offset[static_cast<size_t>(id)]) << back->values[i].name;
    placed += (*rec)->offset[i] >= 0;
  }
  EXPECT_GT(placed, 50);
  // A bigger batch than recorded: no recorded plan (the executor makes its own).
  auto big = ir::recorded_memory_plan(*back, 17);
  ASSERT_TRUE(big.has_value());
  EXPECT_FALSE(big->has_value());
  // A damaged offset is refused, not followed outside the arena.
  for (ir::Attr& a : back->nodes[3].attrs)
    if (a.key == "arena") a.value = int64_t{1} << 30;
  auto bad = ir::recorded_memory_plan(*back, 8);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().find("no valid arena offset"), std::string::npos) << bad.error();
  // Running the pass again replaces the annotations instead of adding more.
  const std::string once = ir::print_graph(*g);
  ASSERT_TRUE(ir::plan_memory_pass(*g, o).is_ok());
  EXPECT_EQ(ir::print_graph(*g), once);
}

ir::PipelineOptions with_geometry(int64_t l2) {
  ir::PipelineOptions o = fuse_all();
  o.kernel_rows = [](GgmlType, int64_t K) { return ir::KernelRows{16, K + 4}; };
  o.threads = 3;
  o.l1_bytes = 32 << 10;
  o.l2_bytes = l2;
  o.l3_bytes = 32 << 20;
  return o;
}

TEST(PartitionAndTiling, AnnotateEveryWeightProduct) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  ASSERT_TRUE(ir::run_pipeline(*g, with_geometry(64 << 10)).is_ok());
  EXPECT_EQ(g->attr_int("threads"), 3);
  EXPECT_EQ(g->attr_int("l2_bytes"), 64 << 10);
  int annotated = 0;
  for (const ir::Node& n : g->nodes) {
    if (!ir::is_weight_product(n)) {
      EXPECT_EQ(n.attr("tile_rows"), nullptr) << ir::op_name(n.op);
      continue;
    }
    ++annotated;
    const int64_t K = g->values[static_cast<size_t>(n.inputs[0])].shape[0];
    if (n.op == ir::OpKind::GateUpSwiGlu || n.op == ir::OpKind::GateUpSwiGluId) {
      EXPECT_EQ(n.attr_int("row_block"), 256);
      // Two streamed rows per output: 32 KiB / (2 * 68) = 240 rows, below one 256-output block.
      EXPECT_EQ(n.attr_int("tile_rows"), 256);
      continue;
    }
    EXPECT_EQ(n.attr_int("row_block"), 16);
    EXPECT_EQ(n.attr_int("tile_rows"), (32768 / (K + 4)) / 16 * 16) << K;
  }
  // Per layer: q_a, q_b, kv_a, attention output, FFN (dense: gate_up + down; MoE: router,
  // 3 expert products, shared gate_up + down), plus the attention's per-head products and logits.
  EXPECT_GE(annotated, 2 * 4 + 2 + 6 + 1);
  ir::Graph again = *g;  // idempotent: the passes replace their annotations
  ASSERT_TRUE(ir::run_pipeline(again, with_geometry(64 << 10)).is_ok());
  EXPECT_EQ(ir::print_graph(again), ir::print_graph(*g));
}

TEST(PartitionAndTiling, UnknownL2LeavesTilingToTheExecutor) {
  auto g = ir::build_graph(testing::tiny_info(q8_spec()));
  ASSERT_TRUE(g.has_value());
  std::vector<std::string> dumped;
  ir::PipelineOptions o = with_geometry(0);
  o.dump_after = "all";
  o.dump = [&](const std::string& p, const std::string&) { dumped.push_back(p); };
  ASSERT_TRUE(ir::run_pipeline(*g, o).is_ok());
  EXPECT_EQ(dumped, (std::vector<std::string>{"verify", "fusion", "partition", "tiling", "memplan"}));
  for (const ir::Node& n : g->nodes) {
    EXPECT_EQ(n.attr("tile_rows"), nullptr);
    if (ir::is_weight_product(n)) {
      EXPECT_GT(n.attr_int("row_block"), 0);
    }
  }
  EXPECT_EQ(g->attr_int("l2_bytes", -1), -1);
}

class FusedFast : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("zenmoe_passes_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "bench2.gguf").string();
    const auto r = testing_cli::run_zenmoe("mkmodel --preset bench --layers 2 --experts 16 -o '" + path_ + "'", dir_);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::shared_ptr<const CompiledModel> compile(const gguf::Model& m, bool fuse) {
    CompileOptions co;
    co.target = {isa::host_level(), isa::host_tuning()};
    co.fuse = fuse;
    auto cm = compile_in_memory(m, co);
    EXPECT_TRUE(cm.has_value()) << cm.error();
    return cm ? std::make_shared<const CompiledModel>(std::move(*cm)) : nullptr;
  }
  static std::unique_ptr<FastExecutor> fast(std::shared_ptr<const CompiledModel> cm, int threads, int max_batch) {
    FastExecutorOptions fo;
    fo.base.n_ctx = 128;
    fo.base.n_threads = threads;
    fo.max_batch = max_batch;
    auto ex = make_fast_executor(std::move(cm), fo);
    EXPECT_TRUE(ex.has_value()) << ex.error();
    return ex ? std::move(*ex) : nullptr;
  }

  static inline fs::path dir_;
  static inline std::string path_;
};

// Largest |a - b| relative to the largest |a| over a row of logits.
double rel_diff(const float* a, const float* b, int n) {
  double d = 0, m = 0;
  for (int i = 0; i < n; ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
  }
  return d / std::max(m, 1e-30);
}

TEST_F(FusedFast, FusedLogitsMatchUnfused) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value()) << model.error();
  auto plain = compile(*model, false), fused = compile(*model, true);
  ASSERT_TRUE(plain && fused);
  EXPECT_EQ(count(plain->graph, ir::OpKind::MatMulAdd), 0);
  EXPECT_GE(count(fused->graph, ir::OpKind::MatMulAdd), 3);
  EXPECT_GE(count(fused->graph, ir::OpKind::RmsNormQuantize), 5);
  EXPECT_EQ(count(fused->graph, ir::OpKind::MatMulIdSum), 1);
  const bool gate_up = isa::host_supports(isa::IsaLevel::kAvx512);
  EXPECT_EQ(count(fused->graph, ir::OpKind::GateUpSwiGlu), gate_up ? 2 : 0);
  EXPECT_EQ(count(fused->graph, ir::OpKind::GateUpSwiGluId), gate_up ? 1 : 0);
  auto a = fast(plain, 2, 8), b = fast(fused, 2, 8);
  ASSERT_TRUE(a && b);
  if (gate_up) {
    const auto log = b->dispatch_log();
    EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& l) { return l.find("gateup") != std::string::npos; }));
  }
  const int V = a->n_vocab(), T = 20;
  std::mt19937 rng(5);
  std::vector<int32_t> toks(T);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % static_cast<unsigned>(V));
  std::vector<float> la(static_cast<size_t>(T * V)), lb(la.size());
  ASSERT_TRUE(a->eval({toks.data(), 12}, la.data(), true).is_ok());  // prefill: GEMM paths
  ASSERT_TRUE(b->eval({toks.data(), 12}, lb.data(), true).is_ok());
  for (int t = 12; t < T; ++t) {  // decode: GEMV paths
    ASSERT_TRUE(a->eval({&toks[static_cast<size_t>(t)], 1}, la.data() + t * V, false).is_ok());
    ASSERT_TRUE(b->eval({&toks[static_cast<size_t>(t)], 1}, lb.data() + t * V, false).is_ok());
  }
  double worst = 0;
  int top1 = 0;
  for (int t = 0; t < T; ++t) {
    const float* x = la.data() + t * V;
    const float* y = lb.data() + t * V;
    worst = std::max(worst, rel_diff(x, y, V));
    top1 += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  std::printf("[passes] fused vs unfused fast logits: max rel diff %.3e, top-1 %d/%d\n", worst, top1, T);
  // Measured 2.4e-7 on an AVX-512 host: the fused kernel's SwiGLU epilogue and the batch path's
  // glue epilogue compute what the unfused GEMV/GEMM + SwiGLU glue + Q8_K glue compute, and
  // accumulating residuals add the same two floats; only matmul_id_sum adds a token's expert
  // products in expert order instead of slot order. The bound leaves room for last-bit noise.
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(top1, T);
}

TEST_F(FusedFast, RecordedMemoryPlanGivesTheSameLogits) {
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value());
  auto with = compile(*model, true);
  ASSERT_TRUE(with);
  ASSERT_EQ(with->graph.attr_int("max_tokens"), kDefaultMaxBatch);
  CompiledModel copy = *with;
  copy.graph.attrs.clear();
  for (ir::Node& n : copy.graph.nodes)
    n.attrs.erase(std::remove_if(n.attrs.begin(), n.attrs.end(), [](const ir::Attr& a) { return a.key.rfind("arena", 0) == 0; }),
                  n.attrs.end());
  auto a = fast(with, 2, 8), b = fast(std::make_shared<const CompiledModel>(std::move(copy)), 2, 8);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> toks = {5, 99, 7, 300, 2, 41, 8, 8, 1, 60, 3};
  std::vector<float> la(static_cast<size_t>(a->n_vocab()) * toks.size()), lb(la.size());
  ASSERT_TRUE(a->eval(toks, la.data(), true).is_ok());
  ASSERT_TRUE(b->eval(toks, lb.data(), true).is_ok());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST_F(FusedFast, PlanOfFusedGraphLoadsAndGivesTheSameLogits) {
  const std::string plan = (dir_ / "b2.zplan").string();
  const auto r = testing_cli::run_zenmoe("compile '" + path_ + "' -o '" + plan + "' --dump-after fusion", dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("; IR after fusion"), std::string::npos);
  EXPECT_NE(r.err.find("matmul_add("), std::string::npos);
  auto loaded = plan::read_plan(plan);
  ASSERT_TRUE(loaded.has_value()) << loaded.error();
  auto model = gguf::Model::open(path_);
  ASSERT_TRUE(model.has_value());
  auto from_plan = compiled_from_plan(std::make_shared<const plan::LoadedPlan>(std::move(*loaded)), *model);
  ASSERT_TRUE(from_plan.has_value()) << from_plan.error();
  auto a = fast(compile(*model, true), 1, 16);
  auto b = fast(std::make_shared<const CompiledModel>(std::move(*from_plan)), 1, 16);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> toks = {1, 17, 200, 3, 45};
  std::vector<float> la(static_cast<size_t>(a->n_vocab()) * toks.size()), lb(la.size());
  ASSERT_TRUE(a->eval(toks, la.data(), true).is_ok());
  ASSERT_TRUE(b->eval(toks, lb.data(), true).is_ok());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
  const auto tiled = testing_cli::run_zenmoe("compile '" + path_ + "' -o '" + plan + "' -t 2 --dump-after partition", dir_);
  ASSERT_EQ(tiled.status, 0) << tiled.err;
  EXPECT_NE(tiled.err.find("; IR after partition"), std::string::npos);
  EXPECT_NE(tiled.err.find("threads=2"), std::string::npos);
  EXPECT_NE(tiled.err.find("row_block="), std::string::npos);
  const auto bad = testing_cli::run_zenmoe("compile '" + path_ + "' -o '" + plan + "' --dump-after nosuch", dir_);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("unknown pass 'nosuch'"), std::string::npos);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1);
}

// Q5_0 matrices (deepseek2's attn_k_b in Q4_K_S files) keep their 22 bytes per block where
// the Q5_0 kernel runs (AVX-512 VNNI and up) and become Q8_0 (34 bytes, the same integers)
// below it.
TEST(PackRequests, Q5_0StaysQ5_0FromAvx512Vnni) {
  testing::TinySpec s = q8_spec();
  s.kb_type = GgmlType::Q5_0;
  s.nope = 32;  // k_b rows of 32: whole blocks
  auto g = ir::build_graph(testing::tiny_info(s));
  ASSERT_TRUE(g.has_value()) << g.error();
  for (isa::IsaLevel level : {isa::IsaLevel::kAvx2, isa::IsaLevel::kAvx512, isa::IsaLevel::kAvx512Vnni,
                              isa::IsaLevel::kAvx512Bf16}) {
    const bool own = level >= isa::IsaLevel::kAvx512Vnni;
    int k_b = 0;
    for (const PackRequest& r : pack_requests(*g, {level, isa::Tuning::kGeneric})) {
      if (r.source != GgmlType::Q5_0) continue;
      ++k_b;
      EXPECT_EQ(r.packed, own ? GgmlType::Q5_0 : GgmlType::Q8_0) << r.name << " " << isa::level_name(level);
      EXPECT_EQ(r.mat_stride, static_cast<uint64_t>((r.cols / 32 * (own ? 352 : 544) + 63) / 64 * 64 *
                                                    ((r.rows + 15) / 16)))
          << r.name;
    }
    EXPECT_EQ(k_b, s.layers) << isa::level_name(level);
  }
}

}  // namespace
}  // namespace zenmoe
