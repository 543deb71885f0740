// libFuzzer target for the GGUF reader: any input must either be rejected with an error or
// parse into a File whose every metadata value and tensor byte can be read without leaving
// the input buffer. Layout invariants are checked with a trap so logic bugs count as crashes.
//
// With ZENMOE_FUZZ_SEED_DIR set, LLVMFuzzerInitialize first writes a seed corpus there
// (writer-made files, plus files built from the oracle model's metadata when
// ZENMOE_FUZZ_ORACLE_DIR is set); scripts/fuzz.sh uses this.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/gguf.h"

namespace {

using namespace zenmoe;
using namespace zenmoe::gguf;

volatile uint64_t g_sink;  // keeps reads from being optimised away

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void touch_metadata(const Metadata& md) {
  uint64_t acc = 0;
  for (const auto& [key, v] : md.entries()) {
    require(!key.empty());
    require(md.find(key) == &v);
    acc += md.get_uint_or(key, 1) + static_cast<uint64_t>(md.get_float_or(key, 0) != 0);
    acc += md.get_bool_or(key, false) + md.get_string_or(key, "").size();
    if (auto i = md.get_int(key)) acc += static_cast<uint64_t>(*i);
    if (auto s = md.get_string_array(key)) acc += s->size();
    if (auto a = md.get_int_array(key)) acc += a->size();
    if (auto f = md.get_float_array(key)) acc += f->size();
    acc += v.array_size();
    for (const auto& s : v.arr_str) acc += s.empty() ? 0 : static_cast<uint8_t>(s.back());
  }
  g_sink = acc;
}

void touch_tensors(const File& f) {
  const uint8_t* lo = f.base() + f.data_offset();
  const uint8_t* hi = f.base() + f.size();
  require(f.data_offset() <= f.size() || f.tensors().empty());
  const uint8_t* prev_end = lo;
  uint64_t acc = 0;
  for (const TensorInfo& t : f.tensors()) {
    require(t.n_dims >= 0 && t.n_dims <= 4 && t.name.size() < 64);
    require(t.n_elements() >= 0);
    require(row_bytes(t.type, t.ne[0]) >= 0);
    if (t.nbytes == 0) continue;
    require(static_cast<int64_t>(t.nbytes) ==
            row_bytes(t.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3]);
    require(t.data >= prev_end && t.data + t.nbytes <= hi);
    require((t.data - f.base()) % f.alignment() == 0);
    acc += t.data[0] + t.data[t.nbytes - 1] + t.row_bytes();
    prev_end = t.data + t.nbytes;
  }
  g_sink = acc;
}

// --- seed corpus -------------------------------------------------------------------------

void write_seed(const std::string& dir, const std::string& name, Writer& w) {
  Status s = w.write(dir + "/" + name);
  if (!s) {
    std::fprintf(stderr, "seed %s: %s\n", name.c_str(), s.message().c_str());
    std::exit(1);
  }
}

void add(Writer& w, const char* name, GgmlType type, std::vector<int64_t> dims) {
  Status s = w.add_tensor(name, type, std::move(dims), [](uint8_t* dst, uint64_t n) {
    for (uint64_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>(k * 31 + 7);
  });
  if (!s) std::exit(1);
}

void writer_seeds(const std::string& dir) {
  Writer spec;
  spec.metadata().set("general.architecture", Value::string("deepseek2"));
  spec.metadata().set("general.alignment", Value::u32(32));
  add(spec, "a", GgmlType::F32, {4, 2});
  write_seed(dir, "spec-example.gguf", spec);

  Writer types;
  Metadata& m = types.metadata();
  m.set("u8", Value::u8(7));
  m.set("i8", Value::i8(-7));
  m.set("u16", Value::u16(700));
  m.set("i16", Value::i16(-700));
  m.set("u32", Value::u32(70000));
  m.set("i32", Value::i32(-70000));
  m.set("f32", Value::f32(0.5f));
  m.set("bool", Value::boolean(true));
  m.set("string", Value::string("text"));
  m.set("u64", Value::u64(1ull << 40));
  m.set("i64", Value::i64(-(1ll << 40)));
  m.set("f64", Value::f64(0.25));
  m.set("a.str", Value::array_of_strings({"x", "yz"}));
  m.set("a.i32", Value::array_of_ints(ValueType::I32, {1, -2}));
  m.set("a.u8", Value::array_of_uints(ValueType::U8, {3, 4}));
  m.set("a.bool", Value::array_of_uints(ValueType::BOOL, {1, 0}));
  m.set("a.f32", Value::array_of_floats(ValueType::F32, {1.5}));
  m.set("a.f64", Value::array_of_floats(ValueType::F64, {2.5}));
  write_seed(dir, "all-types.gguf", types);

  Writer quant;
  quant.set_alignment(64);
  add(quant, "q4k", GgmlType::Q4_K, {256, 2});
  add(quant, "q5_0", GgmlType::Q5_0, {32, 3});
  add(quant, "q6k", GgmlType::Q6_K, {256});
  add(quant, "q8_0", GgmlType::Q8_0, {64});
  add(quant, "f16", GgmlType::F16, {3, 2, 2});
  add(quant, "bf16", GgmlType::BF16, {2, 1, 1, 2});
  add(quant, "iq4xs", GgmlType::IQ4_XS, {256});
  add(quant, "empty", GgmlType::F32, {0});
  write_seed(dir, "quant-types.gguf", quant);

  Writer split;
  split.metadata().set("split.no", Value::u16(0));
  split.metadata().set("split.count", Value::u16(1));
  split.metadata().set("split.tensors.count", Value::i32(1));
  add(split, "t", GgmlType::F32, {8});
  write_seed(dir, "split-keys.gguf", split);
}

// The oracle model's real metadata (tokenizer arrays included) with three small tensors of
// the model's quant types, so seeds look like real files but stay small.
void oracle_seed(const std::string& dir, const std::string& oracle) {
  auto f = File::open(oracle + "/tiny-q4ks.gguf");
  if (!f) {
    std::fprintf(stderr, "%s\n", f.error().c_str());
    std::exit(1);
  }
  Writer w;
  for (const auto& [k, v] : f->metadata().entries()) w.metadata().set(k, v);
  add(w, "output.weight", GgmlType::Q6_K, {256, 1});
  add(w, "blk.0.attn_k_b.weight", GgmlType::Q5_0, {128, 1, 1});
  add(w, "token_embd.weight", GgmlType::Q4_K, {256, 1});
  write_seed(dir, "oracle-metadata.gguf", w);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* seeds = std::getenv("ZENMOE_FUZZ_SEED_DIR");
  if (!seeds) return 0;
  writer_seeds(seeds);
  if (const char* oracle = std::getenv("ZENMOE_FUZZ_ORACLE_DIR")) oracle_seed(seeds, oracle);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = File::from_memory(data, size, "fuzz.gguf");
  if (!f) {
    require(f.error().rfind("fuzz.gguf: ", 0) == 0);
    require(f.error().find('\n') == std::string::npos);
    return 0;
  }
  require(f->version() == 2 || f->version() == 3);
  require(f->alignment() != 0 && (f->alignment() & (f->alignment() - 1)) == 0);
  touch_metadata(f->metadata());
  touch_tensors(*f);
  std::vector<File> files;
  files.push_back(std::move(*f));
  auto m = Model::from_files(std::move(files));
  if (m) {
    for (const TensorInfo& t : m->tensors()) require(m->find_tensor(t.name) == &t);
  }
  return 0;
}
