#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>

namespace npuflow {
namespace {

TEST(Status, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status(StatusCode::kOk, "ignored").ok());
}

TEST(Status, FactoriesFormatTheMessage) {
  Status s = Status::ParamInvalid("tensor '{}' has shape [{}], expected [{}]", "x", 3, 4);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(s.message(), "tensor 'x' has shape [3], expected [4]");
  EXPECT_EQ(s.ToString(), "PARAM_INVALID: tensor 'x' has shape [3], expected [4]");
}

TEST(Status, EveryCodeHasADistinctName) {
  const StatusCode codes[] = {StatusCode::kOk, StatusCode::kFailed, StatusCode::kParamInvalid,
                              StatusCode::kMemoryAllocation, StatusCode::kInternal, StatusCode::kTimeout,
                              StatusCode::kAborted, StatusCode::kEndOfSequence, StatusCode::kNotFound,
                              StatusCode::kUnsupported, StatusCode::kDataCorrupted};
  std::set<std::string_view> names;
  for (StatusCode c : codes) names.insert(StatusCodeName(c));
  EXPECT_EQ(names.size(), std::size(codes));
  EXPECT_EQ(StatusCodeName(StatusCode::kEndOfSequence), "END_OF_SEQUENCE");
}

TEST(Status, CopyIsDeepAndMoveLeavesOk) {
  Status a = Status::Timeout("slow");
  Status b = a;
  EXPECT_EQ(a, b);
  Status c = std::move(a);
  EXPECT_EQ(c.message(), "slow");
  EXPECT_EQ(Status::NotFound("x").WithContext("model.om").message(), "model.om: x");
  EXPECT_TRUE(Status::Ok().WithContext("ctx").ok());
}

StatusOr<int> Half(int x) {
  if (x % 2) return Status::ParamInvalid("{} is odd", x);
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  NPUFLOW_ASSIGN_OR_RETURN(int h, Half(x));
  NPUFLOW_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  NPUFLOW_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(StatusOr, ValueOrError) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_EQ(Quarter(6).status().message(), "3 is odd");
  EXPECT_EQ(CheckEven(3).code(), StatusCode::kParamInvalid);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(Quarter(6).value_or(-1), -1);
}

TEST(StatusOr, AccessingTheValueOfAnErrorThrowsNamingTheError) {
  StatusOr<int> bad = Status::DataCorrupted("checksum mismatch in m.om");
  EXPECT_THROW(
      {
        try {
          (void)bad.value();
        } catch (const std::logic_error& e) {
          EXPECT_NE(std::string(e.what()).find("checksum mismatch in m.om"), std::string::npos);
          throw;
        }
      },
      std::logic_error);
}

TEST(StatusOr, FromOkStatusIsAnInternalError) {
  StatusOr<int> odd = Status::Ok();
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInternal);
}

TEST(StatusOr, HoldsMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(5);
  std::unique_ptr<int> v = std::move(p).value();
  EXPECT_EQ(*v, 5);
}

}  // namespace
}  // namespace npuflow
