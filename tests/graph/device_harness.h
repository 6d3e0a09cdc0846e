// Test helpers: run one op on the simulated device the way a compiled kernel task would
// (host tiling, KernelParams in device memory, args in kernel_abi order), and random tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/kernels/kernel_abi.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"
#include "npu_sim/runtime.h"

namespace npuflow::graph::testing {

// One runtime per test binary, one 910B device.
inline npu_sim::Runtime& TestRuntime() {
  static std::unique_ptr<npu_sim::Runtime> rt = [] {
    RegisterBuiltinOps();
    return std::move(npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2}).value());
  }();
  return *rt;
}

struct DeviceRunOptions {
  std::optional<std::uint32_t> block_dim;  // override the host tiling's block_dim
  bool inplace = false;                    // outputs with an inplace input share its buffer
};

// Runs `op` on device 0 with the given inputs; returns its outputs.
inline StatusOr<std::vector<Tensor>> RunOpOnDevice(const OpDesc& op, const std::vector<Tensor>& inputs,
                                                   DeviceRunOptions options = {}) {
  npu_sim::Runtime& rt = TestRuntime();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  if (def->device_kernel.empty()) return Status::Unsupported("op {} has no device kernel", op.type());
  std::vector<TensorDesc> in_descs, out_descs;
  for (const Tensor& t : inputs) in_descs.push_back(t.desc);
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, in_descs, out_descs));
  const npu_sim::ChipSpec* chip = rt.chip(0).value();
  TilingInfo tiling;
  if (def->tiling != nullptr) {
    std::vector<const Tensor*> depend;
    for (int i : def->tiling_depend_inputs) depend.push_back(&inputs[i]);
    NPUFLOW_ASSIGN_OR_RETURN(tiling, def->tiling(op, in_descs, depend, chip->aicore_count));
  }
  if (options.block_dim) tiling.block_dim = *options.block_dim;
  NPUFLOW_ASSIGN_OR_RETURN(KernelParams params, EncodeKernelParams(*def, op, in_descs, out_descs));

  std::vector<npu_sim::DevicePtr> owned;
  auto alloc = [&](std::uint64_t bytes) -> StatusOr<npu_sim::DevicePtr> {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt.Malloc(0, std::max<std::uint64_t>(bytes, 1)));
    owned.push_back(p);
    return p;
  };
  auto run = [&]() -> StatusOr<std::vector<Tensor>> {
    std::vector<std::uint64_t> args;
    for (const Tensor& t : inputs) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, alloc(t.data.size()));
      if (!t.data.empty()) NPUFLOW_RETURN_IF_ERROR(rt.MemcpyH2D(0, p, t.data.data(), t.data.size()));
      args.push_back(p.value);
    }
    for (std::size_t i = 0; i < out_descs.size(); ++i) {
      const int alias = i < def->inplace.size() ? def->inplace[i] : -1;
      if (options.inplace && alias >= 0) {
        args.push_back(args[alias]);
        continue;
      }
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, alloc(out_descs[i].bytes().value_or(0)));
      args.push_back(p.value);
    }
    std::uint64_t workspace = 0;
    if (tiling.workspace_bytes > 0) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, alloc(tiling.workspace_bytes));
      workspace = p.value;
    }
    args.push_back(workspace);
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr pp, alloc(KernelParamsBytes(params)));
    NPUFLOW_RETURN_IF_ERROR(rt.MemcpyH2D(0, pp, &params, KernelParamsBytes(params)));
    args.push_back(pp.value);
    const npu_sim::Stream s = rt.DefaultStream(0);
    if (def->engine == OpEngine::kAICpu)
      NPUFLOW_RETURN_IF_ERROR(rt.LaunchAicpuKernel(s, def->device_kernel, args));
    else
      NPUFLOW_RETURN_IF_ERROR(rt.LaunchKernel(s, def->device_kernel, tiling.block_dim, args, tiling.tiling_key));
    NPUFLOW_RETURN_IF_ERROR(rt.SynchronizeStream(s));
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < out_descs.size(); ++i) {
      Tensor t = ZeroTensor(out_descs[i]);
      if (!t.data.empty())
        NPUFLOW_RETURN_IF_ERROR(rt.MemcpyD2H(0, t.data.data(), npu_sim::DevicePtr{args[inputs.size() + i]}, t.data.size()));
      outs.push_back(std::move(t));
    }
    return outs;
  };
  auto result = run();
  for (npu_sim::DevicePtr p : owned) (void)rt.Free(0, p);
  return result;
}

// The reference kernel's outputs for `op` on `inputs`.
inline StatusOr<std::vector<Tensor>> RunOpReference(const OpDesc& op, const std::vector<Tensor>& inputs) {
  RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  std::vector<TensorDesc> in_descs, out_descs;
  std::vector<const Tensor*> in_ptrs;
  for (const Tensor& t : inputs) {
    in_descs.push_back(t.desc);
    in_ptrs.push_back(&t);
  }
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, in_descs, out_descs));
  std::vector<Tensor> outs;
  for (const TensorDesc& d : out_descs) outs.push_back(ZeroTensor(d));
  if (def->reference == nullptr) return Status::Unsupported("op {} has no reference kernel", op.type());
  NPUFLOW_RETURN_IF_ERROR(def->reference(op, in_ptrs, outs));
  return outs;
}

// A tensor of `desc` with uniform values in [lo, hi) (integers for integer types).
inline Tensor RandomTensor(const TensorDesc& desc, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  Tensor t = ZeroTensor(desc);
  const auto n = static_cast<std::size_t>(desc.shape.num_elements().value_or(0));
  if (desc.dtype == DataType::kUInt8 || desc.dtype == DataType::kBool) lo = std::max(lo, 0.f);  // no negatives to store
  std::uniform_real_distribution<float> dist(lo, std::max(hi, lo + 1.f));
  for (std::size_t i = 0; i < n; ++i) {
    float v = dist(rng);
    if (!IsFloat(desc.dtype)) v = std::floor(v);
    StoreF(t, i, v);
  }
  return t;
}

// Element-wise closeness: |a - b| <= atol + rtol * |b|, naming the first bad element.
inline ::testing::AssertionResult TensorsNear(const Tensor& a, const Tensor& b, float atol = 1e-5f,
                                              float rtol = 1e-4f) {
  if (!(a.desc == b.desc))
    return ::testing::AssertionFailure() << "descs differ: " << a.desc.ToString() << " vs " << b.desc.ToString();
  const auto n = static_cast<std::size_t>(a.desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) {
    const float x = LoadF(a, i), y = LoadF(b, i);
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y)))
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace npuflow::graph::testing
