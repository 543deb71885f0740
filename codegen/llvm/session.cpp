// The ORC session: every LLVM-version detail of glue code generation lives in this file
// (LLJIT, target machines, the O3 pipeline, object emission through the disk cache).
//
// Target choice: the CPU name picks LLVM's scheduling model (host, znver4, znver5); the
// feature string lists every feature LLVM knows explicitly, each on only when the host has
// it (LLVM's host detection AND the ISA model) and the descriptor's ISA level allows it. So
// `znver5` scheduling never turns on an instruction (e.g. AVX512_BF16) the host lacks.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include "codegen/glue.h"
#include "codegen/llvm/glue_ir.h"
#include "codegen/llvm/object_cache.h"
#include "codegen/perf_map.h"

namespace zenmoe {
namespace {

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

uint64_t fnv(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Whether the ISA level lets the generated code use LLVM feature `f` (host support is
// checked separately). Levels cap vector extensions; everything else follows the host.
bool level_allows(isa::IsaLevel level, const std::string& f) {
  using isa::IsaLevel;
  const bool avx512_family = starts_with(f, "avx512") || starts_with(f, "avx10") || starts_with(f, "amx") ||
                             f == "evex512";
  const bool avx_family = avx512_family || starts_with(f, "avx") || f == "fma" || f == "fma4" || f == "xop" ||
                          f == "f16c" || f == "vaes" || f == "vpclmulqdq" || f == "gfni" || f == "bmi" ||
                          f == "bmi2" || starts_with(f, "sha512") || f == "sm3" || f == "sm4";
  if (level == IsaLevel::kScalar) return !avx_family;
  if (level == IsaLevel::kAvx2) return !avx512_family;
  if (f == "avx512bf16") return level >= IsaLevel::kAvx512Bf16;
  if (starts_with(f, "amx")) return level >= IsaLevel::kAmx;
  if (f == "avx512vnni") return level >= IsaLevel::kAvx512Vnni;
  return true;
}

// Features the ISA model (the project's one CPUID reader) says the host lacks.
bool isa_model_denies(const std::string& f) {
  const isa::CpuFeatures& h = isa::host_features();
  if (f == "avx") return !(h.avx && h.os_ymm);
  if (f == "avx2") return !(h.avx2 && h.os_ymm);
  if (f == "fma") return !h.fma;
  if (f == "f16c") return !h.f16c;
  if (f == "bmi") return !h.bmi1;
  if (f == "bmi2") return !h.bmi2;
  if (f == "avx512f" || f == "evex512") return !(h.avx512f && h.os_zmm);
  if (f == "avx512bw") return !h.avx512bw;
  if (f == "avx512vl") return !h.avx512vl;
  if (f == "avx512dq") return !h.avx512dq;
  if (f == "avx512vnni") return !h.avx512vnni;
  if (f == "avx512vbmi") return !h.avx512vbmi;
  if (f == "avx512bf16") return !h.avx512bf16;
  if (f == "gfni") return !h.gfni;
  return false;
}

// One compilation target: CPU name, explicit feature list, vector width, its TargetMachine.
struct Target {
  std::string cpu;
  std::string features;  // "+a,-b,..." sorted, every feature LLVM reports for the host
  unsigned vf = 4;
  std::unique_ptr<llvm::TargetMachine> tm;
};

Expected<std::unique_ptr<Target>> make_target(isa::IsaLevel level, GlueCpu cpu) {
  auto t = std::make_unique<Target>();
  t->cpu = cpu == GlueCpu::kHost ? llvm::sys::getHostCPUName().str() : glue_cpu_name(cpu);
  std::vector<std::string> feats;
  bool avx512 = false, avx2 = false;
  for (const auto& kv : llvm::sys::getHostCPUFeatures()) {
    const std::string f = kv.getKey().str();
    const bool on = kv.getValue() && level_allows(level, f) && !isa_model_denies(f);
    feats.push_back((on ? "+" : "-") + f);
    if (f == "avx512f") avx512 = on;
    if (f == "avx2") avx2 = on;
  }
  if (feats.empty()) return Error{"glue: LLVM reports no host CPU features; cannot bound the instruction set"};
  std::sort(feats.begin(), feats.end(), [](const std::string& a, const std::string& b) {
    return a.substr(1) < b.substr(1);
  });
  for (const std::string& f : feats) t->features += (t->features.empty() ? "" : ",") + f;
  t->vf = avx512 ? 16 : avx2 ? 8 : 4;
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(llvm::sys::getProcessTriple())};
  jtmb.setCPU(t->cpu);
  jtmb.addFeatures(feats);
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  auto tm = jtmb.createTargetMachine();
  if (!tm) return Error{"glue: no LLVM target machine for CPU " + t->cpu + ": " + to_string(tm.takeError())};
  if (!(*tm)->getMCSubtargetInfo()->isCPUStringValid(t->cpu))
    return Error{"glue: LLVM " LLVM_VERSION_STRING " does not know CPU '" + t->cpu + "'"};
  t->tm = std::move(*tm);
  return t;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

std::string symbol_of(const GlueDesc& d) { return "zenmoe_glue_" + hex64(glue_hash(d)); }

// The size the object's symbol table gives `name` (0 if absent or unreadable): for the perf map.
uint64_t symbol_size(const llvm::MemoryBuffer& obj, const std::string& name) {
  auto file = llvm::object::ObjectFile::createObjectFile(obj.getMemBufferRef());
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  for (const llvm::object::SymbolRef& sym : (*file)->symbols()) {
    auto n = sym.getName();
    if (!n) {
      llvm::consumeError(n.takeError());
      continue;
    }
    if (*n == name) return llvm::object::ELFSymbolRef(sym).getSize();
  }
  return 0;
}

}  // namespace

class GlueSession::Impl {
 public:
  explicit Impl(std::string dir) : cache_(std::move(dir)) {}

  Expected<GlueFn> get(const GlueDesc& d);
  Expected<std::string> ir_text(const GlueDesc& d, bool optimized);
  Expected<Target*> target(const GlueDesc& d);
  std::string file_name(const GlueDesc& d, const Target& t) const;
  std::string key_text(const GlueDesc& d, const Target& t) const;
  GlueStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    GlueStats s = stats_;
    s.cache_rejected = cache_.rejected();
    return s;
  }
  const std::string& dir() const { return cache_.dir(); }
  std::mutex& gen_mu() { return gen_mu_; }
  void set_dump_dir(std::string dir) {
    std::lock_guard<std::mutex> lock(gen_mu_);
    dump_dir_ = std::move(dir);
  }

 private:
  struct Slot {
    std::once_flag once;
    GlueFn fn = nullptr;
    std::string error;
  };
  Expected<std::unique_ptr<llvm::Module>> build(llvm::LLVMContext& ctx, const GlueDesc& d, Target& t,
                                                const std::string& module_id);
  Expected<GlueFn> generate(const GlueDesc& d);
  Status ensure_jit();
  void dump(const llvm::Module& m, const GlueDesc& d) const;

  mutable std::mutex mu_;   // slots_, stats_
  std::mutex gen_mu_;       // everything LLVM: the JIT, target machines, the cache
  std::unordered_map<GlueDesc, std::shared_ptr<Slot>, GlueDescHash> slots_;
  std::map<std::pair<int, int>, std::unique_ptr<Target>> targets_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  glue_llvm::DiskObjectCache cache_;
  GlueStats stats_;
  std::string dump_dir_;
};

Status GlueSession::Impl::ensure_jit() {
  if (jit_) return Status::ok();
  init_llvm();
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) return Error{"glue: cannot start the LLVM JIT: " + to_string(jit.takeError())};
  // Generated code calls libm (cosf, sinf) and compiler-rt helpers from this process.
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
  if (!gen) return Error{"glue: cannot expose process symbols to the JIT: " + to_string(gen.takeError())};
  (*jit)->getMainJITDylib().addGenerator(std::move(*gen));
  jit_ = std::move(*jit);
  return Status::ok();
}

void GlueSession::Impl::dump(const llvm::Module& m, const GlueDesc& d) const {
  if (dump_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dump_dir_, ec);
  llvm::raw_fd_ostream out(dump_dir_ + "/" + glue_name(d) + ".ll", ec);
  if (!ec) m.print(out, nullptr);  // observability only: a failed dump never fails the kernel
}

Expected<Target*> GlueSession::Impl::target(const GlueDesc& d) {
  auto& t = targets_[{static_cast<int>(d.isa), static_cast<int>(d.cpu)}];
  if (!t) {
    init_llvm();
    Expected<std::unique_ptr<Target>> made = make_target(d.isa, d.cpu);
    if (!made) return Error{made.error()};
    t = std::move(*made);
  }
  return t.get();
}

std::string GlueSession::Impl::file_name(const GlueDesc& d, const Target& t) const {
  return "glue-" + hex64(glue_hash(d)) + "-llvm" LLVM_VERSION_STRING "-" + t.cpu + "-" + hex64(fnv(t.features)) + ".o";
}

std::string GlueSession::Impl::key_text(const GlueDesc& d, const Target& t) const {
  unsigned char bytes[sizeof(GlueDesc)];
  std::memcpy(bytes, &d, sizeof bytes);
  std::string s;
  for (unsigned char c : bytes) s += hex64(c).substr(14);
  return s + "|llvm " LLVM_VERSION_STRING "|" + t.cpu + "|" + t.features;
}

Expected<std::unique_ptr<llvm::Module>> GlueSession::Impl::build(llvm::LLVMContext& ctx, const GlueDesc& d,
                                                                 Target& t, const std::string& module_id) {
  auto m = std::make_unique<llvm::Module>(module_id, ctx);
  m->setDataLayout(t.tm->createDataLayout());
  m->setTargetTriple(t.tm->getTargetTriple().str());
  llvm::Function* f = glue_ir::emit_glue(*m, d, symbol_of(d), t.vf);
  f->addFnAttr("target-cpu", t.cpu);
  f->addFnAttr("target-features", t.features);
  if (t.vf == 16) {
    // Without these LLVM splits 512-bit vectors on CPUs it tunes for 256-bit code.
    f->addFnAttr("prefer-vector-width", "512");
    f->addFnAttr("min-legal-vector-width", "512");
  }
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os)) return Error{"glue: " + glue_name(d) + ": generated invalid IR: " + os.str()};
  return m;
}

Expected<GlueFn> GlueSession::Impl::generate(const GlueDesc& d) {
  ZENMOE_RETURN_IF_ERROR(validate(d));
  if (!isa::host_supports(d.isa))
    return Error{glue_name(d) + ": needs " + isa::level_name(d.isa) + " but the host runs at most " +
                 isa::level_name(isa::host_level())};
  std::lock_guard<std::mutex> lock(gen_mu_);
  ZENMOE_RETURN_IF_ERROR(ensure_jit());
  Expected<Target*> t = target(d);
  if (!t) return Error{t.error()};
  const std::string file = file_name(d, **t);
  cache_.expect(file, key_text(d, **t));
  std::unique_ptr<llvm::MemoryBuffer> obj = cache_.lookup(file);
  const bool from_cache = obj != nullptr;
  if (!obj) {
    llvm::LLVMContext ctx;
    Expected<std::unique_ptr<llvm::Module>> m = build(ctx, d, **t, file);
    if (!m) return Error{m.error()};
    optimize(**m, *(*t)->tm);
    dump(**m, d);
    llvm::orc::SimpleCompiler compile(*(*t)->tm, cache_.dir().empty() ? nullptr : &cache_);
    auto compiled = compile(**m);
    if (!compiled) return Error{"glue: " + glue_name(d) + ": code generation failed: " + to_string(compiled.takeError())};
    obj = std::move(*compiled);
  }
  const uint64_t code_bytes = perf_map_enabled() ? symbol_size(*obj, symbol_of(d)) : 0;
  if (llvm::Error e = jit_->addObjectFile(std::move(obj)))
    return Error{"glue: " + glue_name(d) + ": cannot link object: " + to_string(std::move(e))};
  auto addr = jit_->lookup(symbol_of(d));
  if (!addr) return Error{"glue: " + glue_name(d) + ": symbol lookup failed: " + to_string(addr.takeError())};
  {
    std::lock_guard<std::mutex> slock(mu_);
    ++(from_cache ? stats_.loaded : stats_.generated);
  }
  perf_map_note(addr->toPtr<const void*>(), code_bytes, glue_name(d));
  return addr->toPtr<GlueFn>();
}

Expected<GlueFn> GlueSession::Impl::get(const GlueDesc& d) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = slots_[d];
    if (!s) s = std::make_shared<Slot>();
    else if (s->fn) ++stats_.reused;
    slot = s;
  }
  std::call_once(slot->once, [&] {
    Expected<GlueFn> fn = generate(d);
    if (fn) slot->fn = *fn;
    else slot->error = fn.error();
  });
  if (!slot->fn) return Error{slot->error};
  return slot->fn;
}

Expected<std::string> GlueSession::Impl::ir_text(const GlueDesc& d, bool optimized) {
  ZENMOE_RETURN_IF_ERROR(validate(d));
  std::lock_guard<std::mutex> lock(gen_mu_);
  Expected<Target*> t = target(d);
  if (!t) return Error{t.error()};
  llvm::LLVMContext ctx;
  Expected<std::unique_ptr<llvm::Module>> m = build(ctx, d, **t, glue_name(d));
  if (!m) return Error{m.error()};
  if (optimized) optimize(**m, *(*t)->tm);
  std::string s;
  llvm::raw_string_ostream os(s);
  (*m)->print(os, nullptr);
  return os.str();
}

GlueSession::GlueSession(std::string cache_dir) : impl_(std::make_unique<Impl>(std::move(cache_dir))) {}
GlueSession::~GlueSession() = default;
Expected<GlueFn> GlueSession::get(const GlueDesc& d) { return impl_->get(d); }
Expected<std::string> GlueSession::ir_text(const GlueDesc& d, bool optimized) { return impl_->ir_text(d, optimized); }
GlueStats GlueSession::stats() const { return impl_->stats(); }
const std::string& GlueSession::cache_dir() const { return impl_->dir(); }
void GlueSession::set_dump_dir(std::string dir) { impl_->set_dump_dir(std::move(dir)); }

Expected<std::string> GlueSession::cache_file_name(const GlueDesc& d) {
  ZENMOE_RETURN_IF_ERROR(validate(d));
  std::lock_guard<std::mutex> lock(impl_->gen_mu());
  Expected<Target*> t = impl_->target(d);
  if (!t) return Error{t.error()};
  return impl_->file_name(d, **t);
}

Expected<std::string> GlueSession::target_description(const GlueDesc& d) {
  ZENMOE_RETURN_IF_ERROR(validate(d));
  std::lock_guard<std::mutex> lock(impl_->gen_mu());
  Expected<Target*> t = impl_->target(d);
  if (!t) return Error{t.error()};
  return (*t)->cpu + " " + (*t)->features;
}

namespace glue_ir {

llvm::Function* emit_glue(llvm::Module& m, const GlueDesc& d, const std::string& symbol, unsigned vf) {
  llvm::LLVMContext& c = m.getContext();
  auto* ty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {llvm::PointerType::get(c, 0)}, false);
  llvm::Function* f = llvm::Function::Create(ty, llvm::Function::ExternalLinkage, symbol, m);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", f));
  Kit k(b, f, vf);
  llvm::Value* call = f->getArg(0);
  auto field = [&](int off, llvm::Type* t) {
    return b.CreateAlignedLoad(t, k.at_bytes(call, k.ci64(off)), llvm::Align(8));
  };
  Args a{field(0, k.ptr),  field(8, k.ptr),   field(16, k.ptr), field(24, k.ptr), field(32, k.ptr), field(40, k.ptr),
         field(48, k.i64), field(56, k.i64), field(64, k.i64), field(72, k.i64), field(80, k.i64)};
  switch (d.op) {
    case GlueOp::kRmsNorm: emit_rms_norm(k, d, a); break;
    case GlueOp::kQuantize: emit_quantize(k, d, a); break;
    case GlueOp::kSwiglu: emit_swiglu(k, d, a); break;
    case GlueOp::kAdd: emit_add(k, d, a); break;
    case GlueOp::kWeightedSum: emit_weighted_sum(k, d, a); break;
    case GlueOp::kRope: emit_rope(k, d, a); break;
    case GlueOp::kSoftmax: emit_softmax(k, d, a); break;
    case GlueOp::kRouter: emit_router(k, d, a); break;
    case GlueOp::kAttnDecode: emit_attn_decode(k, d, a); break;
  }
  b.CreateRetVoid();
  return f;
}

}  // namespace glue_ir
}  // namespace zenmoe
