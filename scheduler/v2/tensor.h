// A tensor as RT2.0's executors pass it: shape and dtype (the kernel ABI's KernelTensor: no
// allocation to change a shape), placement, and the memory (a device address or a host pointer).
#pragma once

#include <cstdint>

#include "graph/kernels/kernel_abi.h"
#include "scheduler/v2/allocator.h"

namespace npuflow::v2 {

struct Tensor {
  graph::KernelTensor shape;
  TensorPlacement placement = TensorPlacement::kOnDeviceHbm;
  std::uint64_t addr = 0;  // npu_sim::DevicePtr::value, or a host pointer
  std::uint64_t size = 0;  // bytes available at addr
};

// What every kernel of a model's execute graphs gets as ctx->args(): the device side of one Load,
// Execute or UnLoad.
struct RunContext {
  npu_sim::Runtime* runtime = nullptr;
  int device = 0;
  npu_sim::Stream stream{-1, 0};  // where Main's launches go (Init and DeInit: none)
  Allocator* device_allocator = nullptr;
  Allocator* host_allocator = nullptr;
  StreamAllocator* streams = nullptr;
  EventAllocator* events = nullptr;
  NotifyAllocator* notifies = nullptr;
  std::uint64_t iteration = 0;
};

}  // namespace npuflow::v2
