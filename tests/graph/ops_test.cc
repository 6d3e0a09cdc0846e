// The op registry and the first ops: shape inference (with broadcasting and symbolic dims),
// reference kernels, tiling, f16/bf16 storage.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "tests/graph/tensors.h"

#include "graph/ir/half.h"
#include "graph/ops/op_registry.h"

namespace npuflow::graph {
namespace {



// Infers, allocates and runs the reference kernel of `type` on `inputs`.
StatusOr<Tensor> RunOp(std::string_view type, std::vector<Tensor> inputs) {
  RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  OpDesc op("n", std::string(type));
  std::vector<TensorDesc> in_desc;
  std::vector<const Tensor*> in_ptr;
  for (const Tensor& t : inputs) {
    in_desc.push_back(t.desc);
    in_ptr.push_back(&t);
  }
  std::vector<TensorDesc> out_desc;
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, in_desc, out_desc));
  std::vector<Tensor> out;
  for (const TensorDesc& d : out_desc) out.push_back(Tensor{d, std::vector<std::uint8_t>(d.bytes().value())});
  NPUFLOW_RETURN_IF_ERROR(def->reference(op, in_ptr, out));
  return out[0];
}

TEST(Broadcast, NumpyRulesWithSymbolicDims) {
  EXPECT_EQ(BroadcastShapes(Shape{2, 3}, Shape{3}, "n")->ToString(), "[2, 3]");
  EXPECT_EQ(BroadcastShapes(Shape{2, 1}, Shape{1, 4}, "n")->ToString(), "[2, 4]");
  Shape seq({Dim::Symbolic("seq"), Dim::Static(768)});
  EXPECT_EQ(BroadcastShapes(seq, Shape{768}, "n")->ToString(), "[seq, 768]");
  EXPECT_EQ(BroadcastShapes(Shape({Dim::Symbolic("seq"), Dim::Static(1)}), Shape({Dim::Static(1), Dim::Symbolic("seq")}),
                            "n")->ToString(),
            "[seq, seq]");
  auto bad = BroadcastShapes(Shape{2, 3}, Shape{4, 3}, "sum");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "node 'sum': shapes [2, 3] and [4, 3] do not broadcast");
  EXPECT_FALSE(BroadcastShapes(Shape({Dim::Symbolic("a")}), Shape({Dim::Symbolic("b")}), "n").ok());
}

TEST(Ops, ShapeInferenceErrorsNameTheNode) {
  RegisterBuiltinOps();
  const OpDef* add = OpRegistry::Global().Find("Add").value();
  std::vector<TensorDesc> out;
  OpDesc op("sum", "Add");
  Status few = InferOutputs(*add, op, {TensorDesc{}}, out);
  EXPECT_EQ(few.message(), "node 'sum' (Add): 1 inputs, expected 2");
  Status mixed = InferOutputs(*add, op, {TensorDesc{DataType::kFloat32, Shape{2}}, TensorDesc{DataType::kFloat16, Shape{2}}}, out);
  EXPECT_EQ(mixed.message(), "node 'sum' (Add): input dtypes differ: f32 and f16");
  const OpDef* data = OpRegistry::Global().Find("Data").value();
  EXPECT_EQ(InferOutputs(*data, OpDesc("x", "Data"), {}, out).message(), "node 'x' (Data): missing attribute 'dtype'");
  const OpDef* relu = OpRegistry::Global().Find("Relu").value();
  EXPECT_NE(InferOutputs(*relu, OpDesc("r", "Relu"), {TensorDesc{DataType::kInt32, Shape{2}}}, out).message().find("float"),
            std::string_view::npos);
  EXPECT_EQ(OpRegistry::Global().Find("Frobnicate").status().message(), "unknown op type 'Frobnicate'");
}

TEST(Ops, BinaryReferenceKernelsBroadcast) {
  auto sum = RunOp("Add", {F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6}), F32(Shape{3}, {10, 20, 30})});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->desc.shape.ToString(), "[2, 3]");
  EXPECT_EQ(Floats(*sum), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  auto col = RunOp("Mul", {F32(Shape{2, 1}, {2, 3}), F32(Shape{1, 3}, {1, 10, 100})});
  EXPECT_EQ(Floats(*col), (std::vector<float>{2, 20, 200, 3, 30, 300}));
  auto scalar = RunOp("Sub", {F32(Shape{3}, {1, 2, 3}), F32(Shape{}, {1})});
  EXPECT_EQ(Floats(*scalar), (std::vector<float>{0, 1, 2}));
  auto div = RunOp("Div", {F32(Shape{2}, {1, 3}), F32(Shape{2}, {2, 4})});
  EXPECT_EQ(Floats(*div), (std::vector<float>{0.5f, 0.75f}));
}

TEST(Ops, IntegerDivisionByZeroIsAnError) {
  Tensor a{TensorDesc{DataType::kInt32, Shape{1}}, std::vector<std::uint8_t>(4, 0)};
  Tensor b = a;
  auto r = RunOp("Div", {a, b});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("division by zero"), std::string_view::npos);
}

Tensor I32(std::vector<std::int32_t> values) {
  Tensor t{TensorDesc{DataType::kInt32, Shape{static_cast<std::int64_t>(values.size())}}, {}};
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

std::vector<std::int32_t> Ints(const Tensor& t) {
  std::vector<std::int32_t> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

TEST(Ops, IntegerArithmeticIsExactAndWraps) {
  constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(Ints(*RunOp("Add", {I32({16777217, kMax}), I32({2, 1})})), (std::vector<std::int32_t>{16777219, kMin}));
  EXPECT_EQ(Ints(*RunOp("Mul", {I32({16777217, 65536}), I32({3, 65536})})), (std::vector<std::int32_t>{50331651, 0}));
  EXPECT_EQ(Ints(*RunOp("Div", {I32({-7, kMin, 7}), I32({2, -1, -2})})), (std::vector<std::int32_t>{-3, kMin, -3}));
  EXPECT_EQ(Ints(*RunOp("Sub", {I32({kMin}), I32({1})})), (std::vector<std::int32_t>{kMax}));
}

TEST(Ops, UnaryReferenceKernels) {
  auto relu = RunOp("Relu", {F32(Shape{3}, {-1, 0, 2})});
  EXPECT_EQ(Floats(*relu), (std::vector<float>{0, 0, 2}));
  auto gelu = RunOp("Gelu", {F32(Shape{2}, {1, -1})});
  EXPECT_NEAR(Floats(*gelu)[0], 0.841192f, 1e-5);   // tanh approximation at 1
  EXPECT_NEAR(Floats(*gelu)[1], -0.158808f, 1e-5);
  auto tanh = RunOp("Tanh", {F32(Shape{1}, {0.5f})});
  EXPECT_NEAR(Floats(*tanh)[0], std::tanh(0.5f), 1e-7);
}

TEST(Ops, F16StorageAccumulatesInF32) {
  Tensor a{TensorDesc{DataType::kFloat16, Shape{2}}, std::vector<std::uint8_t>(4)};
  std::uint16_t h[2] = {FloatToHalf(1.5f), FloatToHalf(-2.25f)};
  std::memcpy(a.data.data(), h, 4);
  auto sum = RunOp("Add", {a, a});
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::uint16_t r[2];
  std::memcpy(r, sum->data.data(), 4);
  EXPECT_EQ(HalfToFloat(r[0]), 3.f);
  EXPECT_EQ(HalfToFloat(r[1]), -4.5f);
}

TEST(Half, EveryF16RoundTripsAndRoundingIsToNearestEven) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7C00u) == 0x7C00u && (bits & 0x3FFu)) continue;  // nan
    ASSERT_EQ(FloatToHalf(HalfToFloat(bits)), bits) << std::hex << h;
  }
  EXPECT_EQ(FloatToHalf(65520.f), 0x7C00u);          // rounds to inf
  EXPECT_EQ(FloatToHalf(1.f + 1.f / 2048), 0x3C00u); // halfway, to even
  EXPECT_EQ(FloatToHalf(5.96046448e-08f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(3.140625f)), 3.140625f);
}

TEST(Ops, ElementwiseTilingUsesOneBlockPer4096ElementsUpToTheCores) {
  RegisterBuiltinOps();
  const OpDef* add = OpRegistry::Global().Find("Add").value();
  OpDesc op("sum", "Add");
  auto t = add->tiling(op, {TensorDesc{DataType::kFloat32, Shape{10000}}}, {}, 24);
  EXPECT_EQ(t->block_dim, 3u);
  EXPECT_EQ(add->tiling(op, {TensorDesc{DataType::kFloat32, Shape{1 << 24}}}, {}, 24)->block_dim, 24u);
  auto dynamic = add->tiling(op, {TensorDesc{DataType::kFloat32, Shape({Dim::Symbolic("n")})}}, {}, 24);
  EXPECT_NE(dynamic.status().message().find("static shapes"), std::string_view::npos);
}

// The block-split cost model: a block must do at least its dispatch's worth of work.
TEST(Ops, CapBlocksKeepsABlocksWorkAboveItsDispatchCost) {
  const BlockCosts costs{.dispatch_ns = 400, .bytes_per_ns = 10, .flops_per_ns = 40};
  EXPECT_EQ(CapBlocks(24, {.bytes = 1e9}, costs), 24u);            // 100 ms of reading: every core
  EXPECT_EQ(CapBlocks(24, {.bytes = 40'000}, costs), 10u);         // 4 us: ten blocks of 400 ns
  EXPECT_EQ(CapBlocks(24, {.bytes = 1'000}, costs), 1u);           // 100 ns: one block
  EXPECT_EQ(CapBlocks(24, {.bytes = 0, .flops = 160'000}, costs), 10u);  // 4 us of arithmetic
  EXPECT_EQ(CapBlocks(24, {.bytes = 40'000, .flops = 1.6e9}, costs), 24u);  // the larger of the two
  EXPECT_EQ(CapBlocks(24, {.bytes = 1'000}, BlockCosts{}), 24u);   // no cost model: as tiled
  EXPECT_EQ(CapBlocks(0, {.bytes = 1'000}, costs), 1u);
  EXPECT_EQ(CapBlocks(24, {.bytes = std::numeric_limits<double>::infinity()}, costs), 24u);
  EXPECT_EQ(CapBlocks(24, {.bytes = std::nan("")}, costs), 24u);
  // Work at a rate the model lacks cannot be priced: the split stays.
  EXPECT_EQ(CapBlocks(24, {.bytes = 1'000}, {.dispatch_ns = 400, .bytes_per_ns = 0, .flops_per_ns = 40}), 24u);
}

TEST(Ops, TileOpCapsTheTilingsSplitByTheTargetsCosts) {
  RegisterBuiltinOps();
  const OpDef* add = OpRegistry::Global().Find("Add").value();
  const OpDesc op("sum", "Add");
  const std::vector<TensorDesc> in = {TensorDesc{DataType::kFloat32, Shape{10000}},
                                      TensorDesc{DataType::kFloat32, Shape{10000}}};
  // 80 KB read, 40 KB written: 12 us at 10 GB/s, so the tiling's 3 blocks stand at 400 ns a block.
  TileTarget target{.core_count = 24, .costs = {.dispatch_ns = 400, .bytes_per_ns = 10, .flops_per_ns = 40}};
  EXPECT_EQ(TileOp(*add, op, in, {}, target)->block_dim, 3u);
  target.costs.dispatch_ns = 6000;  // a dispatch as dear as half the work: two blocks
  EXPECT_EQ(TileOp(*add, op, in, {}, target)->block_dim, 2u);
  target.costs.dispatch_ns = 100'000;
  EXPECT_EQ(TileOp(*add, op, in, {}, target)->block_dim, 1u);
  EXPECT_EQ(TileOp(*add, op, in, {}, TileTarget{.core_count = 24})->block_dim, 3u);
  // A GEMV of 512 x 4096 f32 (8 MB of weights, two blocks of 2048 columns: 4 on 4 cores).
  const OpDef* mm = OpRegistry::Global().Find("MatMul").value();
  OpDesc gemv("fc", "MatMul");
  const std::vector<TensorDesc> gin = {TensorDesc{DataType::kFloat32, Shape{1, 512}},
                                       TensorDesc{DataType::kFloat32, Shape{512, 4096}}};
  target.costs.dispatch_ns = 400;
  const std::uint32_t tiled = mm->tiling(gemv, gin, {}, 24)->block_dim;
  EXPECT_EQ(TileOp(*mm, gemv, gin, {}, target)->block_dim, tiled);
  target.costs.dispatch_ns = 300'000;  // 839 us of reading pays for two 300 us dispatches
  EXPECT_EQ(TileOp(*mm, gemv, gin, {}, target)->block_dim, 2u);
  target.costs.dispatch_ns = 250'000;  // three blocks paid for; the tiling's even split stays even
  EXPECT_EQ(TileOp(*mm, gemv, gin, {}, target)->block_dim, 2u);
  // A broadcast's work is its output's: [512, 1] + [1, 512] reads 4 KB and writes 1 MB.
  target.costs.dispatch_ns = 400;
  const std::vector<TensorDesc> bcast = {TensorDesc{DataType::kFloat32, Shape{512, 1}},
                                         TensorDesc{DataType::kFloat32, Shape{1, 512}}};
  EXPECT_EQ(TileOp(*add, op, bcast, {}, target)->block_dim, add->tiling(op, bcast, {}, 24)->block_dim);
  // Errors are the tiling's own, unchanged.
  auto dynamic = TileOp(*add, op, {TensorDesc{DataType::kFloat32, Shape({Dim::Symbolic("n")})}}, {}, target);
  EXPECT_NE(dynamic.status().message().find("static shapes"), std::string_view::npos);
  // An op without a tiling function: one block.
  OpDef untiled = *add;
  untiled.tiling = nullptr;
  EXPECT_EQ(TileOp(untiled, op, in, {}, target)->block_dim, 1u);
}

// Attention's work follows valid_len: a short context is not split into blocks it cannot pay for.
TEST(Ops, AttentionsWorkFollowsTheValidLength) {
  RegisterBuiltinOps();
  const OpDef* att = OpRegistry::Global().Find("Attention").value();
  ASSERT_NE(att->work, nullptr);
  const std::vector<TensorDesc> in = {{DataType::kFloat32, Shape{12, 1, 64}},
                                      {DataType::kFloat32, Shape{12, 1024, 64}},
                                      {DataType::kFloat32, Shape{12, 1024, 64}},
                                      {DataType::kInt32, Shape{1}}};
  Tensor len{in[3], std::vector<std::uint8_t>(4)};
  const std::int32_t one = 1;
  std::memcpy(len.data.data(), &one, 4);
  const OpWork short_work = att->work(OpDesc("a", "Attention"), in, {&len});
  const OpWork full_work = att->work(OpDesc("a", "Attention"), in, {});
  EXPECT_DOUBLE_EQ(short_work.bytes, 4.0 * (2 * 12 * 64 + 2 * 12 * 64));
  EXPECT_DOUBLE_EQ(full_work.bytes, 4.0 * (2 * 12 * 64 + 2 * 12 * 1024 * 64));
  EXPECT_DOUBLE_EQ(full_work.flops, 4.0 * 12 * 64 * 1024);
  const TileTarget target{.core_count = 24, .costs = {.dispatch_ns = 400, .bytes_per_ns = 10, .flops_per_ns = 40}};
  // One cached row: 12 heads' 12 KB is 1.2 us, three blocks' worth, and the tiling's even 12
  // stays even: 2.
  EXPECT_EQ(att->tiling(OpDesc("a", "Attention"), in, {&len}, 24)->block_dim, 12u);
  EXPECT_EQ(CapBlocks(12, short_work, target.costs), 3u);
  EXPECT_EQ(TileOp(*att, OpDesc("a", "Attention"), in, {&len}, target)->block_dim, 2u);
}

}  // namespace
}  // namespace npuflow::graph
