// The plan file (runtime/plan_file.h): round trip, the refusals and their messages, truncated
// and corrupt plans and side files, atomic writing, and the GGUF tensor table checksum.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "codegen/isa.h"
#include "codegen/kernel_desc.h"
#include "gguf_test_util.h"
#include "kernels/pack.h"
#include "kernels/ref/quant.h"
#include "runtime/compiled_model.h"
#include "runtime/plan_file.h"
#include "runtime/plan_file_internal.h"
#include "runtime/thread_pool.h"

namespace zenmoe::plan {
namespace {

using gguf::testing::TempDir;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

isa::CpuFeatures all_features() {
  isa::CpuFeatures f;
  for (bool* b : {&f.os_ymm, &f.os_zmm, &f.sse42, &f.avx, &f.avx2, &f.fma, &f.f16c, &f.bmi1, &f.bmi2,
                  &f.avx512f, &f.avx512bw, &f.avx512vl, &f.avx512dq, &f.avx512vnni, &f.avx512vbmi,
                  &f.avx512bf16, &f.gfni})
    *b = true;
  return f;
}

// Three tensors: a plain Q4_K matrix, a gate+up expert stack, and a Q8_0 matrix.
PlanHeader sample_header() {
  PlanHeader h;
  h.target_level = "avx512vnni";
  h.target_tuning = "zen4";
  h.cpu_features = required_features(isa::IsaLevel::kAvx512Vnni);
  h.n_threads = 2;
  h.gguf_path = "/models/tiny.gguf";
  h.gguf_checksum = 0x0123456789abcdefull;
  h.graph_text = "graph deepseek2 {\n  input %tokens : i32[T]\n  output %logits\n}\n";
  const isa::Target t{isa::IsaLevel::kAvx512Vnni, isa::Tuning::kZen4};
  h.kernels.push_back(default_gemv_desc(GgmlType::Q4_K, 256, t));
  h.kernels.push_back(default_gemv_desc(GgmlType::Q4_K, 512, t, KernelOp::kGateUpSwiglu));
  h.kernels.push_back(default_gemv_desc(GgmlType::Q8_0, 64, t));
  h.tensors.push_back({"blk.0.attn_q.weight", GgmlType::Q4_K, 8, 16, 256, 1, kPackWeights, 0, 0, 0});
  h.tensors.push_back({"blk.1.ffn_gate_up_exps.weight", GgmlType::Q4_K, 8, 32, 512, 3, kPackGateUp, 0, 0, 0});
  h.tensors.push_back({"output.weight", GgmlType::Q8_0, 16, 20, 64, 1, kPackWeights, 0, 0, 0});
  return h;
}

uint8_t pattern(size_t i, uint64_t k) { return static_cast<uint8_t>(i * 37 + k * 13 + (k >> 8)); }

Status fill_pattern(const PlanHeader& h, size_t i, uint8_t* dst) {
  for (uint64_t k = 0; k < h.tensors[i].nbytes; ++k) dst[k] = pattern(i, k);
  return Status::ok();
}

// Writes sample_header() (or `h`) at dir/model.zplan; returns the plan path.
std::string write_sample(const TempDir& dir, PlanHeader h = sample_header(), const char* name = "model.zplan") {
  const std::string path = dir.file(name);
  PlanHeader placed = h;
  EXPECT_TRUE(layout_tensors(&placed).is_ok());
  Status s = write_plan(path, h, [&](size_t i, uint8_t* dst) { return fill_pattern(placed, i, dst); });
  EXPECT_TRUE(s.is_ok()) << s.message();
  return path;
}

// Builds plan bytes as documented in plan_file.h, so tests can make any document consistent.
std::string raw_plan(const std::string& doc, const std::string& kernels, uint32_t version = kPlanVersion) {
  auto fnv = [](const std::string& s, uint64_t h) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    return h;
  };
  const uint64_t basis = 0xcbf29ce484222325ull;
  std::string out = "ZPLN";
  auto u32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  u32(version);
  u64(doc.size());
  u64(kernels.size());
  u64(fnv(doc, basis));
  u64(fnv(kernels, fnv(doc, basis)));
  return out + doc + kernels;
}

// The document and descriptor table of a written plan.
void split_plan(const std::string& bytes, nlohmann::json* doc, std::string* kernels) {
  uint64_t doc_n = 0;
  std::memcpy(&doc_n, bytes.data() + 8, 8);
  *doc = nlohmann::json::parse(bytes.substr(40, doc_n));
  *kernels = bytes.substr(40 + doc_n);
}

Expected<LoadedPlan> read_edited(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json doc;
  std::string kernels;
  split_plan(slurp(path), &doc, &kernels);
  edit(doc);
  spit(path, raw_plan(doc.dump(), kernels));
  return read_plan(path);
}

void expect_one_line_error(const Expected<LoadedPlan>& r, const std::string& needle) {
  ASSERT_FALSE(r.has_value()) << "expected an error containing: " << needle;
  EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
}

TEST(PlanFile, RoundTrip) {
  TempDir dir;
  const PlanHeader in = sample_header();
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  const std::string path = dir.file("model.zplan");
  // Tensors may be written at once from several threads, in any order: each once.
  std::vector<uint64_t> sizes(in.tensors.size());
  std::vector<std::atomic<int>> calls(in.tensors.size());
  Status s = write_plan(
      path, in,
      [&](size_t i, uint8_t* dst) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(dst) % 4096, 0u);
        EXPECT_EQ(calls[i].fetch_add(1), 0) << "tensor " << i << " written twice";
        Expected<PackLayout> L = pack_layout(in.tensors[i].format, in.tensors[i].row_block,
                                             in.tensors[i].rows, in.tensors[i].cols);
        EXPECT_TRUE(L.has_value());
        const uint64_t n = static_cast<uint64_t>(L->total_bytes * in.tensors[i].n_mats);
        sizes[i] = n;
        for (uint64_t k = 0; k < n; ++k) dst[k] = pattern(i, k);
        return Status::ok();
      },
      [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(dir.entries(), 2u);  // the plan and its side file, no temporaries
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front().first, 0u);
  EXPECT_EQ(progress.back().first, progress.back().second);
  EXPECT_EQ(progress.back().second, sizes[0] + sizes[1] + sizes[2]);

  Expected<LoadedPlan> r = read_plan(path);
  ASSERT_TRUE(r.has_value()) << r.error();
  const PlanHeader& h = r->header;
  EXPECT_EQ(h.version, kPlanVersion);
  EXPECT_EQ(h.target_level, in.target_level);
  EXPECT_EQ(h.target_tuning, in.target_tuning);
  EXPECT_EQ(h.cpu_features, in.cpu_features);
  EXPECT_EQ(h.n_threads, 2);
  EXPECT_EQ(h.gguf_path, in.gguf_path);
  EXPECT_EQ(h.gguf_checksum, in.gguf_checksum);
  EXPECT_EQ(h.graph_text, in.graph_text);
  ASSERT_EQ(h.kernels.size(), in.kernels.size());
  for (size_t i = 0; i < h.kernels.size(); ++i) EXPECT_TRUE(h.kernels[i] == in.kernels[i]);
  EXPECT_EQ(h.weights_file, "model.zplan.weights");
  EXPECT_EQ(r->weights_path, dir.file("model.zplan.weights"));
  EXPECT_EQ(h.weights_bytes, fs::file_size(r->weights_path));
  ASSERT_EQ(h.tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const PlanTensor& t = h.tensors[i];
    EXPECT_EQ(t.name, in.tensors[i].name);
    EXPECT_EQ(t.format, in.tensors[i].format);
    EXPECT_EQ(t.row_block, in.tensors[i].row_block);
    EXPECT_EQ(t.rows, in.tensors[i].rows);
    EXPECT_EQ(t.cols, in.tensors[i].cols);
    EXPECT_EQ(t.n_mats, in.tensors[i].n_mats);
    EXPECT_EQ(t.kind, in.tensors[i].kind);
    EXPECT_EQ(t.nbytes, sizes[i]);
    EXPECT_EQ(t.mat_stride * static_cast<uint64_t>(t.n_mats), t.nbytes);
    EXPECT_EQ(t.offset % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->tensor_data(i)) % 64, 0u);
    bool same = true;
    for (uint64_t k = 0; k < t.nbytes; ++k) same = same && r->tensor_data(i)[k] == pattern(i, k);
    EXPECT_TRUE(same) << t.name;
  }
  EXPECT_EQ(r->find_tensor("output.weight"), 2);
  EXPECT_EQ(r->find_tensor("nope"), -1);
  EXPECT_EQ(r->matrix_data(1, 2), r->tensor_data(1) + 2 * h.tensors[1].mat_stride);
  EXPECT_TRUE(check_plan_compatible(h, all_features(), nullptr).message().find("missing") != std::string::npos);

  // A moved-from plan gives up its mapping; the moved-to one still reads it.
  LoadedPlan moved = std::move(*r);
  EXPECT_EQ(moved.tensor_data(2)[5], pattern(2, 5));
  EXPECT_FALSE(moved.weights_copied());

  // Copied into anonymous memory instead of mapped: the same bytes at the same offsets.
  Expected<LoadedPlan> copied = read_plan(path, WeightsLoad::kCopy);
  ASSERT_TRUE(copied.has_value()) << copied.error();
  EXPECT_TRUE(copied->weights_copied());
  EXPECT_EQ(copied->weights_size(), moved.weights_size());
  EXPECT_EQ(std::memcmp(copied->weights_base(), moved.weights_base(), moved.weights_size()), 0);
  LoadedPlan copied_moved = std::move(*copied);
  EXPECT_EQ(copied_moved.tensor_data(1)[7], pattern(1, 7));
  copied_moved = std::move(moved);  // releases the copy, takes over the mapping
  EXPECT_FALSE(copied_moved.weights_copied());
  EXPECT_EQ(copied_moved.tensor_data(0)[3], pattern(0, 3));
}

// The side file's copy into memory reads chunks on several threads: every byte lands where it
// belongs whatever the chunk and thread counts; a file shorter than asked is one error.
TEST(PlanFile, ParallelReadPlacesEveryChunk) {
  TempDir dir;
  const std::string path = dir.file("bytes.bin");
  const uint64_t size = 1000003;  // not a multiple of any chunk
  std::vector<uint8_t> want(size);
  std::mt19937 rng(9);
  for (uint8_t& b : want) b = static_cast<uint8_t>(rng());
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(want.data(), 1, want.size(), f), want.size());
    std::fclose(f);
  }
  struct Case {
    int threads;
    uint64_t chunk, bytes;  // bytes read from the start of the file
  };
  const Case cases[] = {{1, uint64_t{1} << 20, size}, {3, 4096, size}, {4, 77777, size}, {8, size, size},
                        {5, 1, 4099}};  // one byte per read: fewer bytes keep it quick
  for (const auto& [threads, chunk, bytes] : cases) {
    std::vector<uint8_t> got(bytes + 16, 0xEE);
    Status s = detail::read_file_parallel(path, got.data(), bytes, threads, chunk);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << threads << " threads, chunks of " << chunk;
    for (size_t i = bytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xEE) << "wrote past the end";
  }
  std::vector<uint8_t> got(size + 5000);
  Status s = detail::read_file_parallel(path, got.data(), got.size(), 3, 4096);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("file shrank"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  s = detail::read_file_parallel(dir.file("missing.bin"), got.data(), 10, 2, 4096);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("cannot open"), std::string::npos) << s.message();
}

// The packer's real output travels through the side file unchanged and still computes the
// same GEMV from the mapping.
TEST(PlanFile, PackedWeightsSurviveTheSideFile) {
  TempDir dir;
  const int64_t rows = 24, cols = 512;
  std::vector<float> wf(static_cast<size_t>(rows * cols));
  for (size_t k = 0; k < wf.size(); ++k) wf[k] = static_cast<float>((k * 7919) % 201) / 100.0f - 1.0f;
  std::vector<uint8_t> wq(static_cast<size_t>(row_bytes(GgmlType::Q4_K, cols) * rows));
  for (int64_t r = 0; r < rows; ++r)
    ref::quantize_row(GgmlType::Q4_K, wf.data() + r * cols, wq.data() + r * row_bytes(GgmlType::Q4_K, cols), cols);
  Expected<PackedWeights> p = pack_weights(GgmlType::Q4_K, 8, wq.data(), wq.size(), rows, cols);
  ASSERT_TRUE(p.has_value()) << p.error();
  PlanHeader h = sample_header();
  h.tensors = {{"w", GgmlType::Q4_K, 8, rows, cols, 1, kPackWeights, 0, 0, 0}};
  ASSERT_TRUE(write_plan(dir.file("p.zplan"), h, [&](size_t, uint8_t* dst) {
                std::memcpy(dst, p->data.get(), static_cast<size_t>(p->layout.total_bytes));
                return Status::ok();
              }).is_ok());
  Expected<LoadedPlan> r = read_plan(dir.file("p.zplan"));
  ASSERT_TRUE(r.has_value()) << r.error();
  std::vector<float> xf(cols);
  for (int64_t k = 0; k < cols; ++k) xf[k] = std::sin(0.1f * static_cast<float>(k));
  std::vector<BlockQ8_K> xq(cols / 256);
  ref::quantize_row(GgmlType::Q8_K, xf.data(), xq.data(), cols);
  std::vector<float> y0(rows), y1(rows);
  ASSERT_TRUE(gemv_packed_ref(p->layout, p->data.get(), xq.data(), y0.data(), 0, rows).is_ok());
  ASSERT_TRUE(gemv_packed_ref(p->layout, r->tensor_data(0), xq.data(), y1.data(), 0, rows).is_ok());
  EXPECT_EQ(y0, y1);
}

TEST(PlanFile, RefusesAnotherPlanVersion) {
  TempDir dir;
  const std::string path = write_sample(dir);
  std::string bytes = slurp(path);
  const std::string mine = std::to_string(kPlanVersion);
  for (const uint32_t other : {kPlanVersion - 1, kPlanVersion + 1}) {
    std::memcpy(bytes.data() + 4, &other, 4);
    spit(path, bytes);
    expect_one_line_error(read_plan(path), "plan was made by plan format version " + std::to_string(other) +
                                               ", this zenmoe reads version " + mine + " — recompile");
  }
  // A future version is refused even when the rest would not parse as this version.
  spit(path, bytes.substr(0, 8));
  expect_one_line_error(read_plan(path), "plan format version " + std::to_string(kPlanVersion + 1));

  PlanHeader h = sample_header();
  h.version = kPlanVersion + 3;
  Status s = check_plan_compatible(h, all_features(), nullptr);
  EXPECT_EQ(s.message(), "plan was made by plan format version " + std::to_string(kPlanVersion + 3) + ", this zenmoe reads version " + mine + " — recompile");
}

TEST(PlanFile, RefusesMissingCpuFeatures) {
  PlanHeader h = sample_header();
  h.target_level = "avx512bf16";
  h.cpu_features = required_features(isa::IsaLevel::kAvx512Bf16);
  EXPECT_NE(h.cpu_features.find("avx512vnni"), std::string::npos);
  EXPECT_NE(h.cpu_features.find("avx512bf16"), std::string::npos);
  isa::CpuFeatures host = all_features();
  host.avx512bf16 = false;
  Status s = check_plan_compatible(h, host, nullptr);
  EXPECT_EQ(s.message(), "plan was compiled for CPU features " + h.cpu_features +
                             "; this CPU lacks avx512bf16 — recompile with --target host");
  host.avx512vnni = false;
  s = check_plan_compatible(h, host, nullptr);
  EXPECT_NE(s.message().find("this CPU lacks avx512vnni,avx512bf16 — recompile"), std::string::npos)
      << s.message();
  // The feature lists follow the ISA model: a CPU has the features of a level iff it runs it.
  for (int l = 0; l < isa::kIsaLevelCount; ++l) {
    const auto level = static_cast<isa::IsaLevel>(l);
    PlanHeader hl = sample_header();
    hl.cpu_features = required_features(level);
    const bool host_ok = check_plan_compatible(hl, isa::host_features(), nullptr).message().find("lacks") ==
                         std::string::npos;
    EXPECT_EQ(host_ok, isa::host_supports(level)) << isa::level_name(level);
  }
  EXPECT_EQ(required_features(isa::IsaLevel::kScalar), "");
}

// A plan whose Q5_0 kernels use GFNI names it among its CPU features: a CPU without GFNI is
// refused, a document that drops it is invalid, and the run's target has GFNI again.
TEST(PlanFile, GfniKernelsRequireGfni) {
  PlanHeader h = sample_header();
  EXPECT_FALSE(requires_feature(h, "gfni"));
  EXPECT_FALSE(plan_target(h)->gfni);
  EXPECT_EQ(required_features(isa::IsaLevel::kAvx512Vnni, h.kernels), h.cpu_features);
  h.kernels.push_back(default_gemv_desc(GgmlType::Q5_0, 64, {isa::IsaLevel::kAvx512Vnni, isa::Tuning::kZen4, true}));
  ASSERT_TRUE(h.kernels.back().gfni);
  h.cpu_features = required_features(isa::IsaLevel::kAvx512Vnni, h.kernels);
  EXPECT_EQ(h.cpu_features, required_features(isa::IsaLevel::kAvx512Vnni) + ",gfni");
  EXPECT_TRUE(requires_feature(h, "gfni"));
  EXPECT_TRUE(plan_target(h)->gfni);
  EXPECT_EQ(check_plan_compatible(h, all_features(), nullptr).message().find("lacks"), std::string::npos);
  isa::CpuFeatures host = all_features();
  host.gfni = false;
  EXPECT_NE(check_plan_compatible(h, host, nullptr).message().find("this CPU lacks gfni"), std::string::npos);
  TempDir dir;
  PlanHeader without = h;
  without.cpu_features = required_features(isa::IsaLevel::kAvx512Vnni);
  Status s = write_plan(dir.file("g.zplan"), without, [](size_t, uint8_t*) { return Status::ok(); });
  EXPECT_NE(s.message().find("lack gfni, which target avx512vnni's GFNI kernels need"), std::string::npos)
      << s.message();
}

gguf::Writer small_gguf(GgmlType type = GgmlType::F32, int64_t cols = 32, bool extra_first = false) {
  static std::vector<uint8_t> zeros(1 << 16);
  gguf::Writer w;
  w.metadata().set("general.architecture", gguf::Value::string("deepseek2"));
  w.metadata().set("general.name", gguf::Value::string("tiny"));
  w.metadata().set("deepseek2.block_count", gguf::Value::u32(1));
  if (extra_first) {
    EXPECT_TRUE(w.add_tensor("extra", GgmlType::F32, {8}, zeros.data()).is_ok());
  }
  EXPECT_TRUE(w.add_tensor("token_embd.weight", type, {cols, 4}, zeros.data()).is_ok());
  EXPECT_TRUE(w.add_tensor("output_norm.weight", GgmlType::F32, {cols}, zeros.data()).is_ok());
  return w;
}

uint64_t checksum_of(const gguf::Writer& w, const TempDir& dir) {
  const std::string path = dir.file("m.gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  Expected<gguf::Model> m = gguf::Model::open(path);
  EXPECT_TRUE(m.has_value()) << m.error();
  return m ? gguf_table_checksum(*m) : 0;
}

TEST(PlanFile, GgufChecksumFollowsTheTensorTable) {
  TempDir dir;
  const uint64_t base = checksum_of(small_gguf(), dir);
  EXPECT_EQ(checksum_of(small_gguf(), dir), base);  // deterministic
  EXPECT_NE(checksum_of(small_gguf(GgmlType::F16), dir), base);        // type
  EXPECT_NE(checksum_of(small_gguf(GgmlType::F32, 64), dir), base);    // shape
  EXPECT_NE(checksum_of(small_gguf(GgmlType::F32, 32, true), dir), base);  // offsets (and a tensor)
  // The same tensors at other data offsets: an 8-float tensor first, then 32- or 64-aligned.
  gguf::Writer aligned = small_gguf(GgmlType::F32, 32, true);
  const uint64_t at32 = checksum_of(aligned, dir);
  aligned.set_alignment(64);
  EXPECT_NE(checksum_of(aligned, dir), at32);
  gguf::Writer hyper = small_gguf();
  hyper.metadata().set("deepseek2.block_count", gguf::Value::u32(2));
  EXPECT_NE(checksum_of(hyper, dir), base);
  gguf::Writer arch = small_gguf();
  arch.metadata().set("general.architecture", gguf::Value::string("qwen3moe"));
  EXPECT_NE(checksum_of(arch, dir), base);
  gguf::Writer renamed = small_gguf();
  renamed.metadata().set("general.name", gguf::Value::string("another name"));
  EXPECT_EQ(checksum_of(renamed, dir), base);  // a cosmetic key needs no recompile
}

TEST(PlanFile, RefusesAChangedOrMissingGguf) {
  TempDir dir;
  const std::string gguf_path = dir.file("m.gguf");
  ASSERT_TRUE(small_gguf().write(gguf_path).is_ok());
  Expected<gguf::Model> m = gguf::Model::open(gguf_path);
  ASSERT_TRUE(m.has_value());
  PlanHeader h = sample_header();
  h.gguf_path = gguf_path;
  h.gguf_checksum = gguf_table_checksum(*m);
  EXPECT_TRUE(check_plan_compatible(h, all_features(), &*m).is_ok());
  Expected<gguf::Model> opened = open_plan_gguf(h, all_features());
  ASSERT_TRUE(opened.has_value()) << opened.error();
  EXPECT_EQ(opened->tensors().size(), 2u);

  ASSERT_TRUE(small_gguf(GgmlType::F16).write(gguf_path).is_ok());
  Expected<gguf::Model> changed = gguf::Model::open(gguf_path);
  ASSERT_TRUE(changed.has_value());
  const std::string msg = "model file " + gguf_path +
                          " changed since the plan was compiled (tensor table checksum differs) — recompile";
  EXPECT_EQ(check_plan_compatible(h, all_features(), &*changed).message(), msg);
  opened = open_plan_gguf(h, all_features());
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error(), msg);

  fs::remove(gguf_path);
  opened = open_plan_gguf(h, all_features());
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error(), "GGUF " + gguf_path + " used by the plan is missing");
  EXPECT_EQ(check_plan_compatible(h, all_features(), nullptr).message(), opened.error());
}

TEST(PlanFile, WriterStoresAnAbsoluteGgufPath) {
  TempDir dir;
  PlanHeader h = sample_header();
  h.gguf_path = "relative/model.gguf";
  const std::string path = write_sample(dir, h);
  Expected<LoadedPlan> r = read_plan(path);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_TRUE(fs::path(r->header.gguf_path).is_absolute());
  EXPECT_EQ(fs::path(r->header.gguf_path).filename(), "model.gguf");
}

// Every cut and every flipped byte is checked in memory (the parser read_plan uses), and a
// spread of them through files, so the test stays fast on a slow disk.
bool through_file(size_t at, size_t n) { return at < 48 || at + 48 > n || at % 23 == 0; }

void expect_parse_error(const std::string& bytes, const std::string& what) {
  uint64_t id = 0;
  Expected<PlanHeader> h =
      detail::parse_plan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "p.zplan", &id);
  ASSERT_FALSE(h.has_value()) << what;
  ASSERT_EQ(h.error().find('\n'), std::string::npos) << h.error();
  ASSERT_EQ(h.error().rfind("p.zplan: ", 0), 0u) << h.error();
}

TEST(PlanFile, TruncatedPlanAtEveryLength) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string bytes = slurp(path);
  ASSERT_GT(bytes.size(), 40u);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    // An exact-size copy, so ASan sees any read past the cut.
    expect_parse_error(bytes.substr(0, cut), "cut at " + std::to_string(cut));
    if (!through_file(cut, bytes.size())) continue;
    spit(path, bytes.substr(0, cut));
    Expected<LoadedPlan> r = read_plan(path);
    ASSERT_FALSE(r.has_value()) << "cut at " << cut;
    ASSERT_EQ(r.error().find('\n'), std::string::npos);
    ASSERT_EQ(r.error().rfind(path, 0), 0u) << r.error();
  }
  spit(path, bytes + "x");
  expect_one_line_error(read_plan(path), "trailing bytes");
}

TEST(PlanFile, CorruptPlanAtEveryByte) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string bytes = slurp(path);
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    expect_parse_error(bad, "byte " + std::to_string(at));
    if (!through_file(at, bytes.size())) continue;
    spit(path, bad);
    Expected<LoadedPlan> r = read_plan(path);
    ASSERT_FALSE(r.has_value()) << "byte " << at;
    ASSERT_EQ(r.error().find('\n'), std::string::npos);
  }
  spit(path, bytes);
  EXPECT_TRUE(read_plan(path).has_value());
}

TEST(PlanFile, TruncatedOrForeignSideFile) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string wpath = dir.file("model.zplan.weights");
  const std::string side = slurp(wpath);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{23}, size_t{24}, size_t{4095}, size_t{4096}, side.size() / 2,
                     side.size() - 1}) {
    spit(wpath, side.substr(0, cut));
    expect_one_line_error(read_plan(path), "truncated");
  }
  spit(wpath, side + std::string(4096, '\0'));
  expect_one_line_error(read_plan(path), "the plan expects");
  std::string bad = side;
  bad[0] = 'X';
  spit(wpath, bad);
  expect_one_line_error(read_plan(path), "no ZPLW magic");
  bad = side;
  bad[9] ^= 1;  // weights id
  spit(wpath, bad);
  expect_one_line_error(read_plan(path), "belongs to another compile");
  fs::remove(wpath);
  expect_one_line_error(read_plan(path), "cannot open the plan's weights");

  // A side file of the same size from another compile is refused too.
  PlanHeader other = sample_header();
  other.n_threads = 1;
  write_sample(dir, other, "other.zplan");
  fs::copy_file(dir.file("other.zplan.weights"), wpath);
  expect_one_line_error(read_plan(path), "belongs to another compile");
}

TEST(PlanFile, OffsetsAndSizesOutOfBounds) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string good = slurp(path);
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    spit(path, good);
    return read_edited(path, edit);
  };
  expect_one_line_error(edited([](auto& d) { d["tensors"][2]["offset"] = d["weights_bytes"]; }), "run past the end");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["offset"] = 4096 + 64; }), "4096-aligned");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["offset"] = 0; }), "after the side file header");
  expect_one_line_error(edited([](auto& d) { d["tensors"][1]["offset"] = d["tensors"][0]["offset"]; }), "overlap");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["nbytes"] = 64; }), "matrices of");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["offset"] = UINT64_MAX - 4095; }), "run past the end");
  expect_one_line_error(edited([](auto& d) {
                          d["tensors"][1]["n_mats"] = INT64_C(1) << 19;
                          d["tensors"][1]["mat_stride"] = UINT64_C(1) << 40;
                          d["tensors"][1]["nbytes"] = UINT64_C(1) << 59;
                        }),
                        "run past the end");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["mat_stride"] = 64; }), "matrix stride");
  expect_one_line_error(edited([](auto& d) { d["weights_bytes"] = 100; }), "smaller than the side file header");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["format"] = 5; }), "no packed layout");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["rows"] = -1; }), "out of range");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0]["kind"] = 9; }), "unknown pack kind");
  expect_one_line_error(edited([](auto& d) { d["tensors"][1]["name"] = "output.weight"; }), "appears twice");
  expect_one_line_error(edited([](auto& d) { d["tensors"][0].erase("cols"); }), "tensors[0].cols is missing");
  expect_one_line_error(edited([](auto& d) { d["graph"] = 3; }), "graph is not a string");
  expect_one_line_error(edited([](auto& d) { d["target_level"] = "avx9000"; }), "unknown ISA level");
  expect_one_line_error(edited([](auto& d) { d["cpu_features"] = "avx2"; }), "which target avx512vnni needs");
  expect_one_line_error(edited([](auto& d) { d["weights_file"] = "../elsewhere"; }), "not a plain file name");
  expect_one_line_error(edited([](auto& d) { d["n_threads"] = 0; }), "thread count");
  expect_one_line_error(edited([](auto& d) { d["n_kernels"] = 2; }), "kernel table holds");
  expect_one_line_error(edited([](auto& d) { d = nlohmann::json::array(); }), "not a JSON object");
}

TEST(PlanFile, InvalidKernelDescriptorIsRefused) {
  TempDir dir;
  const std::string path = write_sample(dir);
  nlohmann::json doc;
  std::string kernels;
  split_plan(slurp(path), &doc, &kernels);
  KernelDesc d;
  std::memcpy(&d, kernels.data(), sizeof d);
  d.cols = 100;  // not a multiple of the Q4_K block
  std::memcpy(kernels.data(), &d, sizeof d);
  spit(path, raw_plan(doc.dump(), kernels));
  expect_one_line_error(read_plan(path), "kernel 0:");
  // A prefetch stride no Q4_K kernel implements (the field was reserved in older plans).
  std::memcpy(&d, kernels.data(), sizeof d);
  d.cols = 256;
  d.prefetch_stride = 1024;
  std::memcpy(kernels.data(), &d, sizeof d);
  spit(path, raw_plan(doc.dump(), kernels));
  expect_one_line_error(read_plan(path), "prefetch less than every line");
  // A stream count no kernel walks, and several streams where the kernel walks one.
  std::memcpy(&d, kernels.data(), sizeof d);
  d.prefetch_stride = 0;
  d.streams = 3;
  std::memcpy(kernels.data(), &d, sizeof d);
  spit(path, raw_plan(doc.dump(), kernels));
  expect_one_line_error(read_plan(path), "3 streams is not 1, 2 or 4");
  d.streams = 2;
  d.weight = GgmlType::Q6_K;
  d.row_block = 16;
  std::memcpy(kernels.data(), &d, sizeof d);
  spit(path, raw_plan(doc.dump(), kernels));
  expect_one_line_error(read_plan(path), "side by side");
  // A prefetch hint no kernel emits.
  d.streams = 1;
  d.weight = GgmlType::Q4_K;
  d.row_block = 8;
  d.prefetch_hint = static_cast<PrefetchHint>(2);
  std::memcpy(kernels.data(), &d, sizeof d);
  spit(path, raw_plan(doc.dump(), kernels));
  expect_one_line_error(read_plan(path), "prefetch hint 2");
  spit(path, raw_plan("{", ""));
  expect_one_line_error(read_plan(path), "not valid JSON");
}

TEST(PlanFile, WriterRejectsInvalidHeadersAndLeavesNothing) {
  TempDir dir;
  auto expect_refused = [&](PlanHeader h, const std::string& needle) {
    Status s = write_plan(dir.file("x.zplan"), std::move(h), [](size_t, uint8_t*) { return Status::ok(); });
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_EQ(dir.entries(), 0u);
  };
  PlanHeader h = sample_header();
  h.kernels[1].prefetch_hint = static_cast<PrefetchHint>(3);
  expect_refused(h, "prefetch hint 3");
  h = sample_header();
  h.tensors[0].rows = 0;
  expect_refused(h, "row count");
  h = sample_header();
  h.tensors[1].kind = kPackGateUp;
  h.tensors[1].rows = 31;
  expect_refused(h, "even");
  h = sample_header();
  h.target_tuning = "zen9";
  expect_refused(h, "tuning");
  h = sample_header();
  h.weights_file = "a/b";
  expect_refused(h, "plain file name");
  Status s = write_plan(dir.file("missing-dir/x.zplan"), sample_header(),
                        [](size_t, uint8_t*) { return Status::ok(); });
  EXPECT_NE(s.message().find("cannot create a temporary"), std::string::npos) << s.message();
}

TEST(PlanFile, FailedWriteLeavesNoFileAndKeepsTheOldPlan) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const std::string old_plan = slurp(path), old_side = slurp(path + ".weights");
  PlanHeader other = sample_header();
  other.n_threads = 1;

  Status s = write_plan(path, other, [](size_t i, uint8_t*) {
    return i == 1 ? Status(Error{"out of coffee"}) : Status::ok();
  });
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("blk.1.ffn_gate_up_exps.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("out of coffee"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 2u);
  EXPECT_EQ(slurp(path), old_plan);
  EXPECT_EQ(slurp(path + ".weights"), old_side);

  s = write_plan(path, other, [](size_t, uint8_t*) -> Status { throw std::runtime_error("boom"); });
  EXPECT_NE(s.message().find("boom"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 2u);
  s = write_plan(
      path, other, [](size_t, uint8_t*) { return Status::ok(); },
      [](uint64_t done, uint64_t) {
        if (done > 0) throw std::runtime_error("progress bar broke");
      });
  EXPECT_NE(s.message().find("progress bar broke"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 2u);
  EXPECT_TRUE(read_plan(path).has_value());

  TempDir empty;
  s = write_plan(empty.file("m.zplan"), sample_header(), [](size_t, uint8_t*) { return Status(Error{"no"}); });
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(empty.entries(), 0u);
}

// Tensors are written on a thread per usable core: tensor 0's writer waits for another tensor's
// to start (it would wait in vain on one thread), the plan reads back whole, and when several
// fail the lowest is the one reported.
TEST(PlanFile, TensorsAreWrittenInParallel) {
  if (default_thread_count() < 2) GTEST_SKIP() << "needs 2 cores";
  TempDir dir;
  const std::string path = dir.file("par.zplan");
  PlanHeader placed = sample_header();
  ASSERT_TRUE(layout_tensors(&placed).is_ok());
  std::mutex mu;
  std::condition_variable cv;
  bool other_started = false;
  Status s = write_plan(path, sample_header(), [&](size_t i, uint8_t* dst) {
    std::unique_lock<std::mutex> lock(mu);
    if (i == 0) {
      if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return other_started; }))
        return Status(Error{"no other tensor was written meanwhile"});
    } else {
      other_started = true;
      cv.notify_all();
    }
    lock.unlock();
    return fill_pattern(placed, i, dst);
  });
  ASSERT_TRUE(s.is_ok()) << s.message();
  Expected<LoadedPlan> r = read_plan(path);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->tensor_data(0)[3], pattern(0, 3));
  EXPECT_EQ(r->tensor_data(2)[11], pattern(2, 11));

  s = write_plan(dir.file("fail.zplan"), sample_header(), [](size_t i, uint8_t*) {
    return i >= 1 ? Status(Error{"failed " + std::to_string(i)}) : Status::ok();
  });
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("blk.1.ffn_gate_up_exps.weight': failed 1"), std::string::npos) << s.message();
  EXPECT_EQ(dir.entries(), 2u);  // the first plan and its side file, nothing of the failed one
}

TEST(PlanFileDeathTest, InterruptedWriteLeavesNoTemporaries) {
  // fork() without exec: the child writes into this test's folder, which is checked afterwards.
  GTEST_FLAG_SET(death_test_style, "fast");
  TempDir dir;
  const std::string path = dir.file("m.zplan");
  EXPECT_EXIT(
      {
        Status s = write_plan(path, sample_header(), [](size_t i, uint8_t*) {
          if (i == 1) std::raise(SIGINT);
          return Status::ok();
        });
        std::exit(s.is_ok() ? 0 : 1);
      },
      ::testing::KilledBySignal(SIGINT), "");
  EXPECT_EQ(dir.entries(), 0u);
  // The previous disposition is restored after a write.
  ASSERT_TRUE(write_plan(path, sample_header(), [](size_t, uint8_t*) { return Status::ok(); }).is_ok());
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// Under nohup SIGHUP is ignored: a hangup during the write must neither remove the
// temporaries nor stop the write.
TEST(PlanFileDeathTest, IgnoredSignalStaysIgnored) {
  // fork() without exec: the child writes into this test's folder, which is checked afterwards.
  GTEST_FLAG_SET(death_test_style, "fast");
  TempDir dir;
  const std::string path = dir.file("m.zplan");
  EXPECT_EXIT(
      {
        std::signal(SIGHUP, SIG_IGN);
        Status s = write_plan(path, sample_header(), [](size_t i, uint8_t*) {
          if (i == 1) std::raise(SIGHUP);
          return Status::ok();
        });
        std::exit(s.is_ok() && read_plan(path).has_value() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(dir.entries(), 2u);
}

TEST(PlanFile, PlanWithoutTensors) {
  TempDir dir;
  PlanHeader h = sample_header();
  h.tensors.clear();
  h.kernels.clear();
  h.weights_file = "side.bin";
  ASSERT_TRUE(write_plan(dir.file("p.zplan"), h, nullptr).is_ok());
  Expected<LoadedPlan> r = read_plan(dir.file("p.zplan"));
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(r->header.weights_bytes, 4096u);
  EXPECT_TRUE(fs::exists(dir.file("side.bin")));
  EXPECT_EQ(read_plan(dir.file("none.zplan")).error().find("cannot open plan"), dir.file("none.zplan").size() + 2);
  spit(dir.file("text.zplan"), "hello world, this is not a plan at all");
  expect_one_line_error(read_plan(dir.file("text.zplan")), "not a zenmoe plan");
}

}  // namespace
}  // namespace zenmoe::plan

namespace zenmoe::plan {
namespace {

// Replays every input kept in tests/fuzz/regressions-plan/ (fuzzer findings and hand-made
// hostile plans) through the parser read_plan uses: each is refused with one line.
TEST(PlanFileRegressions, EveryKeptInputIsRefusedCleanly) {
  const fs::path dir = fs::path(ZENMOE_SOURCE_DIR) / "tests" / "fuzz" / "regressions-plan";
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string bytes = slurp(e.path().string());
    // Kept inputs carry this plan version, so they reach the parts of the parser they were
    // kept for instead of stopping at the version check.
    if (bytes.size() >= 8 && bytes.compare(0, 4, "ZPLN") == 0) std::memcpy(bytes.data() + 4, &kPlanVersion, 4);
    uint64_t id = 0;
    Expected<PlanHeader> h = detail::parse_plan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                e.path().filename().string(), &id);
    ASSERT_FALSE(h.has_value()) << e.path();
    EXPECT_EQ(h.error().find('\n'), std::string::npos) << h.error();
    ++n;
  }
  EXPECT_GE(n, 3u);
}

}  // namespace
}  // namespace zenmoe::plan
