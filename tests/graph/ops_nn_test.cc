// The neural-network ops (graph/ops/nn.cc, graph/kernels/nn.cc): hand-computed reference values,
// the device kernels against the reference on random inputs of several shapes and block_dims
// (1, 3, 7 and the tiling's own; every block_dim must give the same bytes), f16/bf16 storage,
// shape-inference and run-time errors, tiling, and KvCacheWrite in place.
#include <gtest/gtest.h>

#include "tests/graph/tensors.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/ir/half.h"
#include "graph/kernels/gemv_prefetch.h"
#include "graph/kernels/matmul.h"
#include "graph/ops/op_registry.h"
#include "tests/graph/device_harness.h"

namespace npuflow::graph {
namespace {

using testing::DeviceRunOptions;
using testing::RandomTensor;
using testing::RunOpOnDevice;
using testing::RunOpReference;
using testing::TensorsNear;
using testing::TestRuntime;





Tensor Cast(const Tensor& t, DataType dtype) {
  Tensor c = ZeroTensor(TensorDesc{dtype, t.desc.shape});
  const auto n = static_cast<std::size_t>(t.desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) StoreF(c, i, LoadF(t, i));
  return c;
}

OpDesc Op(std::string type, std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  OpDesc op("n", std::move(type));
  for (auto& [k, v] : attrs) op.SetAttr(k, v);
  return op;
}

Tensor RefOut(const OpDesc& op, const std::vector<Tensor>& in) {
  auto out = RunOpReference(op, in);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0] : Tensor{};
}

// The device kernel, at the tiling's block_dim and at 1, 3 and 7, against the reference; all
// block_dims must give identical bytes.
void ExpectDeviceMatchesReference(const OpDesc& op, const std::vector<Tensor>& in, float atol, float rtol) {
  auto ref = RunOpReference(op, in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::optional<Tensor> first;
  for (std::optional<std::uint32_t> block_dim : {std::optional<std::uint32_t>(), std::optional<std::uint32_t>(1u),
                                                 std::optional<std::uint32_t>(3u), std::optional<std::uint32_t>(7u)}) {
    SCOPED_TRACE(block_dim ? "block_dim " + std::to_string(*block_dim) : std::string("tiling's block_dim"));
    auto dev = RunOpOnDevice(op, in, DeviceRunOptions{.block_dim = block_dim});
    ASSERT_TRUE(dev.ok()) << dev.status();
    ASSERT_EQ(dev->size(), 1u);
    EXPECT_TRUE(TensorsNear((*dev)[0], (*ref)[0], atol, rtol));
    if (!first) first = (*dev)[0];
    EXPECT_TRUE((*dev)[0] == *first) << "block_dim changed the result";
  }
}

// Runs `op` like RunOpOnDevice but with the given block_dim and tiling_key.
StatusOr<Tensor> RunWithTilingKey(const OpDesc& op, const std::vector<Tensor>& inputs, std::uint32_t block_dim,
                                  std::uint64_t tiling_key) {
  npu_sim::Runtime& rt = TestRuntime();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  std::vector<TensorDesc> in_descs, out_descs;
  for (const Tensor& t : inputs) in_descs.push_back(t.desc);
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, in_descs, out_descs));
  NPUFLOW_ASSIGN_OR_RETURN(KernelParams params, EncodeKernelParams(*def, op, in_descs, out_descs));
  std::vector<npu_sim::DevicePtr> owned;
  std::vector<std::uint64_t> args;
  auto alloc = [&](std::uint64_t bytes) -> StatusOr<npu_sim::DevicePtr> {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt.Malloc(0, std::max<std::uint64_t>(bytes, 1)));
    owned.push_back(p);
    return p;
  };
  auto run = [&]() -> StatusOr<Tensor> {
    for (const Tensor& t : inputs) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, alloc(t.data.size()));
      NPUFLOW_RETURN_IF_ERROR(rt.MemcpyH2D(0, p, t.data.data(), t.data.size()));
      args.push_back(p.value);
    }
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr out, alloc(out_descs[0].bytes().value()));
    args.push_back(out.value);
    args.push_back(0);
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr pp, alloc(KernelParamsBytes(params)));
    NPUFLOW_RETURN_IF_ERROR(rt.MemcpyH2D(0, pp, &params, KernelParamsBytes(params)));
    args.push_back(pp.value);
    const npu_sim::Stream s = rt.DefaultStream(0);
    NPUFLOW_RETURN_IF_ERROR(rt.LaunchKernel(s, def->device_kernel, block_dim, args, tiling_key));
    NPUFLOW_RETURN_IF_ERROR(rt.SynchronizeStream(s));
    Tensor t = ZeroTensor(out_descs[0]);
    NPUFLOW_RETURN_IF_ERROR(rt.MemcpyD2H(0, t.data.data(), out, t.data.size()));
    return t;
  };
  auto result = run();
  for (npu_sim::DevicePtr p : owned) (void)rt.Free(0, p);
  return result;
}

Status InferStatus(const OpDesc& op, std::vector<TensorDesc> in) {
  RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  std::vector<TensorDesc> out;
  return InferOutputs(*def, op, in, out);
}

StatusOr<TensorDesc> InferOne(const OpDesc& op, std::vector<TensorDesc> in) {
  RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  std::vector<TensorDesc> out;
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, in, out));
  return out.at(0);
}

TensorDesc F32Desc(Shape s) { return TensorDesc{DataType::kFloat32, std::move(s)}; }
Shape Sym(std::vector<Dim> dims) { return Shape(std::move(dims)); }

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// ---- registration ------------------------------------------------------------------------------------
TEST(NnOps, RegisteredOnAICoreWithDeviceKernels) {
  RegisterBuiltinOps();
  for (const char* type :
       {"MatMul", "BatchMatMul", "Softmax", "ArgMax", "LayerNorm", "Gather", "Attention", "KvCacheWrite"}) {
    SCOPED_TRACE(type);
    auto def = OpRegistry::Global().Find(type);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ((*def)->engine, OpEngine::kAICore);
    EXPECT_EQ((*def)->device_kernel, std::string("op.") + type);
    EXPECT_TRUE(npu_sim::KernelRegistry::Global().Find((*def)->device_kernel).ok());
    EXPECT_NE((*def)->reference, nullptr);
    EXPECT_NE((*def)->tiling, nullptr);
  }
  const OpDef* attn = OpRegistry::Global().Find("Attention").value();
  EXPECT_EQ(attn->tiling_depend_inputs, std::vector<int>{3});
  EXPECT_TRUE(attn->tiling_on_aicpu);
  EXPECT_EQ(OpRegistry::Global().Find("KvCacheWrite").value()->inplace, std::vector<int>{0});
}

// ---- MatMul -----------------------------------------------------------------------------------------
TEST(MatMul, ReferenceHandComputed) {
  const Tensor a = F32(Shape{2, 2}, {1, 2, 3, 4}), b = F32(Shape{2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(Floats(RefOut(Op("MatMul"), {a, b})), (std::vector<float>{19, 22, 43, 50}));
  EXPECT_EQ(Floats(RefOut(Op("MatMul"), {a, b, F32(Shape{2}, {1, -1})})), (std::vector<float>{20, 21, 44, 49}));
  // a^T b = [[1, 3], [2, 4]] x b; a b^T = a x [[5, 7], [6, 8]]
  EXPECT_EQ(Floats(RefOut(Op("MatMul", {{"transpose_a", true}}), {a, b})), (std::vector<float>{26, 30, 38, 44}));
  EXPECT_EQ(Floats(RefOut(Op("MatMul", {{"transpose_b", true}}), {a, b})), (std::vector<float>{17, 23, 39, 53}));
  // [1, 3] x [3, 2]
  EXPECT_EQ(Floats(RefOut(Op("MatMul"), {F32(Shape{1, 3}, {1, 2, 3}), F32(Shape{3, 2}, {1, 0, 0, 1, 1, 1})})),
            (std::vector<float>{4, 5}));
}

TEST(MatMul, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(1);
  struct Case {
    std::int64_t m, k, n;
    bool ta, tb, bias;
  };
  for (const Case& c : std::vector<Case>{{1, 1, 1, false, false, false},
                                         {5, 7, 3, false, false, true},
                                         {1, 64, 300, false, false, true},
                                         {37, 129, 300, false, false, false},
                                         {121, 257, 65, true, false, false},
                                         {130, 300, 270, false, true, true},
                                         {133, 65, 129, false, true, false},
                                         {140, 257, 260, true, false, true},
                                         {9, 33, 17, true, true, false},
                                         {3, 0, 4, false, false, true}}) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.k << "x" << c.n << " ta " << c.ta << " tb " << c.tb);
    OpDesc op = Op("MatMul", {{"transpose_a", c.ta}, {"transpose_b", c.tb}});
    std::vector<Tensor> in = {RandomTensor(F32Desc(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}), rng),
                              RandomTensor(F32Desc(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}), rng)};
    if (c.bias) in.push_back(RandomTensor(F32Desc(Shape{c.n}), rng));
    ExpectDeviceMatchesReference(op, in, 1e-4f, 1e-4f);
  }
}

// The epilogue lowering's fuse-epilogues pass sets: act(a x b + bias) + residual. The device
// against the reference, on the GEMV (one row) and GEMM paths, f32 and f16 weights, any block_dim;
// and its bits against the unfused pair (MatMul, then Gelu / Add) run on the device, which the
// fusion must not change (greedy ids stay the same).
// The fused MatMul on the device, at block_dim 1 and 3, gives the bits of the unfused chain on
// the device: `plain` on `plain_in`, then Gelu when `gelu`, then Add(residual, .) when given.
void ExpectFusedMatchesUnfused(const OpDesc& fused, const std::vector<Tensor>& fused_in, const OpDesc& plain,
                               const std::vector<Tensor>& plain_in, bool gelu, const Tensor* residual) {
  auto mm = RunOpOnDevice(plain, plain_in);
  ASSERT_TRUE(mm.ok()) << mm.status();
  Tensor want = (*mm)[0];
  if (gelu) {
    auto g = RunOpOnDevice(Op("Gelu"), {want});
    ASSERT_TRUE(g.ok()) << g.status();
    want = (*g)[0];
  }
  if (residual != nullptr) {
    auto a = RunOpOnDevice(Op("Add"), {*residual, want});
    ASSERT_TRUE(a.ok()) << a.status();
    want = (*a)[0];
  }
  for (std::uint32_t blocks : {1u, 3u}) {
    auto got = RunOpOnDevice(fused, fused_in, {.block_dim = blocks});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0].data, want.data) << "block_dim " << blocks;
  }
}

TEST(MatMul, FusedEpilogueMatchesTheReferenceAndTheUnfusedPairBitForBit) {
  std::mt19937 rng(7);
  struct Case {
    std::int64_t m, k, n;
    bool bias, gelu, residual;
    DataType wtype;
  };
  for (const Case& c : std::vector<Case>{{1, 64, 300, true, true, false, DataType::kFloat32},
                                         {1, 64, 300, true, false, true, DataType::kFloat32},
                                         {1, 96, 1030, true, true, true, DataType::kFloat16},
                                         {1, 33, 17, false, false, true, DataType::kFloat32},
                                         {37, 129, 300, true, true, false, DataType::kFloat32},
                                         {133, 65, 129, false, false, true, DataType::kFloat32},
                                         {140, 70, 260, true, true, true, DataType::kFloat32},
                                         {4, 8, 16, true, true, false, DataType::kFloat32}}) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.k << "x" << c.n << " bias " << c.bias << " gelu " << c.gelu
                                      << " residual " << c.residual << " " << DataTypeName(c.wtype));
    const bool tb = c.wtype == DataType::kFloat32 && c.m % 2 == 0 ? false : true;  // both layouts of b
    std::vector<Tensor> in = {RandomTensor(F32Desc(Shape{c.m, c.k}), rng),
                              RandomTensor(TensorDesc{c.wtype, tb ? Shape{c.n, c.k} : Shape{c.k, c.n}}, rng)};
    if (c.bias) in.push_back(RandomTensor(F32Desc(Shape{c.n}), rng));
    const Tensor residual = RandomTensor(F32Desc(Shape{c.m, c.n}), rng);
    std::vector<Tensor> fused_in = in;
    if (c.residual) fused_in.push_back(residual);
    OpDesc fused = Op("MatMul", {{"transpose_b", tb}});
    if (c.gelu) fused.SetAttr("fused_activation", std::string("gelu"));
    if (c.residual) fused.SetAttr("fused_residual", true);
    ExpectDeviceMatchesReference(fused, fused_in, 2e-3f, 1e-4f);

    // The unfused pair on the device.
    ExpectFusedMatchesUnfused(fused, fused_in, Op("MatMul", {{"transpose_b", tb}}), in, c.gelu,
                              c.residual ? &residual : nullptr);
  }
}

TEST(MatMul, BadEpiloguesAreErrorsNamingTheNode) {
  OpDesc relu = Op("MatMul");
  relu.SetAttr("fused_activation", std::string("relu"));
  Status s = InferStatus(relu, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3})});
  EXPECT_TRUE(Contains(s.message(), "fused_activation 'relu'")) << s;
  OpDesc res = Op("MatMul");
  res.SetAttr("fused_residual", true);
  s = InferStatus(res, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{3})});  // bias, no residual
  EXPECT_TRUE(Contains(s.message(), "residual [3] does not match the output [1, 3]")) << s;
  s = InferStatus(res, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3})});
  EXPECT_TRUE(Contains(s.message(), "2 inputs with fused_residual true")) << s;
  auto ok = InferOne(res, {F32Desc(Shape{2, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{3}), F32Desc(Shape{2, 3})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shape, (Shape{2, 3}));
}

TEST(MatMul, FusedLayerNormMatchesTheReferenceAndTheUnfusedPairBitForBit) {
  std::mt19937 rng(11);
  struct Case {
    std::int64_t k, n;
    bool bias, gelu, residual;
    DataType wtype;
  };
  for (const Case& c : std::vector<Case>{{64, 300, true, true, false, DataType::kFloat32},
                                         {96, 1030, true, false, true, DataType::kFloat16},
                                         {33, 17, false, false, true, DataType::kFloat32},
                                         {768, 2304, true, false, false, DataType::kFloat16}}) {
    SCOPED_TRACE(::testing::Message() << "1x" << c.k << "x" << c.n << " bias " << c.bias << " gelu " << c.gelu
                                      << " residual " << c.residual << " " << DataTypeName(c.wtype));
    const Tensor x = RandomTensor(F32Desc(Shape{1, c.k}), rng);
    const Tensor gamma = RandomTensor(F32Desc(Shape{c.k}), rng), beta = RandomTensor(F32Desc(Shape{c.k}), rng);
    const Tensor b = RandomTensor(TensorDesc{c.wtype, Shape{c.n, c.k}}, rng);
    const Tensor bias = RandomTensor(F32Desc(Shape{c.n}), rng);
    const Tensor residual = RandomTensor(F32Desc(Shape{1, c.n}), rng);
    OpDesc fused = Op("MatMul", {{"transpose_b", true}});
    fused.SetAttr("fused_norm", true);
    fused.SetAttr("fused_norm_epsilon", 1e-5);
    if (c.gelu) fused.SetAttr("fused_activation", std::string("gelu"));
    if (c.residual) fused.SetAttr("fused_residual", true);
    std::vector<Tensor> fused_in = {x, b};
    if (c.bias) fused_in.push_back(bias);
    if (c.residual) fused_in.push_back(residual);
    fused_in.push_back(gamma);
    fused_in.push_back(beta);
    ExpectDeviceMatchesReference(fused, fused_in, 2e-3f, 1e-4f);

    // The unfused chain on the device: LayerNorm, MatMul, then the epilogue's ops.
    auto ln = RunOpOnDevice(Op("LayerNorm", {{"epsilon", 1e-5}}), {x, gamma, beta});
    ASSERT_TRUE(ln.ok()) << ln.status();
    std::vector<Tensor> mm_in = {(*ln)[0], b};
    if (c.bias) mm_in.push_back(bias);
    ExpectFusedMatchesUnfused(fused, fused_in, Op("MatMul", {{"transpose_b", true}}), mm_in, c.gelu,
                              c.residual ? &residual : nullptr);
  }
}

// The blocks of one launch that a unit thread runs share one normalized row (KernelContext::launch);
// the next launch normalizes its own, although its row has the same shape and, its buffers freed
// and allocated again, very likely the same device address with other values. (Likely, not
// certain: it failed when the launch was left out of the cache's key, on the run that was tried.)
TEST(MatMul, FusedLayerNormBlocksShareTheirLaunchsRowAndTheNextLaunchNormalizesItsOwn) {
  std::mt19937 rng(23);
  const std::int64_t k = 64, n = 1030;
  const Tensor gamma = RandomTensor(F32Desc(Shape{k}), rng), beta = RandomTensor(F32Desc(Shape{k}), rng);
  const Tensor b = RandomTensor(F32Desc(Shape{n, k}), rng);
  OpDesc fused = Op("MatMul", {{"transpose_b", true}});
  fused.SetAttr("fused_norm", true);
  fused.SetAttr("fused_norm_epsilon", 1e-5);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const Tensor x = RandomTensor(F32Desc(Shape{1, k}), rng);
    auto ln = RunOpOnDevice(Op("LayerNorm", {{"epsilon", 1e-5}}), {x, gamma, beta});
    ASSERT_TRUE(ln.ok()) << ln.status();
    auto want = RunOpOnDevice(Op("MatMul", {{"transpose_b", true}}), {(*ln)[0], b});
    ASSERT_TRUE(want.ok()) << want.status();
    for (std::uint32_t blocks : {1u, 8u, 40u}) {
      auto got = RunOpOnDevice(fused, {x, b, gamma, beta}, {.block_dim = blocks});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ((*got)[0].data, (*want)[0].data) << "block_dim " << blocks;
    }
  }
}

// OpKernelView::Open reads and checks a launch's params once per thread; the same launch's later
// opens take what it kept. Another launch (or launch 0, or another device's memory) reads the
// device memory again, so params rewritten at the same address are seen and corrupt ones are
// rejected at every launch.
TEST(OpKernelView, ALaunchReadsItsParamsOnceAndEveryOtherLaunchReadsThemAgain) {
  npu_sim::DeviceMemory mem(0, 1 << 20), other(0, 1 << 20);  // two devices' memories, the same addresses
  auto write_params = [](npu_sim::DeviceMemory& m, npu_sim::DevicePtr at, std::uint32_t inputs, std::int64_t dim) {
    KernelParams p;
    p.num_inputs = inputs;
    p.num_outputs = 1;
    for (KernelTensor& t : p.tensors) {
      t.dtype = static_cast<std::uint32_t>(DataType::kFloat32);
      t.rank = 1;
      t.dims[0] = dim;
    }
    auto mapped = m.Map(at, sizeof(KernelParams));
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    std::memcpy(mapped->data(), &p, sizeof(KernelParams));
  };
  const npu_sim::DevicePtr params = mem.Allocate(sizeof(KernelParams), npu_sim::Placement::kHbm, "params").value();
  const npu_sim::DevicePtr same_address = other.Allocate(sizeof(KernelParams), npu_sim::Placement::kHbm, "params").value();
  ASSERT_EQ(params.value, same_address.value);
  write_params(mem, params, 1, 4);
  write_params(other, same_address, 1, 6);
  const std::vector<std::uint64_t> args = {0, 0, 0, params.value};  // input, output, workspace, params
  auto dim_seen = [&](const npu_sim::DeviceMemory& m, std::uint64_t launch) -> StatusOr<std::int64_t> {
    npu_sim::KernelContext ctx(&m, args, 0, 1, 0, launch);
    NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
    return v.params().input(0).dims[0];
  };
  const std::uint64_t first = npu_sim::NextKernelLaunch(), second = npu_sim::NextKernelLaunch();
  ASSERT_NE(first, 0u);
  ASSERT_NE(first, second);
  EXPECT_EQ(dim_seen(mem, first).value(), 4);
  write_params(mem, params, 1, 8);
  EXPECT_EQ(dim_seen(mem, first).value(), 4) << "one launch reads its params once";
  EXPECT_EQ(dim_seen(other, first).value(), 6) << "another device's memory is read";
  EXPECT_EQ(dim_seen(mem, second).value(), 8) << "another launch reads the params again";
  EXPECT_EQ(dim_seen(mem, 0).value(), 8);
  // Corrupt params: rejected at every open of a launch (nothing was kept for it), and at the next.
  write_params(mem, params, 40, 8);
  const std::uint64_t third = npu_sim::NextKernelLaunch(), fourth = npu_sim::NextKernelLaunch();
  for (std::uint64_t launch : {third, third, fourth}) {
    auto seen = dim_seen(mem, launch);
    ASSERT_FALSE(seen.ok());
    EXPECT_EQ(seen.status().code(), StatusCode::kDataCorrupted) << seen.status();
  }
  // Params that name other tensor counts than the arguments: refused on a kept launch's open too.
  write_params(mem, params, 1, 8);
  const std::uint64_t fifth = npu_sim::NextKernelLaunch();
  EXPECT_TRUE(dim_seen(mem, fifth).ok());
  const std::vector<std::uint64_t> two_args = {0, params.value};
  npu_sim::KernelContext short_args(&mem, two_args, 0, 1, 0, fifth);
  EXPECT_EQ(OpKernelView::Open(short_args).status().code(), StatusCode::kParamInvalid);
}

TEST(OpKernelView, ALaunchMapsEachTensorOnceOnAThreadAndTheNextLaunchMapsAgain) {
  npu_sim::DeviceMemory mem(0, 1 << 20);
  KernelParams p;
  p.num_inputs = 1;
  p.num_outputs = 1;
  for (KernelTensor& t : p.tensors) {
    t.dtype = static_cast<std::uint32_t>(DataType::kFloat32);
    t.rank = 1;
    t.dims[0] = 4;
  }
  const npu_sim::DevicePtr params = mem.Allocate(sizeof(KernelParams), npu_sim::Placement::kHbm, "params").value();
  std::memcpy(mem.Map(params, sizeof(KernelParams)).value().data(), &p, sizeof(KernelParams));
  const npu_sim::DevicePtr x = mem.Allocate(16, npu_sim::Placement::kHbm, "x").value();
  const npu_sim::DevicePtr y = mem.Allocate(16, npu_sim::Placement::kHbm, "y").value();
  const std::vector<std::uint64_t> args = {x.value, y.value, 0, params.value};
  auto input = [&](std::uint64_t launch, std::uint32_t block) -> StatusOr<const float*> {
    npu_sim::KernelContext ctx(&mem, args, block, 2, 0, launch);
    NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
    NPUFLOW_ASSIGN_OR_RETURN(std::span<const float> in, v.Input<const float>(0));
    return in.data();
  };
  const std::uint64_t first = npu_sim::NextKernelLaunch(), second = npu_sim::NextKernelLaunch();
  auto block0 = input(first, 0);
  ASSERT_TRUE(block0.ok()) << block0.status();
  ASSERT_TRUE(mem.Free(x).ok());
  // The launch's next block on this thread takes the mapping it kept: the old backing, still alive.
  auto block1 = input(first, 1);
  ASSERT_TRUE(block1.ok()) << block1.status();
  EXPECT_EQ(*block1, *block0);
  // Another launch, or a context without one, maps again: the memory is gone.
  for (std::uint64_t launch : {second, std::uint64_t{0}}) {
    auto again = input(launch, 0);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), StatusCode::kParamInvalid);
    EXPECT_NE(again.status().message().find("no live allocation"), std::string::npos) << again.status();
  }
}

// What a block finds kept on its thread when it starts: written to its one argument.
Status ProbeKeptLaunch(npu_sim::KernelContext& ctx) {
  npu_sim::DeviceMemory::Mapping m;
  NPUFLOW_ASSIGN_OR_RETURN(auto out, ctx.Buffer<std::uint64_t>(0, 1, m));
  out[0] = npu_sim::ThisThreadLaunchMappings().launch;
  return Status::Ok();
}
npu_sim::VTime ProbeCost(const npu_sim::KernelContext&, const npu_sim::ChipSpec&) { return 100; }

TEST(OpKernelView, AUnitThreadKeepsNoMappingsOnceItsMessageIsHandled) {
  // An op kernel keeps its launch's mappings while its blocks run; the next kernel on any unit
  // thread finds none (the unit let them go), so no thread holds a freed allocation's backing.
  npu_sim::KernelRegistry::Global().Register(
      {.name = "test.ProbeKeptLaunch", .engine = npu_sim::Engine::kAICore, .run = &ProbeKeptLaunch, .cost = &ProbeCost});
  npu_sim::Runtime& rt = TestRuntime();
  std::mt19937 rng(5);
  const npu_sim::DevicePtr out = rt.Malloc(0, sizeof(std::uint64_t)).value();
  for (int round = 0; round < 20; ++round) {
    auto dev = RunOpOnDevice(Op("Softmax"), {RandomTensor(F32Desc(Shape{8, 300}), rng, -2, 2)});
    ASSERT_TRUE(dev.ok()) << dev.status();
    const std::vector<std::uint64_t> args = {out.value};
    const npu_sim::Stream s = rt.DefaultStream(0);
    ASSERT_TRUE(rt.LaunchKernel(s, "test.ProbeKeptLaunch", 1, args, 0).ok());
    ASSERT_TRUE(rt.SynchronizeStream(s).ok());
    std::uint64_t kept = 1;
    ASSERT_TRUE(rt.MemcpyD2H(0, &kept, out, sizeof(kept)).ok());
    EXPECT_EQ(kept, 0u) << "round " << round;
  }
  ASSERT_TRUE(rt.Free(0, out).ok());
}

TEST(MatMul, BadLayerNormProloguesAreErrorsNamingTheNode) {
  OpDesc norm = Op("MatMul");
  norm.SetAttr("fused_norm", true);
  Status s = InferStatus(norm, {F32Desc(Shape{2, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{4}), F32Desc(Shape{4})});
  EXPECT_TRUE(Contains(s.message(), "fused_norm needs a to be one f32 row [1, K]")) << s;
  s = InferStatus(norm, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{5}), F32Desc(Shape{4})});
  EXPECT_TRUE(Contains(s.message(), "fused_norm's gamma f32[5] does not match K of a [1, 4]")) << s;
  s = InferStatus(norm, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{4})});
  EXPECT_TRUE(Contains(s.message(), "3 inputs with fused_residual false and fused_norm true")) << s;
  auto ok = InferOne(norm, {F32Desc(Shape{1, 4}), F32Desc(Shape{4, 3}), F32Desc(Shape{3}), F32Desc(Shape{4}),
                            F32Desc(Shape{4})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shape, (Shape{1, 3}));
}

TEST(MatMul, HalfAndBFloat16StorageAccumulateInF32) {
  std::mt19937 rng(2);
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(dt));
    std::vector<Tensor> in = {RandomTensor(TensorDesc{dt, Shape{19, 70}}, rng),
                              RandomTensor(TensorDesc{dt, Shape{70, 33}}, rng),
                              RandomTensor(TensorDesc{dt, Shape{33}}, rng)};
    // One ulp of the output type at the sums' magnitude (|x| < 8).
    const float tol = dt == DataType::kFloat16 ? 8e-3f : 6e-2f;
    ExpectDeviceMatchesReference(Op("MatMul"), in, tol, 0);
    ExpectDeviceMatchesReference(Op("MatMul", {{"transpose_b", true}}),
                                 {in[0], RandomTensor(TensorDesc{dt, Shape{33, 70}}, rng)}, tol, 0);
  }
  // f16 hand example: exact in f16.
  const Tensor a = Cast(F32(Shape{2, 2}, {1, 2, 3, 4}), DataType::kFloat16);
  const Tensor b = Cast(F32(Shape{2, 2}, {5, 6, 7, 8}), DataType::kFloat16);
  auto dev = RunOpOnDevice(Op("MatMul"), {a, b});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ((*dev)[0].desc.dtype, DataType::kFloat16);
  EXPECT_EQ(Floats((*dev)[0]), (std::vector<float>{19, 22, 43, 50}));
}

// One f32 row against f32, f16 or bf16 weights (the decode step's Linear): the GEMV path, for
// both layouts of b, with and without bias, at sizes around its 32-lane blocks.
TEST(MatMul, SingleRowAgainstNarrowerWeights) {
  std::mt19937 rng(3);
  for (DataType wt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16})
    for (std::int64_t k : {1, 31, 32, 33, 100, 768})
      for (bool tb : {false, true})
        for (bool bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << DataTypeName(wt) << " k " << k << " tb " << tb << " bias " << bias);
          const std::int64_t n = 37;
          std::vector<Tensor> in = {RandomTensor(F32Desc(Shape{1, k}), rng),
                                    RandomTensor(TensorDesc{wt, tb ? Shape{n, k} : Shape{k, n}}, rng)};
          if (bias) in.push_back(RandomTensor(F32Desc(Shape{n}), rng));
          const OpDesc op = Op("MatMul", {{"transpose_b", tb}});
          auto out = InferOne(op, {in[0].desc, in[1].desc});
          ASSERT_TRUE(out.ok()) << out.status();
          EXPECT_EQ(out->dtype, DataType::kFloat32);
          ExpectDeviceMatchesReference(op, in, 1e-4f, 1e-4f);
        }
}

// The f16 GEMV has a loop for weights that may be cached (the long lead) and one for weights that
// stream from memory (the short lead, which the stream-weights pass picks): the same bits from
// both (which one runs is a speed choice), and against a double sum, at K around their 16- and
// 32-lane blocks, with bias, from a column range inside the output.
TEST(MatMul, GemvF16BothLoopsGiveTheSameBitsAndMatchADoubleSum) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (std::int64_t k : {1, 15, 16, 17, 31, 33, 63, 64, 65, 100, 768, 3072}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    const std::int64_t n = 21;
    std::vector<float> a(k), bias(n);
    std::vector<std::uint16_t> w(n * k);
    for (float& x : a) x = u(rng);
    for (auto& x : w) x = FloatToHalf(u(rng));
    for (float& x : bias) x = u(rng);
    const GemmMatrix b{.data = w.data(), .dtype = DataType::kFloat16, .ld = k, .transposed = true};
    std::vector<float> cached(n, -7.f), streaming(n, -7.f);
    Gemv(a.data(), b, bias.data(), cached.data(), k, 2, n - 1, GemvPrefetchLead(false));
    Gemv(a.data(), b, bias.data(), streaming.data(), k, 2, n - 1, GemvPrefetchLead(true));
    EXPECT_EQ(std::memcmp(cached.data(), streaming.data(), n * sizeof(float)), 0);
    EXPECT_EQ(cached[1], -7.f);
    EXPECT_EQ(cached[n - 1], -7.f) << "a column after the range was written";
    for (std::int64_t j = 2; j < n - 1; ++j) {
      double want = bias[j];
      for (std::int64_t i = 0; i < k; ++i) want += static_cast<double>(a[i]) * HalfToFloat(w[j * k + i]);
      EXPECT_NEAR(cached[j], want, 1e-5 * (1 + k)) << "column " << j;
    }
  }
}

// GemvReadTuner (graph/kernels/gemv_tuner.h): both ways are sampled during the warm-up, the plain
// read is taken only when it is kNoPrefetchMargin cheaper, the other way is still tried one call in
// kExploreEvery, a preempted call does not flip the choice (not even within the margin), and a
// change in the costs does.
TEST(GemvReadTuner, RunsTheCheaperWayTriesTheOtherAndFollowsAChange) {
  using T = GemvReadTuner;
  T tuner;
  // Runs `calls` calls where a byte costs `prefetch` or `plain` ticks; counts the plain ones.
  auto run = [&](int calls, double prefetch, double plain) {
    int plain_runs = 0;
    for (int i = 0; i < calls; ++i) {
      const T::Way way = tuner.Next();
      plain_runs += way == T::kNoPrefetch;
      tuner.Record(way, static_cast<std::uint64_t>((way == T::kPrefetch ? prefetch : plain) * 1000), 1000);
    }
    return plain_runs;
  };
  EXPECT_EQ(run(2 * T::kWarmup, 1.0, 0.5), static_cast<int>(T::kWarmup)) << "the warm-up samples both ways alike";
  EXPECT_EQ(tuner.best(), T::kNoPrefetch);
  const int calls = 10 * static_cast<int>(T::kExploreEvery);
  EXPECT_NEAR(run(calls, 1.0, 0.5), calls - 10, 1) << "one call in kExploreEvery tries the other way";
  // One preempted call (100x its usual time) counts as kOutlierCap times the average.
  tuner.Record(T::kNoPrefetch, 50'000, 1000);
  EXPECT_EQ(tuner.best(), T::kNoPrefetch);
  EXPECT_LT(tuner.cost(T::kNoPrefetch), 0.5 * (1 + (T::kOutlierCap - 1) * T::kSmoothing) + 1e-9);
  // The machine changes: the prefetch becomes the cheaper way; the explored calls notice it.
  run(static_cast<int>(T::kExploreEvery) * 64, 0.4, 0.5);
  EXPECT_EQ(tuner.best(), T::kPrefetch);
  // The plain read 3% cheaper, within the margin: the prefetch stays, even after one of its calls is
  // preempted (a capped sample moves its average by less than the margin).
  run(static_cast<int>(T::kExploreEvery) * 64, 0.5, 0.485);
  EXPECT_EQ(tuner.best(), T::kPrefetch);
  tuner.Record(T::kPrefetch, 50'000, 1000);
  EXPECT_EQ(tuner.best(), T::kPrefetch);
  // The plain read 20% cheaper: taken.
  run(static_cast<int>(T::kExploreEvery) * 64, 0.5, 0.4);
  EXPECT_EQ(tuner.best(), T::kNoPrefetch);
  EXPECT_GT(tuner.runs(T::kPrefetch), 0u);
  EXPECT_GT(tuner.runs(T::kNoPrefetch), 0u);
}

// A slow first sample (a cold call) weighs 1 / kWarmup of the warm-up's mean, not most of it; a
// clock that read 0 ticks does not pin a way's average at 0.
TEST(GemvReadTuner, TheWarmUpIsAPlainMeanAndAZeroAverageLearnsAgain) {
  using T = GemvReadTuner;
  T tuner;
  tuner.Record(T::kPrefetch, 3000, 1000);  // 3x the usual, within the warm-up's cap
  for (std::uint32_t i = 1; i < T::kWarmup; ++i) tuner.Record(T::kPrefetch, 1000, 1000);
  EXPECT_NEAR(tuner.cost(T::kPrefetch), (3.0 + (T::kWarmup - 1)) / T::kWarmup, 1e-9);
  tuner.Record(T::kNoPrefetch, 0, 1000);
  tuner.Record(T::kNoPrefetch, 2000, 1000);
  EXPECT_GT(tuner.cost(T::kNoPrefetch), 0.0);
}

// Each weight matrix has its own tuner on a thread (and each lead: the same matrix read at the other
// lead is another entry), so one matrix's costs never stand in for another's.
TEST(GemvReadTuner, EachWeightMatrixAndLeadHasItsOwnTuner) {
  alignas(512) static float a[512], b[512];
  GemvReadTuner& ta = GemvReadTuner::ForThisThread(a, false);
  GemvReadTuner& tb = GemvReadTuner::ForThisThread(b, false);
  GemvReadTuner& ta_streaming = GemvReadTuner::ForThisThread(a, true);
  EXPECT_NE(&ta, &tb);
  EXPECT_NE(&ta, &ta_streaming);
  EXPECT_EQ(&ta, &GemvReadTuner::ForThisThread(a, false));
  // a: the plain read far cheaper; b: the prefetch. Each keeps its own choice.
  for (int i = 0; i < 64; ++i) {
    const GemvReadTuner::Way wa = ta.Next();
    ta.Record(wa, wa == GemvReadTuner::kPrefetch ? 2000 : 1000, 1000);
    const GemvReadTuner::Way wb = tb.Next();
    tb.Record(wb, wb == GemvReadTuner::kPrefetch ? 1000 : 2000, 1000);
  }
  EXPECT_EQ(ta.best(), GemvReadTuner::kNoPrefetch);
  EXPECT_EQ(tb.best(), GemvReadTuner::kPrefetch);
  EXPECT_EQ(&ta, &GemvReadTuner::ForThisThread(a, false)) << "the entry stays the matrix's";
  EXPECT_EQ(ta.best(), GemvReadTuner::kNoPrefetch);
}

// A matrix that comes back after more than kMaxPlainReuseBytes of other weights is read with the
// prefetch only: nothing of it stays cached for the plain read to find.
TEST(GemvReadTuner, AMatrixThatComesBackAfterTooManyOtherBytesKeepsThePrefetch) {
  using T = GemvReadTuner;
  T tuner, other;
  auto call = [&](double prefetch, double plain) {
    const T::Way way = tuner.Next();
    tuner.Record(way, static_cast<std::uint64_t>((way == T::kPrefetch ? prefetch : plain) * 1000), 1000);
    return way;
  };
  for (std::uint32_t i = 0; i < 4 * T::kWarmup; ++i) call(1.0, 0.5);
  EXPECT_EQ(tuner.best(), T::kNoPrefetch);
  EXPECT_EQ(call(1.0, 0.5), T::kNoPrefetch) << "back right away: the plain read";
  other.Record(T::kPrefetch, 1, T::kMaxPlainReuseBytes + 1);  // another matrix's bytes in between
  EXPECT_EQ(call(1.0, 0.5), T::kPrefetch) << "back after more than kMaxPlainReuseBytes";
  EXPECT_EQ(call(1.0, 0.5), T::kNoPrefetch) << "and right away again";
}

// Whichever way the tuner picks, a GEMV gives the same bits: the first calls on a thread alternate
// the two (the tuner's warm-up) and later ones try the other way one call in kExploreEvery, so
// repeated calls on the same inputs cover both, for f32 and f16 weights, at both leads, with a bias
// and a column range inside the output. f32 rows up to kGemvPairRowsMaxK long go two at a time:
// each output still has the bits of its row summed alone (DotF32), an odd range included.
TEST(MatMul, GemvGivesTheSameBitsWithAndWithoutItsSoftwarePrefetch) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::int64_t n = 300;
  for (const std::int64_t k : {32, 64, 96, 128, 200}) {
    std::vector<float> a(k), bias(n), w32(n * k);
    std::vector<std::uint16_t> w16(n * k);
    for (float& x : a) x = u(rng);
    for (float& x : bias) x = u(rng);
    for (float& x : w32) x = u(rng);
    for (auto& x : w16) x = FloatToHalf(u(rng));
    for (const bool f16 : {false, true})
      for (const bool streams : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "k " << k << (f16 ? " f16" : " f32") << (streams ? " streaming" : " cached"));
        const GemmMatrix b{.data = f16 ? static_cast<const void*>(w16.data()) : w32.data(),
                           .dtype = f16 ? DataType::kFloat16 : DataType::kFloat32, .ld = k, .transposed = true};
        GemvReadTuner& tuner = GemvReadTuner::ForThisThread(b.data, streams);
        const std::uint64_t plain0 = tuner.runs(GemvReadTuner::kNoPrefetch);
        const std::uint64_t prefetch0 = tuner.runs(GemvReadTuner::kPrefetch);
        std::vector<float> first(n, -7.f);
        Gemv(a.data(), b, bias.data(), first.data(), k, 3, n - 2, GemvPrefetchLead(streams));
        for (int call = 0; call < static_cast<int>(2 * GemvReadTuner::kWarmup + 2 * GemvReadTuner::kExploreEvery);
             ++call) {
          std::vector<float> again(n, -7.f);
          Gemv(a.data(), b, bias.data(), again.data(), k, 3, n - 2, GemvPrefetchLead(streams));
          ASSERT_EQ(std::memcmp(first.data(), again.data(), n * sizeof(float)), 0) << "call " << call;
        }
        EXPECT_GT(tuner.runs(GemvReadTuner::kNoPrefetch), plain0);
        EXPECT_GT(tuner.runs(GemvReadTuner::kPrefetch), prefetch0);
        EXPECT_EQ(first[2], -7.f);
        EXPECT_EQ(first[n - 2], -7.f) << "a column after the range was written";
        for (std::int64_t j = 3; j < n - 2; ++j) {
          if (!f16) {
            const float alone = gemm_internal::DotF32(a.data(), w32.data() + j * k, k) + bias[j];
            ASSERT_EQ(std::memcmp(&first[j], &alone, sizeof(float)), 0) << "column " << j;
          }
          if (j % 37 != 0) continue;
          double want = bias[j];
          for (std::int64_t i = 0; i < k; ++i)
            want += static_cast<double>(a[i]) * (f16 ? HalfToFloat(w16[j * k + i]) : w32[j * k + i]);
          EXPECT_NEAR(first[j], want, 1e-4) << "column " << j;
        }
      }
  }
}

TEST(MatMul, ShapeInferenceWithSymbolicDims) {
  auto out =
      InferOne(Op("MatMul"), {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(768)})), F32Desc(Shape{768, 3072})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ToString(), "f32[seq, 3072]");
  auto t = InferOne(Op("MatMul", {{"transpose_b", true}}), {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(64)})),
                                                            F32Desc(Sym({Dim::Symbolic("past"), Dim::Static(64)}))});
  EXPECT_EQ(t->ToString(), "f32[seq, past]");
  // A symbolic K against a static one is checked at run time.
  EXPECT_TRUE(InferOne(Op("MatMul"), {F32Desc(Sym({Dim::Static(2), Dim::Symbolic("k")})), F32Desc(Shape{4, 5})}).ok());
}

TEST(MatMul, ShapeInferenceErrorsNameTheNodeAndShapes) {
  EXPECT_EQ(InferStatus(Op("MatMul"), {F32Desc(Shape{2, 3}), F32Desc(Shape{4, 5})}).message(),
            "node 'n' (MatMul): a [2, 3] has K = 3 but b [4, 5] has K = 4 (transpose_a = false, transpose_b = false)");
  EXPECT_EQ(InferStatus(Op("MatMul", {{"transpose_a", true}}), {F32Desc(Shape{2, 3}), F32Desc(Shape{3, 5})}).message(),
            "node 'n' (MatMul): a [2, 3] has K = 2 but b [3, 5] has K = 3 (transpose_a = true, transpose_b = false)");
  EXPECT_EQ(InferStatus(Op("MatMul"), {F32Desc(Shape{2, 3}), F32Desc(Shape{3, 5}), TensorDesc{DataType::kFloat16, Shape{5}}})
                .message(),
            "node 'n' (MatMul): a and bias dtypes differ: f32 and f16");
  EXPECT_EQ(InferStatus(Op("MatMul"), {F32Desc(Shape{2, 3, 4}), F32Desc(Shape{4, 5})}).message(),
            "node 'n' (MatMul): needs 2-D a and b, got [2, 3, 4] and [4, 5]");
  EXPECT_EQ(InferStatus(Op("MatMul"), {F32Desc(Shape{2, 3}), F32Desc(Shape{3, 5}), F32Desc(Shape{4})}).message(),
            "node 'n' (MatMul): bias [4] does not match N = 5 of a [2, 3] x b [3, 5]");
  EXPECT_EQ(
      InferStatus(Op("MatMul"), {TensorDesc{DataType::kInt32, Shape{2, 3}}, TensorDesc{DataType::kInt32, Shape{3, 5}}})
          .message(),
      "node 'n' (MatMul): a must be a float tensor (f32, f16, bf16), got i32[2, 3]");
  EXPECT_EQ(InferStatus(Op("MatMul"), {F32Desc(Shape{2, 3})}).message(),
            "node 'n' (MatMul): 1 inputs, expected 2 to 6");
}

TEST(MatMul, TilingUsesOneBlockPerOutputTileUpToTheCores) {
  RegisterBuiltinOps();
  const OpDef* def = OpRegistry::Global().Find("MatMul").value();
  auto small = def->tiling(Op("MatMul"), {F32Desc(Shape{4, 4}), F32Desc(Shape{4, 4})}, {}, 24);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->block_dim, 1u);
  auto big = def->tiling(Op("MatMul"), {F32Desc(Shape{768, 768}), F32Desc(Shape{768, 3072})}, {}, 24);
  EXPECT_EQ(big->block_dim, 24u);
  EXPECT_EQ(big->workspace_bytes, 0u);
  auto dynamic =
      def->tiling(Op("MatMul"), {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(4)})), F32Desc(Shape{4, 4})}, {}, 24);
  ASSERT_FALSE(dynamic.ok());
  EXPECT_TRUE(Contains(dynamic.status().message(), "static shapes"));
}

// ---- BatchMatMul ------------------------------------------------------------------------------------
TEST(BatchMatMul, ReferenceHandComputedWithBroadcast) {
  // a [2, 1, 2]: two row vectors; b [1, 2, 2]: one matrix shared by both.
  auto out = RunOpReference(Op("BatchMatMul"), {F32(Shape{2, 1, 2}, {1, 2, 3, 4}), F32(Shape{1, 2, 2}, {5, 6, 7, 8})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].desc.shape.ToString(), "[2, 1, 2]");
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{19, 22, 43, 50}));
}

TEST(BatchMatMul, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(3);
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : std::vector<Case>{{Shape{2, 3, 4}, Shape{2, 4, 5}, false, false},
                                         {Shape{2, 3, 5, 4}, Shape{3, 4, 6}, false, false},
                                         {Shape{1, 3, 5, 4}, Shape{2, 1, 4, 6}, false, false},
                                         {Shape{2, 12, 7, 16}, Shape{2, 12, 9, 16}, false, true},
                                         {Shape{3, 130, 9}, Shape{1, 130, 260}, true, false}}) {
    SCOPED_TRACE(c.a.ToString() + " x " + c.b.ToString());
    ExpectDeviceMatchesReference(Op("BatchMatMul", {{"transpose_a", c.ta}, {"transpose_b", c.tb}}),
                                 {RandomTensor(F32Desc(c.a), rng), RandomTensor(F32Desc(c.b), rng)}, 1e-4f, 1e-4f);
  }
}

TEST(BatchMatMul, ShapeInference) {
  auto out = InferOne(Op("BatchMatMul"), {F32Desc(Shape{2, 1, 3, 4}), F32Desc(Shape{5, 4, 6})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape.ToString(), "[2, 5, 3, 6]");
  auto sym = InferOne(Op("BatchMatMul", {{"transpose_b", true}}),
                      {F32Desc(Sym({Dim::Static(12), Dim::Symbolic("seq"), Dim::Static(64)})),
                       F32Desc(Sym({Dim::Static(12), Dim::Symbolic("seq"), Dim::Static(64)}))});
  EXPECT_EQ(sym->shape.ToString(), "[12, seq, seq]");
  EXPECT_EQ(InferStatus(Op("BatchMatMul"), {F32Desc(Shape{2, 3, 4}), F32Desc(Shape{3, 4, 5})}).message(),
            "node 'n' (BatchMatMul): batch dims [2] of a [2, 3, 4] and [3] of b [3, 4, 5] do not broadcast");
  EXPECT_EQ(InferStatus(Op("BatchMatMul"), {F32Desc(Shape{3, 4}), F32Desc(Shape{1, 4, 5})}).message(),
            "node 'n' (BatchMatMul): needs a and b of rank >= 3, got [3, 4] and [1, 4, 5]");
  EXPECT_EQ(
      InferStatus(Op("BatchMatMul"), {F32Desc(Shape{2, 3, 4}), F32Desc(Shape{2, 5, 6})}).message(),
      "node 'n' (BatchMatMul): a [2, 3, 4] has K = 4 but b [2, 5, 6] has K = 5 (transpose_a = false, transpose_b = "
      "false)");
}

// ---- Softmax ----------------------------------------------------------------------------------------
TEST(Softmax, ReferenceHandComputedAndStable) {
  const float e1 = std::exp(1.f), e2 = std::exp(2.f), e3 = std::exp(3.f), s = e1 + e2 + e3;
  auto v = Floats(RefOut(Op("Softmax"), {F32(Shape{3}, {1, 2, 3})}));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_NEAR(v[0], e1 / s, 1e-6);
  EXPECT_NEAR(v[1], e2 / s, 1e-6);
  EXPECT_NEAR(v[2], e3 / s, 1e-6);
  // Large inputs: max subtracted first, so no overflow.
  auto big = Floats(RefOut(Op("Softmax"), {F32(Shape{2}, {1000, 1000})}));
  EXPECT_EQ(big, (std::vector<float>{0.5f, 0.5f}));
  // axis 0 of [2, 2]: columns.
  auto col = Floats(RefOut(Op("Softmax", {{"axis", std::int64_t{0}}}), {F32(Shape{2, 2}, {0, 5, 0, 5})}));
  EXPECT_EQ(col, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  auto dev = RunOpOnDevice(Op("Softmax"), {F32(Shape{2}, {1000, 1000})});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Floats((*dev)[0]), (std::vector<float>{0.5f, 0.5f}));
}

TEST(Softmax, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(4);
  struct Case {
    Shape s;
    std::int64_t axis;
  };
  for (const Case& c : std::vector<Case>{{Shape{1}, -1},
                                         {Shape{7, 13}, -1},
                                         {Shape{7, 13}, 0},
                                         {Shape{3, 5, 9}, 1},
                                         {Shape{4, 3, 1000}, -1},
                                         {Shape{2, 12, 33, 33}, 3}}) {
    SCOPED_TRACE(c.s.ToString() + " axis " + std::to_string(c.axis));
    ExpectDeviceMatchesReference(Op("Softmax", {{"axis", c.axis}}), {RandomTensor(F32Desc(c.s), rng, -5, 5)}, 1e-6f,
                                 1e-4f);
  }
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(dt));
    ExpectDeviceMatchesReference(Op("Softmax"), {RandomTensor(TensorDesc{dt, Shape{5, 77}}, rng, -5, 5)}, 1e-3f, 1e-2f);
  }
}

TEST(Softmax, AxisOutOfRangeIsAnError) {
  EXPECT_EQ(InferStatus(Op("Softmax", {{"axis", std::int64_t{2}}}), {F32Desc(Shape{2, 3})}).message(),
            "node 'n' (Softmax): axis 2 out of range for [2, 3] (rank 2)");
  EXPECT_TRUE(Contains(InferStatus(Op("Softmax"), {TensorDesc{DataType::kInt32, Shape{2}}}).message(), "float"));
}

// ---- ArgMax -----------------------------------------------------------------------------------------
std::vector<std::int32_t> Int32s(const Tensor& t) {
  std::vector<std::int32_t> v(t.data.size() / sizeof(std::int32_t));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(std::int32_t));
  return v;
}

TEST(ArgMax, FirstLargestIgnoringNaNAndMinusOneWhenNothingWins) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::vector<float> x;
    std::int32_t want;
  };
  // Lengths around the 8-lane pass: ties inside a lane, across lanes and in the tail.
  std::vector<float> ties(21, 1.f);
  ties[3] = ties[12] = ties[20] = 5.f;
  std::vector<float> tail(19, 0.f);
  tail[18] = 2.f;
  tail[2] = 2.f;
  std::vector<float> masked(17, -inf);
  masked[9] = nan;
  for (const Case& c : std::vector<Case>{{{1, 3, 2}, 1},
                                         {{nan, -1, -2}, 1},
                                         {{-inf, -inf}, -1},
                                         {{nan, nan}, -1},
                                         {{-inf, inf, inf}, 1},
                                         {ties, 3},
                                         {tail, 2},
                                         {masked, -1}}) {
    SCOPED_TRACE(::testing::PrintToString(c.x));
    const Tensor x = F32(Shape{static_cast<std::int64_t>(c.x.size())}, c.x);
    EXPECT_EQ(Int32s(RefOut(Op("ArgMax"), {x})), std::vector<std::int32_t>{c.want});
    auto dev = RunOpOnDevice(Op("ArgMax"), {x});
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_EQ(Int32s((*dev)[0]), std::vector<std::int32_t>{c.want});
  }
  // axis 0 of [2, 3]: per column.
  EXPECT_EQ(Int32s(RefOut(Op("ArgMax", {{"axis", std::int64_t{0}}}), {F32(Shape{2, 3}, {1, 5, 3, 2, 5, 0})})),
            (std::vector<std::int32_t>{1, 0, 0}));
  // The scalar scan (f16, and an axis not the last) keeps the same rules: columns of [4, 3] with
  // NaN, -inf, ties and a column of nothing but -inf and NaN.
  const Tensor cols = Cast(F32(Shape{4, 3}, {nan, -inf, 1, 2, nan, 1, nan, -inf, 3, 2, nan, 3}), DataType::kFloat16);
  const OpDesc axis0 = Op("ArgMax", {{"axis", std::int64_t{0}}});
  EXPECT_EQ(Int32s(RefOut(axis0, {cols})), (std::vector<std::int32_t>{1, -1, 2}));
  auto dev = RunOpOnDevice(axis0, {cols});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Int32s((*dev)[0]), (std::vector<std::int32_t>{1, -1, 2}));
  // An empty axis: nothing wins.
  const Tensor empty = F32(Shape{2, 0}, {});
  EXPECT_EQ(Int32s(RefOut(Op("ArgMax"), {empty})), (std::vector<std::int32_t>{-1, -1}));
  auto dev_empty = RunOpOnDevice(Op("ArgMax"), {empty});
  ASSERT_TRUE(dev_empty.ok()) << dev_empty.status();
  EXPECT_EQ(Int32s((*dev_empty)[0]), (std::vector<std::int32_t>{-1, -1}));
}

TEST(ArgMax, DeviceMatchesReferenceOnRandomShapesAndDtypes) {
  std::mt19937 rng(21);
  struct Case {
    Shape s;
    std::int64_t axis;
  };
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    for (const Case& c : std::vector<Case>{{Shape{1}, -1},
                                           {Shape{1, 50257}, -1},
                                           {Shape{7, 13}, -1},
                                           {Shape{7, 13}, 0},
                                           {Shape{3, 5, 9}, 1},
                                           {Shape{4, 3, 1000}, -1}}) {
      SCOPED_TRACE(std::string(DataTypeName(dt)) + " " + c.s.ToString() + " axis " + std::to_string(c.axis));
      // Few distinct values (rounded to a tenth): many ties, so the lowest-index rule is exercised.
      Tensor x = RandomTensor(TensorDesc{dt, c.s}, rng, -3, 3);
      const auto n = static_cast<std::size_t>(c.s.num_elements().value());
      for (std::size_t i = 0; i < n; ++i) StoreF(x, i, std::round(LoadF(x, i) * 10) / 10);
      ExpectDeviceMatchesReference(Op("ArgMax", {{"axis", c.axis}}), {x}, 0, 0);
    }
  }
}

TEST(ArgMax, ShapeAndDtypeErrorsNameTheNode) {
  auto out = InferOne(Op("ArgMax"), {F32Desc(Shape{2, 3, 5})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->ToString(), "i32[2, 3]");
  EXPECT_EQ(InferStatus(Op("ArgMax", {{"axis", std::int64_t{2}}}), {F32Desc(Shape{2, 3})}).message(),
            "node 'n' (ArgMax): axis 2 out of range for [2, 3] (rank 2)");
  EXPECT_TRUE(Contains(InferStatus(Op("ArgMax"), {TensorDesc{DataType::kInt32, Shape{2}}}).message(), "float"));
  EXPECT_TRUE(Contains(InferStatus(Op("ArgMax"), {F32Desc(Shape{})}).message(), "rank >= 1"));
  EXPECT_TRUE(InferStatus(Op("ArgMax"), {F32Desc(Shape{2, std::int64_t{1} << 31})}).ok());  // last index 2^31 - 1
  EXPECT_EQ(InferStatus(Op("ArgMax"), {F32Desc(Shape{2, (std::int64_t{1} << 31) + 1})}).message(),
            "node 'n' (ArgMax): axis 1 is 2147483649 long; an i32 index holds at most 2147483647");
}

// ---- LayerNorm --------------------------------------------------------------------------------------
TEST(LayerNorm, ReferenceHandComputed) {
  // mean 2.5, variance 1.25
  auto v = Floats(RefOut(Op("LayerNorm", {{"epsilon", 0.0}}),
                         {F32(Shape{1, 4}, {1, 2, 3, 4}), F32(Shape{4}, {1, 1, 2, 2}), F32(Shape{4}, {0, 0, 0, 1})}));
  const float inv = 1.f / std::sqrt(1.25f);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_NEAR(v[0], -1.5f * inv, 1e-6);
  EXPECT_NEAR(v[1], -0.5f * inv, 1e-6);
  EXPECT_NEAR(v[2], 2 * 0.5f * inv, 1e-6);
  EXPECT_NEAR(v[3], 2 * 1.5f * inv + 1, 1e-6);
  // Default epsilon 1e-5 keeps a constant row finite: all zeros.
  auto flat = Floats(RefOut(Op("LayerNorm"), {F32(Shape{2}, {3, 3}), F32(Shape{2}, {1, 1}), F32(Shape{2}, {0, 0})}));
  EXPECT_EQ(flat, (std::vector<float>{0, 0}));
}

TEST(LayerNorm, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(5);
  for (const Shape& s : {Shape{1}, Shape{3, 5}, Shape{2, 7, 768}, Shape{33, 100}}) {
    SCOPED_TRACE(s.ToString());
    const std::int64_t d = s.dim(s.rank() - 1).size;
    ExpectDeviceMatchesReference(Op("LayerNorm"),
                                 {RandomTensor(F32Desc(s), rng, -3, 3), RandomTensor(F32Desc(Shape{d}), rng),
                                  RandomTensor(F32Desc(Shape{d}), rng)},
                                 1e-5f, 1e-4f);
  }
  const TensorDesc half{DataType::kBFloat16, Shape{6, 40}}, vec{DataType::kBFloat16, Shape{40}};
  ExpectDeviceMatchesReference(Op("LayerNorm", {{"epsilon", 1e-3}}),
                               {RandomTensor(half, rng), RandomTensor(vec, rng), RandomTensor(vec, rng)}, 2e-2f, 1e-2f);
}

TEST(LayerNorm, GammaOfTheWrongShapeIsAnError) {
  EXPECT_EQ(InferStatus(Op("LayerNorm"), {F32Desc(Shape{2, 4}), F32Desc(Shape{5}), F32Desc(Shape{4})}).message(),
            "node 'n' (LayerNorm): gamma [5] does not match the last dim 4 of x [2, 4]");
  auto sym = InferOne(Op("LayerNorm"), {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(768)})), F32Desc(Shape{768}),
                                        F32Desc(Shape{768})});
  EXPECT_EQ(sym->shape.ToString(), "[seq, 768]");
}

// ---- Gather -----------------------------------------------------------------------------------------
TEST(Gather, ReferenceGathersRowsAndColumns) {
  const Tensor table = F32(Shape{3, 2}, {0, 1, 10, 11, 20, 21});
  auto rows = RunOpReference(Op("Gather"), {table, I32(Shape{2}, {2, 0})});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[0].desc.shape.ToString(), "[2, 2]");
  EXPECT_EQ(Floats((*rows)[0]), (std::vector<float>{20, 21, 0, 1}));
  auto cols = RunOpReference(Op("Gather", {{"axis", std::int64_t{1}}}), {table, I64(Shape{1, 3}, {1, 1, 0})});
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_EQ((*cols)[0].desc.shape.ToString(), "[3, 1, 3]");
  EXPECT_EQ(Floats((*cols)[0]), (std::vector<float>{1, 1, 0, 11, 11, 10, 21, 21, 20}));
  auto dev = RunOpOnDevice(Op("Gather"), {table, I32(Shape{2}, {2, 0})});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Floats((*dev)[0]), (std::vector<float>{20, 21, 0, 1}));
}

TEST(Gather, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(6);
  struct Case {
    Shape params;
    Shape indices;
    DataType index_type;
    std::int64_t axis;
    DataType dtype;
  };
  for (const Case& c : std::vector<Case>{{Shape{50, 16}, Shape{7}, DataType::kInt32, 0, DataType::kFloat32},
                                         {Shape{50, 16}, Shape{2, 9}, DataType::kInt64, 0, DataType::kFloat16},
                                         {Shape{4, 11, 5}, Shape{13}, DataType::kInt32, 1, DataType::kFloat32},
                                         {Shape{4, 11, 5}, Shape{3}, DataType::kInt64, -1, DataType::kInt32},
                                         {Shape{1000, 64}, Shape{1}, DataType::kInt32, 0, DataType::kBFloat16}}) {
    SCOPED_TRACE(c.params.ToString() + " axis " + std::to_string(c.axis));
    const std::int64_t rank = static_cast<std::int64_t>(c.params.rank());
    const std::int64_t bound = c.params.dim(static_cast<std::size_t>(c.axis < 0 ? c.axis + rank : c.axis)).size;
    Tensor indices = RandomTensor(TensorDesc{c.index_type, c.indices}, rng, 0, static_cast<float>(bound));
    ExpectDeviceMatchesReference(Op("Gather", {{"axis", c.axis}}),
                                 {RandomTensor(TensorDesc{c.dtype, c.params}, rng, -100, 100), indices}, 0, 0);
  }
}

TEST(Gather, OutOfRangeIndexIsAnErrorFromReferenceAndDevice) {
  const Tensor table = F32(Shape{3, 2}, {0, 1, 10, 11, 20, 21});
  for (const Tensor& idx : {I32(Shape{3}, {0, 3, 1}), I32(Shape{1}, {-1}), I32(Shape{4}, {0, 1, 2, 5})}) {
    auto ref = RunOpReference(Op("Gather"), {table, idx});
    ASSERT_FALSE(ref.ok());
    EXPECT_EQ(ref.status().code(), StatusCode::kParamInvalid);
    for (std::uint32_t block_dim : {1u, 3u}) {
      auto dev = RunOpOnDevice(Op("Gather"), {table, idx}, DeviceRunOptions{.block_dim = block_dim});
      ASSERT_FALSE(dev.ok());
      EXPECT_TRUE(Contains(dev.status().message(), "out of range [0, 3) on axis 0")) << dev.status();
    }
  }
  auto ref = RunOpReference(Op("Gather"), {table, I32(Shape{3}, {0, 3, 1})});
  EXPECT_EQ(ref.status().message(), "node 'n' (Gather): index 3 out of range [0, 3) on axis 0");
  auto dev = RunOpOnDevice(Op("Gather"), {table, I32(Shape{1}, {7})});
  EXPECT_TRUE(Contains(dev.status().message(), "op.Gather: index 7 out of range [0, 3) on axis 0")) << dev.status();
  EXPECT_EQ(InferStatus(Op("Gather"), {F32Desc(Shape{3, 2}), F32Desc(Shape{2})}).message(),
            "node 'n' (Gather): indices must be i32 or i64, got f32[2]");
  auto sym =
      InferOne(Op("Gather"), {F32Desc(Shape{50257, 768}), TensorDesc{DataType::kInt32, Sym({Dim::Symbolic("seq")})}});
  EXPECT_EQ(sym->ToString(), "f32[seq, 768]");
}

// ---- Attention --------------------------------------------------------------------------------------
// D = 1, scale 1: q = 1 and keys 0, ln 2, ln 3 give weights 1 : 2 : 3 over values 1, 2, 3; cache
// row 3 is garbage the causal mask must hide.
struct TinyAttention {
  Tensor k = F32(Shape{1, 4, 1}, {0, std::log(2.f), std::log(3.f), 50});
  Tensor v = F32(Shape{1, 4, 1}, {1, 2, 3, 100});
  OpDesc op = Op("Attention", {{"scale", 1.0}});
};

TEST(Attention, ReferenceCausalHandComputed) {
  TinyAttention a;
  // T = 3, valid_len 3: row t sees rows 0..t.
  auto three = Floats(RefOut(a.op, {F32(Shape{1, 3, 1}, {1, 1, 1}), a.k, a.v, I32(Shape{1}, {3})}));
  ASSERT_EQ(three.size(), 3u);
  EXPECT_NEAR(three[0], 1.f, 1e-6);
  EXPECT_NEAR(three[1], 5.f / 3, 1e-6);
  EXPECT_NEAR(three[2], 14.f / 6, 1e-6);
  // T = 1 at valid_len 3: the new row is position 2 and sees rows 0..2.
  auto one = Floats(RefOut(a.op, {F32(Shape{1, 1, 1}, {1}), a.k, a.v, I32(Shape{1}, {3})}));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NEAR(one[0], 14.f / 6, 1e-6);
  // T = 1 at valid_len 2: rows 0..1.
  auto two = Floats(RefOut(a.op, {F32(Shape{1, 1, 1}, {1}), a.k, a.v, I32(Shape{1}, {2})}));
  EXPECT_NEAR(two[0], 5.f / 3, 1e-6);
  for (std::uint32_t block_dim : {1u, 2u, 3u}) {
    auto dev = RunOpOnDevice(a.op, {F32(Shape{1, 3, 1}, {1, 1, 1}), a.k, a.v, I32(Shape{1}, {3})},
                             DeviceRunOptions{.block_dim = block_dim});
    ASSERT_TRUE(dev.ok()) << dev.status();
    auto d = Floats((*dev)[0]);
    EXPECT_NEAR(d[0], 1.f, 1e-6);
    EXPECT_NEAR(d[1], 5.f / 3, 1e-6);
    EXPECT_NEAR(d[2], 14.f / 6, 1e-6);
  }
}

TEST(Attention, DefaultScaleIsOneOverSqrtD) {
  // D = 4, q = (1, 1, 1, 1), k0 = 0, k1 = (1, 1, 1, 1) * ln 2: score of k1 = 4 ln 2 / sqrt 4 = ln 4.
  const float l2 = std::log(2.f);
  auto out = Floats(
      RefOut(Op("Attention"), {F32(Shape{1, 1, 4}, {1, 1, 1, 1}), F32(Shape{1, 2, 4}, {0, 0, 0, 0, l2, l2, l2, l2}),
                               F32(Shape{1, 2, 4}, {0, 0, 0, 0, 5, 5, 5, 5}), I32(Shape{1}, {2})}));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0], 4.f, 1e-5);  // weights 1 : 4 over values 0 and 5
}

TEST(Attention, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(7);
  struct Case {
    Shape q;
    std::int64_t s_max, valid;
  };
  for (const Case& c : std::vector<Case>{{Shape{1, 1, 8}, 16, 1},
                                         {Shape{3, 1, 16}, 40, 17},
                                         {Shape{2, 5, 16}, 40, 40},
                                         {Shape{2, 3, 7, 8}, 20, 9},
                                         {Shape{2, 64, 32}, 300, 200},
                                         {Shape{1, 2, 64}, 1100, 1100}}) {
    SCOPED_TRACE(c.q.ToString() + " valid_len " + std::to_string(c.valid));
    std::vector<Dim> cache_dims = c.q.dims();
    cache_dims[cache_dims.size() - 2] = Dim::Static(c.s_max);
    const Shape cache(cache_dims);
    ExpectDeviceMatchesReference(
        Op("Attention"),
        {RandomTensor(F32Desc(c.q), rng, -2, 2), RandomTensor(F32Desc(cache), rng, -2, 2),
         RandomTensor(F32Desc(cache), rng), I32(Shape{1}, {static_cast<std::int32_t>(c.valid)})},
        1e-5f, 1e-4f);
  }
  const TensorDesc q{DataType::kFloat16, Shape{2, 4, 16}}, cache{DataType::kFloat16, Shape{2, 30, 16}};
  ExpectDeviceMatchesReference(
      Op("Attention"), {RandomTensor(q, rng), RandomTensor(cache, rng), RandomTensor(cache, rng), I32(Shape{1}, {25})},
      2e-3f, 1e-2f);
}

TEST(Attention, EveryTilingKeyAndBlockDimGivesTheSameResult) {
  // valid_len 2000 spans 16 chunks at key 0, 2 at key 1 and one at key 2.
  std::mt19937 rng(8);
  const Shape q{2, 3, 16}, cache{2, 2048, 16};
  const std::vector<Tensor> in = {RandomTensor(F32Desc(q), rng), RandomTensor(F32Desc(cache), rng),
                                  RandomTensor(F32Desc(cache), rng), I32(Shape{1}, {2000})};
  auto ref = RunOpReference(Op("Attention"), in);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (std::uint64_t key : {0u, 1u, 2u}) {
    std::optional<Tensor> first;
    for (std::uint32_t block_dim : {1u, 4u, 7u}) {
      SCOPED_TRACE(::testing::Message() << "key " << key << " block_dim " << block_dim);
      auto dev = RunWithTilingKey(Op("Attention"), in, block_dim, key);
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_TRUE(TensorsNear(*dev, (*ref)[0], 1e-5f, 1e-4f));
      if (!first) first = *dev;
      EXPECT_TRUE(*dev == *first);
    }
  }
  auto bad = RunWithTilingKey(Op("Attention"), in, 1, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "unknown tiling key 3")) << bad.status();
}

TEST(Attention, TilingDependsOnValidLen) {
  RegisterBuiltinOps();
  const OpDef* def = OpRegistry::Global().Find("Attention").value();
  const std::vector<TensorDesc> in = {F32Desc(Shape{12, 1, 64}), F32Desc(Shape{12, 2048, 64}),
                                      F32Desc(Shape{12, 2048, 64}), TensorDesc{DataType::kInt32, Shape{1}}};
  struct Case {
    std::optional<std::int32_t> valid;
    std::uint32_t block_dim;
    std::uint64_t key;
  };
  for (const Case& c : std::vector<Case>{
           {100, 12, 0}, {128, 12, 0}, {129, 12, 1}, {1024, 12, 1}, {1025, 12, 2}, {std::nullopt, 12, 2}}) {
    SCOPED_TRACE(c.valid ? std::to_string(*c.valid) : std::string("unknown"));
    const Tensor v = I32(Shape{1}, {c.valid.value_or(0)});
    std::vector<const Tensor*> depend;
    if (c.valid) depend.push_back(&v);
    auto t = def->tiling(Op("Attention"), in, depend, 24);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->block_dim, c.block_dim);  // one query row per head: at most B * H * T blocks
    EXPECT_EQ(t->tiling_key, c.key);
  }
  // Prefill: T = 64 rows per head; blocks grow with valid_len up to the cores.
  const std::vector<TensorDesc> prefill = {F32Desc(Shape{2, 64, 64}), F32Desc(Shape{2, 2048, 64}),
                                           F32Desc(Shape{2, 2048, 64}), TensorDesc{DataType::kInt32, Shape{1}}};
  const Tensor short_len = I32(Shape{1}, {64}), long_len = I32(Shape{1}, {1500});
  EXPECT_EQ(def->tiling(Op("Attention"), prefill, {&short_len}, 24)->block_dim, 2u);
  EXPECT_EQ(def->tiling(Op("Attention"), prefill, {&long_len}, 24)->block_dim, 24u);
  EXPECT_EQ(def->tiling(Op("Attention"), prefill, {&long_len}, 8)->block_dim, 8u);
}

TEST(Attention, ValidLenOutOfRangeIsAnErrorFromReferenceAndDevice) {
  TinyAttention a;
  const Tensor q = F32(Shape{1, 3, 1}, {1, 1, 1});
  auto over_ref = RunOpReference(a.op, {q, a.k, a.v, I32(Shape{1}, {5})});
  EXPECT_EQ(over_ref.status().message(), "node 'n' (Attention): valid_len 5 exceeds the cache length S_max = 4");
  auto under_ref = RunOpReference(a.op, {q, a.k, a.v, I32(Shape{1}, {2})});
  EXPECT_EQ(under_ref.status().message(), "node 'n' (Attention): valid_len 2 is less than the 3 query rows");
  for (std::uint32_t block_dim : {1u, 3u}) {
    auto over = RunOpOnDevice(a.op, {q, a.k, a.v, I32(Shape{1}, {5})}, DeviceRunOptions{.block_dim = block_dim});
    ASSERT_FALSE(over.ok());
    EXPECT_TRUE(Contains(over.status().message(), "op.Attention: valid_len 5 exceeds the cache length S_max = 4"))
        << over.status();
    auto under = RunOpOnDevice(a.op, {q, a.k, a.v, I32(Shape{1}, {2})}, DeviceRunOptions{.block_dim = block_dim});
    ASSERT_FALSE(under.ok());
    EXPECT_TRUE(Contains(under.status().message(), "valid_len 2 is less than the 3 query rows")) << under.status();
  }
}

TEST(Attention, ShapeInferenceErrors) {
  const TensorDesc len{DataType::kInt32, Shape{1}};
  auto sym = InferOne(Op("Attention"), {F32Desc(Sym({Dim::Static(12), Dim::Symbolic("seq"), Dim::Static(64)})),
                                        F32Desc(Shape{12, 1024, 64}), F32Desc(Shape{12, 1024, 64}), len});
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_EQ(sym->shape.ToString(), "[12, seq, 64]");
  EXPECT_EQ(
      InferStatus(Op("Attention"),
                  {F32Desc(Shape{12, 1, 64}), F32Desc(Shape{8, 16, 64}), F32Desc(Shape{8, 16, 64}), len})
          .message(),
      "node 'n' (Attention): q [12, 1, 64] does not match k_cache [8, 16, 64] (all dims but the rows must agree)");
  EXPECT_EQ(
      InferStatus(Op("Attention"), {F32Desc(Shape{2, 1, 4}), F32Desc(Shape{2, 8, 4}), F32Desc(Shape{2, 9, 4}), len})
          .message(),
      "node 'n' (Attention): k_cache [2, 8, 4] and v_cache [2, 9, 4] differ");
  EXPECT_EQ(InferStatus(Op("Attention"), {F32Desc(Shape{2, 1, 4}), F32Desc(Shape{2, 8, 4}), F32Desc(Shape{2, 8, 4}),
                                          TensorDesc{DataType::kInt64, Shape{1}}})
                .message(),
            "node 'n' (Attention): valid_len must be i32[1], got i64[1]");
  EXPECT_EQ(
      InferStatus(Op("Attention"), {F32Desc(Shape{2, 9, 4}), F32Desc(Shape{2, 8, 4}), F32Desc(Shape{2, 8, 4}), len})
          .message(),
      "node 'n' (Attention): q [2, 9, 4] has 9 rows, more than the 8 rows of k_cache [2, 8, 4]");
}

// ---- KvCacheWrite -----------------------------------------------------------------------------------
TEST(KvCacheWrite, WritesRowsAtPositionInPlaceOrNot) {
  // cache [1, 5, 2] rows r = (r, r); two new rows at position 2.
  const Tensor cache = F32(Shape{1, 5, 2}, {0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
  const Tensor rows = F32(Shape{1, 2, 2}, {-1, -2, -3, -4});
  const std::vector<float> want = {0, 0, 1, 1, -1, -2, -3, -4, 4, 4};
  const OpDesc op = Op("KvCacheWrite");
  EXPECT_EQ(Floats(RefOut(op, {cache, rows, I32(Shape{1}, {2})})), want);
  for (bool inplace : {false, true}) {
    for (std::optional<std::uint32_t> block_dim :
         {std::optional<std::uint32_t>(), std::optional<std::uint32_t>(1u), std::optional<std::uint32_t>(3u),
          std::optional<std::uint32_t>(7u)}) {
      SCOPED_TRACE(::testing::Message() << "inplace " << inplace << " block_dim " << block_dim.value_or(0));
      auto dev = RunOpOnDevice(op, {cache, rows, I32(Shape{1}, {2})},
                               DeviceRunOptions{.block_dim = block_dim, .inplace = inplace});
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_EQ(Floats((*dev)[0]), want);
    }
  }
}

TEST(KvCacheWrite, DeviceMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(9);
  struct Case {
    Shape cache;
    std::int64_t t, pos;
    DataType dtype;
  };
  for (const Case& c : std::vector<Case>{{Shape{3, 10, 8}, 1, 0, DataType::kFloat32},
                                         {Shape{3, 10, 8}, 4, 6, DataType::kFloat16},
                                         {Shape{2, 3, 17, 5}, 7, 3, DataType::kFloat32},
                                         {Shape{12, 64, 64}, 64, 0, DataType::kBFloat16}}) {
    SCOPED_TRACE(c.cache.ToString() + " t " + std::to_string(c.t) + " at " + std::to_string(c.pos));
    std::vector<Dim> row_dims = c.cache.dims();
    row_dims[row_dims.size() - 2] = Dim::Static(c.t);
    const std::vector<Tensor> in = {RandomTensor(TensorDesc{c.dtype, c.cache}, rng),
                                    RandomTensor(TensorDesc{c.dtype, Shape(row_dims)}, rng),
                                    I32(Shape{1}, {static_cast<std::int32_t>(c.pos)})};
    ExpectDeviceMatchesReference(Op("KvCacheWrite"), in, 0, 0);
    auto ref = RunOpReference(Op("KvCacheWrite"), in);
    for (std::uint32_t block_dim : {1u, 3u, 7u}) {
      auto dev = RunOpOnDevice(Op("KvCacheWrite"), in, DeviceRunOptions{.block_dim = block_dim, .inplace = true});
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_TRUE((*dev)[0] == (*ref)[0]);
    }
  }
}

TEST(KvCacheWrite, OverflowIsAnErrorFromReferenceAndDevice) {
  const Tensor cache = F32(Shape{1, 5, 2}, std::vector<float>(10, 0));
  const Tensor rows = F32(Shape{1, 2, 2}, {1, 2, 3, 4});
  const OpDesc op = Op("KvCacheWrite");
  EXPECT_EQ(RunOpReference(op, {cache, rows, I32(Shape{1}, {4})}).status().message(),
            "node 'n' (KvCacheWrite): position 4 + 2 new rows does not fit the cache length 5");
  EXPECT_EQ(RunOpReference(op, {cache, rows, I32(Shape{1}, {-1})}).status().message(),
            "node 'n' (KvCacheWrite): position -1 + 2 new rows does not fit the cache length 5");
  for (bool inplace : {false, true}) {
    for (std::int32_t pos : {4, -1}) {
      auto dev = RunOpOnDevice(op, {cache, rows, I32(Shape{1}, {pos})}, DeviceRunOptions{.inplace = inplace});
      ASSERT_FALSE(dev.ok());
      EXPECT_TRUE(Contains(dev.status().message(), "op.KvCacheWrite: position " + std::to_string(pos) +
                                                       " + 2 new rows does not fit the cache length 5"))
          << dev.status();
    }
  }
  EXPECT_EQ(
      InferStatus(op, {F32Desc(Shape{2, 5, 4}), F32Desc(Shape{2, 1, 3}), TensorDesc{DataType::kInt32, Shape{1}}})
          .message(),
      "node 'n' (KvCacheWrite): new_rows [2, 1, 3] does not match cache [2, 5, 4] (all dims but the rows must agree)");
  EXPECT_EQ(InferStatus(op, {F32Desc(Shape{2, 5, 4}), TensorDesc{DataType::kFloat16, Shape{2, 1, 4}},
                             TensorDesc{DataType::kInt32, Shape{1}}})
                .message(),
            "node 'n' (KvCacheWrite): cache and new_rows dtypes differ: f32 and f16");
}

}  // namespace
}  // namespace npuflow::graph
