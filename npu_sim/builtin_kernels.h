// Device kernels npu_sim ships: enough to drive streams, benchmarks and the tiling-sink path
// without the op library.
//   noop              AICore, any block_dim, does nothing (10 ns a block)
//   vector_add_f32    AICore, args (a, b, c, n): c = a + b over n floats, split by block
//   fill_f32          AICore, args (c, n, value bits): c[i] = value
//   record_launch     AICore, args (out): block 0 writes {block_dim, tiling_key} as two u64
//   tiling_write      AICPU, args (block_dim_addr, tiling_key_addr, block_dim, tiling_key):
//                     writes a tiling result, as a tiling-sink AICPU tiling task does
#pragma once

namespace npuflow::npu_sim {

// Idempotent; Runtime::Create calls it.
void RegisterBuiltinKernels();

}  // namespace npuflow::npu_sim
