// The race detector (RuntimeOptions::race_detect) on hand-made two-stream cases: an unordered
// write and read race; an event, a host synchronize or a model run orders them; disjoint ranges
// and two reads never race. Detection is by happens-before, not by timing, so each case gives the
// same answer whichever stream runs first.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "npu_sim/runtime.h"

namespace npuflow::npu_sim {
namespace {

std::unique_ptr<Runtime> MakeRuntime(int workers = 2) {
  auto rt = Runtime::Create({.chips = {"910B"}, .workers = workers, .race_detect = true});
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(rt).value();
}

const KernelDef* Kernel(std::string_view name) { return KernelRegistry::Global().Find(name).value(); }

constexpr std::uint64_t kN = 1024;  // floats per buffer

struct TwoStreams {
  std::unique_ptr<Runtime> rt = MakeRuntime();
  Stream a = rt->CreateStream(0).value();
  Stream b = rt->CreateStream(0).value();
  DevicePtr x = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "x").value();
  DevicePtr y = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "y").value();
  DevicePtr z = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "z").value();

  Task Fill(DevicePtr p, std::uint64_t n, std::string name) {
    Task t = Task::Kernel(Kernel("fill_f32"), 2, {p.value, n, 0});
    t.name = std::move(name);
    return t;
  }
  Task Add(DevicePtr in0, DevicePtr in1, DevicePtr out, std::string name) {
    Task t = Task::Kernel(Kernel("vector_add_f32"), 2, {in0.value, in1.value, out.value, kN});
    t.name = std::move(name);
    return t;
  }
  void Sync() {
    ASSERT_TRUE(rt->SynchronizeStream(a).ok());
    ASSERT_TRUE(rt->SynchronizeStream(b).ok());
  }
  std::vector<RaceReport> Reports() { return rt->race_detector()->reports(); }
};

TEST(RaceDetector, WriteOnOneStreamReadOnAnotherWithNoOrderIsARace) {
  for (int round = 0; round < 20; ++round) {
    TwoStreams s;
    ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "producer")}).ok());
    ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.x, s.y, s.z, "consumer")}).ok());
    s.Sync();
    auto reports = s.Reports();
    ASSERT_EQ(reports.size(), 1u) << "round " << round;
    const RaceReport& r = reports[0];
    // Whichever ran first is "first": both sides are named, with their streams and the range.
    const bool producer_first = r.first.node == "producer";
    const RaceAccess& w = producer_first ? r.first : r.second;
    const RaceAccess& rd = producer_first ? r.second : r.first;
    EXPECT_EQ(w.node, "producer");
    EXPECT_TRUE(w.write);
    EXPECT_EQ(w.agent, "device 0 stream " + std::to_string(s.a.id));
    EXPECT_EQ(rd.node, "consumer");
    EXPECT_FALSE(rd.write);
    EXPECT_EQ(rd.agent, "device 0 stream " + std::to_string(s.b.id));
    EXPECT_EQ(r.allocation, s.x.allocation());
    EXPECT_EQ(r.allocation_tag, "x");
    EXPECT_EQ(r.begin, 0u);
    EXPECT_EQ(r.end, kN * sizeof(float));
    EXPECT_NE(r.ToString().find("producer"), std::string::npos);
    EXPECT_NE(r.ToString().find("consumer"), std::string::npos);
  }
}

TEST(RaceDetector, TwoWritesWithNoOrderAreARace) {
  TwoStreams s;
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "w1")}).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Fill(s.x, kN, "w2")}).ok());
  s.Sync();
  auto reports = s.Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].first.write);
  EXPECT_TRUE(reports[0].second.write);
}

TEST(RaceDetector, AnEventRecordThenWaitOrdersTheStreams) {
  for (int round = 0; round < 20; ++round) {
    TwoStreams s;
    Event e = s.rt->CreateEvent(0).value();
    ASSERT_TRUE(s.rt->Submit(s.b, {Task::Wait(e.id), s.Add(s.x, s.y, s.z, "consumer")}).ok());
    ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "producer"), Task::Record(e.id)}).ok());
    s.Sync();
    EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
    // And the other way: the consumer's stream writes back what the producer's stream reads next.
    Event back = s.rt->CreateEvent(0).value();
    ASSERT_TRUE(s.rt->Submit(s.b, {s.Fill(s.x, kN, "rewrite"), Task::Record(back.id)}).ok());
    ASSERT_TRUE(s.rt->Submit(s.a, {Task::Wait(back.id), s.Add(s.x, s.y, s.z, "reader")}).ok());
    s.Sync();
    EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
  }
}

TEST(RaceDetector, ARecordWithoutTheWaitDoesNotOrder) {
  TwoStreams s;
  Event e = s.rt->CreateEvent(0).value();
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "producer"), Task::Record(e.id)}).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.x, s.y, s.z, "consumer")}).ok());
  s.Sync();
  EXPECT_EQ(s.Reports().size(), 1u);
}

TEST(RaceDetector, AHostSynchronizeOrdersTheStreams) {
  TwoStreams s;
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "producer")}).ok());
  ASSERT_TRUE(s.rt->SynchronizeStream(s.a).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.x, s.y, s.z, "consumer")}).ok());
  s.Sync();
  EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
  // A host event synchronize too.
  Event e = s.rt->CreateEvent(0).value();
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Fill(s.y, kN, "producer2"), Task::Record(e.id)}).ok());
  ASSERT_TRUE(s.rt->SynchronizeEvent(e).ok());
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Add(s.y, s.y, s.z, "consumer2")}).ok());
  s.Sync();
  EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
}

TEST(RaceDetector, AHostSynchronizeOnAnotherThreadCountsAsSignalled) {
  // Thread T synchronizes stream a; the main thread, after joining T, launches the reader. Host
  // threads talk in ways the detector does not see (here: join), so a completion any host client
  // waited for orders every later host submission (RaceDetector::kHostWorld).
  TwoStreams s;
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, kN, "producer")}).ok());
  std::thread t([&] { ASSERT_TRUE(s.rt->SynchronizeStream(s.a).ok()); });
  t.join();
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.x, s.y, s.z, "consumer")}).ok());
  s.Sync();
  EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
  // Work nobody waited for orders nothing.
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.y, kN, "unsynchronized producer")}).ok());
  std::thread u([&] { ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.y, s.x, s.z, "other thread's consumer")}).ok()); });
  u.join();
  s.Sync();
  EXPECT_EQ(s.Reports().size(), 1u);
}

TEST(RaceDetector, DisjointRangesAndTwoReadsDoNotRace) {
  TwoStreams s;
  const std::uint64_t half = kN / 2;
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.x, half, "low half")}).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Fill(s.x + half * sizeof(float), half, "high half")}).ok());
  s.Sync();
  EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
  // Both streams read x (and y) and write their own outputs.
  DevicePtr z2 = s.rt->Malloc(0, kN * sizeof(float)).value();
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Add(s.x, s.y, s.z, "reader a")}).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.x, s.y, z2, "reader b")}).ok());
  s.Sync();
  EXPECT_TRUE(s.Reports().empty()) << s.Reports()[0].ToString();
  // A partial overlap is a race on the overlap only.
  ASSERT_TRUE(s.rt->Submit(s.a, {s.Fill(s.z, half + 8, "wide")}).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Fill(s.z + half * sizeof(float), half, "narrow")}).ok());
  s.Sync();
  auto reports = s.Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].begin, half * sizeof(float));
  EXPECT_EQ(reports[0].end, (half + 8) * sizeof(float));
}

TEST(RaceDetector, CopiesDeclareTheirRanges) {
  TwoStreams s;
  std::vector<float> host(kN, 1.0f);
  ASSERT_TRUE(s.rt->MemcpyH2DAsync(s.a, s.x, host.data(), kN * sizeof(float)).ok());
  ASSERT_TRUE(s.rt->MemcpyD2HAsync(s.b, host.data(), s.x, kN * sizeof(float)).ok());
  s.Sync();
  auto reports = s.Reports();
  ASSERT_EQ(reports.size(), 1u);
  // Synchronous copies go through the default stream and synchronize: ordered.
  ASSERT_TRUE(s.rt->MemcpyH2D(0, s.y, host.data(), kN * sizeof(float)).ok());
  ASSERT_TRUE(s.rt->Submit(s.b, {s.Add(s.y, s.y, s.z, "after sync copy")}).ok());
  s.Sync();
  EXPECT_EQ(s.Reports().size(), 1u);
}

TEST(RaceDetector, ModelRunsAreOrderedWithTheirRequesterAndEachOther) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream s1 = rt->CreateStream(0).value(), s2 = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, s1).ok());
  ASSERT_TRUE(rt->BindStream(m, s2).ok());
  DevicePtr x = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "x").value();
  DevicePtr y = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "y").value();
  Event e = rt->CreateEvent(0).value();
  Task fill = Task::Kernel(Kernel("fill_f32"), 1, {x.value, kN, 0});
  fill.name = "fill x";
  Task add = Task::Kernel(Kernel("vector_add_f32"), 1, {x.value, x.value, y.value, kN});
  add.name = "x + x";
  // s1 writes x then records; s2 waits, then reads x. Run after run.
  ASSERT_TRUE(rt->LoadTasks(m, s1, {fill, Task::Record(e.id)}).ok());
  ASSERT_TRUE(rt->LoadTasks(m, s2, {Task::Wait(e.id), add}).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(rt->ExecuteModel(m).ok());
  EXPECT_TRUE(rt->race_detector()->reports().empty()) << rt->race_detector()->reports()[0].ToString();
  // The host reads y after the runs: ordered by the run's completion.
  Stream h = rt->CreateStream(0).value();
  std::vector<float> out(kN);
  ASSERT_TRUE(rt->MemcpyD2HAsync(h, out.data(), y, kN * sizeof(float)).ok());
  ASSERT_TRUE(rt->SynchronizeStream(h).ok());
  EXPECT_TRUE(rt->race_detector()->reports().empty()) << rt->race_detector()->reports()[0].ToString();
  // Without the event pair the two streams race within a run.
  Model m2 = rt->CreateModel(0).value();
  Stream t1 = rt->CreateStream(0).value(), t2 = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m2, t1).ok());
  ASSERT_TRUE(rt->BindStream(m2, t2).ok());
  ASSERT_TRUE(rt->LoadTasks(m2, t1, {fill}).ok());
  ASSERT_TRUE(rt->LoadTasks(m2, t2, {add}).ok());
  ASSERT_TRUE(rt->ExecuteModel(m2).ok());
  EXPECT_EQ(rt->race_detector()->reports().size(), 1u);
}

TEST(RaceDetector, AnElidedLatchWaitStillOrders) {
  auto rt = MakeRuntime();
  Stream loader = rt->CreateStream(0).value();
  Model m = rt->CreateModel(0).value();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, s).ok());
  DevicePtr w = rt->Malloc(0, kN * sizeof(float), Placement::kHbm, "weights").value();
  DevicePtr y = rt->Malloc(0, kN * sizeof(float)).value();
  Event latch = rt->CreateEvent(0, EventKind::kLatch).value();
  Task add = Task::Kernel(Kernel("vector_add_f32"), 1, {w.value, w.value, y.value, kN});
  ASSERT_TRUE(rt->LoadTasks(m, s, {Task::Wait(latch.id), add}).ok());
  std::vector<float> host(kN, 2.0f);
  ASSERT_TRUE(rt->MemcpyH2DAsync(loader, w, host.data(), kN * sizeof(float)).ok());
  ASSERT_TRUE(rt->RecordEvent(latch, loader).ok());
  ASSERT_TRUE(rt->ExecuteModel(m).ok());
  ASSERT_TRUE(rt->ElideWaits(m, s, {0}).ok());
  ASSERT_TRUE(rt->ExecuteModel(m).ok());
  ASSERT_TRUE(rt->SynchronizeStream(loader).ok());
  EXPECT_TRUE(rt->race_detector()->reports().empty()) << rt->race_detector()->reports()[0].ToString();
}

TEST(RaceDetector, OffByDefault) {
  auto rt = Runtime::Create({.chips = {"910B"}});
  ASSERT_TRUE(rt.ok());
  if (!RaceDetector::ProcessDefault()) EXPECT_EQ((*rt)->race_detector(), nullptr);
}

}  // namespace
}  // namespace npuflow::npu_sim
