// What the scheduler tests (tests/scheduler/*_test.cc) share: the fixture that brings ModelManager
// up and down around each test, graph-text builders, input tensors, host and device buffers for
// NnExecute, one answer of the Run loop, and the f32 comparison against a reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "lowering/compiler.h"
#include "scheduler/davinci_model.h"
#include "scheduler/run_loop.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"

// Not `testing`: that would hide gtest's ::testing inside npuflow::scheduler.
namespace npuflow::scheduler::test {

// ---- ModelManager -------------------------------------------------------------------------------

// The runtime the tests run on: one device per chip (a shipped chip name or a chip JSON path).
inline npu_sim::RuntimeOptions ManagerOptions(std::string chip = "910B") {
  return {.chips = {std::move(chip)}, .workers = 2};
}

// ModelManager on one 910B (and the built-in ops) for the length of each test.
class ModelManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    Status s = ModelManager::Initialize(ManagerOptions());
    ASSERT_TRUE(s.ok()) << s;
  }
  void TearDown() override {
    Status s = ModelManager::Finalize();
    EXPECT_TRUE(s.ok()) << s;
  }
  static ModelManager& mm() { return *ModelManager::Get(); }
  static npu_sim::Runtime& rt() { return ModelManager::Get()->runtime(); }
};

// ---- graph text ---------------------------------------------------------------------------------

inline std::string Dims(const std::vector<std::int64_t>& dims) {
  std::string s;
  for (std::int64_t d : dims) s += fmt::format(" dim {{ size: {} }}", d);
  return s;
}

// A Data (graph input) node; `dtype` as in the text format ("DT_FLOAT", "DT_INT32", ...).
inline std::string DataNode(const std::string& name, const std::string& dtype, const std::vector<std::int64_t>& dims) {
  return fmt::format(
      "node {{ name: \"{}\" op: \"Data\" attr {{ key: \"dtype\" value {{ type: {} }} }}"
      " attr {{ key: \"shape\" value {{ shape {{{} }} }} }} }}\n",
      name, dtype, Dims(dims));
}

// A Variable node: state that persists across runs of the model.
inline std::string VariableNode(const std::string& name, const std::string& dtype,
                                const std::vector<std::int64_t>& dims) {
  return fmt::format(
      "node {{ name: \"{}\" op: \"Variable\" attr {{ key: \"dtype\" value {{ type: {} }} }}"
      " attr {{ key: \"shape\" value {{ shape {{{} }} }} }} }}\n",
      name, dtype, Dims(dims));
}

// A DT_FLOAT Const holding `values` (float or double, written as fmt writes them).
template <typename T>
std::string ConstNode(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<T>& values) {
  std::string vals;
  for (const T& v : values) vals += fmt::format(" float_val: {}", v);
  return fmt::format(
      "node {{ name: \"{}\" op: \"Const\" attr {{ key: \"value\" value {{ tensor {{ dtype: DT_FLOAT"
      " shape {{{} }}{} }} }} }} }}\n",
      name, Dims(dims), vals);
}

// `graph` (e.g. from synthetic::MakeChainGraph) compiled for the v1 task sink; null (with a
// failure) if it is an error or does not compile.
inline std::shared_ptr<const CompiledModel> CompileGraph(StatusOr<std::unique_ptr<graph::ComputeGraph>> graph,
                                                         graph::CompileOptions options = {}) {
  graph::RegisterBuiltinOps();
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return nullptr;
  auto m = lowering::CompileV1(std::move(*graph), options);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  return std::make_shared<const CompiledModel>(std::move(*m));
}

// Parses and compiles `text` for the v1 runtime; null (with a failure) if either step fails.
inline std::shared_ptr<const CompiledModel> CompileText(const std::string& text, graph::CompileOptions options = {},
                                                        const std::string& source = "test.pbtxt") {
  return CompileGraph(graph::ParseGraphText(text, source), std::move(options));
}

// ---- tensors ------------------------------------------------------------------------------------

// A tensor of `desc` whose element i is value(i) (stored as float for float types, else integer).
template <typename F>
Tensor Filled(const graph::TensorDesc& desc, F value) {
  Tensor t = graph::ZeroTensor(desc);
  const auto n = static_cast<std::size_t>(desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) {
    if (graph::IsFloat(desc.dtype)) graph::StoreF(t, i, static_cast<float>(value(i)));
    else graph::StoreI(t, i, static_cast<std::int64_t>(value(i)));
  }
  return t;
}
template <typename F>
Tensor FilledF32(graph::Shape shape, F value) {
  return Filled(graph::TensorDesc{graph::DataType::kFloat32, std::move(shape)}, std::move(value));
}
template <typename F>
Tensor FilledI32(graph::Shape shape, F value) {
  return Filled(graph::TensorDesc{graph::DataType::kInt32, std::move(shape)}, std::move(value));
}

// A float tensor of `desc` with values uniform in [lo, hi), drawn from `rng`.
inline Tensor RandomFloats(const graph::TensorDesc& desc, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  return Filled(desc, [&](std::size_t) { return dist(rng); });
}

// Random inputs for every (float) input of `cm`, uniform in [lo, hi).
inline std::vector<Tensor> RandomInputs(const CompiledModel& cm, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::vector<Tensor> inputs;
  for (const graph::IoDef& io : cm.inputs) inputs.push_back(RandomFloats(io.desc, rng, lo, hi));
  return inputs;
}

// f32 within 1e-5 relative (1e-6 absolute near zero); integers exact.
// f32 inputs of `m` that differ with `seed`: element i is seed * (i % 7) - 2.
inline std::vector<Tensor> PatternInputs(const CompiledModel& m, float seed) {
  std::vector<Tensor> in;
  for (const graph::IoDef& io : m.inputs) {
    Tensor t = graph::ZeroTensor(io.desc);
    auto* f = reinterpret_cast<float*>(t.data.data());
    for (std::size_t i = 0; i < t.data.size() / sizeof(float); ++i) f[i] = seed * static_cast<float>(i % 7) - 2.f;
    in.push_back(std::move(t));
  }
  return in;
}

inline ::testing::AssertionResult Near(const Tensor& got, const Tensor& want) {
  if (!(got.desc == want.desc))
    return ::testing::AssertionFailure() << "desc " << got.desc.ToString() << ", expected " << want.desc.ToString();
  if (got.data.size() != want.data.size())
    return ::testing::AssertionFailure() << got.data.size() << " bytes, expected " << want.data.size();
  const auto n = static_cast<std::size_t>(want.desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) {
    if (graph::IsFloat(want.desc.dtype)) {
      const float a = graph::LoadF(got, i), b = graph::LoadF(want, i);
      if (!(std::fabs(a - b) <= 1e-5f * std::fabs(b) + 1e-6f))
        return ::testing::AssertionFailure() << "element " << i << ": " << a << ", expected " << b;
    } else if (graph::LoadI(got, i) != graph::LoadI(want, i)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << graph::LoadI(got, i) << ", expected "
                                           << graph::LoadI(want, i);
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- buffers for NnExecute ----------------------------------------------------------------------

// Zeroed host tensors for `outputs`.
inline std::vector<Tensor> ZeroOutputs(const std::vector<graph::IoDef>& outputs) {
  std::vector<Tensor> outs;
  for (const graph::IoDef& o : outputs) outs.push_back(graph::ZeroTensor(o.desc));
  return outs;
}

// ExecuteArgs on host memory: reads `inputs`, writes `outputs`; both must outlive the args.
inline ExecuteArgs HostArgs(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  ExecuteArgs args;
  for (const Tensor& t : inputs) args.inputs.push_back(DataBuffer::Host(t.data.data(), t.data.size()));
  for (Tensor& t : outputs) args.outputs.push_back(DataBuffer::Host(t.data.data(), t.data.size()));
  return args;
}

// Device copies of a model's inputs and device room for its outputs, as `args` (zero copy; no
// timeout set) or as DeviceTensors (RunGraphWithStreamAsync). Freed on destruction.
class DeviceBuffers {
 public:
  DeviceBuffers(npu_sim::Runtime& rt, int device) : rt_(&rt), device_(device) {}
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  DeviceBuffers(DeviceBuffers&&) = default;
  ~DeviceBuffers() {
    for (auto p : in_) (void)rt_->Free(device_, p);
    for (auto p : out_) (void)rt_->Free(device_, p);
  }

  // Copies `inputs` to the device and allocates `outputs`, filled with `poison` when given (an
  // output the run never wrote then shows).
  Status Allocate(const std::vector<Tensor>& inputs, const std::vector<graph::IoDef>& outputs,
                  std::optional<std::uint8_t> poison = std::nullopt) {
    for (const Tensor& t : inputs) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt_->Malloc(device_, std::max<std::uint64_t>(t.data.size(), 1)));
      in_.push_back(p);
      NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyH2D(device_, p, t.data.data(), t.data.size()));
      in_descs_.push_back(t.desc);
      args.inputs.push_back(DataBuffer::Device(p, t.data.size()));
    }
    for (const graph::IoDef& o : outputs) {
      const std::uint64_t bytes = o.desc.bytes().value_or(0);
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt_->Malloc(device_, std::max<std::uint64_t>(bytes, 1)));
      out_.push_back(p);
      if (poison) {
        std::vector<std::uint8_t> fill(bytes, *poison);
        NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyH2D(device_, p, fill.data(), fill.size()));
      }
      out_descs_.push_back(o.desc);
      args.outputs.push_back(DataBuffer::Device(p, bytes));
    }
    return Status::Ok();
  }

  std::vector<DeviceTensor> InputTensors() const { return Tensors(in_descs_, in_); }
  std::vector<DeviceTensor> OutputTensors() const { return Tensors(out_descs_, out_); }

  // The outputs, copied back to the host.
  StatusOr<std::vector<Tensor>> ReadOutputs() const {
    std::vector<Tensor> outs;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      outs.push_back(graph::ZeroTensor(out_descs_[i]));
      NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyD2H(device_, outs.back().data.data(), out_[i], outs.back().data.size()));
    }
    return outs;
  }

  ExecuteArgs args;

 private:
  static std::vector<DeviceTensor> Tensors(const std::vector<graph::TensorDesc>& descs,
                                           const std::vector<npu_sim::DevicePtr>& ptrs) {
    std::vector<DeviceTensor> ts;
    for (std::size_t i = 0; i < ptrs.size(); ++i) ts.push_back(DeviceTensor{descs[i], ptrs[i]});
    return ts;
  }

  npu_sim::Runtime* rt_;
  int device_;
  std::vector<npu_sim::DevicePtr> in_, out_;
  std::vector<graph::TensorDesc> in_descs_, out_descs_;
};

// ---- the Run loop ------------------------------------------------------------------------------

// One answer of RunGraphAsync or RunLoop::Push. calls() counts callback invocations (must end at
// exactly one); the callback keeps what it writes to alive, so a late answer is harmless.
class Answer {
 public:
  using Result = std::pair<Status, std::vector<Tensor>>;

  RunCallback Callback() {
    return [state = state_](Status s, std::vector<Tensor> outs) {
      if (state->calls.fetch_add(1) == 0) state->promise.set_value({std::move(s), std::move(outs)});
    };
  }
  // Waits for the answer; a missing answer is a failure, not a hung test.
  ::testing::AssertionResult Wait(Result& out, int seconds = 30) {
    if (future_.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready)
      return ::testing::AssertionFailure() << "no callback within " << seconds << " s";
    out = future_.get();
    return ::testing::AssertionSuccess();
  }
  int calls() const { return state_->calls.load(); }

 private:
  struct State {
    std::promise<Result> promise;
    std::atomic<int> calls{0};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::future<Result> future_ = state_->promise.get_future();
};

}  // namespace npuflow::scheduler::test
