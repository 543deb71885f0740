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
    {T::Q4_0, "q4_0", 32, 18, T::Q8_0, ref::to_float_q4_0, ref::from_float_q4_0, ref::vec_dot_q4_0},
    {T::Q5_0, "q5_0", 32, 22, T::Q8_0, ref::to_float_q5_0, ref::from_float_q5_0, ref::vec_dot_q5_0},
    {T::Q8_0, "q8_0", 32, 34, T::Q8_0, ref::to_float_q8_0, ref::from_float_q8_0, ref::vec_dot_q8_0},
    {T::Q4_K, "q4_K", 256, 144, T::Q8_K, ref::to_float_q4_K, ref::from_float_q4_K, ref::vec_dot_q4_K},
    {T::Q5_K, "q5_K", 256, 176, T::Q8_K, ref::to_float_q5_K, ref::from_float_q5_K, ref::vec_dot_q5_K},
    {T::Q6_K, "q6_K", 256, 210, T::Q8_K, ref::to_float_q6_K, ref::from_float_q6_K, ref::vec_dot_q6_K},
    // Activation-only format: no dot of its own (vec_dot_type names itself).
    {T::Q8_K, "q8_K", 256, 292, T::Q8_K, ref::to_float_q8_K, ref::from_float_q8_K, nullptr},
    // zenmoe reads IQ4_XS weights but has no quantiser for it.
    {T::IQ4_XS, "iq4_xs", 256, 136, T::Q8_K, ref::to_float_iq4_xs, nullptr, ref::vec_dot_iq4_xs},
};

}  // namespace

const FormatTraits* format_traits(GgmlType t) {
  for (const auto& e : kTraits)
    if (e.type == t) return &e;
  return nullptr;
}

}  // namespace zenmoe
