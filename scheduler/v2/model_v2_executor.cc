#include "scheduler/v2/model_v2_executor.h"

#include <charconv>

#include <fmt/format.h>

#include "base/logging.h"
#include "scheduler/v2/op_kernels.h"

namespace npuflow::v2 {

std::string_view ModelStateName(ModelState state) { return state == ModelState::kInit ? "Init" : "Loaded"; }

StatusOr<std::vector<std::pair<std::size_t, std::size_t>>> ParseIoReuse(std::string_view spec) {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  if (spec.empty()) return pairs;
  auto number = [](std::string_view s, std::size_t& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t bar = std::min(spec.find('|', start), spec.size());
    const std::string_view item = spec.substr(start, bar - start);
    const std::size_t comma = item.find(',');
    std::size_t in = 0, out = 0;
    if (comma == std::string_view::npos || !number(item.substr(0, comma), in) || !number(item.substr(comma + 1), out))
      return Status::ParamInvalid("io reuse option '{}': '{}' is not a pair 'input,output' of indices", spec, item);
    pairs.emplace_back(in, out);
    start = bar + 1;
  }
  return pairs;
}

StatusOr<std::unique_ptr<ModelV2Executor>> ModelV2Executor::Create(exe::ExecuteGraphSet graphs,
                                                                   npu_sim::Runtime* runtime, int device,
                                                                   ExecutorOption option) {
  if (runtime == nullptr) return Status::ParamInvalid("ModelV2Executor::Create: no runtime");
  RegisterOpKernels();  // what lowered graphs run
  NPUFLOW_RETURN_IF_ERROR(graphs.Validate());
  NPUFLOW_ASSIGN_OR_RETURN(auto pairs, ParseIoReuse(option.io_reuse));
  if (option.type == ExecutorType::kTopologicalMultiThread && option.threads < 2)
    return Status::ParamInvalid("the multi-thread executor needs at least 2 threads, got {}", option.threads);
  return std::unique_ptr<ModelV2Executor>(
      new ModelV2Executor(std::move(graphs), runtime, device, option, std::move(pairs)));
}

ModelV2Executor::ModelV2Executor(exe::ExecuteGraphSet graphs, npu_sim::Runtime* runtime, int device,
                                 ExecutorOption option, std::vector<std::pair<std::size_t, std::size_t>> io_pairs)
    : graphs_(std::move(graphs)), runtime_(runtime), device_(device), option_(std::move(option)),
      io_pairs_(std::move(io_pairs)) {
  if (option_.profile) subscribers_.EnableProfiler();
}

ModelV2Executor::~ModelV2Executor() {
  if (state() == ModelState::kLoaded) {
    Status s = UnLoad();
    if (!s.ok()) NPUFLOW_LOG_WARN(kScheduler, "model '{}': unload at destruction: {}", graphs_.main->name(), s.ToString());
  }
}

ModelState ModelV2Executor::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

std::uint64_t ModelV2Executor::GetIterationNum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return iterations_;
}

ExecutorType ModelV2Executor::main_executor_type() const {
  std::lock_guard<std::mutex> lock(mu_);
  return main_ ? main_->type() : option_.type;
}

Status ModelV2Executor::CheckAllocators(const ModelExecuteArg& arg, std::string_view call) const {
  const int given = (arg.external_stream_allocator != nullptr) + (arg.external_event_allocator != nullptr) +
                    (arg.external_notify_allocator != nullptr);
  if (given != 0 && given != 3)
    return Status::ParamInvalid("{}: the stream, event and notify allocators are given all together or not at all "
                                "({} of 3 given)",
                                call, given);
  return Status::Ok();
}

RunContext ModelV2Executor::Context(const ModelExecuteArg& arg) {
  RunContext ctx;
  ctx.runtime = runtime_;
  ctx.device = device_;
  ctx.stream = arg.stream;
  ctx.sync_timeout = option_.sync_timeout;
  ctx.host_allocator = host_allocator_.get();
  const bool external = arg.external_stream_allocator != nullptr;
  ctx.streams = external ? arg.external_stream_allocator : builtin_streams_.get();
  ctx.events = external ? arg.external_event_allocator : static_cast<EventAllocator*>(builtin_events_.get());
  ctx.notifies = external ? arg.external_notify_allocator : static_cast<NotifyAllocator*>(builtin_events_.get());
  return ctx;
}

StatusOr<Allocator*> ModelV2Executor::DeviceAllocator(const ModelExecuteArg& arg) {
  if (arg.external_allocator) return arg.external_allocator;
  auto& slot = device_allocators_[{arg.stream.device, arg.stream.id}];
  if (!slot) {
    slot = std::make_unique<CachingMemAllocator>(
        runtime_, device_, TensorPlacement::kOnDeviceHbm,
        fmt::format("{}.stream{}.hbm", graphs_.main->name(), arg.stream.id));
    slot->BindStream(arg.stream);
  }
  return slot.get();
}

Status ModelV2Executor::Load() { return Load(ModelExecuteArg{}, ModelLoadArg{}); }
Status ModelV2Executor::Load(const ModelExecuteArg& arg) { return Load(arg, ModelLoadArg{}); }

Status ModelV2Executor::Load(const ModelExecuteArg& arg, const ModelLoadArg& load_arg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != ModelState::kInit)
    return Status::ParamInvalid("ModelV2Executor::Load: model '{}' is in state {}; Load needs state Init",
                                graphs_.main->name(), ModelStateName(state_));
  NPUFLOW_RETURN_IF_ERROR(CheckAllocators(arg, "ModelV2Executor::Load"));
  // Both graphs are built before Init runs: a Main that cannot load leaves nothing to undo.
  auto init = ExeGraphExecutor::Create(graphs_.init, ExecutorType::kAutomatic);
  if (!init.ok()) return init.status().WithContext("ModelV2Executor::Load: the Init graph");
  auto main = ExeGraphExecutor::Create(graphs_.main, option_.type, option_.threads);
  if (!main.ok()) return main.status().WithContext("ModelV2Executor::Load: the Main graph");
  if (arg.external_stream_allocator == nullptr) {
    builtin_streams_ = std::make_unique<BuiltinStreamAllocator>(runtime_, device_);
    builtin_events_ = std::make_unique<BuiltinEventAllocator>(runtime_, device_);
  }
  RunContext ctx = Context(arg);
  ctx.lent_constants = load_arg.lent_constants;
  Status s = (*init)->Execute(&ctx);
  if (!s.ok()) {
    // What the Init graph made before it failed (constants on the device, ...) goes back through
    // the DeInit graph, as at UnLoad; an output Init never made is empty and DeInit skips it.
    if (auto deinit = ExeGraphExecutor::Create(graphs_.deinit, ExecutorType::kAutomatic); deinit.ok()) {
      for (std::size_t i = 0; i < graphs_.init->outputs().size(); ++i)
        (*deinit)->data().input(i) = std::move((*init)->data().output(i));
      RunContext undo = Context(arg);
      (void)(*deinit)->Execute(&undo);
    }
    return s.WithContext("ModelV2Executor::Load: running the Init graph");
  }
  const std::size_t first = graphs_.desc.inputs.size() + graphs_.desc.outputs.size();
  for (std::size_t i = 0; i < graphs_.init->outputs().size(); ++i)
    (*main)->data().input(first + i) = std::move((*init)->data().output(i));
  main_ = *std::move(main);
  state_ = ModelState::kLoaded;
  return Status::Ok();
}

Status ModelV2Executor::Execute(const ModelExecuteArg& arg, Tensor* const* inputs, std::size_t input_num,
                                Tensor* const* outputs, std::size_t output_num) {
  std::lock_guard<std::mutex> lock(mu_);
  return ExecuteLocked(arg, inputs, input_num, outputs, output_num);
}

Status ModelV2Executor::ExecuteLocked(const ModelExecuteArg& arg, Tensor* const* inputs, std::size_t input_num,
                                      Tensor* const* outputs, std::size_t output_num) {
  const exe::ModelDesc& desc = graphs_.desc;
  if (state_ != ModelState::kLoaded)
    return Status::ParamInvalid("ModelV2Executor::Execute: model '{}' is in state {}; Execute needs state Loaded",
                                graphs_.main->name(), ModelStateName(state_));
  if (input_num != desc.inputs.size())
    return Status::ParamInvalid("ModelV2Executor::Execute: {} inputs given, model '{}' has {}", input_num,
                                graphs_.main->name(), desc.inputs.size());
  if (output_num != desc.outputs.size())
    return Status::ParamInvalid("ModelV2Executor::Execute: {} outputs given, model '{}' has {}", output_num,
                                graphs_.main->name(), desc.outputs.size());
  for (std::size_t i = 0; i < input_num; ++i)
    if (inputs == nullptr || inputs[i] == nullptr)
      return Status::ParamInvalid("ModelV2Executor::Execute: input {} ('{}') is null", i, desc.inputs[i].name);
  for (std::size_t i = 0; i < output_num; ++i)
    if (outputs == nullptr || outputs[i] == nullptr)
      return Status::ParamInvalid("ModelV2Executor::Execute: output {} ('{}') is null", i, desc.outputs[i].name);
  NPUFLOW_RETURN_IF_ERROR(CheckAllocators(arg, "ModelV2Executor::Execute"));
  if (arg.stream.device < 0)
    return Status::ParamInvalid("ModelV2Executor::Execute: no stream given (ExecuteSync makes a default one)");
  for (const auto& [in, out] : io_pairs_) {
    if (in >= input_num || out >= output_num)
      return Status::ParamInvalid("io reuse pair {},{}: the model has {} inputs and {} outputs", in, out, input_num,
                                  output_num);
    if (outputs[out]->addr != inputs[in]->addr)
      return Status::ParamInvalid("io reuse pair {},{}: output {} is at 0x{:x}, not at its input's 0x{:x}", in, out,
                                  out, outputs[out]->addr, inputs[in]->addr);
  }
  NPUFLOW_ASSIGN_OR_RETURN(Allocator* device_allocator, DeviceAllocator(arg));
  ExecutionData& data = main_->data();
  for (std::size_t i = 0; i < input_num; ++i) data.input(i).Set<Tensor*>(inputs[i]);
  for (std::size_t i = 0; i < output_num; ++i) data.input(input_num + i).Set<Tensor*>(outputs[i]);
  RunContext ctx = Context(arg);
  ctx.device_allocator = device_allocator;
  ctx.iteration = ++iterations_;
  const exe::ModelDesc& desc_ref = graphs_.desc;
  if (desc_ref.reusable_stream_num > 1 || desc_ref.reusable_event_num > 0) {
    // Streams 1.. and the events come from the stream and event allocators (indices from 0), each
    // extra stream with a caching allocator bound to it.
    const auto streams = static_cast<std::size_t>(std::max(1, desc_ref.reusable_stream_num));
    stream_table_.resize(streams);
    allocator_table_.resize(streams);
    stream_table_[0] = arg.stream;
    allocator_table_[0] = device_allocator;
    for (std::size_t k = 1; k < streams; ++k) {
      NPUFLOW_ASSIGN_OR_RETURN(stream_table_[k], ctx.streams->Stream(static_cast<int>(k - 1)));
      ModelExecuteArg side;
      side.stream = stream_table_[k];
      NPUFLOW_ASSIGN_OR_RETURN(allocator_table_[k], DeviceAllocator(side));
    }
    event_table_.resize(static_cast<std::size_t>(desc_ref.reusable_event_num));
    for (std::size_t e = 0; e < event_table_.size(); ++e) {
      NPUFLOW_ASSIGN_OR_RETURN(event_table_[e], ctx.events->Event(static_cast<int>(e)));
    }
    ctx.stream_table = stream_table_.data();
    ctx.allocator_table = allocator_table_.data();
    ctx.stream_count = static_cast<std::uint32_t>(streams);
    ctx.event_table = event_table_.data();
    ctx.event_count = static_cast<std::uint32_t>(event_table_.size());
  }
  Status s = main_->Execute(&ctx, subscribers_.Working());
  if (!s.ok()) {
    if (!event_table_.empty()) {
      // A run that stopped part-way may have recorded events whose waits never came: the next
      // run's waits would pass on those stale records. Its streams may also still hold its
      // kernels, some hung, that read the blocks released below: the executor's own streams (the
      // side streams, and the default stream of ExecuteSync) are aborted, and every stream is
      // synchronized (an abort's synchronize returns once nothing of it can touch memory), then
      // the events are cleared. `npuflow --race-detect stress --scenario faults` found the
      // release racing a side stream's kernel when a stream of the run had hung.
      for (std::size_t k = 0; k < stream_table_.size(); ++k)
        if (k > 0 || stream_table_[k] == default_stream_) (void)runtime_->AbortStream(stream_table_[k]);
      for (const npu_sim::Stream& stream : stream_table_)
        (void)runtime_->SynchronizeStream(stream, option_.sync_timeout);
      for (const npu_sim::Event& event : event_table_) (void)runtime_->ResetEvent(event);
    }
    // What the run took and would have freed after the failing node goes back now (each block to
    // its stream's allocator: only later work on that stream can take it).
    ReleaseRunBuffers(main_->data());
  }
  return s;
}

Status ModelV2Executor::ExecuteSync(Tensor* const* inputs, std::size_t input_num, Tensor* const* outputs,
                                    std::size_t output_num) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == ModelState::kLoaded && default_stream_.device < 0) {
    NPUFLOW_ASSIGN_OR_RETURN(default_stream_, runtime_->CreateStream(device_));
  }
  ModelExecuteArg arg;
  arg.stream = default_stream_;
  NPUFLOW_RETURN_IF_ERROR(ExecuteLocked(arg, inputs, input_num, outputs, output_num));
  Status s = runtime_->SynchronizeStream(default_stream_, option_.sync_timeout);
  // A side stream's failure is its own stream's to report: a task that failed there, with the
  // records after it issued later, would otherwise leave the run's outputs wrong and its answer Ok.
  for (std::size_t k = 1; s.ok() && k < stream_table_.size(); ++k)
    s = runtime_->SynchronizeStream(stream_table_[k], option_.sync_timeout)
            .WithContext(fmt::format("side stream {}", k));
  if (!s.ok()) RecoverLocked();
  return s.WithContext("ModelV2Executor::ExecuteSync: synchronizing the run's streams");
}

void ModelV2Executor::RecoverLocked() {
  std::vector<npu_sim::Stream> streams = {default_stream_};
  for (std::size_t k = 1; k < stream_table_.size(); ++k) streams.push_back(stream_table_[k]);
  // Nothing the run left on its streams is worth keeping: a task that never ends (a hung kernel)
  // holds its stream and everything queued behind it, and a side stream whose main stream failed
  // waits for a record that will never come. The abort fails them; each stream then serves the
  // next run. (An idle stream is not touched.)
  for (const npu_sim::Stream& stream : streams) (void)runtime_->AbortStream(stream);
  // Each stream's failure is reported once, here, so the next run's synchronize sees only its own.
  for (const npu_sim::Stream& stream : streams) (void)runtime_->SynchronizeStream(stream, option_.sync_timeout);
  // A record whose wait never came would let the next run's wait pass before its producer ran.
  for (const npu_sim::Event& event : event_table_) (void)runtime_->ResetEvent(event);
}

Status ModelV2Executor::UnLoad() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != ModelState::kLoaded)
    return Status::ParamInvalid("ModelV2Executor::UnLoad: model '{}' is in state {}; UnLoad needs state Loaded",
                                graphs_.main->name(), ModelStateName(state_));
  auto deinit = ExeGraphExecutor::Create(graphs_.deinit, ExecutorType::kAutomatic);
  if (!deinit.ok()) return deinit.status().WithContext("ModelV2Executor::UnLoad: the DeInit graph");
  Status first;
  if (default_stream_.device >= 0) {
    first = runtime_->SynchronizeStream(default_stream_, option_.sync_timeout)
                .WithContext("ModelV2Executor::UnLoad: synchronizing the default stream");
    Status d = runtime_->DestroyStream(default_stream_);
    if (first.ok()) first = d.WithContext("ModelV2Executor::UnLoad: destroying the default stream");
    default_stream_ = npu_sim::Stream{-1, 0};
  }
  // A multi-stream Main's side streams: every run joined them back into its main stream, so they
  // are idle once that stream is; synchronized anyway before their allocators go.
  for (std::size_t k = 1; k < stream_table_.size(); ++k) {
    Status d = runtime_->SynchronizeStream(stream_table_[k], option_.sync_timeout);
    if (first.ok()) first = d.WithContext("ModelV2Executor::UnLoad: synchronizing a side stream");
  }
  stream_table_.clear();
  allocator_table_.clear();
  event_table_.clear();
  const std::size_t first_init = graphs_.desc.inputs.size() + graphs_.desc.outputs.size();
  for (std::size_t i = 0; i < graphs_.init->outputs().size(); ++i)
    (*deinit)->data().input(i) = std::move(main_->data().input(first_init + i));
  main_.reset();
  RunContext ctx = Context(ModelExecuteArg{});
  Status s = (*deinit)->Execute(&ctx);
  if (first.ok() && !s.ok()) first = s.WithContext("ModelV2Executor::UnLoad: running the DeInit graph");
  // What DeInit could not release is not retried: the model is unloaded either way.
  device_allocators_.clear();  // the callers synchronized their streams (the allocators' contract)
  builtin_streams_.reset();
  builtin_events_.reset();
  state_ = ModelState::kInit;
  return first;
}

}  // namespace npuflow::v2
