// Every tensor of the llama.cpp-made oracle models, dequantised by the reference to_float,
// must reproduce ggml's own dequantisation: FNV-1a 64 hash of the float32 bytes (storage
// order), sum, sum of squares and the first 8 values from the *.dequant.json files.
#include <gtest/gtest.h>

#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/ref/quant.h"
#include "runtime/gguf.h"

namespace zenmoe::ref {
namespace {

// FNV-1a 64 over the little-endian bytes. The oracle files were hashed with offset basis
// 1469598103934665603 (0x14650fb0739d0383): the standard basis 14695981039346656037 with its
// last digit lost. Found by running the hash backwards from the hash of an all-ones tensor,
// which gives the same start state for every length; the prime is the standard one.
uint64_t fnv1a64(const float* v, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(v[i]);
    for (int k = 0; k < 4; ++k) {  // little-endian bytes
      h ^= (bits >> (8 * k)) & 0xFF;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

void check_model(const std::string& stem) {
  const std::string dir = ZENMOE_ORACLE_DIR;
  auto model = gguf::Model::open(dir + "/" + stem + ".gguf");
  ASSERT_TRUE(model.has_value()) << model.error();
  std::ifstream in(dir + "/" + stem + ".dequant.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& expected = j.at("tensors");
  ASSERT_EQ(expected.size(), model->tensors().size());
  std::vector<float> y;
  for (const auto& e : expected) {
    const std::string name = e.at("name");
    SCOPED_TRACE(name);
    const gguf::TensorInfo* t = model->find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(e.at("type").get<std::string>(), type_name(t->type));
    for (int d = 0; d < 4; ++d) EXPECT_EQ(e.at("ne")[d].get<int64_t>(), t->ne[d]);
    const int64_t n = t->n_elements();
    ASSERT_TRUE(check_row(t->type, t->ne[0]).is_ok());
    y.assign(static_cast<size_t>(n), 0.0f);
    dequantize_row(t->type, t->data, y.data(), n);  // rows are contiguous: one long row
    EXPECT_EQ(hex64(fnv1a64(y.data(), y.size())), e.at("fnv1a64_f32").get<std::string>());
    double sum = 0, sumsq = 0;
    for (float v : y) {
      sum += v;
      sumsq += static_cast<double>(v) * v;
    }
    // Same values in the same order summed in double; allow only double-rounding noise.
    const double want_sum = e.at("sum"), want_sumsq = e.at("sumsq");
    EXPECT_NEAR(sum, want_sum, 1e-9 * (1.0 + want_sumsq));
    EXPECT_NEAR(sumsq, want_sumsq, 1e-12 * want_sumsq);
    const auto& first = e.at("first");
    for (size_t k = 0; k < first.size(); ++k) EXPECT_EQ(y[k], static_cast<float>(first[k].get<double>())) << k;
  }
}

TEST(OracleDequant, TinyQ4KS) { check_model("tiny-q4ks"); }
TEST(OracleDequant, TinyF16) { check_model("tiny-f16"); }

// tiny-q4ks.gguf is tiny-f16.gguf run through llama-quantize (Q4_K_S, no importance matrix).
// Quantising the f16 weights with the reference quantisers must give the very same bytes:
// q4_K, q5_0 (attn_k_b) and q6_K (output). Layers 2 and 3 repeat the tensor kinds of layer 1
// and are skipped to keep the sanitizer build fast.
TEST(OracleQuantise, ReproducesLlamaQuantizeBytes) {
  const std::string dir = ZENMOE_ORACLE_DIR;
  auto q = gguf::Model::open(dir + "/tiny-q4ks.gguf");
  auto f = gguf::Model::open(dir + "/tiny-f16.gguf");
  ASSERT_TRUE(q.has_value()) << q.error();
  ASSERT_TRUE(f.has_value()) << f.error();
  int checked = 0;
  std::vector<float> x;
  std::vector<uint8_t> mine;
  for (const gguf::TensorInfo& t : q->tensors()) {
    if (t.type == GgmlType::F32 || t.name.rfind("blk.2.", 0) == 0 || t.name.rfind("blk.3.", 0) == 0) continue;
    SCOPED_TRACE(t.name);
    const gguf::TensorInfo* src = f->find_tensor(t.name);
    ASSERT_NE(src, nullptr);
    ASSERT_EQ(src->n_elements(), t.n_elements());
    ASSERT_TRUE(check_row(t.type, t.ne[0], true).is_ok());
    x.resize(static_cast<size_t>(t.n_elements()));
    dequantize_row(src->type, src->data, x.data(), t.n_elements());
    mine.assign(t.nbytes, 0);
    quantize_row(t.type, x.data(), mine.data(), t.n_elements());
    const int64_t bb = format_traits(t.type)->block_bytes;
    int64_t differing = 0;
    for (uint64_t off = 0; off < t.nbytes; off += static_cast<uint64_t>(bb))
      differing += std::memcmp(mine.data() + off, t.data + off, static_cast<size_t>(bb)) != 0;
    EXPECT_EQ(differing, 0) << "blocks differing from llama-quantize, type " << type_name(t.type);
    ++checked;
  }
  EXPECT_EQ(checked, 2 + 9 + 12);  // output, token_embd; 9 in dense blk.0; 12 in MoE blk.1
}

}  // namespace
}  // namespace zenmoe::ref
