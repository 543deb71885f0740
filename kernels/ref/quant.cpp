// Type-generic entry points over the traits table.
#include "kernels/ref/quant.h"

#include <limits>
#include <string>
#include <vector>

namespace zenmoe::ref {

Status check_row(GgmlType t, int64_t n, bool need_quantize) {
  const FormatTraits* tr = format_traits(t);
  if (!tr) return Error{std::string("type ") + type_name(t) + " has no reference numerics"};
  if (need_quantize && !tr->from_float)
    return Error{std::string("type ") + tr->name + " has no reference quantiser"};
  if (n < 0 || n % tr->block_elems != 0)
    return Error{std::string("row of ") + std::to_string(n) + " elements is not a multiple of the " +
                 tr->name + " block (" + std::to_string(tr->block_elems) + ")"};
  return Status::ok();
}

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
  const FormatTraits* tr = format_traits(t);
  if (tr && tr->from_float) tr->from_float(x, dst, n);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const FormatTraits* tr = format_traits(t);
  if (tr) {
    tr->to_float(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = std::numeric_limits<float>::quiet_NaN();
}

float vec_dot_row(GgmlType wtype, const void* w, const void* xq, int64_t n) {
  const FormatTraits* tr = format_traits(wtype);
  if (!tr || !tr->vec_dot) return std::numeric_limits<float>::quiet_NaN();
  return tr->vec_dot(w, xq, n);
}

float vec_dot_row_f32(GgmlType wtype, const void* w, const float* x, int64_t n) {
  const FormatTraits* tr = format_traits(wtype);
  if (!tr || !tr->vec_dot) return std::numeric_limits<float>::quiet_NaN();
  const FormatTraits* at = format_traits(tr->vec_dot_type);
  if (!at || !at->from_float) return std::numeric_limits<float>::quiet_NaN();
  const int64_t xbytes = row_bytes(at->type, n);
  if (xbytes < 0 || n % tr->block_elems != 0) return std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> xq(static_cast<size_t>(xbytes));
  at->from_float(x, xq.data(), n);
  return tr->vec_dot(w, xq.data(), n);
}

}  // namespace zenmoe::ref
