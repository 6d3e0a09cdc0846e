// A tensor as RT2.0's executors pass it: shape and dtype (the kernel ABI's KernelTensor: no
// allocation to change a shape), placement, and the memory (a device address or a host pointer).
#pragma once

#include <cstdint>
#include <map>
#include <string>

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
// Outer constant memory (GE's outer weight memory): device memory the caller lends for one of
// Init's constants, instead of Init placing its own copy. A Variable lent this way shares its state
// with whoever owns the memory (GPT-2's prefill writes the decode model's KV cache). The memory
// stays the lender's: DeInit does not free it, and it must outlive the model's load.
struct LentConstant {
  std::uint64_t addr = 0;  // npu_sim::DevicePtr::value
  std::uint64_t size = 0;  // at least the constant's bytes
};

struct RunContext {
  npu_sim::Runtime* runtime = nullptr;
  int device = 0;
  npu_sim::Stream stream{-1, 0};  // where Main's launches go (Init and DeInit: none)
  npu_sim::Timeout sync_timeout;  // a kernel's own wait for the device (a tiling's read back)
  Allocator* device_allocator = nullptr;
  Allocator* host_allocator = nullptr;
  StreamAllocator* streams = nullptr;
  EventAllocator* events = nullptr;
  NotifyAllocator* notifies = nullptr;
  std::uint64_t iteration = 0;
  // A multi-stream Main (ModelDesc::reusable_stream_num > 1): stream k's handle and device
  // allocator (k = 0: `stream` and `device_allocator`), and the model's events by index.
  const npu_sim::Stream* stream_table = nullptr;
  Allocator* const* allocator_table = nullptr;
  std::uint32_t stream_count = 1;
  const npu_sim::Event* event_table = nullptr;
  std::uint32_t event_count = 0;
  npu_sim::Stream StreamAt(std::uint32_t k) const { return k == 0 || stream_table == nullptr ? stream : stream_table[k]; }
  Allocator* AllocatorAt(std::uint32_t k) const {
    return k == 0 || allocator_table == nullptr ? device_allocator : allocator_table[k];
  }
  // Load only: constants the caller lends (ModelLoadArg), by Init node name.
  const std::map<std::string, LentConstant>* lent_constants = nullptr;
};

}  // namespace npuflow::v2
