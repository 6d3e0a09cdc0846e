// The op library's registry: what each op type declares.
//
// An op declares its inputs, shape inference (static, and symbolic for dynamic dims), its engine,
// a host tiling function (block_dim, tiling_key, workspace), which inputs' *values* its tiling
// depends on, whether it can tile on AICPU, a reference CPU kernel (the oracle every runtime is
// compared against), and the npu_sim device kernel that runs it on the simulated device.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/kernels/kernel_abi.h"
#include "graph/ir/types.h"

namespace npuflow::npu_sim {
struct ChipSpec;
}  // namespace npuflow::npu_sim

namespace npuflow::graph {

enum class OpEngine : std::uint8_t { kAICore, kAICpu, kHostLocal };
std::string_view OpEngineName(OpEngine engine);

struct TilingInfo {
  std::uint32_t block_dim = 1;
  std::uint64_t tiling_key = 0;
  std::uint64_t workspace_bytes = 0;
};

// What a kernel moves and computes in all its blocks together: the cost model's measure of work.
struct OpWork {
  double bytes = 0;
  double flops = 0;
};

// The cost model that sizes block splits (TileOp): what one more block costs the device and how
// fast one core works through a block (npu_sim::ChipSpec's block_* fields, wall time on the host
// that runs the simulation). dispatch_ns 0: splits are left as the tiling made them.
struct BlockCosts {
  double dispatch_ns = 0;
  double bytes_per_ns = 0;  // GB/s
  double flops_per_ns = 0;  // GFLOP/s
};

// What a tiling is for: the cores it spreads blocks over and what a block costs.
struct TileTarget {
  int core_count = 1;
  BlockCosts costs;
};

// The target of a chip: its AICore count and its block_* costs, taken through float as the tiling
// sink's context stores them, so host and device cap alike.
TileTarget TileTargetOf(const npu_sim::ChipSpec& chip);

// Extra workspace of a custom op's kernel under the tiling sink (seed 003: "+20 KB for custom ops").
inline constexpr std::uint64_t kCustomOpSinkWorkspaceBytes = 20 * 1024;

struct OpDef {
  std::string type;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  std::vector<std::string> required_attrs;
  OpEngine engine = OpEngine::kAICore;

  // Output descriptors from input descriptors. Errors name the node (op.name()) and the shapes.
  using InferFn = Status (*)(const OpDesc& op, const std::vector<TensorDesc>& inputs, std::vector<TensorDesc>& outputs);
  InferFn infer = nullptr;

  // The reference CPU kernel: outputs (already sized by `infer` for the inputs' shapes) from
  // inputs. f16 and bf16 are storage types: arithmetic accumulates in f32.
  using ReferenceFn = Status (*)(const OpDesc& op, const std::vector<const Tensor*>& inputs,
                                 std::vector<Tensor>& outputs);
  ReferenceFn reference = nullptr;

  // Host tiling for static input shapes; `depend_values` holds the values of the
  // tiling-depend inputs (in `tiling_depend_inputs` order), empty when they are not known.
  using TilingFn = StatusOr<TilingInfo> (*)(const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                            const std::vector<const Tensor*>& depend_values, int core_count);
  TilingFn tiling = nullptr;
  // The kernel's work for these inputs (all blocks together), for the block-split cost model;
  // null: every input's bytes read and every output's written, no arithmetic counted (DefaultWork).
  using WorkFn = OpWork (*)(const OpDesc& op, const std::vector<TensorDesc>& inputs,
                            const std::vector<const Tensor*>& depend_values);
  WorkFn work = nullptr;
  std::vector<int> tiling_depend_inputs;
  bool tiling_on_aicpu = false;
  // A user's op, not one npuflow ships (GE's custom op). Tiled on the device by the tiling sink it
  // gets kCustomOpSinkWorkspaceBytes of workspace beyond what its host tiling asks for, as in GE.
  bool custom = false;

  // Fills the op-specific scalars of the device kernel's KernelParams (ints / floats; see
  // graph/kernels/kernel_abi.h). Tensors are filled by EncodeKernelParams. Null: the op has none.
  using ParamsFn = Status (*)(const OpDesc& op, const std::vector<TensorDesc>& inputs, KernelParams& params);
  ParamsFn params = nullptr;

  // The npu_sim kernel that runs this op on the device (DeviceKernelName(type), registered in
  // npu_sim's KernelRegistry); empty for host-local ops.
  std::string device_kernel;

  // Output i may be written in place over input inplace[i] (-1: never). The memory planner gives
  // both the same bytes when the input has no other consumer; the device kernel then skips the
  // copy. (A Reshape is placed as a view first: see `view`.)
  std::vector<int> inplace;
  // The op writes its in-place input rather than only viewing it: over a Variable that is an
  // update, which dead-code elimination keeps, the memory plan makes in the Variable's own bytes
  // and the interpreter persists (KvCacheWrite).
  bool updates_inplace_input = false;
  // A view: output `output` is input 0's bytes from the returned byte offset on, unchanged (a
  // Reshape; a Split whose pieces are contiguous), or -1 when this instance is not one. Static
  // shapes only. plan-memory places a node whose outputs are all views inside its input's bytes
  // (marking it `_view`) and gen-tasks gives it no task: nothing runs for it on the device.
  using ViewFn = std::int64_t (*)(const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                  const std::vector<TensorDesc>& outputs, int output);
  ViewFn view = nullptr;
  // A collective communication (HCCL-like) op. A model holding one is never unloaded to free
  // device resources for another (seed 002, 3.5.1): that would break the communication group.
  bool communication = false;
};

// Process-wide, filled at start-up by RegisterBuiltinOps; lookups are thread-safe afterwards.
// Registering a type again replaces it (the last registration wins).
class OpRegistry {
 public:
  static OpRegistry& Global();
  void Register(OpDef def) { defs_.Register(std::move(def)); }
  // An unknown type is a NotFound naming it.
  StatusOr<const OpDef*> Find(std::string_view type) const;
  std::vector<std::string> Types() const { return defs_.Names(); }

 private:
  NamedRegistry<OpDef, &OpDef::type> defs_;
};

// Registers the ops npuflow ships (idempotent).
void RegisterBuiltinOps();

// Runs `def.infer` after checking the input count and required attributes; every error names the
// node.
Status InferOutputs(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                    std::vector<TensorDesc>& outputs);

// The op's tiling for `target`: `def.tiling` over the target's cores, then its block_dim capped
// so that no block does less work than its dispatch costs (a block's work in ns, at the cost
// model's rates, is at least costs.dispatch_ns; an op whose whole work is less runs as one block).
// A tiling's even block count stays even (GEMV's, so 2 host threads share it evenly).
// Kernels split their work with BlockRange, so any block_dim up to the tiling's gives the same
// output. An op without a tiling function gets the default TilingInfo (one block).
StatusOr<TilingInfo> TileOp(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                            const std::vector<const Tensor*>& depend_values, const TileTarget& target);

// The cap alone: `block_dim` limited to the blocks `work` pays for under `costs` (at least 1).
std::uint32_t CapBlocks(std::uint32_t block_dim, const OpWork& work, const BlockCosts& costs);

// The bytes of static tensors together; nullopt if one is dynamic.
std::optional<double> StaticBytes(const std::vector<TensorDesc>& descs);

// The default work estimate: every input's static bytes read and every output's written (the
// outputs from `def.infer`). Nullopt when a shape is dynamic or inference fails: no cap then.
std::optional<OpWork> DefaultWork(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs);

// NumPy broadcasting of two shapes, with symbolic dims: equal dims (same size or same symbol)
// stay, a static 1 yields to the other, a symbol against a static size n > 1 becomes n (checked at
// run time). Anything else is a ParamInvalid naming the node and both shapes.
StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b, std::string_view node);

// The KernelParams of a static-shape launch: tensors from the descriptors, then the op's own
// ParamsFn (if any) for ints/floats. A dynamic shape, a rank above kMaxKernelRank or more than
// kMaxKernelTensors tensors is a ParamInvalid naming the node.
StatusOr<KernelParams> EncodeKernelParams(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                          const std::vector<TensorDesc>& outputs);

}  // namespace npuflow::graph
