// The four things a stress client does for one request, each through the public entry point a
// user's program would call.
#include <fmt/format.h>

#include "base/unique_function.h"
#include "graph/ir/tensor_access.h"
#include "stress/storm_state.h"

namespace npuflow::stress::detail {
namespace {

using graph::Tensor;
using Outputs = std::vector<Tensor>;

// Session::RunGraph with host tensors: NnExecute behind it (RT2.0 for a dynamic model).
StatusOr<Outputs> RunGraph(StormState& s, const Target& t, const InputSet& set) {
  return t.session->RunGraph(t.graph, set.inputs);
}

// Session::RunGraphAsync: the model's Run loop; the callback completes a promise this client
// waits on (a fiber yields meanwhile).
StatusOr<Outputs> RunAsync(StormState& s, const Target& t, const InputSet& set) {
  actors::Promise<StatusOr<Outputs>> done;
  auto answer = done.GetFuture();
  Status pushed = t.session->RunGraphAsync(
      t.graph, set.inputs, [done = std::move(done)](Status status, Outputs outputs) mutable {
        if (status.ok()) {
          done.Set(std::move(outputs));
        } else {
          done.Fail(std::move(status));
        }
      });
  if (!pushed.ok()) return pushed;
  return answer.Get();
}

// A user stream of the run's pool, for as long as this lives.
class StreamLease {
 public:
  StreamLease(StormState& s, std::uint64_t request) : s_(s), stream_(s.streams.Acquire()) { s.Restart(request); }
  ~StreamLease() { s_.streams.Release(stream_); }
  npu_sim::Stream stream() const { return stream_; }

 private:
  StormState& s_;
  npu_sim::Stream stream_;
};

// Device buffers for the outputs, freed when it goes. Even after a timeout: an abort returns once
// nothing of the stopped work can still write (npu_sim's WorkGate).
class OutputBuffers {
 public:
  OutputBuffers(StormState& s, const StressModel& m) : s_(s), m_(m) {}
  ~OutputBuffers() {
    for (const npu_sim::DevicePtr& p : ptrs_) {
      (void)s_.rt.Free(0, p);
    }
  }
  Status Allocate() {
    for (const graph::IoDef& io : m_.outputs) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, s_.rt.Malloc(0, io.desc.bytes().value_or(0), npu_sim::Placement::kHbm,
                                                                  "stress output"));
      ptrs_.push_back(p);
    }
    return Status::Ok();
  }
  // The outputs, copied on `stream` and synchronized with the run's timeout: a synchronous copy
  // (the device's default stream, no timeout) would wait for good behind a hung DMA copy.
  StatusOr<Outputs> Read(npu_sim::Stream stream) {
    auto outs = std::make_shared<Outputs>();
    for (std::size_t i = 0; i < ptrs_.size(); ++i) {
      outs->push_back(graph::ZeroTensor(m_.outputs[i].desc));
      Tensor& t = outs->back();
      NPUFLOW_RETURN_IF_ERROR(s_.rt.MemcpyD2HAsync(stream, t.data.data(), ptrs_[i], t.data.size()));
    }
    Status st = s_.rt.SynchronizeStream(stream, s_.timeout);
    if (st.code() == StatusCode::kTimeout) {
      // A copy still queued is dropped, one running is waited for: then the buffers can go.
      (void)s_.rt.AbortStream(stream);
      (void)s_.rt.SynchronizeStream(stream, s_.timeout);  // the abort's error, reported once
    }
    if (!st.ok()) return st.WithContext("reading the outputs");
    return std::move(*outs);
  }
  const std::vector<npu_sim::DevicePtr>& ptrs() const { return ptrs_; }

 private:
  StormState& s_;
  const StressModel& m_;
  std::vector<npu_sim::DevicePtr> ptrs_;
};

// The target's loaded model, loading it first when churn (or recycling) unloaded it.
StatusOr<std::shared_ptr<scheduler::DavinciModel>> LoadedModel(const Target& t) {
  auto model = t.session->GetLoadedModel(t.graph);
  if (model.ok() || model.status().code() != StatusCode::kNotFound) return model;
  NPUFLOW_RETURN_IF_ERROR(t.session->LoadGraph(t.graph));
  return t.session->GetLoadedModel(t.graph);
}

// DavinciModel::NnExecute with device buffers: zero copy, one message to the device.
StatusOr<Outputs> NnExecute(StormState& s, std::uint64_t request, const Target& t, int set) {
  const StressModel& m = s.models[t.model];
  NPUFLOW_ASSIGN_OR_RETURN(auto model, LoadedModel(t));
  OutputBuffers out(s, m);
  NPUFLOW_RETURN_IF_ERROR(out.Allocate());
  scheduler::ExecuteArgs args;
  const auto& in = s.inputs[t.model][set];
  for (std::size_t i = 0; i < in.size(); ++i)
    args.inputs.push_back(scheduler::DataBuffer::Device(in[i], m.inputs[i].desc.bytes().value_or(0)));
  for (std::size_t i = 0; i < out.ptrs().size(); ++i)
    args.outputs.push_back(scheduler::DataBuffer::Device(out.ptrs()[i], m.outputs[i].desc.bytes().value_or(0)));
  args.timeout = s.timeout;
  if (Status st = model->NnExecute(args); !st.ok()) return st;
  StreamLease lease(s, request);
  return out.Read(lease.stream());
}

// Session::RunGraphWithStreamAsync on a user stream (a model execute queued on it), then the
// stream's synchronize. A timeout aborts the stream, as a user's program would, to reuse it.
StatusOr<Outputs> OnStream(StormState& s, std::uint64_t request, const Target& t, int set) {
  const StressModel& m = s.models[t.model];
  OutputBuffers out(s, m);
  NPUFLOW_RETURN_IF_ERROR(out.Allocate());
  std::vector<scheduler::DeviceTensor> ins, outs;
  const auto& in = s.inputs[t.model][set];
  for (std::size_t i = 0; i < in.size(); ++i) ins.push_back({m.inputs[i].desc, in[i]});
  for (std::size_t i = 0; i < out.ptrs().size(); ++i) outs.push_back({m.outputs[i].desc, out.ptrs()[i]});
  StreamLease lease(s, request);
  const npu_sim::Stream stream = lease.stream();
  Status st = t.session->RunGraphWithStreamAsync(t.graph, stream, ins, outs);
  if (!st.ok()) return st;
  st = s.rt.SynchronizeStream(stream, s.timeout);
  if (st.code() == StatusCode::kTimeout) {
    // Aborting the stream stops the model run its execute task asked for, and the collecting
    // synchronize returns once that run has stopped: the buffers can go.
    (void)s.rt.AbortStream(stream);
    (void)s.rt.SynchronizeStream(stream, s.timeout);  // the abort's error, reported once
  }
  if (!st.ok()) return st;
  return out.Read(stream);
}

}  // namespace

StatusOr<std::vector<Tensor>> RunAction(StormState& s, std::uint64_t request, Action action, const Target& t, int set) {
  const InputSet& inputs = s.models[t.model].sets[set];
  switch (action) {
    case Action::kRunGraph: return RunGraph(s, t, inputs);
    case Action::kAsync: return RunAsync(s, t, inputs);
    case Action::kNnExecute: return NnExecute(s, request, t, set);
    case Action::kStream: return OnStream(s, request, t, set);
  }
  return Status::Internal("stress: unknown action {}", static_cast<int>(action));
}

}  // namespace npuflow::stress::detail
