#include "runtime/fast_glue.h"

#include <algorithm>

namespace zenmoe {

using refexec::Tensor;

namespace {

// Rows of `t` per token (every dimension but ne0 and the last).
int64_t rows_per_token(const Tensor& t) {
  int64_t r = 1;
  for (size_t i = 1; i + 1 < t.ne.size(); ++i) r *= t.ne[i];
  return r;
}

// The descriptor for node `n`, or false when the reference path keeps it.
bool desc_for(const ir::Node& n, const ir::Graph& g, isa::IsaLevel l, GlueCpu cpu, GlueDesc* d) {
  const ir::Value& x = g.values[static_cast<size_t>(n.inputs[0])];
  const auto n0 = static_cast<int32_t>(x.shape[0]);
  switch (n.op) {
    case ir::OpKind::RmsNorm:
      *d = glue_rms_norm_desc(n0, n.attr_float("eps"), true, true, GlueQuant::kNone, l, cpu);
      return true;
    case ir::OpKind::RmsNormQuantize:  // the f32 row is written only when the node outputs it
      if (g.values[static_cast<size_t>(n.outputs[0])].type != GgmlType::Q8_K) return false;
      *d = glue_rms_norm_desc(n0, n.attr_float("eps"), true, n.outputs.size() > 1, GlueQuant::kQ8K, l, cpu);
      return true;
    case ir::OpKind::Quantize: {
      const GgmlType out = g.values[static_cast<size_t>(n.outputs[0])].type;
      if (out != GgmlType::Q8_K && out != GgmlType::Q8_0) return false;
      *d = glue_quantize_desc(n0, out == GgmlType::Q8_K ? GlueQuant::kQ8K : GlueQuant::kQ80, l, cpu);
      return true;
    }
    case ir::OpKind::SwiGlu: *d = glue_swiglu_desc(n0, true, GlueQuant::kNone, l, cpu); return true;
    case ir::OpKind::Add: *d = glue_add_desc(n0, l, cpu); return true;
    case ir::OpKind::WeightedSum:
      *d = glue_weighted_sum_desc(n0, static_cast<int32_t>(x.shape[1]), l, cpu);
      return true;
    case ir::OpKind::Rope: *d = glue_rope_desc(refexec::rope_params(n), l, cpu); return true;
    case ir::OpKind::Router: {
      ref::RouterConfig c;
      c.n_expert = n0;
      c.n_expert_used = static_cast<int>(n.attr_int("n_used"));
      c.n_groups = static_cast<int>(n.attr_int("n_groups"));
      c.n_group_used = static_cast<int>(n.attr_int("n_group_used"));
      c.gating_func = n.attr_str("gating") == "sigmoid" ? 2 : 1;
      c.norm_weights = n.attr_int("norm") != 0;
      c.weights_scale = n.attr_float("scale");
      *d = glue_router_desc(c, n.inputs.size() > 1, l, cpu);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

GlueCpu glue_cpu_for(isa::Tuning t) {
  return t == isa::Tuning::kZen5 ? GlueCpu::kZnver5 : t == isa::Tuning::kZen4 ? GlueCpu::kZnver4 : GlueCpu::kHost;
}

Expected<std::unique_ptr<LightGlue>> LightGlue::create(const ir::Node& n, const ir::Graph& g, isa::Target target) {
  GlueDesc d;
  if (!desc_for(n, g, target.level, glue_cpu_for(target.tuning), &d)) return std::unique_ptr<LightGlue>();
  auto fn = glue_kernel(d);
  if (!fn) return Error{fn.error()};
  std::unique_ptr<LightGlue> op(new LightGlue());
  op->op_ = n.op;
  op->fn_ = *fn;
  op->name_ = glue_name(d);
  op->rope_dims_ = d.rope_dims;
  return op;
}

void LightGlue::run(int64_t t0, int64_t t1, std::span<Tensor* const> in, std::span<Tensor* const> out) const {
  const Tensor& x = *in[0];
  Tensor& y = *out[0];
  const int64_t per = rows_per_token(x), n0 = x.ne[0], nt = t1 - t0;
  GlueCall c;
  switch (op_) {
    case ir::OpKind::RmsNorm:
      c.x = x.cf32() + t0 * per * n0;
      c.w = in[1]->cf32();
      c.y = y.f32() + t0 * per * n0;
      c.n_rows = nt * per;
      break;
    case ir::OpKind::RmsNormQuantize:
      c.x = x.cf32() + t0 * per * n0;
      c.w = in[1]->cf32();
      c.q = y.data + t0 * per * y.row_size();
      c.y = out.size() > 1 ? out[1]->f32() + t0 * per * n0 : nullptr;
      c.n_rows = nt * per;
      break;
    case ir::OpKind::Quantize:
      c.x = x.cf32() + t0 * per * n0;
      c.q = y.data + t0 * per * y.row_size();
      c.n_rows = nt * per;
      break;
    case ir::OpKind::SwiGlu:
    case ir::OpKind::Add:
      c.x = x.cf32() + t0 * per * n0;
      c.x2 = in[1]->cf32() + t0 * per * n0;
      c.y = y.f32() + t0 * per * n0;
      c.n_rows = nt * per;
      break;
    case ir::OpKind::WeightedSum: {
      const int64_t k = x.ne[1];
      c.x = x.cf32() + t0 * k * n0;
      c.w = in[1]->cf32() + t0 * k;
      c.y = y.f32() + t0 * n0;
      c.n_rows = nt;
      c.stride = n0;
      break;
    }
    case ir::OpKind::Router: {
      const int64_t k = out[0]->ne[0];
      c.x = x.cf32() + t0 * n0;
      c.x2 = in.size() > 1 ? in[1]->cf32() : nullptr;
      c.ids = out[0]->i32() + t0 * k;
      c.y = out[1]->f32() + t0 * k;
      c.n_rows = nt;
      break;
    }
    case ir::OpKind::Rope: {
      // RoPE rotates the first n_dims of each head in place; the rest is copied as is.
      const int32_t* pos = in[1]->ci32();
      for (int64_t t = t0; t < t1; ++t) {
        const float* src = x.cf32() + t * per * n0;
        float* dst = y.f32() + t * per * n0;
        if (dst != src) std::copy(src, src + per * n0, dst);
        GlueCall r;
        r.x = dst;
        r.y = dst;
        r.n_rows = per;
        r.stride = n0;
        r.pos = pos[t];
        fn_(&r);
      }
      return;
    }
    default:
      return;
  }
  fn_(&c);
}

}  // namespace zenmoe
