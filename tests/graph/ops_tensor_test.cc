// The tensor-layout ops (Reshape, Transpose, Concat, Split, Slice, Cast, Variable, FileConstant) and
// the device kernels of every AICore op here and of the elementwise ops: shape inference and its
// errors, hand-computed reference values, and device kernels against the reference kernels for
// several shapes, dtypes and block_dims.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "graph/ir/half.h"
#include "graph/ops/op_registry.h"
#include "tests/graph/device_harness.h"

namespace npuflow::graph {
namespace {

using testing::DeviceRunOptions;
using testing::RandomTensor;
using testing::RunOpOnDevice;
using testing::RunOpReference;
using testing::TensorsNear;
using Ints = std::vector<std::int64_t>;

template <typename T>
Tensor Make(DataType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t{TensorDesc{dtype, std::move(shape)}, {}};
  t.data.resize(values.size() * sizeof(T));
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}
Tensor F32(Shape shape, const std::vector<float>& v) { return Make(DataType::kFloat32, std::move(shape), v); }
Tensor I32(Shape shape, const std::vector<std::int32_t>& v) { return Make(DataType::kInt32, std::move(shape), v); }

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

OpDesc Op(std::string type, std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
  OpDesc op("n", type);
  for (auto& [k, v] : attrs) op.SetAttr(k, std::move(v));
  return op;
}

TensorDesc Desc(DataType dtype, Shape shape) { return TensorDesc{dtype, std::move(shape)}; }
TensorDesc F32Desc(Shape shape) { return Desc(DataType::kFloat32, std::move(shape)); }
Shape Sym(std::vector<Dim> dims) { return Shape(std::move(dims)); }

// Output descriptors, or the error of shape inference.
StatusOr<std::vector<TensorDesc>> Infer(const OpDesc& op, const std::vector<TensorDesc>& inputs) {
  RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  std::vector<TensorDesc> out;
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, op, inputs, out));
  return out;
}

std::string InferError(const OpDesc& op, const std::vector<TensorDesc>& inputs) {
  auto r = Infer(op, inputs);
  return r.ok() ? "ok" : std::string(r.status().message());
}

// The reference outputs for `op` on `inputs` (checked to succeed).
std::vector<Tensor> Reference(const OpDesc& op, const std::vector<Tensor>& inputs) {
  auto r = RunOpReference(op, inputs);
  EXPECT_TRUE(r.ok()) << op.type() << ": " << r.status();
  return r.ok() ? *r : std::vector<Tensor>{};
}

// The device kernel against the reference kernel with the tiling's block_dim and 1, 3, 7. `exact`:
// the bytes must match; otherwise TensorsNear with atol/rtol.
void ExpectDeviceMatchesReference(const OpDesc& op, const std::vector<Tensor>& inputs, bool exact = true,
                                  float atol = 1e-5f, float rtol = 1e-4f) {
  std::string shapes;
  for (const Tensor& t : inputs) shapes += t.desc.ToString() + " ";
  SCOPED_TRACE(op.type() + " on " + shapes);
  auto ref = RunOpReference(op, inputs);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (std::optional<std::uint32_t> block_dim : {std::optional<std::uint32_t>(), std::optional<std::uint32_t>(1),
                                                 std::optional<std::uint32_t>(3), std::optional<std::uint32_t>(7)}) {
    SCOPED_TRACE(block_dim ? "block_dim " + std::to_string(*block_dim) : std::string("tiling's block_dim"));
    auto dev = RunOpOnDevice(op, inputs, DeviceRunOptions{.block_dim = block_dim});
    ASSERT_TRUE(dev.ok()) << dev.status();
    ASSERT_EQ(dev->size(), ref->size());
    for (std::size_t i = 0; i < ref->size(); ++i) {
      if (exact) {
        EXPECT_EQ((*dev)[i].desc, (*ref)[i].desc) << "output " << i;
        EXPECT_TRUE((*dev)[i].data == (*ref)[i].data) << "output " << i << " bytes differ";
      } else {
        EXPECT_TRUE(TensorsNear((*dev)[i], (*ref)[i], atol, rtol)) << "output " << i;
      }
    }
  }
}

// ---- elementwise device kernels ---------------------------------------------------------------------
const std::vector<std::pair<Shape, Shape>>& BinaryShapes() {
  static const std::vector<std::pair<Shape, Shape>> shapes = {
      {Shape{7}, Shape{7}},             {Shape{2, 3}, Shape{3}},        {Shape{3, 1}, Shape{1, 4}},
      {Shape{5, 1, 3}, Shape{4, 1}},    {Shape{}, Shape{2, 5}},         {Shape{1000}, Shape{1}},
      {Shape{33, 257}, Shape{257}},     {Shape{257}, Shape{33, 257}},   {Shape{12295}, Shape{12295}},
      {Shape{2, 3, 4}, Shape{2, 1, 4}}, {Shape{6, 1}, Shape{6, 5}},     {Shape{3, 4, 1, 5}, Shape{4, 7, 1}},
      {Shape{1, 1}, Shape{1}},          {Shape{0, 3}, Shape{3}}};
  return shapes;
}

TEST(ElementwiseKernels, BinaryF32MatchesReferenceWithBroadcasts) {
  std::mt19937 rng(1);
  for (const char* type : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [sa, sb] : BinaryShapes()) {
      Tensor a = RandomTensor(F32Desc(sa), rng, -3, 3);
      Tensor b = RandomTensor(F32Desc(sb), rng, 0.5f, 2);  // away from 0 for Div
      ExpectDeviceMatchesReference(Op(type), {a, b});
    }
  }
}

TEST(ElementwiseKernels, BinaryF16Bf16AndIntegersMatchReference) {
  std::mt19937 rng(2);
  for (const char* type : {"Add", "Sub", "Mul", "Div"}) {
    for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
      for (const auto& [sa, sb] : std::initializer_list<std::pair<Shape, Shape>>{
               {Shape{2, 3}, Shape{3}}, {Shape{3, 1}, Shape{1, 4}}, {Shape{4099}, Shape{4099}}, {Shape{}, Shape{9}}}) {
        Tensor a = RandomTensor(Desc(dtype, sa), rng, -50, 50);
        Tensor b = RandomTensor(Desc(dtype, sb), rng, 1, 20);
        ExpectDeviceMatchesReference(Op(type), {a, b});
      }
    }
  }
}

TEST(ElementwiseKernels, UnaryMatchesReference) {
  std::mt19937 rng(3);
  for (const char* type : {"Relu", "Tanh", "Gelu"}) {
    for (const Shape& s : {Shape{1}, Shape{4095}, Shape{4097}, Shape{3, 5, 7}, Shape{20000}, Shape{0}}) {
      ExpectDeviceMatchesReference(Op(type), {RandomTensor(F32Desc(s), rng, -6, 6)}, /*exact=*/false, 2e-6f, 1e-5f);
    }
    for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
      // One rounding step of f16 / bf16 may differ where the two tanh's straddle it.
      const float tol = dtype == DataType::kFloat16 ? 1e-3f : 8e-3f;
      ExpectDeviceMatchesReference(Op(type), {RandomTensor(Desc(dtype, Shape{5, 999}), rng, -6, 6)}, false, tol, tol);
    }
  }
}

TEST(ElementwiseKernels, TanhAndGeluAreAccurateOverTheirRange) {
  std::vector<float> xs;
  for (float x = -20.f; x <= 20.f; x += 0.01f) xs.push_back(x);
  for (float x : {0.f, -0.f, 1e-30f, -1e-8f, 0.625f, -0.625f, 87.f, -100.f, 1e30f})
    xs.push_back(x);
  const Tensor x = F32(Shape{static_cast<std::int64_t>(xs.size())}, xs);
  for (const char* type : {"Tanh", "Gelu"}) {
    auto dev = RunOpOnDevice(Op(type), {x});
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_TRUE(TensorsNear((*dev)[0], Reference(Op(type), {x})[0], 1e-6f, 1e-6f)) << type;
  }
}

TEST(ElementwiseKernels, BroadcastingAddByHand) {
  auto sum = RunOpOnDevice(Op("Add"), {F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6}), F32(Shape{3}, {10, 20, 30})});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ((*sum)[0].desc.shape.ToString(), "[2, 3]");
  EXPECT_EQ(Values<float>((*sum)[0]), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  auto outer = RunOpOnDevice(Op("Mul"), {F32(Shape{2, 1}, {2, 3}), F32(Shape{1, 3}, {1, 10, 100})},
                             DeviceRunOptions{.block_dim = 4});
  ASSERT_TRUE(outer.ok()) << outer.status();
  EXPECT_EQ(Values<float>((*outer)[0]), (std::vector<float>{2, 20, 200, 3, 30, 300}));
}

TEST(ElementwiseKernels, IntegerDivisionTruncatesAndZeroIsAnError) {
  auto q = RunOpOnDevice(Op("Div"), {I32(Shape{4}, {-7, 7, 7, -2147483647 - 1}), I32(Shape{4}, {2, -2, 3, -1})});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(Values<std::int32_t>((*q)[0]), (std::vector<std::int32_t>{-3, -3, 2, -2147483647 - 1}));
  auto zero = RunOpOnDevice(Op("Div"), {I32(Shape{3}, {1, 2, 3}), I32(Shape{3}, {1, 0, 1})});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("op.Div: integer division by zero"), std::string_view::npos)
      << zero.status();
  auto wrap = RunOpOnDevice(Op("Add"), {I32(Shape{1}, {2147483647}), I32(Shape{1}, {1})});
  ASSERT_TRUE(wrap.ok()) << wrap.status();
  EXPECT_EQ(Values<std::int32_t>((*wrap)[0]), (std::vector<std::int32_t>{-2147483647 - 1}));
}

TEST(ElementwiseKernels, UnsupportedDtypeIsAnError) {
  Tensor a{Desc(DataType::kUInt8, Shape{2}), {1, 2}};
  auto r = RunOpOnDevice(Op("Add"), {a, a});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("op.Add: dtype u8 not supported"), std::string_view::npos) << r.status();
}

// ---- Reshape ----------------------------------------------------------------------------------------
TEST(Reshape, InfersMinusOneAndKeepsZeroLiteral) {
  auto out = Infer(Op("Reshape", {{"shape", Ints{3, -1}}}), {F32Desc(Shape{2, 3, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.ToString(), "[3, 4]");
  EXPECT_EQ(Infer(Op("Reshape", {{"shape", Ints{0, 5}}}), {F32Desc(Shape{5, 0})})->at(0).shape.ToString(), "[0, 5]");
  auto sym = Infer(Op("Reshape", {{"shape", Ints{-1, 12, 64}}}), {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(768)}))});
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_EQ((*sym)[0].shape.ToString(), "[seq, 12, 64]");

  auto values = Reference(Op("Reshape", {{"shape", Ints{-1, 2}}}), {F32(Shape{2, 2}, {1, 2, 3, 4})});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].desc.shape.ToString(), "[2, 2]");
  EXPECT_EQ(Values<float>(values[0]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Reshape, ErrorsNameTheNodeAndBothShapes) {
  EXPECT_EQ(InferError(Op("Reshape", {{"shape", Ints{4, 2}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Reshape): cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)");
  EXPECT_EQ(InferError(Op("Reshape", {{"shape", Ints{4, -1}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Reshape): cannot reshape [2, 3] (6 elements) to [4, -1]: no size for -1");
  EXPECT_EQ(InferError(Op("Reshape", {{"shape", Ints{-1, -1}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Reshape): attribute 'shape' [-1, -1] has more than one -1");
  EXPECT_EQ(InferError(Op("Reshape", {{"shape", Ints{2, -3}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Reshape): attribute 'shape' [2, -3] has a negative dim -3");
  EXPECT_EQ(InferError(Op("Reshape"), {F32Desc(Shape{2, 3})}), "node 'n' (Reshape): missing attribute 'shape'");
  // Two symbols, or a static target, cannot be checked.
  const Shape two_symbols = Sym({Dim::Symbolic("b"), Dim::Symbolic("s"), Dim::Static(4)});
  EXPECT_NE(InferError(Op("Reshape", {{"shape", Ints{-1, 4}}}), {F32Desc(two_symbols)}).find("cannot reshape [b, s, 4] to [-1, 4]"),
            std::string::npos);
  EXPECT_NE(InferError(Op("Reshape", {{"shape", Ints{8, 768}}}), {F32Desc(Sym({Dim::Symbolic("s"), Dim::Static(768)}))})
                .find("cannot reshape [s, 768] to [8, 768]"),
            std::string::npos);
  EXPECT_NE(InferError(Op("Reshape", {{"shape", Ints{-1, 64}}}), {F32Desc(Sym({Dim::Symbolic("s"), Dim::Static(768)}))})
                .find("cannot reshape"),
            std::string::npos);
}

TEST(Reshape, DeviceCopyMatchesReferenceAndRunsInPlace) {
  std::mt19937 rng(4);
  ExpectDeviceMatchesReference(Op("Reshape", {{"shape", Ints{-1}}}), {RandomTensor(F32Desc(Shape{13, 1001}), rng)});
  ExpectDeviceMatchesReference(Op("Reshape", {{"shape", Ints{3, -1}}}),
                               {RandomTensor(Desc(DataType::kFloat16, Shape{9, 7}), rng)});
  ExpectDeviceMatchesReference(Op("Reshape", {{"shape", Ints{5, 0}}}), {RandomTensor(F32Desc(Shape{0}), rng)});
  const Tensor x = RandomTensor(F32Desc(Shape{64, 130}), rng);
  for (std::uint32_t block_dim : {1u, 3u}) {
    auto y = RunOpOnDevice(Op("Reshape", {{"shape", Ints{130, -1}}}), {x},
                           DeviceRunOptions{.block_dim = block_dim, .inplace = true});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ((*y)[0].desc.shape.ToString(), "[130, 64]");
    EXPECT_TRUE((*y)[0].data == x.data);
  }
  RegisterBuiltinOps();
  EXPECT_EQ(OpRegistry::Global().Find("Reshape").value()->inplace, std::vector<int>{0});
}

// ---- Transpose --------------------------------------------------------------------------------------
TEST(Transpose, TwoByThreeByHand) {
  auto y = Reference(Op("Transpose", {{"perm", Ints{1, 0}}}), {F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].desc.shape.ToString(), "[3, 2]");
  EXPECT_EQ(Values<float>(y[0]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  auto dev = RunOpOnDevice(Op("Transpose", {{"perm", Ints{1, 0}}}), {F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Values<float>((*dev)[0]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Transpose, InferenceCarriesSymbolsAndChecksPerm) {
  auto out = Infer(Op("Transpose", {{"perm", Ints{0, 2, 1}}}),
                   {F32Desc(Sym({Dim::Static(2), Dim::Symbolic("seq"), Dim::Static(64)}))});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.ToString(), "[2, 64, seq]");
  EXPECT_EQ(InferError(Op("Transpose", {{"perm", Ints{0, 0}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Transpose): attribute 'perm' [0, 0] is not a permutation of 0..1 for [2, 3]");
  EXPECT_EQ(InferError(Op("Transpose", {{"perm", Ints{1, 0}}}), {F32Desc(Shape{2, 3, 4})}),
            "node 'n' (Transpose): attribute 'perm' [1, 0] is not a permutation of 0..2 for [2, 3, 4]");
  EXPECT_NE(InferError(Op("Transpose", {{"perm", Ints{0, 2}}}), {F32Desc(Shape{2, 3})}), "ok");
}

TEST(Transpose, DeviceMatchesReference) {
  std::mt19937 rng(5);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {Shape{2, 3}, {1, 0}},          {Shape{67, 129}, {1, 0}},          {Shape{2, 3, 4}, {2, 0, 1}},
      {Shape{5, 7, 9, 3}, {0, 2, 1, 3}}, {Shape{4, 1, 6, 1, 5}, {4, 3, 2, 1, 0}}, {Shape{3, 4}, {0, 1}},
      {Shape{}, {}},                  {Shape{2, 0, 3}, {2, 1, 0}},       {Shape{2, 3, 4, 5, 2, 3, 2, 2}, {7, 6, 5, 4, 3, 2, 1, 0}}};
  for (const auto& [shape, perm] : cases) {
    ExpectDeviceMatchesReference(Op("Transpose", {{"perm", perm}}), {RandomTensor(F32Desc(shape), rng)});
  }
  ExpectDeviceMatchesReference(Op("Transpose", {{"perm", Ints{1, 0}}}),
                               {RandomTensor(Desc(DataType::kFloat16, Shape{33, 65}), rng)});
  ExpectDeviceMatchesReference(Op("Transpose", {{"perm", Ints{2, 1, 0}}}),
                               {RandomTensor(Desc(DataType::kInt64, Shape{3, 5, 7}), rng, -100, 100)});
  ExpectDeviceMatchesReference(Op("Transpose", {{"perm", Ints{1, 0}}}),
                               {RandomTensor(Desc(DataType::kUInt8, Shape{9, 11}), rng, 0, 255)});
}

// ---- Concat -----------------------------------------------------------------------------------------
TEST(Concat, ByHandOnBothAxes) {
  const Tensor a = F32(Shape{2, 2}, {1, 2, 3, 4}), b = F32(Shape{2, 1}, {5, 6}), c = F32(Shape{1, 2}, {7, 8});
  auto cols = Reference(Op("Concat", {{"axis", std::int64_t{-1}}}), {a, b});
  ASSERT_EQ(cols.size(), 1u);
  EXPECT_EQ(cols[0].desc.shape.ToString(), "[2, 3]");
  EXPECT_EQ(Values<float>(cols[0]), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  auto rows = Reference(Op("Concat", {{"axis", std::int64_t{0}}}), {a, c});
  EXPECT_EQ(Values<float>(rows[0]), (std::vector<float>{1, 2, 3, 4, 7, 8}));
  auto dev = RunOpOnDevice(Op("Concat", {{"axis", std::int64_t{1}}}), {a, b}, DeviceRunOptions{.block_dim = 5});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Values<float>((*dev)[0]), (std::vector<float>{1, 2, 5, 3, 4, 6}));
}

TEST(Concat, InferenceErrorsAndSymbols) {
  EXPECT_EQ(InferError(Op("Concat", {{"axis", std::int64_t{1}}}), {F32Desc(Shape{3, 4}), F32Desc(Shape{2, 4})}),
            "node 'n' (Concat): input 1 shape [2, 4] does not match input 0 shape [3, 4] outside axis 1");
  EXPECT_EQ(InferError(Op("Concat", {{"axis", std::int64_t{2}}}), {F32Desc(Shape{3, 4})}),
            "node 'n' (Concat): attribute 'axis' 2 is out of range for [3, 4] (rank 2)");
  EXPECT_EQ(InferError(Op("Concat", {{"axis", std::int64_t{0}}}), {F32Desc(Shape{3}), Desc(DataType::kInt32, Shape{3})}),
            "node 'n' (Concat): input 1 is i32[3], input 0 is f32[3]");
  std::vector<TensorDesc> fifteen(15, F32Desc(Shape{1}));
  EXPECT_EQ(InferError(Op("Concat", {{"axis", std::int64_t{0}}}), fifteen),
            "node 'n' (Concat): 15 inputs, expected 1 to 14");
  const Shape seq4 = Sym({Dim::Symbolic("seq"), Dim::Static(4)});
  auto out = Infer(Op("Concat", {{"axis", std::int64_t{1}}}), {F32Desc(seq4), F32Desc(seq4)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.ToString(), "[seq, 8]");
  out = Infer(Op("Concat", {{"axis", std::int64_t{0}}}), {F32Desc(seq4), F32Desc(Shape{3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.ToString(), "[seq+3, 4]") << "a sum known only at run time: a symbol of its own";
}

TEST(Concat, DeviceMatchesReference) {
  std::mt19937 rng(6);
  const std::vector<std::pair<std::int64_t, std::vector<Shape>>> cases = {
      {0, {Shape{3}, Shape{5}}},
      {1, {Shape{7, 3}, Shape{7, 1}, Shape{7, 0}, Shape{7, 11}}},
      {-2, {Shape{2, 3, 5}, Shape{2, 9, 5}}},
      {0, {Shape{4097}, Shape{1}, Shape{4100}}},
      {2, {Shape{3, 2, 1}, Shape{3, 2, 4}, Shape{3, 2, 2}, Shape{3, 2, 1}, Shape{3, 2, 7}}},
      {1, {Shape{0, 3}, Shape{0, 2}}}};
  for (const auto& [axis, shapes] : cases) {
    std::vector<Tensor> in;
    for (const Shape& s : shapes) in.push_back(RandomTensor(F32Desc(s), rng));
    ExpectDeviceMatchesReference(Op("Concat", {{"axis", axis}}), in);
  }
  std::vector<Tensor> many;
  for (int i = 0; i < 14; ++i) many.push_back(RandomTensor(Desc(DataType::kFloat16, Shape{3, i % 4, 2}), rng));
  ExpectDeviceMatchesReference(Op("Concat", {{"axis", std::int64_t{1}}}), many);
}

// ---- Split ------------------------------------------------------------------------------------------
TEST(Split, BySizesAndByNumSplitByHand) {
  const Tensor x = F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  auto by_sizes = Reference(Op("Split", {{"axis", std::int64_t{1}}, {"sizes", Ints{1, 2}}}), {x});
  ASSERT_EQ(by_sizes.size(), 2u);
  EXPECT_EQ(by_sizes[0].desc.shape.ToString(), "[2, 1]");
  EXPECT_EQ(by_sizes[1].desc.shape.ToString(), "[2, 2]");
  EXPECT_EQ(Values<float>(by_sizes[0]), (std::vector<float>{1, 4}));
  EXPECT_EQ(Values<float>(by_sizes[1]), (std::vector<float>{2, 3, 5, 6}));
  auto by_num = Reference(Op("Split", {{"axis", std::int64_t{0}}, {"num_split", std::int64_t{2}}}), {x});
  ASSERT_EQ(by_num.size(), 2u);
  EXPECT_EQ(Values<float>(by_num[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Values<float>(by_num[1]), (std::vector<float>{4, 5, 6}));
  auto dev = RunOpOnDevice(Op("Split", {{"axis", std::int64_t{-1}}, {"num_split", std::int64_t{3}}}), {x});
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_EQ(dev->size(), 3u);
  EXPECT_EQ(Values<float>((*dev)[0]), (std::vector<float>{1, 4}));
  EXPECT_EQ(Values<float>((*dev)[1]), (std::vector<float>{2, 5}));
  EXPECT_EQ(Values<float>((*dev)[2]), (std::vector<float>{3, 6}));
}

TEST(Split, InferenceErrors) {
  EXPECT_EQ(InferError(Op("Split", {{"axis", std::int64_t{1}}, {"num_split", std::int64_t{4}}}), {F32Desc(Shape{2, 6})}),
            "node 'n' (Split): attribute 'num_split' 4 does not divide axis 1 of [2, 6] (size 6)");
  EXPECT_EQ(InferError(Op("Split", {{"axis", std::int64_t{1}}, {"sizes", Ints{2, 3}}}), {F32Desc(Shape{2, 6})}),
            "node 'n' (Split): attribute 'sizes' [2, 3] does not split axis 1 of [2, 6] (size 6)");
  EXPECT_EQ(InferError(Op("Split", {{"axis", std::int64_t{0}}}), {F32Desc(Shape{2, 6})}),
            "node 'n' (Split): needs exactly one of the attributes 'sizes' and 'num_split'");
  EXPECT_EQ(InferError(Op("Split", {{"axis", std::int64_t{1}}, {"num_split", std::int64_t{2}}}),
                       {F32Desc(Sym({Dim::Symbolic("b"), Dim::Symbolic("s")}))}),
            "node 'n' (Split): attribute 'num_split' 2 does not divide axis 1 of [b, s] (size s)");
  auto sym = Infer(Op("Split", {{"axis", std::int64_t{1}}, {"num_split", std::int64_t{3}}}),
                   {F32Desc(Sym({Dim::Symbolic("seq"), Dim::Static(2304)}))});
  ASSERT_TRUE(sym.ok()) << sym.status();
  ASSERT_EQ(sym->size(), 3u);
  EXPECT_EQ((*sym)[2].shape.ToString(), "[seq, 768]");
}

TEST(Split, DeviceMatchesReference) {
  std::mt19937 rng(7);
  ExpectDeviceMatchesReference(Op("Split", {{"axis", std::int64_t{1}}, {"sizes", Ints{3, 0, 5, 1}}}),
                               {RandomTensor(F32Desc(Shape{11, 9}), rng)});
  ExpectDeviceMatchesReference(Op("Split", {{"axis", std::int64_t{0}}, {"num_split", std::int64_t{3}}}),
                               {RandomTensor(F32Desc(Shape{4101 * 3}), rng)});
  ExpectDeviceMatchesReference(Op("Split", {{"axis", std::int64_t{-1}}, {"num_split", std::int64_t{3}}}),
                               {RandomTensor(Desc(DataType::kFloat16, Shape{2, 5, 2304}), rng)});
  ExpectDeviceMatchesReference(Op("Split", {{"axis", std::int64_t{2}}, {"sizes", Ints{1, 1}}}),
                               {RandomTensor(Desc(DataType::kInt64, Shape{3, 4, 2}), rng, -9, 9)});
}

// ---- Slice ------------------------------------------------------------------------------------------
TEST(Slice, NegativeEndAndStrideTwoByHand) {
  // x[0:2, 1:-1:2] of a 3x6.
  const Tensor x = F32(Shape{3, 6}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25});
  const OpDesc op = Op("Slice", {{"begin", Ints{0, 1}}, {"end", Ints{2, -1}}, {"strides", Ints{1, 2}}});
  auto y = Reference(op, {x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].desc.shape.ToString(), "[2, 2]");
  EXPECT_EQ(Values<float>(y[0]), (std::vector<float>{1, 3, 11, 13}));
  auto dev = RunOpOnDevice(op, {x}, DeviceRunOptions{.block_dim = 3});
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(Values<float>((*dev)[0]), (std::vector<float>{1, 3, 11, 13}));
  // Clamped like Python: x[-100:100, 4:2] is 3x0; x[1:, -2:] is the last two columns of rows 1 and 2.
  EXPECT_EQ(Infer(Op("Slice", {{"begin", Ints{-100, 4}}, {"end", Ints{100, 2}}}), {x.desc})->at(0).shape.ToString(),
            "[3, 0]");
  auto tail = Reference(Op("Slice", {{"begin", Ints{1, -2}}, {"end", Ints{100, 6}}}), {x});
  EXPECT_EQ(Values<float>(tail[0]), (std::vector<float>{14, 15, 24, 25}));
}

TEST(Slice, InferenceErrorsAndSymbols) {
  EXPECT_EQ(InferError(Op("Slice", {{"begin", Ints{0, 0}}, {"end", Ints{1, 1}}, {"strides", Ints{1, 0}}}),
                       {F32Desc(Shape{2, 3})}),
            "node 'n' (Slice): attribute 'strides' [1, 0] must be positive");
  EXPECT_EQ(InferError(Op("Slice", {{"begin", Ints{0}}, {"end", Ints{1, 1}}}), {F32Desc(Shape{2, 3})}),
            "node 'n' (Slice): attribute 'begin' [0] has 1 values, input [2, 3] has rank 2");
  const Shape seq = Sym({Dim::Symbolic("seq"), Dim::Static(8)});
  const std::int64_t kEnd = std::numeric_limits<std::int64_t>::max();
  auto out = Infer(Op("Slice", {{"begin", Ints{0, 2}}, {"end", Ints{kEnd, 6}}}), {F32Desc(seq)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape.ToString(), "[seq, 4]");
  EXPECT_NE(InferError(Op("Slice", {{"begin", Ints{1, 0}}, {"end", Ints{kEnd, 8}}}), {F32Desc(seq)})
                .find("node 'n' (Slice): dim 0 of [seq, 8] is symbolic"),
            std::string::npos);
}

TEST(Slice, DeviceMatchesReference) {
  std::mt19937 rng(8);
  struct Case {
    Shape shape;
    Ints begin, end, strides;
  };
  const std::vector<Case> cases = {
      {Shape{10}, {2}, {9}, {3}},
      {Shape{17, 33}, {1, -30}, {-1, 100}, {2, 1}},
      {Shape{4, 5, 6}, {0, 1, 0}, {4, 5, 6}, {1, 1, 1}},
      {Shape{4, 5, 6}, {-3, 0, 5}, {4, 5, 6}, {2, 4, 1}},
      {Shape{5000, 3}, {7, 0}, {4999, 3}, {1, 1}},
      {Shape{3, 4}, {2, 2}, {1, 4}, {1, 1}},  // empty
      {Shape{2, 3, 4, 5, 6}, {1, 0, 1, 2, 0}, {2, 3, 4, 5, 6}, {1, 2, 2, 1, 5}}};
  for (const Case& c : cases) {
    ExpectDeviceMatchesReference(Op("Slice", {{"begin", c.begin}, {"end", c.end}, {"strides", c.strides}}),
                                 {RandomTensor(F32Desc(c.shape), rng)});
  }
  ExpectDeviceMatchesReference(Op("Slice", {{"begin", Ints{1, 3}}, {"end", Ints{-1, 64}}}),
                               {RandomTensor(Desc(DataType::kBFloat16, Shape{9, 70}), rng)});
}

// ---- Cast -------------------------------------------------------------------------------------------
TEST(Cast, TruncatesTowardZeroAndBoolIsNonZero) {
  const Tensor x = F32(Shape{6}, {1.7f, -1.7f, 0.f, -0.4f, 3e9f, std::nanf("")});
  auto i = Reference(Op("Cast", {{"dtype", DataType::kInt32}}), {x});
  ASSERT_EQ(i.size(), 1u);
  EXPECT_EQ(i[0].desc.ToString(), "i32[6]");
  EXPECT_EQ(Values<std::int32_t>(i[0]), (std::vector<std::int32_t>{1, -1, 0, 0, 2147483647, 0}));
  auto b = Reference(Op("Cast", {{"dtype", DataType::kBool}}), {x});
  EXPECT_EQ(b[0].data, (std::vector<std::uint8_t>{1, 1, 0, 1, 1, 1}));
  auto dev_i = RunOpOnDevice(Op("Cast", {{"dtype", DataType::kInt32}}), {x});
  ASSERT_TRUE(dev_i.ok()) << dev_i.status();
  EXPECT_EQ(Values<std::int32_t>((*dev_i)[0]), (std::vector<std::int32_t>{1, -1, 0, 0, 2147483647, 0}));
  auto dev_b = RunOpOnDevice(Op("Cast", {{"dtype", DataType::kBool}}), {x});
  ASSERT_TRUE(dev_b.ok()) << dev_b.status();
  EXPECT_EQ((*dev_b)[0].data, (std::vector<std::uint8_t>{1, 1, 0, 1, 1, 1}));
  auto back = Reference(Op("Cast", {{"dtype", DataType::kFloat32}}), {I32(Shape{2}, {-3, 16777217})});
  EXPECT_EQ(Values<float>(back[0]), (std::vector<float>{-3.f, 16777216.f}));
  EXPECT_EQ(InferError(Op("Cast"), {F32Desc(Shape{2})}), "node 'n' (Cast): missing attribute 'dtype'");
}

TEST(Cast, DeviceMatchesReferenceForEveryDtypePair) {
  std::mt19937 rng(9);
  const DataType all[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32,
                          DataType::kInt64,   DataType::kUInt8,   DataType::kBool};
  for (DataType from : all) {
    // u8 and bool inputs stay in their range; the others cross every target's range.
    const float lo = from == DataType::kUInt8 || from == DataType::kBool ? 0.f : -300.f;
    const float hi = from == DataType::kUInt8 ? 255.f : from == DataType::kBool ? 2.f : 300.f;
    const Tensor x = RandomTensor(Desc(from, Shape{3, 1367}), rng, lo, hi);
    for (DataType to : all) ExpectDeviceMatchesReference(Op("Cast", {{"dtype", to}}), {x});
  }
  // i64 -> i32 wraps; i64 stays exact through i64.
  Tensor big = Make<std::int64_t>(DataType::kInt64, Shape{2}, {(std::int64_t{1} << 40) + 5, -(std::int64_t{1} << 62)});
  auto wrapped = RunOpOnDevice(Op("Cast", {{"dtype", DataType::kInt32}}), {big});
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(Values<std::int32_t>((*wrapped)[0]), (std::vector<std::int32_t>{5, 0}));
  EXPECT_EQ(Reference(Op("Cast", {{"dtype", DataType::kInt32}}), {big})[0].data, (*wrapped)[0].data);
  auto same = RunOpOnDevice(Op("Cast", {{"dtype", DataType::kInt64}}), {big});
  EXPECT_EQ((*same)[0].data, big.data);
}

// ---- Variable ---------------------------------------------------------------------------------------
// ---- HcomAllReduce over one rank ------------------------------------------------------------------
TEST(HcomAllReduce, OneRankIsTheIdentityOnDeviceAndReference) {
  std::mt19937 rng(4);
  const Tensor x = RandomTensor(Desc(DataType::kFloat32, Shape{3, 517}), rng, -2.f, 2.f);
  EXPECT_EQ(Reference(Op("HcomAllReduce"), {x})[0].data, x.data);
  ExpectDeviceMatchesReference(Op("HcomAllReduce", {{"reduction", std::string("max")}}), {x});
  EXPECT_EQ(InferError(Op("HcomAllReduce", {{"reduction", std::string("avg")}}), {F32Desc(Shape{2})}),
            "node 'n' (HcomAllReduce): reduction 'avg' is not one of sum, max, min, prod");
  EXPECT_TRUE(OpRegistry::Global().Find("HcomAllReduce").value()->communication);
}

TEST(Variable, OutputsItsValueOrZeros) {
  const Tensor v = F32(Shape{2}, {1.5f, -2.f});
  auto with_value =
      Reference(Op("Variable", {{"dtype", DataType::kFloat32}, {"shape", Shape{2}}, {"value", v}}), {});
  ASSERT_EQ(with_value.size(), 1u);
  EXPECT_EQ(with_value[0], v);
  auto zeros = Reference(Op("Variable", {{"dtype", DataType::kInt32}, {"shape", Shape{3}}}), {});
  EXPECT_EQ(zeros[0].desc.ToString(), "i32[3]");
  EXPECT_EQ(zeros[0].data, std::vector<std::uint8_t>(12, 0));
  RegisterBuiltinOps();
  const OpDef* def = OpRegistry::Global().Find("Variable").value();
  EXPECT_EQ(def->engine, OpEngine::kHostLocal);
  EXPECT_TRUE(def->device_kernel.empty());

  EXPECT_EQ(InferError(Op("Variable", {{"dtype", DataType::kFloat32}, {"shape", Shape{3}}, {"value", v}}), {}),
            "node 'n' (Variable): attribute 'value' is f32[2] (8 bytes), expected f32[3] (12 bytes)");
  EXPECT_EQ(InferError(Op("Variable", {{"dtype", DataType::kFloat32}, {"shape", Sym({Dim::Symbolic("s")})}}), {}),
            "node 'n' (Variable): attribute 'shape' [s] must be static");
  EXPECT_EQ(InferError(Op("Variable", {{"shape", Shape{1}}}), {}), "node 'n' (Variable): missing attribute 'dtype'");
}

// ---- FileConstant -----------------------------------------------------------------------------------
class FileConstantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("npuflow_file_constant_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".bin"))
                .string();
    std::ofstream f(path_, std::ios::binary);
    const std::string header = "0123456789abcdef";  // 16 bytes before the weights
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(reinterpret_cast<const char*>(weights_.data()), static_cast<std::streamsize>(weights_.size() * 4));
  }
  void TearDown() override { std::filesystem::remove(path_); }

  OpDesc FileConstant(std::vector<std::pair<std::string, AttrValue>> attrs) {
    OpDesc op("w", "FileConstant");
    op.SetAttr("dtype", DataType::kFloat32);
    op.SetAttr("shape", Shape{2, 3});
    for (auto& [k, v] : attrs) op.SetAttr(k, std::move(v));
    return op;
  }

  std::string path_;
  const std::vector<float> weights_ = {1, 2, 3, 4, 5, 6};  // 24 bytes at offset 16; the file has 40
};

TEST_F(FileConstantTest, ReadsTheBytesAtTheOffset) {
  auto y = RunOpReference(FileConstant({{"location", path_}, {"offset", std::int64_t{16}}, {"length", std::int64_t{24}}}), {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].desc.ToString(), "f32[2, 3]");
  EXPECT_EQ(Values<float>((*y)[0]), weights_);
  // file_path when there is no location; length 0 is the tensor size.
  auto by_file_path = RunOpReference(FileConstant({{"file_path", path_}, {"offset", std::int64_t{16}}}), {});
  ASSERT_TRUE(by_file_path.ok()) << by_file_path.status();
  EXPECT_EQ(Values<float>((*by_file_path)[0]), weights_);
  RegisterBuiltinOps();
  const OpDef* def = OpRegistry::Global().Find("FileConstant").value();
  EXPECT_EQ(def->engine, OpEngine::kHostLocal);
  EXPECT_TRUE(def->device_kernel.empty());
}

TEST_F(FileConstantTest, ErrorsNameTheFileTheNodeAndTheSizes) {
  auto past_end = RunOpReference(FileConstant({{"location", path_}, {"offset", std::int64_t{20}}}), {});
  ASSERT_FALSE(past_end.ok());
  EXPECT_EQ(past_end.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(past_end.status().message(),
            "node 'w' (FileConstant): weight file '" + path_ + "' has 40 bytes, reading offset 20 + length 24 needs 44");

  auto wrong_length = RunOpReference(FileConstant({{"location", path_}, {"length", std::int64_t{20}}}), {});
  ASSERT_FALSE(wrong_length.ok());
  EXPECT_EQ(wrong_length.status().message(), "node 'w' (FileConstant): length 20 bytes of '" + path_ +
                                                 "' differs from the tensor size 24 bytes (f32[2, 3])");

  const std::string missing = path_ + ".missing";
  auto no_file = RunOpReference(FileConstant({{"location", missing}}), {});
  ASSERT_FALSE(no_file.ok());
  EXPECT_EQ(no_file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_file.status().message().find("node 'w' (FileConstant): cannot read weight file '" + missing + "'"),
            std::string_view::npos)
      << no_file.status();

  EXPECT_EQ(InferError(FileConstant({}), {}), "node 'w' (FileConstant): needs attribute 'location' or 'file_path'");
  EXPECT_EQ(InferError(FileConstant({{"location", path_}, {"offset", std::int64_t{-1}}}), {}),
            "node 'w' (FileConstant): offset -1 and length 0 of '" + path_ + "' must not be negative");
}

// ---- tiling -----------------------------------------------------------------------------------------
TEST(TensorOps, TilingUsesAtMostOneBlockPerCoreAndNeedsStaticShapes) {
  RegisterBuiltinOps();
  const OpDef* concat = OpRegistry::Global().Find("Concat").value();
  const OpDesc op = Op("Concat", {{"axis", std::int64_t{0}}});
  EXPECT_EQ(concat->tiling(op, {F32Desc(Shape{10}), F32Desc(Shape{20})}, {}, 24)->block_dim, 1u);
  EXPECT_EQ(concat->tiling(op, {F32Desc(Shape{5000}), F32Desc(Shape{5000})}, {}, 24)->block_dim, 3u);
  EXPECT_EQ(concat->tiling(op, {F32Desc(Shape{1 << 24}), F32Desc(Shape{1})}, {}, 24)->block_dim, 24u);
  const OpDef* slice = OpRegistry::Global().Find("Slice").value();
  // Slice's work is its output: 2 x 10 elements of a 1M input.
  auto t = slice->tiling(Op("Slice", {{"begin", Ints{0, 0}}, {"end", Ints{2, 10}}}), {F32Desc(Shape{1000, 1000})}, {}, 24);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->block_dim, 1u);
  const OpDef* cast = OpRegistry::Global().Find("Cast").value();
  auto dynamic = cast->tiling(Op("Cast", {{"dtype", DataType::kInt32}}), {F32Desc(Sym({Dim::Symbolic("s")}))}, {}, 24);
  ASSERT_FALSE(dynamic.ok());
  EXPECT_EQ(dynamic.status().message(), "node 'n' (Cast): tiling needs static shapes, got [s]");
  for (const char* type : {"Add", "Sub", "Mul", "Div", "Relu", "Tanh", "Gelu", "Reshape", "Transpose", "Concat",
                           "Split", "Slice", "Cast"}) {
    const OpDef* def = OpRegistry::Global().Find(type).value();
    EXPECT_EQ(def->device_kernel, DeviceKernelName(type)) << type;
    EXPECT_EQ(def->engine, OpEngine::kAICore) << type;
    EXPECT_TRUE(npu_sim::KernelRegistry::Global().Find(def->device_kernel).ok()) << type;
  }
  for (const char* type : {"Data", "Const", "NetOutput"})
    EXPECT_TRUE(OpRegistry::Global().Find(type).value()->device_kernel.empty()) << type;
}

TEST(TensorOps, KernelParamsLayout) {
  RegisterBuiltinOps();
  const OpDef* slice = OpRegistry::Global().Find("Slice").value();
  const OpDesc op = Op("Slice", {{"begin", Ints{-2, 1}}, {"end", Ints{5, 9}}, {"strides", Ints{1, 3}}});
  const std::vector<TensorDesc> in = {F32Desc(Shape{6, 9})};
  auto out = Infer(op, in);
  ASSERT_TRUE(out.ok()) << out.status();
  auto p = EncodeKernelParams(*slice, op, in, *out);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ints[0], 4 | (std::int64_t{1} << 32));  // begin -2 of 6, stride 1
  EXPECT_EQ(p->ints[1], 1 | (std::int64_t{3} << 32));  // begin 1, stride 3
  const OpDef* transpose = OpRegistry::Global().Find("Transpose").value();
  const OpDesc t = Op("Transpose", {{"perm", Ints{2, 0, 1}}});
  auto tp = EncodeKernelParams(*transpose, t, {F32Desc(Shape{2, 3, 4})}, {F32Desc(Shape{4, 2, 3})});
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_EQ((std::vector<std::int64_t>(tp->ints, tp->ints + 3)), (Ints{2, 0, 1}));
  const OpDef* split = OpRegistry::Global().Find("Split").value();
  const OpDesc s = Op("Split", {{"axis", std::int64_t{-1}}, {"num_split", std::int64_t{2}}});
  auto sp = EncodeKernelParams(*split, s, {F32Desc(Shape{2, 4})}, {F32Desc(Shape{2, 2}), F32Desc(Shape{2, 2})});
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ(sp->ints[0], 1);
  // MatMul: stream_weights (set by lowering's stream-weights pass) reaches the kernel as ints[6]
  // (which the kernel reads for MatMul only).
  const OpDef* matmul = OpRegistry::Global().Find("MatMul").value();
  for (bool stream : {false, true}) {
    const OpDesc m = Op("MatMul", {{"transpose_b", true}, {"stream_weights", stream}});
    auto mp = EncodeKernelParams(*matmul, m, {F32Desc(Shape{1, 4}), F32Desc(Shape{3, 4})}, {F32Desc(Shape{1, 3})});
    ASSERT_TRUE(mp.ok()) << mp.status();
    EXPECT_EQ(mp->ints[1], 1);
    EXPECT_EQ(mp->ints[6], stream ? 1 : 0);
  }
}

}  // namespace
}  // namespace npuflow::graph
