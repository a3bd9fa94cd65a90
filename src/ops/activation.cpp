#include "ops/activation.h"

#include "core/cpu.h"
#include "ops/pv.h"

namespace squeeze::ops {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  attention_kernels(active_isa()).swiglu(gate, up, n, out);
}

}  // namespace squeeze::ops
