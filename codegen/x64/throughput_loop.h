// Generated loops that issue one instruction form back to back, for `zenmoe bench compute`:
// the compute side of the roofline, as the read-bandwidth probe is its memory side. Each loop
// iteration issues kThroughputInstrs instructions into 12 independent destinations (enough
// to cover the latency of every form probed at two per cycle), with register operands or
// L1-resident memory ones, so its rate is the core's issue rate for that form.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codegen/isa.h"
#include "kernels/status.h"

namespace zenmoe::x64 {

enum class ThroughputOp : uint8_t {
  kFmaYmm,        // vfmadd231ps ymm, ymm, ymm
  kCvtPh2PsYmm,   // vcvtph2ps ymm, m128 (F16C)
  kFmaZmm,        // vfmadd231ps zmm, zmm, zmm
  kFmaZmmBcast,   // vfmadd231ps zmm, zmm, m32{1to16}: the GEMV and attention inner loops' form
  kCvtPh2PsZmm,   // vcvtph2ps zmm, m256: F16 weights and cache rows widened
  kVnniZmm,       // vpdpbusd zmm, zmm, zmm: the integer formats' dot product
  kBf16DotZmm,    // vdpbf16ps zmm, zmm, zmm: BF16 pairs
};

struct ThroughputInfo {
  ThroughputOp op;
  const char* name;      // the instruction form as above
  const char* unit;      // what ops_per_instr counts: "flop", "int op" or "element"
  int ops_per_instr;     // an FMA lane is 2 flops, a vpdpbusd lane 8 int ops
  isa::IsaLevel level;   // the lowest ISA level that has it
};

// Every form at or below `level`, in the order above.
std::vector<ThroughputInfo> throughput_ops(isa::IsaLevel level);

inline constexpr int kThroughputInstrs = 24;  // instructions per loop iteration
inline constexpr int kThroughputBufferBytes = kThroughputInstrs * 32;  // memory operands read

class ThroughputLoop {
 public:
  // Error if `op` needs more than `level` allows (never an instruction the host lacks when
  // `level` comes from the host).
  static Expected<std::unique_ptr<ThroughputLoop>> make(ThroughputOp op, isa::IsaLevel level);
  ~ThroughputLoop();
  ThroughputLoop(const ThroughputLoop&) = delete;
  ThroughputLoop& operator=(const ThroughputLoop&) = delete;

  // Runs `iterations` (>= 1) iterations; `buffer` holds kThroughputBufferBytes readable bytes.
  void run(int64_t iterations, const void* buffer) const;

 private:
  struct Code;
  explicit ThroughputLoop(std::unique_ptr<Code> code);
  std::unique_ptr<Code> code_;
};

}  // namespace zenmoe::x64
