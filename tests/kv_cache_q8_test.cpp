// The Q8_0 MLA latent cache: store() quantises rows exactly as the reference quantiser does,
// and attention over it (AVX-512 kernels on the Q8_0 rows for decode-sized batches, chunked
// SGEMM otherwise, at AVX-512 and scalar targets, 1-3 threads, head groups of 8 and fewer,
// contexts past one widening chunk) equals the F32 path run over the dequantised rows, and
// stays close to the F32 path over the exact rows. On AVX-512 VNNI targets the decode kernels
// score in int8 over queries quantised to q8_0: there the queries given to both paths are
// q8_0 values already (which that quantisation keeps as they are).
// The CLI accepts `-ctk q8_0 -ctv q8_0` and refuses mixed or unknown types with one line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "codegen/isa.h"
#include "ir/graph.h"
#include "kernels/formats.h"
#include "kernels/ref/quant.h"
#include "runtime/fast_attention.h"
#include "tests/cli_util.h"
#include "tests/mla_cache_util.h"

namespace zenmoe {
namespace {

using namespace mla_cache_test;

void check_target(isa::Target target, int nth) {
  ir::Node node;
  const ir::Graph g = attention_graph(&node);
  auto q8 = MlaOp::create(node, g, target, KvCacheType::Q8_0);
  auto f32 = MlaOp::create(node, g, target, KvCacheType::F32);
  auto exact = MlaOp::create(node, g, target, KvCacheType::F32);
  ASSERT_TRUE(q8.has_value()) << q8.error();
  ASSERT_TRUE(f32.has_value() && exact.has_value());
  Cache cq8(GgmlType::Q8_0), cdeq(GgmlType::F32), cexact(GgmlType::F32);
  std::mt19937 rng(1234u + static_cast<unsigned>(nth));
  const bool q8_scores = (*q8)->decode_q8_scores();
  EXPECT_EQ(q8_scores, target.level >= isa::IsaLevel::kAvx512Vnni);
  // Prefill chunks (SGEMM path), then decode-sized batches (the Q8_0 kernels).
  int64_t p0 = 0;
  double worst_exact = 0.0;
  for (int64_t T : kBatchSizes) {
    ASSERT_LE(p0 + T, kCtx);
    Batch b(p0, T, rng);
    if (q8_scores)  // every head's [q_lat | q_pe] row as q8_0 values (whole blocks in each part)
      for (std::vector<float>* q : {&b.q_lat, &b.q_pe}) {
        std::vector<uint8_t> blocks(static_cast<size_t>(row_bytes(GgmlType::Q8_0, static_cast<int64_t>(q->size()))));
        ref::from_float_q8_0_x86(q->data(), blocks.data(), static_cast<int64_t>(q->size()));
        ref::dequantize_row(GgmlType::Q8_0, blocks.data(), q->data(), static_cast<int64_t>(q->size()));
      }
    const std::vector<float> ye = attend(**exact, b, cexact, nth);
    const std::vector<float> yq = attend(**q8, b, cq8, nth);
    // store() writes the reference quantiser's bytes.
    const int64_t rb = row_bytes(GgmlType::Q8_0, kW);
    std::vector<float> row(kW);
    std::vector<uint8_t> want(static_cast<size_t>(rb));
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(b.c.data() + t * kR, kR, row.data());
      std::copy_n(b.k_pe.data() + t * kRope, kRope, row.data() + kR);
      ref::from_float_q8_0(row.data(), want.data(), kW);
      ASSERT_EQ(std::memcmp(want.data(), cq8.bytes.data() + (p0 + t) * rb, want.size()), 0) << "position " << p0 + t;
      // The F32 cache then gets these rows dequantised: the same numbers, another code path.
      ref::to_float_q8_0(want.data(), row.data(), kW);
      std::copy_n(row.data(), kR, b.c.data() + t * kR);
      std::copy_n(row.data() + kR, kRope, b.k_pe.data() + t * kRope);
    }
    const std::vector<float> yd = attend(**f32, b, cdeq, nth);
    // Same cached numbers: only the summation order differs (outputs are averages of N(0,1)
    // values, |y| < 4).
    EXPECT_LE(max_abs_diff(yq, yd), 2e-5) << "batch at " << p0 << " of " << T;
    worst_exact = std::max(worst_exact, max_abs_diff(yq, ye));
    p0 += T;
  }
  // Against the unquantised cache: each cached N(0,1) element moves by up to half a step of
  // amax/127 (amax of 32 normals ~2.1), about 5e-3 RMS, and scores and values inherit errors
  // of that size; the maximum over the ~3e6 outputs compared measured about 2e-2.
  std::printf("[kv q8] %s, %d threads: max |y_q8 - y_f32| = %.3e\n", isa::level_name(target.level), nth, worst_exact);
  EXPECT_LE(worst_exact, 4e-2);
  EXPECT_GT(worst_exact, 0.0);  // the cache really is quantised
}

TEST(KvCacheQ8, AttentionMatchesF32OnHostTarget) {
  const isa::Target host{isa::host_level(), isa::host_tuning()};
  for (int nth : {1, 3}) check_target(host, nth);
}

TEST(KvCacheQ8, AttentionMatchesF32OnScalarTarget) { check_target(isa::Target{}, 2); }

TEST(KvCacheQ8, RefusesRowsThatAreNotWholeBlocks) {
  ir::Graph g;
  const int q_lat = g.add_value({"q_lat", ir::ValueKind::Temp, GgmlType::F32, {48, 2, ir::kDimTokens}});
  const int q_pe = g.add_value({"q_pe", ir::ValueKind::Temp, GgmlType::F32, {8, 2, ir::kDimTokens}});
  g.add_node(ir::OpKind::MlaAttention, {q_lat, q_pe, 0, 0, 0, 0}, {0}, {{"scale", 1.0f}});
  auto op = MlaOp::create(g.nodes.back(), g, isa::Target{}, KvCacheType::Q8_0);
  ASSERT_FALSE(op.has_value());
  EXPECT_NE(op.error().find("multiple of 32, got 56"), std::string::npos) << op.error();
}

namespace fs = std::filesystem;

class KvCacheCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zenmoe_kvq8_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  testing_cli::CliResult zenmoe(const std::string& args) { return testing_cli::run_zenmoe(args, dir_); }
  std::string model() const { return "'" + std::string(ZENMOE_ORACLE_DIR) + "/tiny-q4ks.gguf'"; }
  fs::path dir_;
};

TEST_F(KvCacheCli, RunsWithQ8Cache) {
  const auto r = zenmoe("run -m " + model() + " -p 'The quick brown fox' -n 8 --temp 0 -c 256 -ctk q8_0 -ctv q8_0 -v");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  // tiny-q4ks: 4 layers of 576-element rows, 256 positions at 34 bytes per 32 elements.
  EXPECT_NE(r.err.find("KV cache: " + std::to_string(4 * 256 * 576 / 32 * 34) + " bytes"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("as q8_0"), std::string::npos) << r.err;
}

TEST_F(KvCacheCli, RefusesMixedAndUnknownTypes) {
  const std::string run = "run -m " + model() + " -p hi -n 1 ";
  testing_cli::expect_one_line_error(zenmoe(run + "--cache-type-k q8_0 --cache-type-v f16"),
                                     "mixed", "--cache-type-k q8_0 and --cache-type-v f16 differ");
  testing_cli::expect_one_line_error(zenmoe(run + "-ctk q4_0"), "-ctk q4_0",
                                     "unknown cache type 'q4_0' (accepted: f32, f16, bf16, q8_0)");
  testing_cli::expect_one_line_error(zenmoe("logits -m " + model() + " --tokens 1,2 --mode prefill -ctk q8_0 -ctv f32 -o x"),
                                     "logits", "differ");
  testing_cli::expect_one_line_error(zenmoe("bench model " + model() + " -ctk q5_1"), "bench model",
                                     "unknown cache type 'q5_1'");
}

}  // namespace
}  // namespace zenmoe
