// GlueDesc: hashing, names, validation, descriptor helpers and the process-wide session.
// No LLVM here: the session's implementation lives in codegen/llvm/session.cpp.
#include "codegen/glue.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/hash.h"

namespace zenmoe {

bool operator==(const GlueDesc& a, const GlueDesc& b) { return std::memcmp(&a, &b, sizeof(GlueDesc)) == 0; }

uint64_t glue_hash(const GlueDesc& d) { return fnv1a(&d, sizeof d); }

const char* glue_op_name(GlueOp op) {
  switch (op) {
    case GlueOp::kRmsNorm: return "rmsnorm";
    case GlueOp::kQuantize: return "quantize";
    case GlueOp::kSwiglu: return "swiglu";
    case GlueOp::kAdd: return "add";
    case GlueOp::kWeightedSum: return "wsum";
    case GlueOp::kRope: return "rope";
    case GlueOp::kSoftmax: return "softmax";
    case GlueOp::kRouter: return "router";
    case GlueOp::kAttnDecode: return "attndecode";
  }
  return "unknown";
}

const char* glue_cpu_name(GlueCpu c) {
  switch (c) {
    case GlueCpu::kHost: return "host";
    case GlueCpu::kZnver4: return "znver4";
    case GlueCpu::kZnver5: return "znver5";
  }
  return "unknown";
}

Expected<GlueCpu> parse_glue_cpu(std::string_view name) {
  if (name == "host") return GlueCpu::kHost;
  if (name == "znver4") return GlueCpu::kZnver4;
  if (name == "znver5") return GlueCpu::kZnver5;
  return Error{"unknown target CPU '" + std::string(name) + "' (expected host, znver4 or znver5)"};
}

namespace {

const char* quant_name(GlueQuant q) {
  switch (q) {
    case GlueQuant::kNone: return "none";
    case GlueQuant::kQ8K: return "q8k";
    case GlueQuant::kQ80: return "q80";
  }
  return "unknown";
}

// The descriptor with every field `d.op` does not read reset to its default.
GlueDesc used_fields(const GlueDesc& d) {
  GlueDesc u;
  u.op = d.op;
  u.isa = d.isa;
  u.cpu = d.cpu;
  u.version = d.version;
  switch (d.op) {
    case GlueOp::kRmsNorm:
      u.eps = d.eps;
      u.flags = d.flags & kGlueHasWeight;
      [[fallthrough]];
    case GlueOp::kSwiglu:
      u.write_f32 = d.write_f32;
      u.quant = d.quant;
      u.n = d.n;
      break;
    case GlueOp::kQuantize:
      u.write_f32 = d.write_f32;
      u.quant = d.quant;
      u.n = d.n;
      break;
    case GlueOp::kAdd: u.n = d.n; break;
    case GlueOp::kWeightedSum: u.n = d.n; u.top_k = d.top_k; break;
    case GlueOp::kRope:
      u.rope_dims = d.rope_dims;
      u.freq_base = d.freq_base;
      u.freq_scale = d.freq_scale;
      u.n_ctx_orig = d.n_ctx_orig;
      u.ext_factor = d.ext_factor;
      u.attn_factor = d.attn_factor;
      u.beta_fast = d.beta_fast;
      u.beta_slow = d.beta_slow;
      break;
    case GlueOp::kSoftmax: u.scale = d.scale; break;
    case GlueOp::kRouter:
      u.n = d.n;
      u.top_k = d.top_k;
      u.scale = d.scale;
      u.gating = d.gating;
      u.flags = d.flags & (kGlueHasBias | kGlueNormWeights);
      u.n_groups = d.n_groups;
      u.n_group_used = d.n_group_used;
      break;
    case GlueOp::kAttnDecode:
      u.n = d.n;
      u.kv_type = d.kv_type;
      u.scale = d.scale;
      u.heads = d.heads;
      u.v_width = d.v_width;
      break;
  }
  return u;
}

constexpr int32_t kMaxRow = 1 << 24;

Status check_row_quant(const GlueDesc& d, const std::string& name, bool f32_allowed) {
  if (d.n <= 0 || d.n > kMaxRow) return Error{name + ": row length " + std::to_string(d.n) + " not in 1..2^24"};
  if (d.write_f32 > 1) return Error{name + ": write_f32 must be 0 or 1"};
  if (!f32_allowed && d.write_f32) return Error{name + ": a quantiser writes no f32 row"};
  if (d.quant == GlueQuant::kNone && !d.write_f32) return Error{name + ": writes nothing"};
  if (d.quant == GlueQuant::kQ8K && d.n % 256 != 0)
    return Error{name + ": Q8_K output needs a row length multiple of 256, got " + std::to_string(d.n)};
  if (d.quant == GlueQuant::kQ80 && d.n % 32 != 0)
    return Error{name + ": Q8_0 output needs a row length multiple of 32, got " + std::to_string(d.n)};
  return Status::ok();
}

Status check_rope(const GlueDesc& d, const std::string& name) {
  if (d.rope_dims < 2 || d.rope_dims > 4096 || d.rope_dims % 2 != 0)
    return Error{name + ": rope dimensions " + std::to_string(d.rope_dims) + " not even in 2..4096"};
  if (!(d.freq_base > 0.0f) || !std::isfinite(d.freq_base)) return Error{name + ": rope freq_base must be positive"};
  if (!(d.freq_scale > 0.0f) || !std::isfinite(d.freq_scale))
    return Error{name + ": rope freq_scale must be positive"};
  if (d.n_ctx_orig <= 0) return Error{name + ": rope original context must be positive"};
  if (!std::isfinite(d.ext_factor) || !std::isfinite(d.attn_factor) || !std::isfinite(d.beta_fast) ||
      !std::isfinite(d.beta_slow))
    return Error{name + ": rope factors must be finite"};
  return Status::ok();
}

Status check_router(const GlueDesc& d, const std::string& name) {
  if (d.n <= 0 || d.n > 65536) return Error{name + ": expert count " + std::to_string(d.n) + " not in 1..65536"};
  if (d.top_k <= 0 || d.top_k > d.n)
    return Error{name + ": experts used " + std::to_string(d.top_k) + " not in [1, " + std::to_string(d.n) + "]"};
  if (d.gating != 1 && d.gating != 2)
    return Error{name + ": gating function " + std::to_string(d.gating) + " is not 1 (softmax) or 2 (sigmoid)"};
  if (!std::isfinite(d.scale)) return Error{name + ": weights scale must be finite"};
  if (d.n_groups < 1) return Error{name + ": group count must be positive"};
  if (d.n_groups > 1) {
    if (d.n % d.n_groups != 0 || d.n_groups > 256)
      return Error{name + ": " + std::to_string(d.n) + " experts do not split into " + std::to_string(d.n_groups) +
                   " groups (at most 256)"};
    if (d.n_group_used < 1 || d.n_group_used >= d.n_groups)
      return Error{name + ": groups used " + std::to_string(d.n_group_used) + " not in [1, " +
                   std::to_string(d.n_groups - 1) + "]"};
    if (d.n_group_used * (d.n / d.n_groups) < d.top_k)
      return Error{name + ": the kept groups hold fewer than " + std::to_string(d.top_k) + " experts"};
  } else if (d.n_group_used != 1) {
    return Error{name + ": groups used must be 1 without groups"};
  }
  return Status::ok();
}

Status check_op(const GlueDesc& d, const std::string& name) {
  switch (d.op) {
    case GlueOp::kRmsNorm:
      if (!(d.eps >= 0.0f) || !std::isfinite(d.eps)) return Error{name + ": eps must be finite and >= 0"};
      [[fallthrough]];
    case GlueOp::kSwiglu:
      if (d.quant == GlueQuant::kQ80) return Error{name + ": fused output is Q8_K or none"};
      return check_row_quant(d, name, true);
    case GlueOp::kQuantize:
      if (d.quant == GlueQuant::kNone) return Error{name + ": quantiser needs a format (Q8_K or Q8_0)"};
      return check_row_quant(d, name, false);
    case GlueOp::kAdd:
      if (d.n <= 0 || d.n > kMaxRow) return Error{name + ": row length not in 1..2^24"};
      return Status::ok();
    case GlueOp::kWeightedSum:
      if (d.n <= 0 || d.n > kMaxRow) return Error{name + ": row length not in 1..2^24"};
      if (d.top_k < 1 || d.top_k > 64) return Error{name + ": terms " + std::to_string(d.top_k) + " not in 1..64"};
      return Status::ok();
    case GlueOp::kRope: return check_rope(d, name);
    case GlueOp::kSoftmax:
      if (!std::isfinite(d.scale)) return Error{name + ": scale must be finite"};
      return Status::ok();
    case GlueOp::kRouter: return check_router(d, name);
    case GlueOp::kAttnDecode:
      if (d.isa < isa::IsaLevel::kAvx512) return Error{name + ": needs AVX-512 (the heads are vector lanes)"};
      if (d.n <= 0 || d.n > 4096) return Error{name + ": row width " + std::to_string(d.n) + " not in 1..4096"};
      if (d.v_width <= 0 || d.v_width > d.n)
        return Error{name + ": value width " + std::to_string(d.v_width) + " not in 1.." + std::to_string(d.n)};
      if (d.heads <= 0 || d.heads > 4096) return Error{name + ": heads " + std::to_string(d.heads) + " not in 1..4096"};
      if (d.kv_type > 3)
        return Error{name + ": cache type " + std::to_string(d.kv_type) +
                     " is not 0 (f32), 1 (f16), 2 (bf16) or 3 (q8_0)"};
      if (d.kv_type == 3 && d.n % 32 != 0)
        return Error{name + ": q8_0 cache rows need a width multiple of 32, got " + std::to_string(d.n)};
      if (!std::isfinite(d.scale)) return Error{name + ": scale must be finite"};
      return Status::ok();
  }
  return Error{name + ": unknown op"};
}

}  // namespace

std::string glue_name(const GlueDesc& d) {
  std::string s = "glue_";
  s += glue_op_name(d.op);
  if (d.op == GlueOp::kRmsNorm || d.op == GlueOp::kSwiglu || d.op == GlueOp::kQuantize) {
    if (d.write_f32) s += "_f32";
    if (d.quant != GlueQuant::kNone) s += std::string("_") + quant_name(d.quant);
  }
  if (d.op == GlueOp::kRope) s += "_d" + std::to_string(d.rope_dims);
  else if (d.op == GlueOp::kWeightedSum) s += "_n" + std::to_string(d.n) + "_k" + std::to_string(d.top_k);
  else if (d.op == GlueOp::kRouter) s += "_e" + std::to_string(d.n) + "_k" + std::to_string(d.top_k);
  else if (d.op == GlueOp::kAttnDecode)
    s += std::string("_") + (d.kv_type == 0 ? "f32" : d.kv_type == 1 ? "f16" : d.kv_type == 2 ? "bf16" : "q8_0") +
         "_h" + std::to_string(d.heads) + "_d" + std::to_string(d.n) + "_v" + std::to_string(d.v_width);
  else if (d.op != GlueOp::kSoftmax) s += "_n" + std::to_string(d.n);
  s += "__";
  s += isa::level_name(d.isa);
  s += '_';
  s += glue_cpu_name(d.cpu);
  return s;
}

Status validate(const GlueDesc& d) {
  const std::string name = static_cast<int>(d.op) < kGlueOpCount ? glue_name(d) : "glue kernel";
  if (static_cast<int>(d.op) >= kGlueOpCount) return Error{name + ": unknown op " + std::to_string(int(d.op))};
  if (static_cast<int>(d.isa) >= isa::kIsaLevelCount) return Error{name + ": unknown ISA level"};
  if (static_cast<int>(d.cpu) > 2) return Error{name + ": unknown target CPU"};
  if (static_cast<int>(d.quant) > 2) return Error{name + ": unknown quantised output"};
  if (d.version != kGlueGeneratorVersion)
    return Error{name + ": generator version " + std::to_string(d.version) + " is not " +
                 std::to_string(kGlueGeneratorVersion)};
  ZENMOE_RETURN_IF_ERROR(check_op(d, name));
  if (used_fields(d) != d) return Error{name + ": a field the op does not use is not at its default"};
  return Status::ok();
}

namespace {

GlueDesc base_desc(GlueOp op, int32_t n, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d;
  d.op = op;
  d.n = n;
  d.isa = isa::kernel_level(level);
  d.cpu = cpu;
  return d;
}

}  // namespace

GlueDesc glue_rms_norm_desc(int32_t n, float eps, bool weight, bool write_f32, GlueQuant quant,
                            isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kRmsNorm, n, level, cpu);
  d.eps = eps;
  d.flags = weight ? kGlueHasWeight : 0;
  d.write_f32 = write_f32 ? 1 : 0;
  d.quant = quant;
  return d;
}

GlueDesc glue_quantize_desc(int32_t n, GlueQuant quant, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kQuantize, n, level, cpu);
  d.write_f32 = 0;
  d.quant = quant;
  return d;
}

GlueDesc glue_swiglu_desc(int32_t n, bool write_f32, GlueQuant quant, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kSwiglu, n, level, cpu);
  d.write_f32 = write_f32 ? 1 : 0;
  d.quant = quant;
  return d;
}

GlueDesc glue_add_desc(int32_t n, isa::IsaLevel level, GlueCpu cpu) {
  return base_desc(GlueOp::kAdd, n, level, cpu);
}

GlueDesc glue_weighted_sum_desc(int32_t n, int32_t terms, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kWeightedSum, n, level, cpu);
  d.top_k = terms;
  return d;
}

GlueDesc glue_softmax_desc(float scale, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kSoftmax, 0, level, cpu);
  d.scale = scale;
  return d;
}

GlueDesc glue_attn_decode_desc(int32_t heads, int32_t width, int32_t v_width, uint8_t kv_type, float scale,
                               isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kAttnDecode, width, level, cpu);
  d.heads = heads;
  d.v_width = v_width;
  d.kv_type = kv_type;
  d.scale = scale;
  return d;
}

bool glue_attn_bf16_dot(const GlueDesc& d) {
  const bool zen = d.cpu == GlueCpu::kZnver4 || d.cpu == GlueCpu::kZnver5;
  return d.op == GlueOp::kAttnDecode && d.kv_type == 2 && d.isa >= isa::IsaLevel::kAvx512Bf16 && d.n % 2 == 0 &&
         zen;
}

bool glue_attn_q8_dot(const GlueDesc& d) {
  return d.op == GlueOp::kAttnDecode && d.kv_type == 3 && d.isa >= isa::IsaLevel::kAvx512Vnni && d.n % 32 == 0;
}

int64_t glue_attn_pair_dwords(const GlueDesc& d) { return (int64_t{d.v_width} + 31) / 32 * 32; }

GlueAttnLayout glue_attn_layout(const GlueDesc& d) {
  auto lines = [](int64_t f) { return (f + 15) / 16 * 16; };
  GlueAttnLayout l;
  l.lanes = (int64_t{d.heads} + 15) / 16 * 16;
  l.qt = 0;
  l.tile = l.qt + lines(int64_t{d.n} * l.lanes);
  const int64_t interleaved = glue_attn_bf16_dot(d) ? glue_attn_pair_dwords(d) / 2 : 0;  // per row
  l.s = l.tile + lines(kGlueAttnTileRows * std::max(int64_t{d.n}, interleaved));
  l.pairs = l.s + kGlueAttnTileRows * l.lanes;
  l.yt = l.pairs + kGlueAttnTileRows / 2 * l.lanes;
  l.stats = l.yt + int64_t{d.v_width} * l.lanes;
  l.floats = l.stats + 3 * l.lanes;
  return l;
}

GlueDesc glue_rope_desc(const ref::RopeParams& p, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kRope, 0, level, cpu);
  d.rope_dims = p.n_dims;
  d.freq_base = p.freq_base;
  d.freq_scale = p.freq_scale;
  d.n_ctx_orig = p.n_ctx_orig;
  d.ext_factor = p.ext_factor;
  d.attn_factor = p.attn_factor;
  d.beta_fast = p.beta_fast;
  d.beta_slow = p.beta_slow;
  return d;
}

GlueDesc glue_router_desc(const ref::RouterConfig& c, bool bias, isa::IsaLevel level, GlueCpu cpu) {
  GlueDesc d = base_desc(GlueOp::kRouter, c.n_expert, level, cpu);
  d.top_k = c.n_expert_used;
  d.n_groups = c.n_groups;
  d.n_group_used = c.n_groups > 1 ? c.n_group_used : 1;
  d.gating = static_cast<uint8_t>(c.gating_func);
  d.scale = c.weights_scale;
  d.flags = static_cast<uint8_t>((bias ? kGlueHasBias : 0) | (c.norm_weights ? kGlueNormWeights : 0));
  return d;
}

std::string glue_default_cache_dir() {
  if (const char* dir = std::getenv("ZENMOE_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::string(xdg) + "/zenmoe";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/zenmoe";
  return "";
}

GlueSession& glue_session() {
  static GlueSession& s = [] () -> GlueSession& {
    static GlueSession session(glue_default_cache_dir());
    if (const char* dump = std::getenv("ZENMOE_GLUE_DUMP"); dump != nullptr) session.set_dump_dir(dump);
    return session;
  }();
  return s;
}

Expected<GlueFn> glue_kernel(const GlueDesc& d) { return glue_session().get(d); }

Expected<std::string> glue_dump_ir(const GlueDesc& d) { return glue_session().ir_text(d, true); }

}  // namespace zenmoe
