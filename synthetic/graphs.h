// Synthetic graphs for tests and benchmarks: long chains and random DAGs of elementwise ops,
// built with the C++ API (no parsing), deterministic for a seed.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "graph/ir/compute_graph.h"

namespace npuflow::synthetic {

using graph::ComputeGraph;

// x -> Relu -> Tanh -> Relu -> ... (`length` ops) -> NetOutput, all f32[`width`].
StatusOr<std::unique_ptr<ComputeGraph>> MakeChainGraph(int length, std::int64_t width = 16);

struct RandomDagOptions {
  int nodes = 100;        // compute nodes
  int inputs = 4;         // Data nodes
  int max_fan_in = 2;     // 1: unary ops only; 2: Add/Mul too
  int locality = 16;      // inputs are drawn mostly from the last `locality` nodes of a class
  std::uint64_t seed = 1;
};
// Compute nodes in `size classes` (f32[16], [256], [1024], [4096]); each reads one or two earlier
// tensors of its class; every tensor nothing reads goes to NetOutput.
StatusOr<std::unique_ptr<ComputeGraph>> MakeRandomDag(const RandomDagOptions& options);

}  // namespace npuflow::synthetic
