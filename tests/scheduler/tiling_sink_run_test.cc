// The tiling sink at run time (seed 003, 5.2-5.4): a Session with ge.tiling_schedule_optimize = "1"
// runs a marked Attention through the task sink (AICPU tiling, task update, NOPs) and gives the
// interpreter's results.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "graph/ops/interpreter.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using graph::Tensor;

const char* kAttention = R"pb(
  node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
  node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "row" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "pos" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
  node { name: "att" op: "Attention" input: "q" input: "kv" input: "kv" input: "len" }
  node { name: "out" op: "NetOutput" input: "att" }
)pb";

class TilingSinkRun : public test::ModelManagerTest {};

TEST_F(TilingSinkRun, AMarkedAttentionGivesTheInterpretersResults) {
  auto session = Session::Create({{"ge.tiling_schedule_optimize", "1"}, {"npuflow.executeTimeoutMs", "5000"}});
  ASSERT_TRUE(session.ok()) << session.status();
  auto g = graph::ParseGraphText(kAttention, "attention.pbtxt");
  ASSERT_TRUE(g.ok()) << g.status();
  auto ref_graph = graph::ParseGraphText(kAttention, "attention.pbtxt");
  auto interp = graph::Interpreter::Create(**ref_graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  ASSERT_TRUE((*session)->AddGraph(1, std::move(*g)).ok());
  for (std::int32_t p = 0; p < 8; ++p) {
    Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
    Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.05f * (i * p % 7); });
    Tensor pos = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p; });
    Tensor len = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p + 1; });
    auto want = (*interp)->Run({{"q", q}, {"row", row}, {"pos", pos}, {"len", len}});
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*session)->RunGraph(1, {q, row, pos, len});
    ASSERT_TRUE(got.ok()) << "position " << p << ": " << got.status();
    ASSERT_EQ(got->size(), 1u);
    for (std::size_t i = 0; i < 8; ++i)  // the device's key chunks round differently from the reference
      EXPECT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i),
                  1e-5)
          << "position " << p << " element " << i;
  }
}

}  // namespace
}  // namespace npuflow::scheduler
