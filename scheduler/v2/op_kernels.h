// The kernels lowering emits for a ComputeGraph (lowering/graph_converter.h names them):
//
//   Init    ConstToDevice   a Const's value or a FileConstant's bytes into device memory
//   DeInit  FreeConst       releases it
//   Main    PrepareInput    a caller's input tensor, checked against the model input and copied to
//                           the device when it lives on the host
//           InferShape      output shapes from the actual input shapes (dynamic ops only)
//           Tiling          host tiling and the kernel's params (dynamic ops only)
//           AllocOutputs    output and workspace memory from the run's device allocator [memory]
//           LaunchKernel    params copy + the kernel, one Submit to the run's stream [launch]
//           FreeMemory      a tensor's memory back to the allocator after its last reader's
//                           launch (safe at once: the allocator is bound to that stream) [memory]
//           CopyOutput      a result into the caller's output tensor, whose shape it sets [launch]
// For an op whose input shapes are static at lowering time, InferShape and Tiling are folded:
// AllocOutputs and LaunchKernel compute shapes and tiling once, in their Prepare at load.
#pragma once

#include <cstdint>

#include "graph/ops/op_registry.h"
#include "scheduler/v2/allocator.h"
#include "scheduler/v2/tensor.h"

namespace npuflow::v2 {

// What an intermediate tensor's chain holds: the tensor and, when the run allocated its memory,
// the block to give back.
struct Buffer {
  Tensor tensor;
  MemBlock block;
  Allocator* owner = nullptr;  // where `block` goes back to: set by the kernels that take memory per run
  // A model input copied from the caller's host memory for this run: the bytes there, which a
  // tiling that needs the value reads without waiting for the device (null otherwise).
  const void* host_source = nullptr;
};

// What Tiling writes and LaunchKernel reads for a dynamic op.
struct TilingData {
  graph::TilingInfo tiling;
  graph::KernelParams params;
  MemBlock workspace;
};

// Registers the kernels above (idempotent).
void RegisterOpKernels();

class ExecutionData;
// After a failed run: every block a Buffer of `data` still holds from that run goes back to the
// allocator it came from (the FreeMemory nodes after the failure never ran), so a model that
// fails keeps no memory. Constants (Init's, no owner) stay. Call it once the run's streams may
// reuse memory: a caching allocator bound to a stream gives a block only to later work on it.
void ReleaseRunBuffers(ExecutionData& data);

}  // namespace npuflow::v2
