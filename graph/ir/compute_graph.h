// ComputeGraph: the IR the compiler passes work on.
//
// A graph owns its nodes. A node has an OpDesc (name, op type, typed attributes), data inputs
// (each the output of another node), control inputs (ordering only), and output descriptors
// (filled by shape inference). A PartitionedCall node owns a subgraph; a "_stage" attribute on it
// marks a pipeline stage.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "graph/ir/types.h"

namespace npuflow::graph {

class ComputeGraph;
class Node;

// A constant's value: raw little-endian bytes of `desc`.
struct Tensor {
  TensorDesc desc;
  std::vector<std::uint8_t> data;
  friend bool operator==(const Tensor& a, const Tensor& b) { return a.desc == b.desc && a.data == b.data; }
};

// The name of a subgraph owned by the root graph.
struct SubgraphRef {
  std::string name;
  friend bool operator==(const SubgraphRef& a, const SubgraphRef& b) { return a.name == b.name; }
};

using AttrValue = std::variant<std::int64_t, double, std::string, bool, std::vector<std::int64_t>, std::vector<double>,
                               std::vector<std::string>, Tensor, DataType, Shape, SubgraphRef>;

class OpDesc {
 public:
  OpDesc() = default;
  OpDesc(std::string name, std::string type) : name_(std::move(name)), type_(std::move(type)) {}

  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  void set_name(std::string name) { name_ = std::move(name); }
  void set_type(std::string type) { type_ = std::move(type); }

  using AttrMap = std::map<std::string, AttrValue, std::less<>>;  // transparent: lookups do not allocate
  const AttrMap& attrs() const { return attrs_; }
  bool HasAttr(std::string_view key) const { return attrs_.find(key) != attrs_.end(); }
  void SetAttr(std::string key, AttrValue value) { attrs_.insert_or_assign(std::move(key), std::move(value)); }
  void RemoveAttr(std::string_view key) {
    if (auto it = attrs_.find(key); it != attrs_.end()) attrs_.erase(it);
  }

  // The attribute as T. Missing, or of another type: a ParamInvalid naming the node, the
  // attribute and what was expected.
  template <typename T>
  StatusOr<T> Attr(std::string_view key) const {
    auto it = attrs_.find(key);
    if (it == attrs_.end())
      return Status::ParamInvalid("node '{}' ({}): missing attribute '{}'", name_, type_, key);
    if (const T* v = std::get_if<T>(&it->second)) return *v;
    return Status::ParamInvalid("node '{}' ({}): attribute '{}' has another type", name_, type_, key);
  }
  // The attribute as T, or `fallback` when absent (a present attribute of another type is still
  // an error).
  template <typename T>
  StatusOr<T> AttrOr(std::string_view key, T fallback) const {
    if (!HasAttr(key)) return fallback;
    return Attr<T>(key);
  }

 private:
  std::string name_;
  std::string type_;
  AttrMap attrs_;
};

// A data input: output `index` of `node`.
struct Endpoint {
  Node* node = nullptr;
  int index = 0;
  friend bool operator==(const Endpoint& a, const Endpoint& b) { return a.node == b.node && a.index == b.index; }
};

class Node {
 public:
  OpDesc& op() { return op_; }
  const OpDesc& op() const { return op_; }
  const std::string& name() const { return op_.name(); }
  const std::string& type() const { return op_.type(); }
  std::int64_t id() const { return id_; }
  ComputeGraph* graph() const { return graph_; }

  const std::vector<Endpoint>& inputs() const { return inputs_; }
  const std::vector<Node*>& control_inputs() const { return control_inputs_; }
  std::vector<TensorDesc>& outputs() { return outputs_; }
  const std::vector<TensorDesc>& outputs() const { return outputs_; }

  // The graph a PartitionedCall owns, or null.
  ComputeGraph* subgraph() const { return subgraph_; }

 private:
  friend class ComputeGraph;
  OpDesc op_;
  std::int64_t id_ = 0;
  ComputeGraph* graph_ = nullptr;
  std::vector<Endpoint> inputs_;
  std::vector<Node*> control_inputs_;
  std::vector<TensorDesc> outputs_;
  ComputeGraph* subgraph_ = nullptr;
};

class ComputeGraph {
 public:
  explicit ComputeGraph(std::string name) : name_(std::move(name)) {}
  ComputeGraph(const ComputeGraph&) = delete;
  ComputeGraph& operator=(const ComputeGraph&) = delete;

  const std::string& name() const { return name_; }
  ComputeGraph* parent() const { return parent_; }

  // A new node named op.name(). A name already used in this graph is a ParamInvalid.
  StatusOr<Node*> AddNode(OpDesc op);
  // Data edge: output `src_index` of `src` becomes the next data input of `dst`.
  Status AddInput(Node* dst, Endpoint src);
  Status AddControlInput(Node* dst, Node* src);
  // Data input `i` of `dst` now reads `src`.
  Status SetInput(Node* dst, std::size_t i, Endpoint src);
  // Drops every data and control input of `node` (it becomes a source).
  void ClearInputs(Node* node);
  // Removes a node that nothing consumes (data or control). Otherwise a ParamInvalid naming a
  // consumer. O(nodes): use RemoveNodes for many.
  Status RemoveNode(Node* node);
  // Removes a set of nodes in one O(nodes + edges) sweep. A node outside the set that consumes
  // one of them is a ParamInvalid naming both, and nothing is removed.
  Status RemoveNodes(const std::vector<Node*>& doomed);

  Node* FindNode(std::string_view name) const;
  // Nodes in insertion order.
  std::vector<Node*> nodes() const;
  std::size_t node_count() const { return nodes_.size(); }
  // The data and control consumers of `node`, in node order.
  std::vector<Node*> Consumers(const Node* node) const;

  // A subgraph owned by this (root) graph; a PartitionedCall points at it.
  StatusOr<ComputeGraph*> AddSubgraph(std::string name);
  ComputeGraph* FindSubgraph(std::string_view name) const;
  std::vector<ComputeGraph*> subgraphs() const;
  Status SetSubgraph(Node* call, ComputeGraph* subgraph);

  // Nodes so that every node comes after its data and control inputs; ties in insertion order
  // (stable). A cycle is a ParamInvalid naming the nodes on it.
  StatusOr<std::vector<Node*>> TopologicalOrder() const;

 private:
  std::string name_;
  ComputeGraph* parent_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, Node*> by_name_;
  std::int64_t next_id_ = 0;
  std::vector<std::unique_ptr<ComputeGraph>> subgraphs_;
};

}  // namespace npuflow::graph
