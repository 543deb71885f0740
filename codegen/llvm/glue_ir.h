// LLVM IR emitters of the glue ops (codegen/glue.h). Internal to codegen/llvm.
#pragma once

#include <string>

#include <llvm/IR/Module.h>

#include "codegen/glue.h"
#include "codegen/llvm/ir_kit.h"

namespace zenmoe::glue_ir {

// Defines `void symbol(const GlueCall*)` in `m` for a validated descriptor, with vectors of
// `vf` floats.
llvm::Function* emit_glue(llvm::Module& m, const GlueDesc& d, const std::string& symbol, unsigned vf);

// The GlueCall fields, loaded once at function entry.
struct Args {
  llvm::Value *x, *x2, *w, *y, *q, *ids, *n_rows, *stride, *n, *n_visible, *pos;
};

// Row ops (glue_rows.cpp).
void emit_rms_norm(Kit& k, const GlueDesc& d, const Args& a);
void emit_quantize(Kit& k, const GlueDesc& d, const Args& a);
void emit_swiglu(Kit& k, const GlueDesc& d, const Args& a);
void emit_add(Kit& k, const GlueDesc& d, const Args& a);
void emit_weighted_sum(Kit& k, const GlueDesc& d, const Args& a);
// Attention and routing ops (glue_attn.cpp).
void emit_rope(Kit& k, const GlueDesc& d, const Args& a);
void emit_softmax(Kit& k, const GlueDesc& d, const Args& a);
void emit_router(Kit& k, const GlueDesc& d, const Args& a);
// MLA decode attention, heads in the vector lanes (glue_mla.cpp).
void emit_attn_decode(Kit& k, const GlueDesc& d, const Args& a);
// One softmax row of length n (i64) with `n_visible` entries kept: x -> y, both float*.
void emit_softmax_row(Kit& k, float scale, llvm::Value* x, llvm::Value* y, llvm::Value* n, llvm::Value* n_visible);

}  // namespace zenmoe::glue_ir
