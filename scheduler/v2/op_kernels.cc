#include "scheduler/v2/op_kernels.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/exe_graph/exe_graph.h"
#include "graph/exe_graph/kernel_registry.h"
#include "graph/ops/control_flow.h"
#include "npu_sim/kernel.h"
#include "scheduler/v2/execution_data.h"

namespace npuflow::v2 {
namespace {

using exe::Chain;
using exe::ExeNode;
using exe::KernelContext;
using graph::KernelTensor;
using graph::TensorDesc;

RunContext& Run(KernelContext* ctx) { return *static_cast<RunContext*>(ctx->args()); }

Tensor* TensorIn(Chain& c) {
  if (Buffer* b = c.Object<Buffer>()) return &b->tensor;
  return c.Get<Tensor*>();
}

StatusOr<KernelTensor> ToKernelTensor(const TensorDesc& d) {
  if (!d.shape.is_static()) return Status::ParamInvalid("shape {} is not static", d.ToString());
  if (d.shape.rank() > static_cast<std::size_t>(graph::kMaxKernelRank))
    return Status::ParamInvalid("rank {} above the limit {}", d.shape.rank(), graph::kMaxKernelRank);
  KernelTensor t;
  t.dtype = static_cast<std::uint32_t>(d.dtype);
  t.rank = static_cast<std::uint32_t>(d.shape.rank());
  for (std::size_t i = 0; i < d.shape.rank(); ++i) t.dims[i] = d.shape.dim(i).size;
  return t;
}

TensorDesc ToDesc(const KernelTensor& t) {
  std::vector<graph::Dim> dims;
  for (std::uint32_t i = 0; i < t.rank; ++i) dims.push_back(graph::Dim::Static(t.dims[i]));
  return TensorDesc{t.data_type(), graph::Shape(std::move(dims))};
}

std::string ShapeText(const KernelTensor& t) { return ToDesc(t).ToString(); }

template <typename T>
StatusOr<T> Attr(const ExeNode& node, const std::string& key) {
  auto it = node.attrs.find(key);
  if (it == node.attrs.end()) return Status::ParamInvalid("missing attribute '{}'", key);
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  return Status::ParamInvalid("attribute '{}' has another type", key);
}

StatusOr<TensorDesc> DescAttr(const ExeNode& node, const std::string& prefix) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::Shape shape, Attr<graph::Shape>(node, prefix + "_shape"));
  NPUFLOW_ASSIGN_OR_RETURN(graph::DataType dtype, Attr<graph::DataType>(node, prefix + "_dtype"));
  return TensorDesc{dtype, std::move(shape)};
}

// --- The compute op's data: its OpDef and OpDesc, and what static shapes fix at load.

struct OpInfo {
  const graph::OpDef* def = nullptr;
  graph::OpDesc op;
  graph::TileTarget target;
  const npu_sim::KernelDef* device_kernel = nullptr;
  int num_inputs = 0;
  int num_outputs = 0;
  std::vector<int> alias;  // per output: the input it writes in place (-1: its own memory)
  std::uint32_t stream = 0;  // which of the model's streams its launch (and its memory) is on
  bool is_static = false;
  // Its tiling reads input values (OpDef::tiling_depend_inputs) known only at run time.
  bool value_tiling = false;
  // Static only (held apart: KernelParams is over a kilobyte, and a dynamic op has four nodes).
  struct Fixed {
    std::vector<KernelTensor> out_shapes;
    graph::TilingInfo tiling;
    graph::KernelParams params;
  };
  std::unique_ptr<Fixed> fixed;
};

StatusOr<std::shared_ptr<const void>> PrepareOp(const ExeNode& node) {
  auto info = std::make_shared<OpInfo>();
  NPUFLOW_ASSIGN_OR_RETURN(std::string type, Attr<std::string>(node, "op_type"));
  NPUFLOW_ASSIGN_OR_RETURN(std::string name, Attr<std::string>(node, "op_name"));
  NPUFLOW_ASSIGN_OR_RETURN(info->def, graph::OpRegistry::Global().Find(type));
  info->op = graph::OpDesc(name, type);
  for (const auto& [key, value] : node.attrs)
    if (key.rfind("op.", 0) == 0) info->op.SetAttr(key.substr(3), value);
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t cores, Attr<std::int64_t>(node, "core_count"));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t nin, Attr<std::int64_t>(node, "num_inputs"));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t nout, Attr<std::int64_t>(node, "num_outputs"));
  info->target.core_count = static_cast<int>(cores);
  // The block-split cost model; a model converted before it had none (splits as tiled).
  if (node.attrs.contains("block_costs")) {
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<double> costs, Attr<std::vector<double>>(node, "block_costs"));
    if (costs.size() != 3 || !(costs[0] >= 0 && costs[0] <= 1e9) || !(costs[1] > 0 && costs[1] <= 1e6) ||
        !(costs[2] > 0 && costs[2] <= 1e6))
      return Status::ParamInvalid(
          "attribute 'block_costs' of '{}': expected [dispatch_ns 0..1e9, GB/s and GFLOP/s above 0 up to 1e6]", name);
    info->target.costs = {costs[0], costs[1], costs[2]};
  }
  info->num_inputs = static_cast<int>(nin);
  info->num_outputs = static_cast<int>(nout);
  if (info->def->device_kernel.empty())
    return Status::Unsupported("op {} has no device kernel", type);
  NPUFLOW_ASSIGN_OR_RETURN(info->device_kernel, npu_sim::KernelRegistry::Global().Find(info->def->device_kernel));
  for (int j = 0; j < info->num_outputs; ++j) {
    auto a = Attr<std::int64_t>(node, fmt::format("alias_{}", j));
    info->alias.push_back(a.ok() ? static_cast<int>(*a) : -1);
  }
  info->is_static = Attr<bool>(node, "static").value_or(false);
  info->value_tiling = Attr<bool>(node, "value_tiling").value_or(false);
  info->stream = static_cast<std::uint32_t>(Attr<std::int64_t>(node, "stream").value_or(0));
  if (info->is_static) {
    info->fixed = std::make_unique<OpInfo::Fixed>();
    OpInfo::Fixed& f = *info->fixed;
    std::vector<TensorDesc> in, out;
    for (int i = 0; i < info->num_inputs; ++i) {
      NPUFLOW_ASSIGN_OR_RETURN(TensorDesc d, DescAttr(node, fmt::format("in{}", i)));
      in.push_back(std::move(d));
    }
    for (int j = 0; j < info->num_outputs; ++j) {
      NPUFLOW_ASSIGN_OR_RETURN(TensorDesc d, DescAttr(node, fmt::format("out{}", j)));
      NPUFLOW_ASSIGN_OR_RETURN(KernelTensor t, ToKernelTensor(d));
      f.out_shapes.push_back(t);
      out.push_back(std::move(d));
    }
    NPUFLOW_ASSIGN_OR_RETURN(f.tiling, graph::TileOp(*info->def, info->op, in, {}, info->target));
    NPUFLOW_ASSIGN_OR_RETURN(f.params, graph::EncodeKernelParams(*info->def, info->op, in, out));
  }
  return std::shared_ptr<const void>(std::move(info));
}

std::vector<TensorDesc> InputDescs(KernelContext* ctx, int n) {
  std::vector<TensorDesc> descs;
  descs.reserve(n);
  for (int i = 0; i < n; ++i) descs.push_back(ToDesc(TensorIn(ctx->input(i))->shape));
  return descs;
}

Status CreateBuffers(KernelContext* ctx) {
  for (std::uint32_t j = 0; j < ctx->num_outputs; ++j) ctx->output(j).Emplace<Buffer>();
  return Status::Ok();
}

// InferShape: in(inputs) out(output buffers).
std::uint32_t InferShapeRun(KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  const std::vector<TensorDesc> in = InputDescs(ctx, info.num_inputs);
  std::vector<TensorDesc> out;
  Status s = graph::InferOutputs(*info.def, info.op, in, out);
  if (!s.ok()) return ctx->Fail(std::move(s));
  for (int j = 0; j < info.num_outputs; ++j) {
    auto t = ToKernelTensor(out[j]);
    if (!t.ok()) return ctx->Fail(t.status().WithContext(fmt::format("output {}", j)));
    ctx->output(j).Object<Buffer>()->tensor.shape = *t;
  }
  return exe::kKernelSuccess;
}

Status CreateTilingData(KernelContext* ctx) {
  ctx->output(0).Emplace<TilingData>();
  return Status::Ok();
}

// The values of the op's tiling-depend inputs on the host. A model input given from host memory is
// read there. Anything else is read back from the device after every stream of the run has been
// synchronized (what writes it has been submitted: the Tiling node waits for its launch): the host
// round trip the tiling sink saves.
Status ReadDependValues(KernelContext* ctx, const OpInfo& info, std::vector<graph::Tensor>& values) {
  RunContext& rc = Run(ctx);
  bool synchronized = false;
  for (int k : info.def->tiling_depend_inputs) {
    if (k < 0 || k >= info.num_inputs) return Status::Internal("tiling-depend input {} of {} inputs", k, info.num_inputs);
    const Tensor& t = *TensorIn(ctx->input(k));
    const Buffer* b = ctx->input(k).Object<Buffer>();
    const void* host = b != nullptr ? b->host_source : nullptr;
    if (t.placement == TensorPlacement::kOnHost || t.placement == TensorPlacement::kFollowing)
      host = reinterpret_cast<const void*>(t.addr);
    graph::Tensor v;
    v.desc = ToDesc(t.shape);
    v.data.resize(t.shape.bytes());
    if (!v.data.empty()) {
      if (host != nullptr) {  // a model input the caller gave from the host: no round trip
        std::memcpy(v.data.data(), host, v.data.size());
      } else {
        if (!synchronized) {
          for (std::uint32_t s = 0; s < rc.stream_count; ++s) {
            Status synced = rc.runtime->SynchronizeStream(rc.StreamAt(s), rc.sync_timeout);
            if (!synced.ok())
              return synced.WithContext(
                  fmt::format("waiting for stream {} to read tiling-depend input {} back", s, k));
          }
          synchronized = true;
        }
        NPUFLOW_RETURN_IF_ERROR(rc.runtime->MemcpyD2H(rc.device, v.data.data(), npu_sim::DevicePtr{t.addr}, v.data.size())
                                    .WithContext(fmt::format("reading tiling-depend input {}", k)));
      }
    }
    values.push_back(std::move(v));
  }
  return Status::Ok();
}

// Tiling: in(inputs, outputs) out(tiling data).
std::uint32_t TilingRun(KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  const std::vector<TensorDesc> in = InputDescs(ctx, info.num_inputs);
  std::vector<TensorDesc> out;
  for (int j = 0; j < info.num_outputs; ++j) out.push_back(ToDesc(TensorIn(ctx->input(info.num_inputs + j))->shape));
  TilingData& data = *ctx->output(0).Object<TilingData>();
  data.tiling = graph::TilingInfo{};
  if (info.def->tiling != nullptr) {
    std::vector<graph::Tensor> values;
    std::vector<const graph::Tensor*> depend;
    if (info.value_tiling) {
      if (Status s = ReadDependValues(ctx, info, values); !s.ok()) return ctx->Fail(std::move(s));
      for (const graph::Tensor& v : values) depend.push_back(&v);
    }
    auto tiling = graph::TileOp(*info.def, info.op, in, depend, info.target);
    if (!tiling.ok()) return ctx->Fail(tiling.status());
    data.tiling = *tiling;
  }
  auto params = graph::EncodeKernelParams(*info.def, info.op, in, out);
  if (!params.ok()) return ctx->Fail(params.status());
  data.params = *params;
  return exe::kKernelSuccess;
}

Status CreateStaticBuffers(KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  for (std::uint32_t j = 0; j < ctx->num_outputs; ++j) {
    Buffer& b = ctx->output(j).Emplace<Buffer>();
    if (info.is_static) b.tensor.shape = info.fixed->out_shapes[j];
  }
  return Status::Ok();
}

// AllocOutputs: in(inputs) out(output buffers). Static ops made their buffers (with shapes) at load.
std::uint32_t AllocOutputsRun(KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  Allocator* allocator = Run(ctx).AllocatorAt(info.stream);
  for (int j = 0; j < info.num_outputs; ++j) {
    Buffer& b = *ctx->output(j).Object<Buffer>();
    b.tensor.placement = TensorPlacement::kOnDeviceHbm;
    if (info.alias[j] >= 0) {  // written in place over its input (a Variable's update)
      const Tensor* in = TensorIn(ctx->input(info.alias[j]));
      b.tensor.addr = in->addr;
      b.tensor.size = in->size;
      b.block = MemBlock{};
      b.owner = nullptr;
      continue;
    }
    auto block = allocator->Malloc(b.tensor.shape.bytes());
    if (!block.ok()) return ctx->Fail(block.status().WithContext(fmt::format("output {} of {}", j, ShapeText(b.tensor.shape))));
    b.block = *block;
    b.owner = allocator;
    b.tensor.addr = block->addr;
    b.tensor.size = block->size;
  }
  return exe::kKernelSuccess;
}

// LaunchKernel: in(inputs, outputs[, tiling data]). One Submit: the params copy, then the kernel.
// The params and workspace blocks go back to the allocator at once: whatever takes them next is
// ordered after this kernel on the same stream.
std::uint32_t LaunchRun(KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  RunContext& rc = Run(ctx);
  const graph::TilingInfo* tiling = nullptr;
  const graph::KernelParams* params = nullptr;
  if (info.is_static) {
    tiling = &info.fixed->tiling;
    params = &info.fixed->params;
  } else {
    const TilingData& data = *ctx->input(info.num_inputs + info.num_outputs).Object<TilingData>();
    tiling = &data.tiling;
    params = &data.params;
  }
  const std::uint64_t params_bytes = graph::KernelParamsBytes(*params);
  Allocator* allocator = rc.AllocatorAt(info.stream);
  auto params_block = allocator->Malloc(params_bytes);
  if (!params_block.ok()) return ctx->Fail(params_block.status().WithContext("kernel params"));
  MemBlock workspace;
  if (tiling->workspace_bytes > 0) {
    auto ws = allocator->Malloc(tiling->workspace_bytes);
    if (!ws.ok()) {
      allocator->Free(*params_block);
      return ctx->Fail(ws.status().WithContext("workspace"));
    }
    workspace = *ws;
  }
  std::vector<std::uint64_t> args;
  args.reserve(info.num_inputs + info.num_outputs + 2);
  for (int i = 0; i < info.num_inputs + info.num_outputs; ++i) args.push_back(TensorIn(ctx->input(i))->addr);
  args.push_back(workspace.addr);
  args.push_back(params_block->addr);

  auto bytes = std::make_shared<graph::KernelParams>(*params);
  std::vector<npu_sim::Task> tasks(2);
  tasks[0] = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, params_bytes);
  tasks[0].dst_dev = npu_sim::DevicePtr{params_block->addr};
  tasks[0].src_host = bytes.get();
  tasks[0].keep_alive = bytes;
  tasks[1] = npu_sim::Task::Kernel(info.device_kernel, info.def->engine == graph::OpEngine::kAICore ? tiling->block_dim : 1,
                                   std::move(args), tiling->tiling_key);
  tasks[1].name = info.op.name();
  auto submitted = rc.runtime->Submit(rc.StreamAt(info.stream), std::move(tasks));
  allocator->Free(*params_block);
  allocator->Free(workspace);
  if (!submitted.ok()) return ctx->Fail(submitted.status());
  return exe::kKernelSuccess;
}

std::string LaunchTrace(const KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  std::string s = info.op.type();
  for (int j = 0; j < info.num_outputs; ++j) {
    const Tensor* t = TensorIn(ctx->input(info.num_inputs + j));
    s += " " + ShapeText(t->shape);
  }
  return s;
}

std::string OpExceptionDump(const KernelContext* ctx) {
  const OpInfo& info = ctx->info<OpInfo>();
  std::string s = "inputs";
  for (int i = 0; i < info.num_inputs; ++i) s += " " + ShapeText(TensorIn(ctx->input(i))->shape);
  return s;
}

struct StreamInfo {
  std::uint32_t stream = 0;
  std::uint32_t event = 0;
};

StatusOr<std::shared_ptr<const void>> PrepareStream(const ExeNode& node) {
  auto info = std::make_shared<StreamInfo>();
  info->stream = static_cast<std::uint32_t>(Attr<std::int64_t>(node, "stream").value_or(0));
  info->event = static_cast<std::uint32_t>(Attr<std::int64_t>(node, "event").value_or(0));
  return std::shared_ptr<const void>(std::move(info));
}

// FreeMemory: in(buffer); back to the allocator of the stream that took it.
std::uint32_t FreeMemoryRun(KernelContext* ctx) {
  Buffer* b = ctx->input(0).Object<Buffer>();
  if (b != nullptr && b->block) {
    Run(ctx).AllocatorAt(ctx->info<StreamInfo>().stream)->Free(b->block);
    b->block = MemBlock{};
    b->owner = nullptr;
  }
  return exe::kKernelSuccess;
}

// SendEvent / WaitEvent: record event e on stream s / make stream s wait for it (cross-stream
// order of a multi-stream Main).
std::uint32_t CheckEvent(KernelContext* ctx, const StreamInfo& info, const RunContext& rc) {
  if (info.stream >= rc.stream_count || info.event >= rc.event_count)
    return ctx->Fail(Status::Internal("stream {} / event {}: the run has {} streams and {} events", info.stream,
                                      info.event, rc.stream_count, rc.event_count));
  return exe::kKernelSuccess;
}

std::uint32_t SendEventRun(KernelContext* ctx) {
  const StreamInfo& info = ctx->info<StreamInfo>();
  RunContext& rc = Run(ctx);
  if (std::uint32_t bad = CheckEvent(ctx, info, rc)) return bad;
  Status s = rc.runtime->RecordEvent(rc.event_table[info.event], rc.StreamAt(info.stream));
  return s.ok() ? exe::kKernelSuccess : ctx->Fail(s);
}

std::uint32_t WaitEventRun(KernelContext* ctx) {
  const StreamInfo& info = ctx->info<StreamInfo>();
  RunContext& rc = Run(ctx);
  if (std::uint32_t bad = CheckEvent(ctx, info, rc)) return bad;
  Status s = rc.runtime->StreamWaitEvent(rc.StreamAt(info.stream), rc.event_table[info.event]);
  return s.ok() ? exe::kKernelSuccess : ctx->Fail(s);
}

// --- Model inputs and outputs.

struct IoInfo {
  std::string name;
  TensorDesc desc;
};

StatusOr<std::shared_ptr<const void>> PrepareIo(const ExeNode& node) {
  auto info = std::make_shared<IoInfo>();
  NPUFLOW_ASSIGN_OR_RETURN(info->name, Attr<std::string>(node, "io_name"));
  NPUFLOW_ASSIGN_OR_RETURN(info->desc, DescAttr(node, "io"));
  return std::shared_ptr<const void>(std::move(info));
}

Status CreateOneBuffer(KernelContext* ctx) {
  ctx->output(0).Emplace<Buffer>();
  return Status::Ok();
}

// PrepareInput: in(the caller's Tensor*) out(buffer on the device).
std::uint32_t PrepareInputRun(KernelContext* ctx) {
  const IoInfo& info = ctx->info<IoInfo>();
  const Tensor* user = ctx->input(0).Get<Tensor*>();
  const KernelTensor& s = user->shape;
  const graph::Shape& want = info.desc.shape;
  if (s.data_type() != info.desc.dtype)
    return ctx->Fail(Status::ParamInvalid("input '{}': dtype {}, the model takes {}", info.name,
                                          graph::DataTypeName(s.data_type()), info.desc.ToString()));
  if (s.rank != want.rank() || s.rank > static_cast<std::uint32_t>(graph::kMaxKernelRank))
    return ctx->Fail(Status::ParamInvalid("input '{}': rank {}, the model takes {}", info.name, s.rank,
                                          info.desc.ToString()));
  for (std::uint32_t i = 0; i < s.rank; ++i) {
    if (s.dims[i] < 0)
      return ctx->Fail(Status::ParamInvalid("input '{}': dim {} is {}, negative", info.name, i, s.dims[i]));
    if (want.dim(i).is_static() && want.dim(i).size != s.dims[i])
      return ctx->Fail(Status::ParamInvalid("input '{}': shape {}, the model takes {}", info.name, ShapeText(s),
                                            info.desc.ToString()));
  }
  const std::uint64_t bytes = s.bytes();
  if (user->size < bytes)
    return ctx->Fail(Status::ParamInvalid("input '{}': shape {} needs {} bytes, the tensor has {}", info.name,
                                          ShapeText(s), bytes, user->size));
  Buffer& b = *ctx->output(0).Object<Buffer>();
  b.tensor = *user;
  b.block = MemBlock{};
  b.owner = nullptr;
  b.host_source = nullptr;
  if (user->placement == TensorPlacement::kOnHost || user->placement == TensorPlacement::kFollowing) {
    b.host_source = reinterpret_cast<const void*>(user->addr);
    RunContext& rc = Run(ctx);
    auto block = rc.device_allocator->Malloc(bytes);
    if (!block.ok()) return ctx->Fail(block.status().WithContext(fmt::format("input '{}'", info.name)));
    if (bytes > 0) {
      Status c = rc.runtime->MemcpyH2DAsync(rc.stream, npu_sim::DevicePtr{block->addr},
                                            reinterpret_cast<const void*>(user->addr), bytes);
      if (!c.ok()) {
        rc.device_allocator->Free(*block);
        return ctx->Fail(c);
      }
    }
    b.block = *block;
    b.owner = rc.device_allocator;
    b.tensor.placement = TensorPlacement::kOnDeviceHbm;
    b.tensor.addr = block->addr;
    b.tensor.size = block->size;
  }
  return exe::kKernelSuccess;
}

// CopyOutput: in(the result, the caller's Tensor*).
std::uint32_t CopyOutputRun(KernelContext* ctx) {
  const IoInfo& info = ctx->info<IoInfo>();
  const Tensor* result = TensorIn(ctx->input(0));
  Tensor* user = ctx->input(1).Get<Tensor*>();
  const std::uint64_t bytes = result->shape.bytes();
  if (user->addr == 0 && (user->placement == TensorPlacement::kOnHost || user->placement == TensorPlacement::kFollowing)) {
    // Given without memory: host memory of the size needed, the caller's to free
    // (HostMemAllocator::Free).
    auto block = Run(ctx).host_allocator->Malloc(std::max<std::uint64_t>(bytes, 1));
    if (!block.ok()) return ctx->Fail(block.status().WithContext(fmt::format("output '{}'", info.name)));
    user->addr = block->addr;
    user->size = block->size;
  }
  if (user->size < bytes)
    return ctx->Fail(Status::ParamInvalid("output '{}': shape {} needs {} bytes, the tensor given has {}", info.name,
                                          ShapeText(result->shape), bytes, user->size));
  user->shape = result->shape;
  if (bytes == 0) return exe::kKernelSuccess;
  RunContext& rc = Run(ctx);
  Status s = user->placement == TensorPlacement::kOnHost || user->placement == TensorPlacement::kFollowing
                 ? rc.runtime->MemcpyD2HAsync(rc.stream, reinterpret_cast<void*>(user->addr),
                                              npu_sim::DevicePtr{result->addr}, bytes)
                 : rc.runtime->MemcpyD2DAsync(rc.stream, npu_sim::DevicePtr{user->addr},
                                              npu_sim::DevicePtr{result->addr}, bytes);
  if (!s.ok()) return ctx->Fail(s);
  return exe::kKernelSuccess;
}

// --- Constants (Init / DeInit).

struct ConstInfo {
  TensorDesc desc;
  std::vector<std::uint8_t> bytes;  // a Const's value
  std::string file;                 // a FileConstant's
  std::uint64_t offset = 0;
  bool zeros = false;               // a Variable without a value: zero-filled on the device
};

StatusOr<std::shared_ptr<const void>> PrepareConst(const ExeNode& node) {
  auto info = std::make_shared<ConstInfo>();
  NPUFLOW_ASSIGN_OR_RETURN(info->desc, DescAttr(node, "const"));
  if (auto value = Attr<graph::Tensor>(node, "value"); value.ok()) {
    info->bytes = value->data;
  } else if (Attr<bool>(node, "zeros").value_or(false)) {
    info->zeros = true;
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(info->file, Attr<std::string>(node, "location"));
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, Attr<std::int64_t>(node, "offset"));
    info->offset = static_cast<std::uint64_t>(offset);
  }
  return std::shared_ptr<const void>(std::move(info));
}

std::uint32_t ConstToDeviceRun(KernelContext* ctx) {
  const ConstInfo& info = ctx->info<ConstInfo>();
  RunContext& rc = Run(ctx);
  const std::uint64_t bytes = info.desc.bytes().value_or(0);
  if (rc.lent_constants != nullptr) {
    if (auto it = rc.lent_constants->find(ctx->node->name); it != rc.lent_constants->end()) {
      if (it->second.size < bytes)
        return ctx->Fail(Status::ParamInvalid("constant '{}' is {} ({} bytes), the memory lent for it has only {} bytes",
                                              ctx->node->name, info.desc.ToString(), bytes, it->second.size));
      Buffer& b = ctx->output(0).Emplace<Buffer>();
      auto shape = ToKernelTensor(info.desc);
      if (!shape.ok()) return ctx->Fail(shape.status());
      b.tensor.shape = *shape;
      b.tensor.addr = it->second.addr;
      b.tensor.size = bytes;
      b.block = MemBlock{};  // the lender's: FreeConst leaves it
      return exe::kKernelSuccess;
    }
  }
  std::vector<std::uint8_t> file_bytes;
  const std::uint8_t* src = info.bytes.data();
  if (!info.file.empty()) {
    std::ifstream in(info.file, std::ios::binary);
    file_bytes.resize(bytes);
    if (!in.seekg(static_cast<std::streamoff>(info.offset)) ||
        !in.read(reinterpret_cast<char*>(file_bytes.data()), static_cast<std::streamsize>(bytes)))
      return ctx->Fail(Status::DataCorrupted("{}: cannot read {} bytes at offset {}", info.file, bytes, info.offset));
    src = file_bytes.data();
  } else if (info.zeros) {
    file_bytes.assign(bytes, 0);  // only when nothing was lent for it
    src = file_bytes.data();
  } else if (info.bytes.size() != bytes) {
    return ctx->Fail(Status::Internal("constant of {} holds {} bytes", info.desc.ToString(), info.bytes.size()));
  }
  Buffer& b = ctx->output(0).Emplace<Buffer>();
  auto shape = ToKernelTensor(info.desc);
  if (!shape.ok()) return ctx->Fail(shape.status());
  b.tensor.shape = *shape;
  if (bytes == 0) return exe::kKernelSuccess;
  auto ptr = rc.runtime->Malloc(rc.device, bytes, npu_sim::Placement::kHbm, ctx->node->name);
  if (!ptr.ok()) return ctx->Fail(ptr.status());
  Status s = rc.runtime->MemcpyH2D(rc.device, *ptr, src, bytes);
  if (!s.ok()) {
    (void)rc.runtime->Free(rc.device, *ptr);
    return ctx->Fail(s);
  }
  b.tensor.addr = ptr->value;
  b.tensor.size = bytes;
  b.block = MemBlock{ptr->value, bytes};
  return exe::kKernelSuccess;
}

std::uint32_t FreeConstRun(KernelContext* ctx) {
  Buffer* b = ctx->input(0).Object<Buffer>();
  if (b == nullptr || !b->block) return exe::kKernelSuccess;
  Status s = Run(ctx).runtime->Free(Run(ctx).device, npu_sim::DevicePtr{b->block.addr});
  b->block = MemBlock{};
  if (!s.ok()) return ctx->Fail(s);
  return exe::kKernelSuccess;
}

// The data dumper's view of a launch: the stream is synchronized (the kernel has run), then each
// output is read back.
Status LaunchDump(const KernelContext* ctx, std::vector<exe::DumpTensor>& out) {
  const OpInfo& info = ctx->info<OpInfo>();
  RunContext& rc = *static_cast<RunContext*>(ctx->args());
  NPUFLOW_RETURN_IF_ERROR(rc.runtime->SynchronizeStream(rc.stream));
  for (int j = 0; j < info.num_outputs; ++j) {
    const Tensor* t = TensorIn(ctx->input(info.num_inputs + j));
    exe::DumpTensor d;
    d.name = fmt::format("output{}", j);
    d.desc = ShapeText(t->shape);
    d.bytes.resize(t->shape.bytes());
    if (!d.bytes.empty())
      NPUFLOW_RETURN_IF_ERROR(rc.runtime->MemcpyD2H(rc.device, d.bytes.data(), npu_sim::DevicePtr{t->addr}, d.bytes.size()));
    out.push_back(std::move(d));
  }
  return Status::Ok();
}

// --- Control flow (lowered If / While; lowering/graph_converter.h has the shapes).

std::uint32_t NoOpRun(KernelContext*) { return exe::kKernelSuccess; }

Status CreateAllBuffers(KernelContext* ctx) {
  for (std::uint32_t j = 0; j < ctx->num_outputs; ++j) ctx->output(j).Emplace<Buffer>();
  return Status::Ok();
}

// A copy of `src` in fresh memory, ordered on the stream; `dst` keeps nothing of what it held.
Status CopyInto(RunContext& rc, const Tensor& src, Buffer& dst) {
  const std::uint64_t bytes = src.shape.bytes();
  Buffer fresh;
  fresh.tensor.shape = src.shape;
  fresh.tensor.placement = TensorPlacement::kOnDeviceHbm;
  if (bytes > 0) {
    NPUFLOW_ASSIGN_OR_RETURN(fresh.block, rc.device_allocator->Malloc(bytes));
    fresh.owner = rc.device_allocator;
    fresh.tensor.addr = fresh.block.addr;
    fresh.tensor.size = fresh.block.size;
    Status s = rc.runtime->MemcpyD2DAsync(rc.stream, npu_sim::DevicePtr{fresh.tensor.addr},
                                          npu_sim::DevicePtr{src.addr}, bytes);
    if (!s.ok()) {
      rc.device_allocator->Free(fresh.block);
      return s;
    }
  }
  dst = fresh;
  return Status::Ok();
}

// The condition's truth (graph/ops/control_flow.h): one element is read back, after the stream
// has run what writes it.
StatusOr<bool> ReadCondition(RunContext& rc, const Tensor& t) {
  graph::Tensor cond;
  cond.desc = ToDesc(t.shape);
  const std::int64_t n = cond.desc.shape.num_elements().value_or(0);
  if (n != 1) return n > 0;
  cond.data.resize(t.shape.bytes());
  NPUFLOW_RETURN_IF_ERROR(rc.runtime->SynchronizeStream(rc.stream));
  NPUFLOW_RETURN_IF_ERROR(
      rc.runtime->MemcpyD2H(rc.device, cond.data.data(), npu_sim::DevicePtr{t.addr}, cond.data.size()));
  return graph::ConditionIsTrue(cond);
}

// IfSwitch: in(cond) out(branch word: 0 then, 1 else).
std::uint32_t IfSwitchRun(KernelContext* ctx) {
  auto taken = ReadCondition(Run(ctx), *TensorIn(ctx->input(0)));
  if (!taken.ok()) return ctx->Fail(taken.status().WithContext("the If's condition"));
  ctx->output(0).Set<std::uint64_t>(*taken ? 0 : 1);
  return exe::kKernelSuccess;
}

struct LoopInfo {
  std::int64_t max_iterations = graph::kDefaultMaxIterations;
};

StatusOr<std::shared_ptr<const void>> PrepareLoop(const ExeNode& node) {
  auto info = std::make_shared<LoopInfo>();
  NPUFLOW_ASSIGN_OR_RETURN(info->max_iterations, Attr<std::int64_t>(node, "max_iterations"));
  return std::shared_ptr<const void>(std::move(info));
}

// ReadCondition: in(cond) out(word: 1 true, 0 false).
std::uint32_t ReadConditionRun(KernelContext* ctx) {
  auto truth = ReadCondition(Run(ctx), *TensorIn(ctx->input(0)));
  if (!truth.ok()) return ctx->Fail(truth.status().WithContext("the While's condition"));
  ctx->output(0).Set<std::uint64_t>(*truth ? 1 : 0);
  return exe::kKernelSuccess;
}

// LoopSwitch: in(condition word, iteration counter) out(branch word: 0 exit, 1 body).
std::uint32_t LoopSwitchRun(KernelContext* ctx) {
  const bool go_on = ctx->input(0).word() != 0;
  exe::Chain& counter = ctx->input(1);
  const auto done = counter.Get<std::int64_t>();
  if (go_on && done >= ctx->info<LoopInfo>().max_iterations)
    return ctx->Fail(Status::Failed("still running after max_iterations = {} iterations",
                                    ctx->info<LoopInfo>().max_iterations));
  if (go_on) counter.Set<std::int64_t>(done + 1);
  ctx->output(0).Set<std::uint64_t>(go_on ? 1 : 0);
  return exe::kKernelSuccess;
}

// CopyToValue: in(a branch's result) out(the If's output).
std::uint32_t CopyToValueRun(KernelContext* ctx) {
  Status s = CopyInto(Run(ctx), *TensorIn(ctx->input(0)), *ctx->output(0).Object<Buffer>());
  if (!s.ok()) return ctx->Fail(s);
  return exe::kKernelSuccess;
}

Status CreateLoopOutputs(KernelContext* ctx) {
  for (std::uint32_t j = 0; j + 1 < ctx->num_outputs; ++j) ctx->output(j).Emplace<Buffer>();
  ctx->output(ctx->num_outputs - 1).Set<std::int64_t>(0);
  return Status::Ok();
}

// LoopEnter: in(the While's inputs) out(loop variables, iteration counter): copies, counter 0.
std::uint32_t LoopEnterRun(KernelContext* ctx) {
  RunContext& rc = Run(ctx);
  for (std::uint32_t i = 0; i < ctx->num_inputs; ++i) {
    Status s = CopyInto(rc, *TensorIn(ctx->input(i)), *ctx->output(i).Object<Buffer>());
    if (!s.ok()) {
      for (std::uint32_t k = 0; k < i; ++k) {
        Buffer& b = *ctx->output(k).Object<Buffer>();
        rc.device_allocator->Free(b.block);
        b.block = MemBlock{};
        b.owner = nullptr;
      }
      return ctx->Fail(s.WithContext(fmt::format("loop variable {}", i)));
    }
  }
  ctx->output(ctx->num_outputs - 1).Set<std::int64_t>(0);
  return exe::kKernelSuccess;
}

// LoopNext: in(the body's results) out(loop variables). All results are copied before any old
// variable is freed: a result may be a variable itself.
std::uint32_t LoopNextRun(KernelContext* ctx) {
  RunContext& rc = Run(ctx);
  const std::uint32_t n = ctx->num_inputs;
  Buffer fresh[graph::kMaxKernelTensors];
  std::vector<Buffer> more(n > graph::kMaxKernelTensors ? n : 0);
  Buffer* next = n > graph::kMaxKernelTensors ? more.data() : fresh;
  for (std::uint32_t i = 0; i < n; ++i) {
    Status s = CopyInto(rc, *TensorIn(ctx->input(i)), next[i]);
    if (!s.ok()) {
      for (std::uint32_t k = 0; k < i; ++k) rc.device_allocator->Free(next[k].block);
      return ctx->Fail(s.WithContext(fmt::format("loop variable {}", i)));
    }
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    Buffer& var = *ctx->output(i).Object<Buffer>();
    rc.device_allocator->Free(var.block);
    var = next[i];
  }
  return exe::kKernelSuccess;
}

}  // namespace

void ReleaseRunBuffers(ExecutionData& data) {
  const std::size_t values = data.graph().values().size();
  for (std::size_t v = 0; v < values; ++v) {
    exe::Chain& chain = data.value(static_cast<int>(v));
    if (!chain.Holds<Buffer>()) continue;
    Buffer& b = *chain.Object<Buffer>();
    if (b.owner == nullptr) continue;  // not taken by the run (a constant, a caller's tensor, an alias)
    if (b.block) b.owner->Free(b.block);
    b.block = MemBlock{};
    b.owner = nullptr;
  }
}

void RegisterOpKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    graph::RegisterBuiltinOps();
    using exe::KernelRegister;
    using exe::KernelTag;
    KernelRegister("ConstToDevice").RunFunc(ConstToDeviceRun).Prepare(PrepareConst).Tag(KernelTag::kMemory);
    KernelRegister("FreeConst").RunFunc(FreeConstRun).Tag(KernelTag::kMemory);
    KernelRegister("PrepareInput").RunFunc(PrepareInputRun).Prepare(PrepareIo).OutputsCreator(CreateOneBuffer)
        .Tag(KernelTag::kMemory);
    KernelRegister("CopyOutput").RunFunc(CopyOutputRun).Prepare(PrepareIo).Tag(KernelTag::kLaunch);
    KernelRegister("InferShape").RunFunc(InferShapeRun).Prepare(PrepareOp).OutputsCreator(CreateBuffers)
        .ExceptionDumpInfoFiller(OpExceptionDump);
    KernelRegister("Tiling").RunFunc(TilingRun).Prepare(PrepareOp).OutputsCreator(CreateTilingData)
        .ExceptionDumpInfoFiller(OpExceptionDump);
    KernelRegister("AllocOutputs").RunFunc(AllocOutputsRun).Prepare(PrepareOp).OutputsCreator(CreateStaticBuffers)
        .Tag(KernelTag::kMemory);
    KernelRegister("LaunchKernel").RunFunc(LaunchRun).Prepare(PrepareOp).TracePrinter(LaunchTrace)
        .ExceptionDumpInfoFiller(OpExceptionDump).DataDumpInfoFiller(LaunchDump).Tag(KernelTag::kLaunch);
    KernelRegister("FreeMemory").RunFunc(FreeMemoryRun).Prepare(PrepareStream).Tag(KernelTag::kMemory);
    KernelRegister("SendEvent").RunFunc(SendEventRun).Prepare(PrepareStream).Tag(KernelTag::kLaunch);
    KernelRegister("WaitEvent").RunFunc(WaitEventRun).Prepare(PrepareStream).Tag(KernelTag::kLaunch);
    KernelRegister("NoOp").RunFunc(NoOpRun);
    KernelRegister("IfSwitch").RunFunc(IfSwitchRun);
    KernelRegister("ReadCondition").RunFunc(ReadConditionRun);
    KernelRegister("LoopSwitch").RunFunc(LoopSwitchRun).Prepare(PrepareLoop);
    KernelRegister("CopyToValue").RunFunc(CopyToValueRun).OutputsCreator(CreateAllBuffers).Tag(KernelTag::kMemory);
    KernelRegister("LoopEnter").RunFunc(LoopEnterRun).OutputsCreator(CreateLoopOutputs).Tag(KernelTag::kMemory);
    KernelRegister("LoopNext").RunFunc(LoopNextRun).OutputsCreator(CreateAllBuffers).Tag(KernelTag::kMemory);
  });
}

}  // namespace npuflow::v2
