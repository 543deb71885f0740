#include "runtime/ref_executor_model.h"

#include <limits>

#include "ir/builder.h"

namespace zenmoe {

namespace {

ir::MetaValue convert(const gguf::Value& v) {
  using VT = gguf::ValueType;
  ir::MetaValue m;
  switch (v.type) {
    case VT::I8: case VT::I16: case VT::I32: case VT::I64:
      m.kind = ir::MetaValue::Kind::Int;
      m.i = v.i;
      break;
    case VT::U8: case VT::U16: case VT::U32: case VT::U64:
      m.kind = ir::MetaValue::Kind::Int;
      // Values beyond int64 are clamped; no hyper-parameter comes close.
      m.i = v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                ? std::numeric_limits<int64_t>::max()
                : static_cast<int64_t>(v.u);
      break;
    case VT::F32: case VT::F64:
      m.kind = ir::MetaValue::Kind::Float;
      m.f = v.f;
      break;
    case VT::BOOL:
      m.kind = ir::MetaValue::Kind::Bool;
      m.b = v.u != 0;
      break;
    case VT::STRING:
      m.kind = ir::MetaValue::Kind::String;
      m.s = v.str;
      break;
    case VT::ARRAY:
      m.kind = ir::MetaValue::Kind::Array;
      m.array_len = static_cast<int64_t>(v.array_size());
      break;
  }
  return m;
}

}  // namespace

ir::ModelInfo model_info_from_gguf(const gguf::Model& model) {
  ir::ModelInfo info;
  info.source = model.files().empty() ? std::string("model") : model.files().front().path();
  for (const auto& [k, v] : model.metadata().entries()) info.meta[k] = convert(v);
  for (const auto& t : model.tensors())
    info.add_tensor(t.name, t.type, {t.ne[0], t.ne[1], t.ne[2], t.ne[3]});
  return info;
}

Expected<ir::Graph> build_graph_from_gguf(const gguf::Model& model) {
  return ir::build_graph(model_info_from_gguf(model));
}

}  // namespace zenmoe
