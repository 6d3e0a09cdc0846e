// Internal to graph/: the op files' registration entry points, called once by RegisterBuiltinOps.
// Each Register*Ops adds OpDefs (the device kernels register in graph/kernels/device_kernels.h).
#pragma once

#include "graph/ops/op_registry.h"

namespace npuflow::graph {

void RegisterElementwiseOps(OpRegistry& registry);  // ops/elementwise.cc
void RegisterTensorOps(OpRegistry& registry);       // ops/tensor.cc
void RegisterNnOps(OpRegistry& registry);           // ops/nn.cc

}  // namespace npuflow::graph
