// Helpers of the RT2.0 end-to-end tests: graphs built node by node, random tensors, one
// ModelV2Executor run with host tensors, and a tolerant comparison against the interpreter.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/ir/compute_graph.h"
#include "graph/ir/tensor_access.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::v2::v2test {

using graph::ComputeGraph;
using graph::DataType;
using graph::Dim;
using graph::Endpoint;
using graph::Node;
using graph::OpDesc;
using graph::Shape;
using graph::TensorDesc;

inline graph::Tensor RandomTensor(const TensorDesc& desc, std::uint32_t seed) {
  graph::Tensor t = graph::ZeroTensor(desc);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::size_t n = t.data.size() / sizeof(float);
  for (std::size_t i = 0; i < n; ++i) graph::StoreF(t, i, u(rng));
  return t;
}

inline Node* AddOp(ComputeGraph& g, const std::string& name, const std::string& type, std::vector<Endpoint> inputs,
            std::map<std::string, graph::AttrValue> attrs = {}) {
  OpDesc op(name, type);
  for (auto& [k, v] : attrs) op.SetAttr(k, v);
  Node* node = *g.AddNode(std::move(op));
  for (const Endpoint& e : inputs) EXPECT_TRUE(g.AddInput(node, e).ok());
  return node;
}

// Runs the model once with host tensors; returns the outputs as graph tensors.
inline StatusOr<std::vector<graph::Tensor>> RunV2(ModelV2Executor& m, const std::vector<graph::Tensor>& inputs) {
  std::vector<Tensor> in(inputs.size());
  std::vector<Tensor*> in_ptrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in[i].placement = TensorPlacement::kOnHost;
    in[i].addr = reinterpret_cast<std::uint64_t>(inputs[i].data.data());
    in[i].size = inputs[i].data.size();
    in[i].shape.dtype = static_cast<std::uint32_t>(inputs[i].desc.dtype);
    in[i].shape.rank = static_cast<std::uint32_t>(inputs[i].desc.shape.rank());
    for (std::size_t d = 0; d < inputs[i].desc.shape.rank(); ++d) in[i].shape.dims[d] = inputs[i].desc.shape.dim(d).size;
    in_ptrs.push_back(&in[i]);
  }
  const std::size_t nout = m.GetModelDesc().outputs.size();
  std::vector<std::vector<std::uint8_t>> out_bytes(nout, std::vector<std::uint8_t>(1 << 16));
  std::vector<Tensor> out(nout);
  std::vector<Tensor*> out_ptrs;
  for (std::size_t j = 0; j < nout; ++j) {
    out[j].placement = TensorPlacement::kOnHost;
    out[j].addr = reinterpret_cast<std::uint64_t>(out_bytes[j].data());
    out[j].size = out_bytes[j].size();
    out_ptrs.push_back(&out[j]);
  }
  NPUFLOW_RETURN_IF_ERROR(m.ExecuteSync(in_ptrs.data(), in_ptrs.size(), out_ptrs.data(), out_ptrs.size()));
  std::vector<graph::Tensor> result;
  for (std::size_t j = 0; j < nout; ++j) {
    std::vector<Dim> dims;
    for (std::uint32_t d = 0; d < out[j].shape.rank; ++d) dims.push_back(Dim::Static(out[j].shape.dims[d]));
    graph::Tensor t = graph::ZeroTensor(TensorDesc{out[j].shape.data_type(), Shape(std::move(dims))});
    std::memcpy(t.data.data(), out_bytes[j].data(), t.data.size());
    result.push_back(std::move(t));
  }
  return result;
}


inline void ExpectNear(const graph::Tensor& a, const graph::Tensor& b, const std::string& what,
                       double tolerance = 1e-4) {
  ASSERT_EQ(a.desc, b.desc) << what;
  const std::size_t n = a.data.size() / graph::DataTypeSize(a.desc.dtype);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(graph::LoadF(a, i), graph::LoadF(b, i), tolerance) << what << " element " << i;
}

}  // namespace npuflow::v2::v2test
