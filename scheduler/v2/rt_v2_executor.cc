#include "scheduler/v2/rt_v2_executor.h"

#include <cstring>

namespace npuflow::v2 {

StatusOr<std::shared_ptr<RtV2SimpleExecutor>> RtV2SimpleExecutor::Create(
    std::shared_ptr<const exe::ExecuteGraphSet> graphs, npu_sim::Runtime* runtime, int device, ExecutorOption option,
    int instances) {
  if (!graphs) return Status::ParamInvalid("RtV2SimpleExecutor: no execute graphs");
  if (instances < 1) return Status::ParamInvalid("RtV2SimpleExecutor: {} instances, at least 1", instances);
  if (graphs->desc.updates_variables) instances = 1;
  std::shared_ptr<RtV2SimpleExecutor> e(
      new RtV2SimpleExecutor(std::move(graphs), runtime, device, std::move(option), instances));
  NPUFLOW_ASSIGN_OR_RETURN(auto first, e->NewInstance());
  e->idle_.push_back(std::move(first));
  e->made_ = 1;
  return e;
}

RtV2SimpleExecutor::~RtV2SimpleExecutor() = default;  // each instance unloads itself

int RtV2SimpleExecutor::instances() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

StatusOr<std::unique_ptr<ModelV2Executor>> RtV2SimpleExecutor::NewInstance() {
  NPUFLOW_ASSIGN_OR_RETURN(auto m, ModelV2Executor::Create(*graphs_, runtime_, device_, option_));
  NPUFLOW_RETURN_IF_ERROR(m->Load());
  return m;
}

StatusOr<std::unique_ptr<ModelV2Executor>> RtV2SimpleExecutor::Take() {
  for (;;) {
    actors::Future<Status> wake;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto m = std::move(idle_.back());
        idle_.pop_back();
        return m;
      }
      if (made_ < max_instances_) {
        ++made_;
        lock.unlock();
        auto m = NewInstance();
        if (!m.ok()) {
          lock.lock();
          --made_;
        }
        return m;
      }
      waiters_.emplace_back();
      wake = waiters_.back().GetFuture();
    }
    // Give wakes one waiter per instance it returns; another caller may take that instance
    // first, and then this one queues again.
    NPUFLOW_RETURN_IF_ERROR(wake.Get());
  }
}

void RtV2SimpleExecutor::Give(std::unique_ptr<ModelV2Executor> executor) {
  actors::Promise<Status> waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(executor));
    if (!waiters_.empty()) {
      waiter = std::move(waiters_.front());
      waiters_.pop_front();
    }
  }
  if (waiter.valid()) waiter.Set(Status::Ok());
}

std::string RtV2SimpleExecutor::ProfileReport(std::size_t top) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const HostProfiler*> profilers;
  for (const auto& m : idle_)
    if (const HostProfiler* p = m->GetSubscribers().profiler()) profilers.push_back(p);
  if (profilers.empty()) return "no profile: the model ran without --profile\n";
  return HostProfiler::Report(profilers, top);
}

StatusOr<std::vector<graph::Tensor>> RtV2SimpleExecutor::Run(const std::vector<graph::Tensor>& inputs) {
  const exe::ModelDesc& d = graphs_->desc;
  if (inputs.size() != d.inputs.size())
    return Status::ParamInvalid("{} inputs given, the graph takes {}", inputs.size(), d.inputs.size());
  std::vector<Tensor> in(inputs.size());
  std::vector<Tensor*> in_ptrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorDesc& desc = inputs[i].desc;
    if (!desc.shape.is_static() || desc.shape.rank() > static_cast<std::size_t>(graph::kMaxKernelRank))
      return Status::ParamInvalid("input '{}': {} is not a static shape of rank <= {}", d.inputs[i].name,
                                  desc.ToString(), graph::kMaxKernelRank);
    in[i].placement = TensorPlacement::kOnHost;
    in[i].addr = reinterpret_cast<std::uint64_t>(inputs[i].data.data());
    in[i].size = inputs[i].data.size();
    in[i].shape.dtype = static_cast<std::uint32_t>(desc.dtype);
    in[i].shape.rank = static_cast<std::uint32_t>(desc.shape.rank());
    for (std::size_t k = 0; k < desc.shape.rank(); ++k) in[i].shape.dims[k] = desc.shape.dim(k).size;
    in_ptrs.push_back(&in[i]);
  }
  // Outputs without memory: CopyOutput takes host memory of the needed size and hands it over.
  std::vector<Tensor> out(d.outputs.size());
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : out) {
    t.placement = TensorPlacement::kOnHost;
    out_ptrs.push_back(&t);
  }
  NPUFLOW_ASSIGN_OR_RETURN(auto m, Take());
  Status s = m->ExecuteSync(in_ptrs.data(), in_ptrs.size(), out_ptrs.data(), out_ptrs.size());
  Give(std::move(m));
  std::vector<graph::Tensor> result;
  HostMemAllocator host;
  for (Tensor& t : out) {
    if (s.ok()) {
      std::vector<graph::Dim> dims;
      for (std::uint32_t k = 0; k < t.shape.rank; ++k) dims.push_back(graph::Dim::Static(t.shape.dims[k]));
      graph::Tensor r;
      r.desc = graph::TensorDesc{t.shape.data_type(), graph::Shape(std::move(dims))};
      r.data.resize(t.shape.bytes());
      if (!r.data.empty()) std::memcpy(r.data.data(), reinterpret_cast<const void*>(t.addr), r.data.size());
      result.push_back(std::move(r));
    }
    host.Free(MemBlock{t.addr, t.size});
  }
  if (!s.ok()) return s;
  return result;
}

}  // namespace npuflow::v2
