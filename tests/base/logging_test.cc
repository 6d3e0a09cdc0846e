#include "base/logging.h"

#include <gtest/gtest.h>

namespace npuflow::log {
namespace {

TEST(Logging, OneLoggerPerLayerNamedForIt) {
  EXPECT_EQ(Get(Layer::kActors).name(), "actors");
  EXPECT_EQ(Get(Layer::kNpuSim).name(), "npu_sim");
  EXPECT_NE(&Get(Layer::kActors), &Get(Layer::kGraph));
}

TEST(Logging, ConfigureSetsGlobalAndPerLayerLevels) {
  ASSERT_TRUE(Configure("warn,actors=debug").ok());
  EXPECT_EQ(Get(Layer::kActors).level(), spdlog::level::debug);
  EXPECT_EQ(Get(Layer::kGraph).level(), spdlog::level::warn);
  ASSERT_TRUE(Configure("error").ok());
  EXPECT_EQ(Get(Layer::kActors).level(), spdlog::level::err);
}

TEST(Logging, BadSpecIsRejectedAndChangesNothing) {
  ASSERT_TRUE(Configure("info").ok());
  Status s = Configure("actors=debug,loud");
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("'loud'"), std::string_view::npos) << s;
  EXPECT_EQ(Get(Layer::kActors).level(), spdlog::level::info);
  s = Configure("nolayer=debug");
  EXPECT_NE(s.message().find("'nolayer'"), std::string_view::npos) << s;
}

TEST(Logging, DisabledStatementDoesNotEvaluateItsArguments) {
  ASSERT_TRUE(Configure("off").ok());
  int evaluated = 0;
  auto expensive = [&] { return ++evaluated; };
  NPUFLOW_LOG_DEBUG(kActors, "value {}", expensive());
  EXPECT_EQ(evaluated, 0);
  ASSERT_TRUE(Configure("debug").ok());
  NPUFLOW_LOG_DEBUG(kActors, "value {}", expensive());
  EXPECT_EQ(evaluated, 1);
  ASSERT_TRUE(Configure("warn").ok());
}

}  // namespace
}  // namespace npuflow::log
