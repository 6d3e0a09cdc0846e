// The contract between compiled tasks and op device kernels (npu_sim kernels named "op.<Type>").
//
// A kernel task's arguments are device words, in this order:
//   [input 0 .. input n-1, output 0 .. output m-1, workspace (0: none), params]
// `params` points at a KernelParams in device memory: the tensors' dtypes and shapes and the op's
// own scalars. gen-tasks writes one per kernel into the model's tiling-data segment at compile
// time; the tiling sink writes it on the device (AICPU tiling task) when shapes or tiling depend
// on values only known at run time. A kernel never learns shapes any other way.
//
// Block split: block `block_idx` of `block_dim` does its share of the work (BlockRange), so any
// block_dim >= 1 gives the same result; block_dim and tiling_key come from the op's host tiling.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/status.h"
#include "graph/ir/types.h"
#include "npu_sim/chip_spec.h"
#include "npu_sim/kernel.h"

namespace npuflow::graph {

inline constexpr int kMaxKernelRank = 8;
inline constexpr int kMaxKernelTensors = 16;  // inputs + outputs of one kernel
inline constexpr int kKernelInts = 8;
inline constexpr int kKernelFloats = 4;

struct KernelTensor {
  std::uint32_t dtype = 0;  // a DataType
  std::uint32_t rank = 0;
  std::int64_t dims[kMaxKernelRank] = {};

  DataType data_type() const { return static_cast<DataType>(dtype); }
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (std::uint32_t i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(num_elements()) * DataTypeSize(data_type()); }
  // dims[i] counted from the back for negative i (-1: the last).
  std::int64_t dim(int i) const { return dims[i < 0 ? static_cast<int>(rank) + i : i]; }
};

// In device memory only the used prefix is stored: everything before `tensors`, then
// num_inputs + num_outputs tensors (KernelParamsBytes).
struct KernelParams {
  std::uint32_t num_inputs = 0;
  std::uint32_t num_outputs = 0;
  std::int64_t ints[kKernelInts] = {};      // op-specific (axis, transpose flags, ...): see each op
  float floats[kKernelFloats] = {};         // op-specific (epsilon, scale, ...)
  KernelTensor tensors[kMaxKernelTensors];  // inputs, then outputs

  const KernelTensor& input(std::uint32_t i) const { return tensors[i]; }
  const KernelTensor& output(std::uint32_t i) const { return tensors[num_inputs + i]; }
};
static_assert(std::is_trivially_copyable_v<KernelParams>);

// The bytes of `p` a kernel reads: the header and its used tensors.
inline std::size_t KernelParamsBytes(const KernelParams& p) {
  const std::size_t used = std::min<std::size_t>(p.num_inputs + p.num_outputs, kMaxKernelTensors);
  return offsetof(KernelParams, tensors) + used * sizeof(KernelTensor);
}

// [begin, end) of `n` work items that block `idx` of `dim` owns; contiguous, balanced.
inline std::pair<std::int64_t, std::int64_t> BlockRange(std::int64_t n, std::uint32_t idx, std::uint32_t dim) {
  const std::int64_t per = n / dim, extra = n % dim;
  const std::int64_t i = idx;
  const std::int64_t begin = i * per + std::min(i, extra);
  return {begin, begin + per + (i < extra ? 1 : 0)};
}

// What an op device kernel sees: the params, and bounds-checked views of its tensors. Mappings
// stay valid while the view lives.
//
// A launch's blocks on one thread share their mappings (KernelContext::launch): the first block
// to map an argument maps it, and the thread keeps that mapping (the allocation's backing held;
// npu_sim::LaunchMappings) until it maps for another launch or its unit has run its parts;
// the launch's later blocks there take its bytes without the device memory's lock and a
// reference count each. A Free of that memory while the launch runs
// lets those blocks finish on the old backing (DeviceMemory's rule: fail, or finish on the old
// backing); the launch after it maps again and fails. Each block still checks its own bounds.
// Why: GPT-2 117M's decode step maps about 1,300 tensors in 380 blocks, each map a shared lock and
// a reference count on lines that step's 250 MB of weights had pushed out of the caches.
//
// The params are the thread's too: a view of a launch points at the params its thread kept for
// that launch (read from device memory by the launch's first open there), so an open copies
// nothing and the view is a few words. So a view is good until its thread opens a view of another
// launch (kernels and cost functions open one at a time). A context without a launch (a caller that
// builds one itself) gets a view that holds its own params and mappings.
class OpKernelView {
 public:
  // Reads the params (the last argument) and checks the argument count against them.
  static StatusOr<OpKernelView> Open(const npu_sim::KernelContext& ctx);

  const KernelParams& params() const { return *params_; }
  std::uint32_t block_idx() const { return ctx_->block_idx(); }
  std::uint32_t block_dim() const { return ctx_->block_dim(); }
  std::uint64_t tiling_key() const { return ctx_->tiling_key(); }
  std::uint64_t launch() const { return ctx_->launch(); }  // KernelContext::launch

  // The whole of input / output i as T (T must match the tensor's element size).
  template <typename T>
  StatusOr<std::span<T>> Input(std::uint32_t i) { return Map<T>(i, params_->input(i)); }
  template <typename T>
  StatusOr<std::span<T>> Output(std::uint32_t i) { return Map<T>(params_->num_inputs + i, params_->output(i)); }
  // Raw device word of an argument (to tell whether an output aliases an input).
  std::uint64_t arg(std::uint32_t i) const { return ctx_->scalar(i); }
  std::uint64_t input_addr(std::uint32_t i) const { return ctx_->scalar(i); }
  std::uint64_t output_addr(std::uint32_t i) const { return ctx_->scalar(params_->num_inputs + i); }

 private:
  template <typename T>
  StatusOr<std::span<T>> Map(std::uint32_t arg, const KernelTensor& t) {
    if (sizeof(T) != DataTypeSize(t.data_type()))
      return Status::Internal("kernel argument {}: element size {} does not match {}", arg, sizeof(T),
                              DataTypeName(t.data_type()));
    const std::uint64_t n = static_cast<std::uint64_t>(t.num_elements());
    if (n == 0) return std::span<T>();
    NPUFLOW_ASSIGN_OR_RETURN(std::byte* data, MapArg(arg, n * sizeof(T)));
    return std::span<T>(reinterpret_cast<T*>(data), n);
  }
  // [argument `arg`, + bytes): the launch's mapping kept on this thread, or a new one (kept there,
  // or in this view when the context has no launch).
  StatusOr<std::byte*> MapArg(std::uint32_t arg, std::uint64_t bytes);

  // What a view of a context without a launch holds itself.
  struct Own {
    KernelParams params;
    std::array<npu_sim::DeviceMemory::Mapping, 2 * kMaxKernelTensors> maps;
    std::size_t num_maps = 0;
  };

  const npu_sim::KernelContext* ctx_ = nullptr;
  const KernelParams* params_ = nullptr;  // the thread's kept ones, or own_->params
  std::unique_ptr<Own> own_;
};

// Virtual duration of one block that moves `bytes` to and from HBM and does `flops` on one core
// (roofline: the slower of the two, plus a fixed start cost).
npu_sim::VTime BlockCost(const npu_sim::ChipSpec& chip, double bytes, double flops);

// The memory an op kernel task touches (npu_sim::KernelDef::accesses, for the race detector): its
// inputs read whole, its outputs written whole, its params read. Every "op.<Type>" kernel
// declares this; a kernel that touches less (KvCacheWrite writes one row of its output) is
// over-approximated, which never hides a race.
Status OpKernelAccesses(const npu_sim::KernelContext& ctx, std::vector<npu_sim::MemAccess>& out);

// The device kernel name of an op type: "op.<Type>".
std::string DeviceKernelName(std::string_view op_type);

}  // namespace npuflow::graph
