// The device kernels of the op library (npu_sim kernels named DeviceKernelName(type)), registered
// once by graph::RegisterBuiltinOps. Internal to graph/.
#pragma once

namespace npuflow::graph {

void RegisterElementwiseKernels();  // kernels/elementwise.cc
void RegisterTensorKernels();       // kernels/tensor.cc
void RegisterNnKernels();           // kernels/nn.cc

}  // namespace npuflow::graph
