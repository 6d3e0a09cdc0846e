// DavinciModel: one compiled model loaded onto a device for the v1 task-sink runtime (seed 002,
// section 2.4). Init runs the documented stages in order:
//
//   InitModelMem   weights, variables and, per execution instance, feature map (fixed and
//                  refreshable), tiling data and the model's own I/O blocks; self-allocated or
//                  on user memory (LoadConfig::feature_memory_base / const_memory_base)
//   PreProcessFileConstants
//                  external weights (weights/): each FileConstant's file is found (LoadConfig
//                  weight_path, else <model dir>/weight/, else its location); user device
//                  memory (SetExternalWeightAddress) is used in place; otherwise the session's
//                  ExternalWeightManager places the regions (one allocation for a model whose
//                  FileConstants share one file, else one per region) and the WeightLoaderActor
//                  fills them in 10 MiB chunks. Each region has a latch event; the first task on
//                  each stream that reads it waits on it, so executions may start while weights
//                  still stream in. With verify_weights or a key the load completes (checked)
//                  before Init returns.
//   InitIoNodes    every place a task reads a model input or writes a model output becomes a
//                  zero-copy slot (npu_sim::IoPatch): the caller's device addresses go straight
//                  into the task arguments at each run; host buffers are copied through the
//                  model's own I/O blocks, the only place a copy is made
//   InitVariables  variable memory filled with the initial values (TransAllVarData)
//   InitNodes      kernels resolved in npu_sim's registry; communication (HCCL-like) ops found
//   DoTaskSink     per instance: BindModelStream, InitTaskInfo (TaskDef -> npu_sim::Task with
//                  resolved addresses), DistributeTask (each stream's list sent once), build end
//
// After Init one execution is one message to the device (npu_sim::Runtime::ExecuteModel).
//
// Execution instances. A device model runs one execution at a time, because an execution owns the
// feature map. A DavinciModel therefore loads `instances` copies of everything an execution
// writes (feature map, tiling data, own I/O blocks, streams, events) over one copy of the weights;
// concurrent callers spread over them. A model that updates a Variable in place has one instance,
// so its updates stay in call order.
//
// Thread-safety: NnExecute may be called from many threads and fibers at once. Each execution is
// a message to the model's ModelActor (model_actor.h), which owns the execution state (instances
// in flight, exclusivity, the weight gate, timeouts, unload draining); the caller only checks its
// arguments, stages host buffers, sends and waits.
//
// Units. One class in several files, one per stage group: davinci_model.cc (Init's outline and
// the lifetime: construction, Unload), davinci_model_load.cc (Needs, InitModelMem, InitIoNodes,
// InitVariables, InitNodes), weight_binding.cc (PreProcessFileConstants, the weight load's status
// and the gate elision), task_sink.cc (DoTaskSink: BindModelStream, InitTaskInfo, DistributeTask)
// and nn_execute.cc (NnExecute, Execute, ExecuteHostScheduled). They stay one class because every
// stage writes the same per-instance records (Instance: memory, streams, lists, gates) that the
// next stage and the execution paths read, and an execution reads them with no indirection; the
// files are what keeps each stage's code apart.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/adaptive_wait.h"
#include "base/aes_gcm.h"
#include "base/status.h"
#include "graph/model_file/compiled_model.h"
#include "npu_sim/runtime.h"
#include "scheduler/model_actor.h"
#include "weights/external_weight_manager.h"

namespace npuflow::scheduler {

using graph::CompiledModel;
using graph::Tensor;

// A model input or output buffer: host memory (copied in, or filled on completion) or device
// memory on the model's device (zero copy). `bytes` must equal the tensor's size. An output the
// caller does not want is Discard(): the run writes it in the model's own memory, and nothing
// copies it out (a greedy decode step leaves its logits there and reads only the next token).
struct DataBuffer {
  void* host = nullptr;
  npu_sim::DevicePtr device;
  std::uint64_t bytes = 0;
  bool discard = false;  // outputs only: neither host nor device, bytes 0
  static DataBuffer Host(void* data, std::uint64_t bytes) { return DataBuffer{data, {}, bytes}; }
  static DataBuffer Host(const void* data, std::uint64_t bytes) { return DataBuffer{const_cast<void*>(data), {}, bytes}; }
  static DataBuffer Device(npu_sim::DevicePtr ptr, std::uint64_t bytes) { return DataBuffer{nullptr, ptr, bytes}; }
  static DataBuffer Discard() { return DataBuffer{nullptr, {}, 0, true}; }
};

struct ExecuteArgs {
  std::vector<DataBuffer> inputs;
  std::vector<DataBuffer> outputs;
  // Async on this user stream (rtModelExecute on a stream): NnExecute returns once submitted and
  // the caller synchronizes the stream. Buffers must then be device memory.
  std::optional<npu_sim::Stream> stream;
  npu_sim::Timeout timeout;  // synchronous runs: abort the device model after this long
};

// User device memory for an external weight file (aclmdlSetExternalWeightAddress).
struct FileConstantMem {
  std::string file_name;  // matched against the base name of a FileConstant's file
  npu_sim::DevicePtr ptr;
  std::uint64_t size = 0;
};

// Who runs an execution's bookkeeping: the model's ModelActor (the default), or the calling
// thread under the model's locks (the path before the actor, kept for same-run comparisons).
// NPUFLOW_EXECUTE_PATH=actor|caller sets the default.
enum class ExecutePath { kActor, kCallerThread };
StatusOr<ExecutePath> DefaultExecutePath();

struct LoadConfig {
  int device = 0;
  std::uint64_t session_id = 0;
  int instances = 1;  // concurrent executions, 1..64 (forced to 1 for models that update Variables)
  // User memory: the refreshable feature map (SetFeatureMemoryBase; one instance only) and the
  // weights (const memory base). Never freed by npuflow; each must be at least the segment size.
  npu_sim::DevicePtr feature_memory_base;
  std::uint64_t feature_memory_size = 0;
  npu_sim::DevicePtr const_memory_base;
  std::uint64_t const_memory_size = 0;
  // Shared weights (ModelManager's weight sharing): when set, the weights already live here and
  // are not allocated or copied.
  npu_sim::DevicePtr shared_weights;

  // External weights. Where FileConstant files are looked for: `weight_path` (a directory) when
  // set, else "<model_dir>/weight/" when that file exists, else the node's location as it is.
  std::string weight_path;
  std::string model_dir;  // the directory of the model file, when loaded from one
  std::vector<FileConstantMem> external_weight_memory;
  bool verify_weights = false;        // check each region's SHA-256 while loading
  std::optional<AesKey> weight_key;   // the weight files are AES-256-GCM envelopes under this key
  // The session's manager (ModelManager supplies its own when null).
  std::shared_ptr<weights::ExternalWeightManager> weight_manager;
  // Unset: DefaultExecutePath().
  std::optional<ExecutePath> execute_path;

  // User memory for the file `name`: ptr + offset holds a FileConstant's bytes, nothing is copied,
  // nothing is ever freed. A null pointer, a size of 0 or one that is not a multiple of 32 is a
  // ParamInvalid; a later call for the same name replaces the earlier one.
  Status SetExternalWeightAddress(std::string name, npu_sim::DevicePtr ptr, std::uint64_t size);
};

// What loading a model takes from a device.
struct ResourceNeeds {
  std::uint64_t memory_bytes = 0;
  std::size_t streams = 0;
  std::size_t events = 0;
};

class DavinciModel {
 public:
  // The synchronous wait's options for `workers` device workers on `cores` cores this process may
  // run on (0: unknown): a spin with a core of its own, none without one (ExecWaitOptions in
  // davinci_model.cc has the figures).
  static actors::AdaptiveWait::Options ExecWaitOptions(int workers, int cores);

  // What Init needs from the device for `model` under `config` (before any allocation).
  static ResourceNeeds Needs(const CompiledModel& model, const LoadConfig& config);

  DavinciModel(npu_sim::Runtime* rt, std::uint32_t id, std::shared_ptr<const CompiledModel> model,
               LoadConfig config);
  ~DavinciModel();  // Unload()
  DavinciModel(const DavinciModel&) = delete;
  DavinciModel& operator=(const DavinciModel&) = delete;

  // The stages above, in order. A failure releases what the earlier stages took.
  Status Init();
  // The stages Init ran, in order (for tests and `npuflow run -v`).
  const std::vector<std::string>& init_stages() const { return init_stages_; }

  // One inference (seed 002, 3.3): map (device buffers) or copy (host buffers) the inputs,
  // execute, synchronize with the timeout unless async on a user stream, copy host outputs.
  // A timeout aborts the device model and returns a Timeout status. Host outputs are written by
  // the device straight into the caller's buffers, never after this returns; when it returns an
  // error their contents are unspecified (an output copied before the failure stays written).
  Status NnExecute(const ExecuteArgs& args);
  // Host tensors in, host tensors out: the common case of NnExecute.
  StatusOr<std::vector<Tensor>> Execute(const std::vector<Tensor>& inputs, npu_sim::Timeout timeout = std::nullopt);

  // The same tasks without task sink, for comparison: every task is submitted by the host on its
  // own (one host interaction each) to host streams, then the host synchronizes. Runs on
  // instance 0 and fails if another execution of this model is in flight.
  Status ExecuteHostScheduled(const ExecuteArgs& args);

  // Releases every device resource the model holds (device models, streams, events, memory it
  // allocated). Waits for nothing: executions in flight fail with Aborted. Idempotent.
  Status Unload();

  std::uint32_t id() const { return id_; }
  bool unloaded() const { return unloaded_.load(std::memory_order_acquire); }
  int device() const { return config_.device; }
  std::uint64_t session_id() const { return config_.session_id; }
  const CompiledModel& compiled() const { return *model_; }
  std::shared_ptr<const CompiledModel> compiled_shared() const { return model_; }
  int instances() const { return static_cast<int>(instances_.size()); }
  // Host-buffer executions whose caller read the outputs where the run left them (see Staging).
  std::uint64_t outputs_read_in_place() const { return reads_in_place_.load(std::memory_order_relaxed); }
  // The device task lists instance `instance` distributed, per model stream, with resolved
  // addresses, weight gates and task updates as npu_sim runs them (for inspection and tests).
  // Out of range: empty.
  std::vector<std::vector<npu_sim::Task>> DistributedTasks(int instance) const {
    if (instance < 0 || static_cast<std::size_t>(instance) >= instances_.size()) return {};
    return instances_[static_cast<std::size_t>(instance)]->lists;
  }
  bool has_communication_tasks() const { return has_communication_; }
  bool updates_variables() const { return updates_variables_; }
  npu_sim::DevicePtr weights_base() const { return weights_; }
  // Where a weight, FileConstant or Variable lives on the device (shared by every instance), and
  // its bytes: what another runtime may borrow (RT2.0's ModelLoadArg). NotFound for a node without
  // such a placement; FileConstant bytes are there once WaitForWeights returns.
  StatusOr<std::pair<npu_sim::DevicePtr, std::uint64_t>> SharedTensor(const std::string& node) const;
  std::uint64_t last_used() const { return last_used_.load(std::memory_order_relaxed); }
  void Touch();
  // In use: an execution in flight or a Run loop started. Resource recycling skips busy models.
  bool busy() const {
    return in_flight_.load(std::memory_order_relaxed) > 0 || run_loops_.load() > 0 || borrowers_.load() > 0;
  }
  void AddRunLoop(int delta) { run_loops_.fetch_add(delta); }
  // A Run loop is about to submit to instance 0 on its own (see model_msg::ShareInstance): the
  // loop waits for this before its first submission. Any thread, handlers included.
  actors::Future<Status> ShareInstanceWithRunLoop();
  // Runs `hook` when the model is unloaded, first thing, before anything is freed (a Run loop
  // stops there: it submits to the model's execution stream, which Unload destroys). Unloaded
  // already: the hook is not kept, and false is returned.
  bool OnUnload(std::function<void()> hook);
  // Another runtime uses this model's memory (SharedTensor: RT2.0's prefill on its weights and KV
  // cache): resource recycling must not unload it meanwhile.
  void AddBorrower(int delta) { borrowers_.fetch_add(delta); }

  // The device model and execution stream of instance `i` (the Run loop uses instance 0).
  npu_sim::Model device_model(int i) const { return instances_[i]->model; }
  npu_sim::Stream exec_stream(int i) const { return instances_[i]->exec_stream; }
  // The io vector that runs instance `i` on its own I/O blocks.
  std::vector<std::uint64_t> OwnIo(int i) const;
  // The device address of instance `i`'s own block for input / output `index`.
  npu_sim::DevicePtr OwnInput(int i, std::size_t index) const;
  npu_sim::DevicePtr OwnOutput(int i, std::size_t index) const;
  npu_sim::Runtime& runtime() { return *rt_; }
  // Ok while external weights are loading or loaded; the load's error if it failed (executions
  // then fail with it).
  Status WeightsStatus();
  // Blocks until every external weight region of the model has landed; their load status.
  Status WaitForWeights() const;
  struct ExternalWeightInfo {
    std::string node, file;
    std::uint64_t offset = 0, bytes = 0;
    npu_sim::DevicePtr address;
    bool user_memory = false;
    bool copied_here = false;  // this model started the copy (false: shared or user memory)
  };
  const std::vector<ExternalWeightInfo>& external_weights() const { return external_weight_info_; }

 private:
  struct Instance {
    std::array<npu_sim::DevicePtr, graph::kSegmentCount> base{};
    std::array<bool, graph::kSegmentCount> owned{};  // allocated here (freed on unload)
    npu_sim::Model model;
    bool has_model = false;
    std::vector<npu_sim::Stream> streams;  // bound to `model`
    npu_sim::Stream exec_stream;           // host stream: copies and model executes
    std::vector<npu_sim::Stream> host_streams;  // ExecuteHostScheduled only, created on first use
    std::vector<npu_sim::Event> events;
    std::vector<std::vector<npu_sim::Task>> lists;  // the resolved lists, kept for host scheduling
    std::vector<std::vector<npu_sim::IoPatch>> patches;
    // Per stream, the list positions of the weight gates (the waits on FileConstant latches).
    std::vector<std::vector<std::uint32_t>> gates;
    // The tiling sink (seed 003, 5.2): per marked kernel, recorded at distribution, its stream and
    // task id and its tiling context's device address; a task update names them (TaskOf).
    struct TilingSinkTask {
      std::string node;
      std::size_t stream = 0;  // index into `streams`
      std::uint32_t task = 0;  // position in that stream's list
      bool kernel_seen = false;
      npu_sim::DevicePtr context;
    };
    std::vector<TilingSinkTask> tiling_sink;
    std::atomic<bool> gates_elided{false};
    std::atomic<int> in_flight{0};
  };

  static constexpr int Seg(graph::Segment s) { return static_cast<int>(s); }

  Status InitModelMem();
  // The last stage: spawns the ModelActor unless the config asks for the caller-thread path.
  Status StartExecutionPath();
  // PreProcessFileConstants and its stages (weight_binding.cc).
  friend class ModelActor;
  struct FileConstantUse;
  using FileConstantsByFile = std::map<std::string, std::vector<const FileConstantUse*>>;
  Status PreProcessFileConstants();
  StatusOr<std::vector<FileConstantUse>> FindFileConstants() const;
  StatusOr<FileConstantUse> ReadFileConstant(const graph::TensorPlacement& t) const;
  // Binds the FileConstants whose file has user device memory; the others go to `rest`, per file.
  Status BindUserWeightMemory(const std::vector<FileConstantUse>& fcs, FileConstantsByFile& rest);
  Status CheckWeightFiles(const FileConstantsByFile& by_file) const;
  // Places one file's regions through the weight manager (`combined`: one copy of their span).
  Status PlaceWeightFile(const std::string& path, const std::vector<const FileConstantUse*>& users, bool combined);
  Status InitIoNodes();
  Status InitVariables();
  Status InitNodes();
  // DoTaskSink and its stages (task_sink.cc). TaskPositions: per stream, TaskDef index -> list index.
  using TaskPositions = std::vector<std::vector<std::uint32_t>>;
  Status DoTaskSink();
  StatusOr<std::uint64_t> Resolve(const Instance& inst, const graph::MemRef& ref) const;
  // The FileConstant slot holding logical offset `offset` of the file_constant segment, or -1.
  int FileConstantSlotOf(std::uint64_t offset) const;
  Status CheckArgs(const ExecuteArgs& args) const;
  // The execution paths (nn_execute.cc): through the ModelActor, or on the calling thread.
  Status NnExecuteThroughActor(const ExecuteArgs& args);
  Status NnExecuteOnCaller(const ExecuteArgs& args);
  Status RunHostScheduled(const ExecuteArgs& args);
  // A staged run as one submission: the input copies, the model execute, the output copies.
  void FillStaging(const ExecuteArgs& args, Staging& staging) const;
  void FillOutputs(const ExecuteArgs& args, Staging& staging) const;  // the output half of FillStaging
  // Host staging for one run: a spare one whose buffers already have their capacity (no
  // allocation), else a new one. A run gives it back when nothing else holds it any more (a copy
  // that outlived a timeout still does: that one is dropped when its tasks are).
  std::shared_ptr<Staging> AcquireStaging();
  void ReleaseStaging(std::shared_ptr<Staging> staging);
  // Closes the staging's output window (no copy writes the caller's outputs after this), then
  // releases it.
  void CloseStaging(std::shared_ptr<Staging> staging);
  // Closes a staging when the call that filled it returns, on every path.
  class StagingCloser {
   public:
    StagingCloser(DavinciModel* model, std::shared_ptr<Staging> staging) : model_(model), staging_(std::move(staging)) {}
    ~StagingCloser() {
      if (staging_ != nullptr) model_->CloseStaging(std::move(staging_));
    }
    StagingCloser(const StagingCloser&) = delete;
    StagingCloser& operator=(const StagingCloser&) = delete;

   private:
    DavinciModel* model_;
    std::shared_ptr<Staging> staging_;
  };
  // After a run that left its outputs in instance staging.read_in_place's blocks: copies them
  // into the caller's buffers, then frees the instance (model_msg::OutputsRead).
  Status ReadOutputsInPlace(const ExecuteArgs& args, const Staging& staging);
  // outputs_in_place: the D2H copies leave the outputs in the instance's blocks for the caller
  // (see Staging).
  std::vector<npu_sim::Task> StagedTasks(const std::vector<std::uint64_t>& io, std::uint32_t device_model,
                                         const std::shared_ptr<Staging>& staging, bool outputs_in_place) const;
  bool HasGates(int i) const;
  Instance& PickInstance();
  std::vector<std::uint64_t> IoFor(const Instance& inst, const ExecuteArgs& args) const;
  Status FreeInstance(Instance& inst);
  Status BindModelStream(Instance& inst);
  Status InitTaskInfo(Instance& inst, TaskPositions& moved);
  Status InitStreamTasks(Instance& inst, std::size_t s, std::size_t first_kernel, std::vector<std::uint32_t>& moved);
  StatusOr<npu_sim::Task> TaskOf(const Instance& inst, const graph::TaskDef& t, const npu_sim::KernelDef* def) const;
  Status RecordTilingSinkTask(Instance& inst, std::size_t s, const graph::TaskDef& t, std::uint32_t position) const;
  Status DistributeTask(Instance& inst, const TaskPositions& moved);
  // NnExecute with host buffers: copies and run in one submission on the instance's exec stream.
  Status ExecuteStaged(Instance& inst, std::vector<std::uint64_t> io, const ExecuteArgs& args, bool weights_settled);
  // After a run that started with every weight landed: the instance's gates become NOPs on the
  // device (their latches stay recorded while the model is loaded), once.
  void ElideGates(Instance& inst);

  npu_sim::Runtime* rt_;
  const std::uint32_t id_;
  std::shared_ptr<const CompiledModel> model_;
  LoadConfig config_;
  std::vector<std::string> init_stages_;
  std::vector<ExternalWeightInfo> external_weight_info_;

  npu_sim::DevicePtr weights_, variables_;
  // External weights: per FileConstant, its logical place and device address (GE's
  // fileconstant_addr_mapping), sorted by logical offset, and what keeps the device copies alive.
  struct FileConstantSlot {
    std::uint64_t logical = 0;
    std::uint64_t bytes = 0;
    npu_sim::DevicePtr address;
    std::optional<npu_sim::Event> ready;  // latch of its region (none on user memory)
    std::string node;
  };
  std::vector<FileConstantSlot> file_constants_;
  std::vector<std::shared_ptr<weights::DeviceWeightFile>> weight_files_;
  std::vector<std::shared_ptr<weights::RegionLoadState>> weight_loads_;
  std::atomic<bool> weights_landed_{false};
  bool owns_weights_ = false, owns_variables_ = false;
  std::vector<std::unique_ptr<Instance>> instances_;
  // Zero-copy places: per stream, the patches (slot = input index, then n_inputs + output index).
  std::vector<std::vector<npu_sim::IoPatch>> io_patches_;
  std::vector<const npu_sim::KernelDef*> kernels_;  // per (stream, task), resolved by InitNodes
  bool has_communication_ = false;
  bool updates_variables_ = false;
  // Executions hold exec_mu_ shared; Unload aborts the device models (so executions in flight
  // end), then takes it exclusively before releasing anything they use.
  std::shared_mutex exec_mu_;
  bool instances_freed_ = false;  // under exec_mu_: the unload has freed the instances' blocks
  std::atomic<std::uint64_t> reads_in_place_{0};
  std::atomic<bool> unloaded_{false};

  std::atomic<int> in_flight_{0};
  std::atomic<int> run_loops_{0};
  std::mutex unload_hooks_mu_;
  std::vector<std::function<void()>> unload_hooks_;
  std::atomic<int> borrowers_{0};
  std::atomic<std::uint64_t> last_used_{0};
  std::atomic<std::uint64_t> next_instance_{0};

  // The execution path's actor (invalid on the caller path, and until Init has finished), and
  // per instance the io that runs it on its own I/O blocks.
  actors::Address<ModelMsg> actor_;
  // The synchronous executions' wait (NnExecute through the actor): sleeps through most of a
  // step, spins through its expected end (actors/adaptive_wait.h).
  actors::AdaptiveWait exec_wait_;
  static actors::AdaptiveWait::Options ExecWaitOptions(npu_sim::Runtime& rt);
  std::vector<std::vector<std::uint64_t>> own_io_;
  std::mutex host_streams_mu_;  // Instance::host_streams: made by a host-scheduled run, aborted by Unload
  std::mutex staging_mu_;
  std::vector<std::shared_ptr<Staging>> spare_staging_;  // at most kSpareStaging, under staging_mu_
  static constexpr std::size_t kSpareStaging = 4;
};

}  // namespace npuflow::scheduler
