// CompiledModel: what the v1 compiler (lowering/) produces and the task-sink runtime loads; the
// content of an .om model file (graph/model_file/model_file.h).
//
// Device memory is described by segment and offset, never by address: the loader allocates each
// segment and resolves a MemRef to base(segment) + offset. Everything here is plain data.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/exe_graph/exe_graph.h"
#include "graph/ir/compute_graph.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/types.h"

namespace npuflow::graph {

// Device memory segments of a model (seed 002, section 8).
enum class Segment : std::uint8_t {
  kNone,              // a null argument (no workspace)
  kWeights,           // Const values, loaded once, read-only
  kFixedFeatureMap,   // activations whose addresses device-side tasks keep (tiling-sink inputs, workspaces)
  kFeatureMap,        // refreshable activations: the user may supply this memory per model
  kVariables,         // Variable values, persistent across runs
  kInput,             // one zero-copy block per model input, never shared
  kOutput,            // one zero-copy block per model output, never shared
  kTilingData,        // KernelParams of each kernel (graph/kernels/kernel_abi.h); written by AICPU when sunk
  kFileConstant,      // FileConstant values (external weights, weights/): the offset is a logical one; the
                      // loader maps each FileConstant's logical offset to the device address of its file
                      // region (fileconstant_addr_mapping), so regions need not be contiguous
};
inline constexpr int kSegmentCount = 9;
std::string_view SegmentName(Segment segment);  // "weights", "fixed_fm", "fm", "variables", "input", ...

struct MemRef {
  Segment segment = Segment::kNone;
  std::uint64_t offset = 0;
  friend bool operator==(const MemRef&, const MemRef&) = default;
};

// Where output `output` of node `node` lives. Inputs and outputs of the model have their own
// kInput / kOutput blocks; `first_use`/`last_use` are positions in the compiled execution order
// (the producer's and the last consumer's), the lifetime plan-memory reused bytes by.
struct TensorPlacement {
  std::string node;
  int output = 0;
  MemRef ref;
  std::uint64_t bytes = 0;
  std::int64_t first_use = 0;
  std::int64_t last_use = 0;
};

struct MemoryPlan {
  std::array<std::uint64_t, kSegmentCount> segment_bytes{};  // indexed by Segment
  std::vector<TensorPlacement> tensors;
  // The sum of all feature-map tensor sizes (what no reuse would take), against which the
  // planned feature map (fixed + refreshable) is compared.
  std::uint64_t feature_map_tensor_bytes = 0;
  std::uint64_t bytes(Segment s) const { return segment_bytes[static_cast<int>(s)]; }
};

// kTaskUpdate: the tiling sink's update of a kernel on another stream (rt's ModelTaskUpdate): its
// new block_dim (u32) and tiling key (u64) are read from device words when the update runs.
// A kernel whose block_dim is this waits for the tiling sink's task update (npu_sim's
// kTilingSinkBlockDim, GE's kTilingSinkBlockDim).
inline constexpr std::uint32_t kTilingSinkBlockDim = 0xFFFFFFFFu;

enum class TaskType : std::uint8_t { kKernel, kAicpuKernel, kMemcpy, kEventRecord, kEventWait, kNop, kTaskUpdate };
std::string_view TaskTypeName(TaskType type);

struct TaskDef {
  TaskType type = TaskType::kNop;
  std::string node;    // the op this task runs (empty for pure sync tasks)
  std::string kernel;  // kKernel / kAicpuKernel: the npu_sim kernel name
  std::uint32_t block_dim = 1;
  std::uint64_t tiling_key = 0;
  std::vector<MemRef> args;  // kernel args (graph/kernels/kernel_abi.h order)
  std::uint32_t event = 0;   // kEventRecord / kEventWait
  MemRef src, dst;           // kMemcpy, device to device
  std::uint64_t bytes = 0;   // kMemcpy
  // kTaskUpdate: the target kernel (an index into model.streams, and into that stream's tasks) and
  // the tiling context's block_dim and tiling-key words.
  std::uint32_t target_stream = 0;
  std::uint32_t target_task = 0;
  MemRef block_dim_ref, tiling_key_ref;
};

struct StreamDef {
  std::uint32_t id = 0;
  OpEngine engine = OpEngine::kAICore;  // the engine of the stream's first op
  std::string name;                     // "tiling": the tiling sink's attached stream; empty otherwise
  std::vector<TaskDef> tasks;
};

// A model input (a Data node) or output (a NetOutput input), in order.
struct IoDef {
  std::string name;  // the Data node; for outputs, "<producer>:<index>"
  TensorDesc desc;
  MemRef ref;  // its kInput / kOutput block
};

struct CompileOptions {
  std::string chip = "910B";
  enum class StreamMode : std::uint8_t { kSingle, kMulti } stream_mode = StreamMode::kMulti;
  int max_parallel = 8;  // streams per engine in multi-stream mode, 1..64
  // External weights (weights/, the external-weights pass). `external_weight`: "" keeps Consts
  // embedded and FileConstants external; "0" embeds everything (FileConstant -> Const); "1" one
  // file per distinct weight; "2" one combined file. Paths here are where the compile wrote.
  std::string external_weight;
  std::string external_weight_dir;  // the resolved weight directory (modes 1 and 2)
  std::string model_name;           // names the combined file "<model_name>_weight_combined"
  std::string value_bins;           // ge.exec.value_bins JSON: FileConstant file_id -> file
  // The tiling sink (seed 003, lowering/tiling_sink.h): ge.tiling_schedule_optimize "", "0" or
  // "1"; whether the compile targets a known device (a Session: online, so the chip's task-update
  // support is a gate) or not (npuflow compile: offline, that gate skipped, as in GE); and the
  // NOPs before a sunk kernel (-1: the chip's prefetch_num; a developer override otherwise).
  std::string tiling_schedule_optimize;
  bool online = false;
  int tiling_sink_nops = -1;
  // Marked nodes on one stream whose tiling is the same computation (the same op type and
  // attributes, input descriptions, workspace, and tiling-depend tensors) share the first one's
  // AICPU tiling task and event: one tiling per group, a task update per kernel (gen-tasks). Off:
  // each marked node has its own chain, as GE builds it. Not kept in the .om (its tasks are).
  bool tiling_sink_share = true;
};

// What mark-tiling-sink decided for a node whose tiling depends on an input's value known only
// at run time: marked (device tiling on the attached "tiling" stream), or the dynamic path and
// the gate that failed ("option", "device" or "op") with why.
struct TilingSinkDecision {
  std::string node;
  std::string op_type;
  bool marked = false;
  std::string gate;
  std::string why;
};

struct CompiledModel {
  std::unique_ptr<ComputeGraph> graph;  // after all passes, with the annotations they made
  CompileOptions options;
  std::string chip;
  MemoryPlan memory;
  std::vector<StreamDef> streams;
  std::uint32_t event_count = 0;
  std::vector<IoDef> inputs;
  std::vector<IoDef> outputs;
  // Initial contents of segments, loaded at model load: weights (Consts), variables (initial
  // values, zero where none), tiling data (KernelParams). Sizes equal the segments'.
  std::vector<std::uint8_t> weights;
  std::vector<std::uint8_t> variables;
  std::vector<std::uint8_t> tiling_data;
  // RT2.0 (npuflow compile --runtime v2): the Init / Main / DeInit execute graphs, and the
  // executor Main runs on ("auto" or empty: chosen at load). Null: the model has none. A file may
  // hold task lists (above), execute graphs, or both.
  std::shared_ptr<const exe::ExecuteGraphSet> execute_graphs;
  std::string executor;
  // mark-tiling-sink's decisions, in graph order (the compile log; not stored in the .om: the
  // marks are node attributes there).
  std::vector<TilingSinkDecision> tiling_sink;
  // A pipeline model (lowering::CompilePipeline): each stage's compiled model, in stage order;
  // `graph` is the stage-partitioned root reduced to its wiring (lowering::PipelineWiring). Empty
  // for any other model.
  std::vector<std::shared_ptr<const CompiledModel>> stages;
};

}  // namespace npuflow::graph
