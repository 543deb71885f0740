// The traits table: which reference numerics back each format zenmoe computes with.
#include "kernels/formats.h"
#include "kernels/ref/quant.h"

namespace zenmoe {
namespace {

using T = GgmlType;

// vec_dot_type per ggml's CPU backend (spec §2.12).
constexpr FormatTraits kTraits[] = {
    {T::F32, "f32", 1, 4, T::F32, ref::to_float_f32, ref::from_float_f32, ref::vec_dot_f32},
    {T::F16, "f16", 1, 2, T::F16, ref::to_float_f16, ref::from_float_f16, ref::vec_dot_f16},
    {T::BF16, "bf16", 1, 2, T::BF16, ref::to_float_bf16, ref::from_float_bf16, ref::vec_dot_bf16},
};

}  // namespace

const FormatTraits* format_traits(GgmlType t) {
  for (const auto& e : kTraits)
    if (e.type == t) return &e;
  return nullptr;
}

}  // namespace zenmoe
