// IR text form: golden files (tests/golden/*.ir) for the oracle model and a legacy-form model,
// print/parse round trips, and parse errors. ZENMOE_UPDATE_GOLDEN=1 rewrites the goldens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "runtime/gguf.h"
#include "runtime/ref_executor_model.h"
#include "tests/ir_test_model.h"

namespace zenmoe {
namespace {

std::string golden_path(const std::string& name) {
  return std::string(ZENMOE_SOURCE_DIR) + "/tests/golden/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_golden(const ir::Graph& g, const std::string& name) {
  const std::string text = ir::print_graph(g);
  if (std::getenv("ZENMOE_UPDATE_GOLDEN")) std::ofstream(golden_path(name)) << text;
  const std::string golden = read_text(golden_path(name));
  ASSERT_FALSE(golden.empty()) << "missing " << golden_path(name);
  EXPECT_EQ(text, golden) << "graph differs from " << name;
  // The golden parses back to a valid graph that prints identically.
  auto parsed = ir::parse_graph(golden);
  ASSERT_TRUE(parsed.has_value()) << parsed.error();
  Status s = ir::verify(*parsed);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(ir::print_graph(*parsed), golden);
}

TEST(IrText, OracleModelGolden) {
  auto model = gguf::Model::open(std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf");
  ASSERT_TRUE(model.has_value()) << model.error();
  auto g = build_graph_from_gguf(*model);
  ASSERT_TRUE(g.has_value()) << g.error();
  check_golden(*g, "deepseek2_tiny_q4ks.ir");
}

TEST(IrText, LegacyFormGolden) {
  testing::TinySpec s;
  s.mla = false, s.tied_output = true, s.fused_gate_up = true;
  s.E = 8, s.groups = 4, s.group_used = 2, s.gating = 1;
  auto g = ir::build_graph(testing::tiny_info(s));
  ASSERT_TRUE(g.has_value()) << g.error();
  check_golden(*g, "deepseek2_legacy.ir");
}

TEST(IrText, AttributesRoundTripExactly) {
  ir::Graph g;
  g.arch = "test";
  int x = g.add_value({"x", ir::ValueKind::Input, GgmlType::F32, {4, ir::kDimTokens}});
  int w = g.add_value({"w", ir::ValueKind::Weight, GgmlType::F32, {4}});
  int y = g.add_value({"y", ir::ValueKind::Temp, GgmlType::F32, {4, ir::kDimTokens}});
  g.add_node(ir::OpKind::RmsNorm, {x, w}, {y},
             {{"eps", 9.99999997e-07f}, {"big", 3.0e38f}, {"tiny", 1.0e-45f}, {"one", 1.0f},
              {"neg", int64_t{-7}}, {"name", std::string("sigmoid")}});
  g.outputs.push_back(y);
  const std::string text = ir::print_graph(g);
  auto p = ir::parse_graph(text);
  ASSERT_TRUE(p.has_value()) << p.error();
  EXPECT_EQ(ir::print_graph(*p), text);
  const ir::Node& n = p->nodes[0];
  EXPECT_EQ(n.attr_float("eps"), 9.99999997e-07f);
  EXPECT_EQ(n.attr_float("big"), 3.0e38f);
  EXPECT_EQ(n.attr_float("tiny"), 1.0e-45f);
  EXPECT_EQ(n.attr_float("one"), 1.0f);  // printed "1.0", still a float
  EXPECT_EQ(n.attr_int("neg"), -7);
  EXPECT_EQ(n.attr_str("name"), "sigmoid");
}

std::string parse_error(const std::string& text) {
  auto p = ir::parse_graph(text);
  return p ? std::string("(no error)") : p.error();
}

TEST(IrText, ParseErrorsNameTheLine) {
  const std::string head = "graph t {\n  input %x : f32[4,T]\n";
  EXPECT_NE(parse_error(head + "  %y : f32[4,T] = frobnicate(%x)\n}\n").find("line 3"), std::string::npos);
  EXPECT_NE(parse_error(head + "  %y : f32[4,T] = frobnicate(%x)\n}\n").find("unknown op 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(parse_error(head + "  %y : f32[4,T] = add(%x, %z)\n}\n").find("unknown value %z"), std::string::npos);
  EXPECT_NE(parse_error(head + "  input %x : f32[4]\n}\n").find("defined twice"), std::string::npos);
  EXPECT_NE(parse_error(head + "  input %y : q9_K[4]\n}\n").find("unknown type 'q9_K'"), std::string::npos);
  EXPECT_NE(parse_error(head + "  input %y : f32[0]\n}\n").find("bad dimension"), std::string::npos);
  EXPECT_NE(parse_error(head).find("missing 'graph"), std::string::npos);
  EXPECT_NE(parse_error("input %x : f32[4]\n").find("expected 'graph <arch> {'"), std::string::npos);
  EXPECT_NE(parse_error(head + "  %y : f32[4,T] = add(%x, %x) {eps=}\n}\n").find("attribute value"),
            std::string::npos);
  EXPECT_NE(parse_error(head + "}\n  output %x\n").find("after the closing"), std::string::npos);
}

}  // namespace
}  // namespace zenmoe
