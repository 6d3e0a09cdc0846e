// Internal to graph/: the op files' registration entry points, called once by RegisterBuiltinOps.
// Each Register*Ops adds OpDefs; each Register*Kernels adds the ops' device kernels to npu_sim's
// KernelRegistry under DeviceKernelName(type).
#pragma once

#include "graph/op_registry.h"

namespace npuflow::graph {

void RegisterElementwiseOps(OpRegistry& registry);  // ops_elementwise.cc
void RegisterTensorOps(OpRegistry& registry);       // ops_tensor.cc
void RegisterNnOps(OpRegistry& registry);           // ops_nn.cc
void RegisterElementwiseKernels();                  // kernels_elementwise.cc
void RegisterTensorKernels();                       // kernels_tensor.cc
void RegisterNnKernels();                           // kernels_nn.cc

}  // namespace npuflow::graph
