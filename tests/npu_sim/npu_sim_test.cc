// The simulated device through its host API: chips, memory, streams, events, prefetch and task
// update, faults, timeouts, device models, traces.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <random>
#include <set>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "npu_sim/race_detector.h"
#include "npu_sim/runtime.h"
#include "npu_sim/stream_actor.h"
#include "npu_sim/timeline.h"
#include "npu_sim/units.h"

namespace npuflow::npu_sim {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Runtime> MakeRuntime(RuntimeOptions options = {}) {
  auto rt = Runtime::Create(std::move(options));
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(rt).value();
}

std::uint64_t FloatBits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

std::vector<float> Read(Runtime& rt, DevicePtr p, std::size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(rt.MemcpyD2H(0, out.data(), p, n * sizeof(float)).ok());
  return out;
}

const KernelDef* Kernel(std::string_view name) { return KernelRegistry::Global().Find(name).value(); }

// ---- chips ------------------------------------------------------------------------------------------
TEST(ChipSpec, ShippedChipsLoadWithTheirPrefetchAndFeatures) {
  auto b = LoadChipSpec("910B");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->prefetch_num, 8);
  EXPECT_TRUE(b->task_update_supported);
  auto p = LoadChipSpec("310P");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prefetch_num, 5);
  EXPECT_FALSE(p->task_update_supported);
}

TEST(ChipSpec, MalformedFilesNameTheField) {
  std::string good = R"({"name":"x","aicore_count":2,"aicpu_count":1,"hbm_capacity_bytes":1073741824,
    "hbm_bandwidth_gbps":100,"h2d_bandwidth_gbps":10,"d2h_bandwidth_gbps":10,"d2d_bandwidth_gbps":50,
    "dma_latency_ns":100,"dma_channels":2,"host_launch_latency_ns":1000,"event_record_latency_ns":10,
    "event_wait_latency_ns":10,"nop_latency_ns":5,"kernel_launch_overhead_ns":100,"aicpu_launch_overhead_ns":100,
    "task_update_latency_ns":50,"aicore_gflops":10,"aicpu_gflops":1,"prefetch_num":4,"features":{"task_update":true}})";
  ASSERT_TRUE(ParseChipSpec(good, "x.json").ok());
  std::string missing = good;
  missing.replace(missing.find("\"dma_channels\":2,"), 17, "");
  auto s = ParseChipSpec(missing, "x.json").status();
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("'dma_channels'"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("x.json"), std::string_view::npos) << s;
  std::string wrong = good;
  wrong.replace(wrong.find("\"prefetch_num\":4"), 16, "\"prefetch_num\":\"8\"");
  EXPECT_NE(ParseChipSpec(wrong, "x.json").status().message().find("'prefetch_num'"), std::string_view::npos);
  std::string negative = good;
  negative.replace(negative.find("\"aicore_count\":2"), 16, "\"aicore_count\":0");
  EXPECT_NE(ParseChipSpec(negative, "x.json").status().message().find("'aicore_count'"), std::string_view::npos);
  EXPECT_NE(ParseChipSpec("{not json", "x.json").status().message().find("not valid JSON"), std::string_view::npos);
  EXPECT_EQ(LoadChipSpec("no-such-chip").status().code(), StatusCode::kNotFound);
}

// The block-split costs are optional (defaults), and checked when given.
TEST(ChipSpec, BlockCostsAreOptionalAndChecked) {
  auto b = LoadChipSpec("910B");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->block_dispatch_ns, 400);
  EXPECT_EQ(b->block_host_gbps, 10);
  EXPECT_EQ(b->block_host_gflops, 40);
  const std::string base = R"({"name":"x","aicore_count":2,"aicpu_count":1,"hbm_capacity_bytes":1073741824,
    "hbm_bandwidth_gbps":100,"h2d_bandwidth_gbps":10,"d2h_bandwidth_gbps":10,"d2d_bandwidth_gbps":50,
    "dma_latency_ns":100,"dma_channels":2,"host_launch_latency_ns":1000,"event_record_latency_ns":10,
    "event_wait_latency_ns":10,"nop_latency_ns":5,"kernel_launch_overhead_ns":100,"aicpu_launch_overhead_ns":100,
    "task_update_latency_ns":50,"aicore_gflops":10,"aicpu_gflops":1,"prefetch_num":4,)";
  auto defaults = ParseChipSpec(base + R"("features":{"task_update":true}})", "x.json");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->block_dispatch_ns, ChipSpec{}.block_dispatch_ns);
  auto off = ParseChipSpec(base + R"("block_dispatch_ns":0,"block_host_gbps":2.5,"features":{"task_update":true}})",
                           "x.json");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->block_dispatch_ns, 0);
  EXPECT_EQ(off->block_host_gbps, 2.5);
  auto bad = ParseChipSpec(base + R"("block_host_gflops":0,"features":{"task_update":true}})", "x.json").status();
  EXPECT_NE(bad.message().find("'block_host_gflops'"), std::string_view::npos) << bad;
  bad = ParseChipSpec(base + R"("block_dispatch_ns":-1,"features":{"task_update":true}})", "x.json").status();
  EXPECT_NE(bad.message().find("'block_dispatch_ns'"), std::string_view::npos) << bad;
}

// ---- memory -----------------------------------------------------------------------------------------
TEST(DeviceMemory, OverCapacityIsAMemoryAllocationError) {
  DeviceMemory mem(0, 1 << 20);
  auto a = mem.Allocate(600 * 1024, Placement::kHbm, "a");
  ASSERT_TRUE(a.ok());
  auto b = mem.Allocate(600 * 1024, Placement::kHbm, "b");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kMemoryAllocation);
  EXPECT_NE(b.status().message().find("'b'"), std::string_view::npos) << b.status();
  auto stats = mem.Stats();
  EXPECT_EQ(stats.allocations, 1u);
  EXPECT_EQ(stats.in_use, 600u * 1024);
  ASSERT_TRUE(mem.Free(*a).ok());
  EXPECT_TRUE(mem.Allocate(600 * 1024, Placement::kHbm, "b").ok());
  EXPECT_EQ(mem.Stats().peak, 600u * 1024);
}

TEST(DeviceMemory, DefaultPagesOnlyMakeResidentThePagesWritten) {
  // A KV cache's pattern: one row per head written, the heads 256 KiB apart. On 4 KiB pages only
  // those pages become resident (on huge pages each write would take 2 MiB).
  constexpr std::uint64_t kBytes = 64ull << 20, kStride = 256 << 10;
  DeviceMemory mem(0, kBytes);
  auto ptr = mem.Allocate(kBytes, Placement::kHbm, "kv", PagePolicy::kDefaultOnly);
  ASSERT_TRUE(ptr.ok()) << ptr.status();
  EXPECT_EQ(*mem.ResidentBytes(*ptr, kBytes), 0u);
  for (std::uint64_t at = 0; at < kBytes; at += kStride) {
    auto m = mem.Map(*ptr + at, 256);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(std::to_integer<int>(m->data()[0]), 0);  // zeroed
    std::memset(m->data(), 7, 256);
  }
  EXPECT_EQ(*mem.ResidentBytes(*ptr, kBytes), kBytes / kStride * 4096);
  EXPECT_FALSE(mem.ResidentBytes(*ptr + kBytes, 1).ok());  // outside: an error, as Map
}

TEST(DeviceMemory, AccessOutsideAnAllocationNamesAddressAndAllocation) {
  DeviceMemory mem(0, 1 << 20);
  DevicePtr p = mem.Allocate(100, Placement::kHbm, "weights").value();
  EXPECT_TRUE(mem.Map(p, 100).ok());
  EXPECT_TRUE(mem.Map(p + 60, 40).ok());
  auto bad = mem.Map(p + 60, 41);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'weights'"), std::string_view::npos) << bad.status();
  EXPECT_NE(bad.status().message().find(ToString(p + 60)), std::string_view::npos) << bad.status();
  ASSERT_TRUE(mem.Free(p).ok());
  EXPECT_FALSE(mem.Map(p, 1).ok());
  EXPECT_EQ(mem.Free(p).code(), StatusCode::kParamInvalid);  // double free
}

// ---- streams ----------------------------------------------------------------------------------------
TEST(Streams, KernelsRunInSubmissionOrderAndComputeRealResults) {
  auto rt = MakeRuntime();
  constexpr std::uint64_t n = 1000;
  DevicePtr a = rt->Malloc(0, n * 4).value(), c = rt->Malloc(0, n * 4).value();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 4, {a.value, n, FloatBits(1.5f)}).ok());
  ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 3, {c.value, n, FloatBits(0.f)}).ok());
  // c += a, 20 times, with various block_dims: only in-order execution gives 30.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(rt->LaunchKernel(s, "vector_add_f32", 1 + i % 7, {c.value, a.value, c.value, n}).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  for (float v : Read(*rt, c, n)) ASSERT_EQ(v, 30.f);
  EXPECT_GT(rt->HostClock(), 0);
}

// A D2H copy with data_in_place moves nothing and takes the same virtual time as the copy; the
// host then reads the bytes itself (ReadInPlace), counted as copy time, and a range outside the
// allocation fails the copy task (on the stream) and the read (naming the address).
TEST(Streams, AnInPlaceReadCostsTheCopysTimeAndTheHostReadsTheBytes) {
  auto rt = MakeRuntime();
  constexpr std::uint64_t n = 4096;
  DevicePtr a = rt->Malloc(0, n * 4).value();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 4, {a.value, n, FloatBits(2.5f)}).ok());
  std::vector<float> host(n, -1.f);
  auto copy = [&](bool in_place, std::uint64_t bytes) {
    Task t = Task::Copy(CopyKind::kDeviceToHost, bytes);
    t.src_dev = a;
    t.data_in_place = in_place;
    if (!in_place) t.dst_host = host.data();
    return t;
  };
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  const VTime t0 = rt->HostClock();
  ASSERT_TRUE(rt->Submit(s, {copy(false, n * 4)}).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  const VTime copied = rt->HostClock() - t0;
  for (float v : host) ASSERT_EQ(v, 2.5f);

  std::fill(host.begin(), host.end(), -1.f);
  const std::uint64_t bytes0 = rt->Stats(0)->dma_copy_bytes;
  const VTime t1 = rt->HostClock();
  ASSERT_TRUE(rt->Submit(s, {copy(true, n * 4)}).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  EXPECT_EQ(rt->HostClock() - t1, copied);  // the same device time
  EXPECT_EQ(host[0], -1.f);                  // nothing moved
  EXPECT_EQ(rt->Stats(0)->dma_copy_bytes, bytes0);
  ASSERT_TRUE(rt->ReadInPlace(0, host.data(), a, n * 4).ok());
  for (float v : host) ASSERT_EQ(v, 2.5f);
  EXPECT_EQ(rt->Stats(0)->dma_copy_bytes, bytes0 + n * 4);  // the host's read is the copy

  ASSERT_TRUE(rt->Submit(s, {copy(true, n * 4 + 4)}).ok());
  EXPECT_FALSE(rt->SynchronizeStream(s).ok());
  auto bad = rt->ReadInPlace(0, host.data(), a + 8, n * 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(ToString(a + 8)), std::string_view::npos) << bad;
  EXPECT_EQ(rt->ReadInPlace(0, nullptr, a, 4).code(), StatusCode::kParamInvalid);
  EXPECT_FALSE(rt->ReadInPlace(7, host.data(), a, 4).ok());
}

// ---- copies run by their stream ---------------------------------------------------------------------
// A stream runs a small copy on a free DMA channel itself (StreamActor::CopyHere) instead of
// sending it through the engine to the channel's actor; RuntimeOptions::copies_here false sends
// every copy. Whether that is off for this process (NPUFLOW_COPIES_HERE=0, or the race detector).
bool CopiesHereOff() {
  const char* v = std::getenv("NPUFLOW_COPIES_HERE");
  return (v != nullptr && std::string_view(v) == "0") || RaceDetector::ProcessDefault();
}

// The same copies both ways give the same bytes, virtual times and counts; a copy past
// kCopyHereMaxBytes, and a peer-to-peer one, still go through the channels.
TEST(CopiesHere, GiveTheSameBytesVirtualTimesAndCountsAsThroughTheChannels) {
  std::vector<VTime> clocks;
  std::vector<std::uint64_t> bytes;
  for (bool here : {true, false}) {
    SCOPED_TRACE(fmt::format("copies here {}", here));
    auto rt = MakeRuntime({.chips = {"910B", "910B"}, .deterministic = true, .copies_here = here});
    constexpr std::uint64_t kSmall = 4096, kLarge = kCopyHereMaxBytes + 2 * kSmall;
    DevicePtr a = rt->Malloc(0, kLarge).value(), b = rt->Malloc(0, kLarge).value(), p = rt->Malloc(1, kSmall).value();
    Stream s = rt->CreateStream(0).value();
    std::vector<std::uint8_t> in(kLarge), out(kLarge, 0), back(kSmall, 0);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint8_t>(i * 7 + 3);
    const DeviceStats before = rt->Stats(0).value();
    const VTime t0 = rt->HostClock();
    ASSERT_TRUE(rt->MemcpyH2DAsync(s, a, in.data(), kSmall).ok());            // here
    ASSERT_TRUE(rt->MemcpyD2DAsync(s, b, a, kSmall).ok());                    // here
    ASSERT_TRUE(rt->MemcpyH2DAsync(s, a + kSmall, in.data() + kSmall, kLarge - kSmall).ok());  // too large
    ASSERT_TRUE(rt->MemcpyD2HAsync(s, out.data(), b, kSmall).ok());           // here
    ASSERT_TRUE(rt->MemcpyD2HAsync(s, out.data() + kSmall, a + kSmall, kLarge - kSmall).ok());
    ASSERT_TRUE(rt->MemcpyPeerAsync(s, 1, p, a, kSmall).ok());                // peer to peer
    ASSERT_TRUE(rt->SynchronizeStream(s).ok());
    ASSERT_TRUE(rt->MemcpyD2H(1, back.data(), p, kSmall).ok());
    clocks.push_back(rt->HostClock() - t0);
    EXPECT_EQ(out, in);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), in.begin()));
    const DeviceStats after = rt->Stats(0).value();
    EXPECT_EQ(after.tasks_executed - before.tasks_executed, 6u);
    bytes.push_back(after.dma_copy_bytes - before.dma_copy_bytes);
    EXPECT_EQ(after.copies_here - before.copies_here, here && !CopiesHereOff() ? 3u : 0u);
  }
  EXPECT_EQ(clocks[0], clocks[1]);
  EXPECT_EQ(bytes[0], bytes[1]);
}

// A channel's injected fault meets the copy a stream runs on it as it meets one sent to it: a
// failure names the channel and the task, a hang leaves the stream waiting until it is aborted,
// a delay lengthens the copy's virtual time; the stream serves again after each.
TEST(CopiesHere, AChannelsFaultsMeetTheCopiesAStreamRunsOnIt) {
 std::vector<std::string> seen;
 for (bool here : {true, false}) {
  SCOPED_TRACE(fmt::format("copies here {}", here));
  auto rt = MakeRuntime({.deterministic = true, .copies_here = here});
  const int channels = rt->chip(0).value()->dma_channels;
  auto fault_all = [&](Fault f) {
    for (int c = 0; c < channels; ++c) ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kDma, c, f).ok());
  };
  DevicePtr a = rt->Malloc(0, 64).value();
  Stream s = rt->CreateStream(0).value();
  std::vector<std::uint8_t> in(64, 9), out(64, 0);
  fault_all(Fault{FaultKind::kFail, 1});
  ASSERT_TRUE(rt->MemcpyH2DAsync(s, a, in.data(), 64).ok());
  Status failed = rt->SynchronizeStream(s);
  EXPECT_EQ(failed.code(), StatusCode::kFailed) << failed;
  EXPECT_NE(failed.message().find("injected fault on dma"), std::string_view::npos) << failed;
  EXPECT_NE(failed.message().find("task 0 (memcpy)"), std::string_view::npos) << failed;
  const Fault harmless{FaultKind::kDelay, 1, 0};  // replaces the faults the other channels still hold
  fault_all(harmless);
  ASSERT_TRUE(rt->MemcpyH2DAsync(s, a, in.data(), 64).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());

  fault_all(Fault{FaultKind::kHang, 1});
  ASSERT_TRUE(rt->MemcpyD2HAsync(s, out.data(), a, 64).ok());
  EXPECT_EQ(rt->SynchronizeStream(s, 30ms).code(), StatusCode::kTimeout);
  ASSERT_TRUE(rt->AbortStream(s).ok());
  EXPECT_EQ(rt->SynchronizeStream(s, 5s).code(), StatusCode::kAborted);
  fault_all(harmless);
  ASSERT_TRUE(rt->MemcpyD2HAsync(s, out.data(), a, 64).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s, 5s).ok());
  EXPECT_EQ(out, in);

  const VTime t0 = rt->HostClock();
  ASSERT_TRUE(rt->MemcpyH2DAsync(s, a, in.data(), 64).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  const VTime plain = rt->HostClock() - t0;
  fault_all(Fault{FaultKind::kDelay, 1, 1'000'000});
  const VTime t1 = rt->HostClock();
  ASSERT_TRUE(rt->MemcpyH2DAsync(s, a, in.data(), 64).ok());
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  EXPECT_GE(rt->HostClock() - t1, 1'000'000);
  EXPECT_GT(rt->HostClock() - t1, plain);
  seen.emplace_back(failed.message());
  seen.push_back(std::to_string(rt->HostClock() - t1));
  EXPECT_EQ(rt->Stats(0)->copies_here, here && !CopiesHereOff() ? 6u : 0u);  // all but the hung one
 }
 EXPECT_EQ(seen[0], seen[2]);  // the same error text
 EXPECT_EQ(seen[1], seen[3]);  // the same delayed virtual time
}

// A small chip with one DMA channel, written where a test can name it (RuntimeOptions::chips).
std::string WriteTinyChip(const std::string& file, int max_streams, int max_events) {
  const std::string path = testing::TempDir() + "/" + file;
  const std::string spec = fmt::format(
      R"({{"name":"tiny","aicore_count":2,"aicpu_count":1,"hbm_capacity_bytes":16777216,
    "hbm_bandwidth_gbps":100,"h2d_bandwidth_gbps":10,"d2h_bandwidth_gbps":10,"d2d_bandwidth_gbps":50,
    "dma_latency_ns":100,"dma_channels":1,"host_launch_latency_ns":100,"event_record_latency_ns":10,
    "event_wait_latency_ns":10,"nop_latency_ns":1,"kernel_launch_overhead_ns":10,"aicpu_launch_overhead_ns":10,
    "task_update_latency_ns":50,"aicore_gflops":10,"aicpu_gflops":1,"prefetch_num":4,"max_streams":{},
    "max_events":{},"features":{{"task_update":true}}}})",
      max_streams, max_events);
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(spec.c_str(), f);
    std::fclose(f);
  }
  return path;
}

// A stream does not run a copy ahead of one another stream sent before it (found in review): on
// one channel, A's 1 MiB copy is sent, then B's 4 KiB copy starts; both ways B's ends after A's, at
// the same virtual times. And a Synchronize of the tasks before a copy is answered before the
// copy runs, as when the copy is sent (also found in review): with the channel hung, it is still
// answered.
TEST(CopiesHere, NeverGoAheadOfCopiesSentBeforeThemNorOfSynchronizesBeforeThem) {
  const std::string chip = WriteTinyChip("npuflow_one_dma_channel.json", 8, 8);
  std::vector<std::pair<VTime, VTime>> ends;
  std::vector<VTime> synced;
  for (bool here : {false, true}) {
    SCOPED_TRACE(fmt::format("copies here {}", here));
    auto rt = MakeRuntime({.chips = {chip}, .deterministic = true, .copies_here = here});
    DevicePtr a = rt->Malloc(0, 1 << 20).value(), b = rt->Malloc(0, 4096).value();
    Stream sa = rt->CreateStream(0).value(), sb = rt->CreateStream(0).value(), sc = rt->CreateStream(0).value();
    std::vector<std::uint8_t> big(1 << 20, 1), small(4096, 2);
    Event go = rt->CreateEvent(0).value(), sent = rt->CreateEvent(0).value();
    ASSERT_TRUE(rt->StreamWaitEvent(sa, go).ok());
    ASSERT_TRUE(rt->RecordEvent(sent, sa).ok());
    ASSERT_TRUE(rt->MemcpyH2DAsync(sa, a, big.data(), big.size()).ok());
    ASSERT_TRUE(rt->StreamWaitEvent(sb, sent).ok());
    ASSERT_TRUE(rt->MemcpyH2DAsync(sb, b, small.data(), small.size()).ok());
    ASSERT_TRUE(rt->RecordEvent(go, sc).ok());
    auto fa = rt->SynchronizeStreamAsync(sa);
    auto fb = rt->SynchronizeStreamAsync(sb);
    auto ra = fa.GetFor(10s);
    auto rb = fb.GetFor(10s);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_GT(*rb, *ra);
    ends.emplace_back(*ra, *rb);

    // [wait, copy]: a Synchronize of the wait alone, the copy's channel hung.
    ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kDma, 0, Fault{FaultKind::kHang, 1}).ok());
    Stream s = rt->CreateStream(0).value();
    Event e = rt->CreateEvent(0).value();
    ASSERT_TRUE(rt->StreamWaitEvent(s, e).ok());
    ASSERT_TRUE(rt->MemcpyH2DAsync(s, b, small.data(), small.size()).ok());
    auto wait_done = rt->SynchronizeSubmissionAsync(s, 0, 1);
    ASSERT_TRUE(rt->RecordEvent(e, sc).ok());
    auto w = wait_done.GetFor(5s);  // not answered at all before the fix: the copy hung
    ASSERT_TRUE(w.ok()) << w.status();
    synced.push_back(*w);
    EXPECT_EQ(rt->SynchronizeStream(s, 30ms).code(), StatusCode::kTimeout);
    ASSERT_TRUE(rt->AbortStream(s).ok());
    (void)rt->SynchronizeStream(s, 5s);
  }
  EXPECT_EQ(ends[0], ends[1]);
  EXPECT_EQ(synced[0], synced[1]);
}

// Streams on several host threads copy small buffers through the device and back while another
// stream's large copies hold the channels: every byte comes back, and some small copies ran on
// their stream (under ThreadSanitizer this is the check that a channel's state is held by one at a
// time).
TEST(CopiesHere, ManyStreamsCopyWhileLargeCopiesHoldTheChannels) {
  auto rt = MakeRuntime({.workers = 2});
  constexpr int kStreams = 4, kRounds = 150;
  constexpr std::uint64_t kSmall = 256, kLarge = 1 << 20;
  std::atomic<bool> done{false};
  std::thread large([&] {
    Stream s = rt->CreateStream(0).value();
    DevicePtr d = rt->Malloc(0, kLarge).value();
    std::vector<std::uint8_t> h(kLarge, 1);
    while (!done.load()) {
      ASSERT_TRUE(rt->MemcpyH2DAsync(s, d, h.data(), kLarge).ok());
      ASSERT_TRUE(rt->SynchronizeStream(s).ok());
    }
  });
  std::vector<std::thread> threads;
  for (int k = 0; k < kStreams; ++k) {
    threads.emplace_back([&, k] {
      Stream s = rt->CreateStream(0).value();
      DevicePtr d = rt->Malloc(0, kSmall).value();
      std::vector<std::uint8_t> in(kSmall), out(kSmall);
      for (int r = 0; r < kRounds; ++r) {
        for (std::size_t i = 0; i < kSmall; ++i) in[i] = static_cast<std::uint8_t>(k * 31 + r * 7 + i);
        ASSERT_TRUE(rt->MemcpyH2DAsync(s, d, in.data(), kSmall).ok());
        ASSERT_TRUE(rt->MemcpyD2HAsync(s, out.data(), d, kSmall).ok());
        ASSERT_TRUE(rt->SynchronizeStream(s).ok());
        ASSERT_EQ(out, in) << "stream " << k << " round " << r;
      }
    });
  }
  for (auto& t : threads) t.join();
  done.store(true);
  large.join();
  if (!CopiesHereOff()) EXPECT_GT(rt->Stats(0)->copies_here, 0u);
}

TEST(Streams, SubmissionsFromManyThreadsAreAppliedInLockOrder) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) ASSERT_TRUE(rt->Submit(s, {Task::Nop(), Task::Nop()}).ok());
    });
  for (auto& th : threads) th.join();
  ASSERT_TRUE(rt->SynchronizeStream(s).ok());
  EXPECT_GE(rt->Stats(0)->tasks_executed, 1600u);
}

TEST(Streams, UnknownKernelAndBadBlockDimAreRefusedAtLaunch) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  EXPECT_EQ(rt->LaunchKernel(s, "nope", 1, {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(rt->LaunchKernel(s, "noop", 0, {}).code(), StatusCode::kParamInvalid);
  EXPECT_EQ(rt->LaunchKernel(s, "tiling_write", 1, {}).code(), StatusCode::kParamInvalid);
  EXPECT_EQ(rt->LaunchKernel(Stream{0, 99}, "noop", 1, {}).code(), StatusCode::kNotFound);
  EXPECT_EQ(rt->LaunchKernel(Stream{3, 0}, "noop", 1, {}).code(), StatusCode::kParamInvalid);
}

TEST(Streams, OutOfBoundsKernelAccessFailsTheStreamNamingTheAllocation) {
  auto rt = MakeRuntime();
  DevicePtr a = rt->Malloc(0, 64, Placement::kHbm, "small").value();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 1, {a.value, 1000, FloatBits(1.f)}).ok());
  Status st = rt->SynchronizeStream(s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'small'"), std::string_view::npos) << st;
  EXPECT_NE(st.message().find("stream 1 task 0"), std::string_view::npos) << st;
  // The error is reported once; the stream serves again.
  ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 1, {a.value, 16, FloatBits(1.f)}).ok());
  EXPECT_TRUE(rt->SynchronizeStream(s).ok());
}

TEST(Streams, AHungHostStreamEndsInTimeoutThenAbortAndServesAgain) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kHang, 1}).ok());
  ASSERT_TRUE(rt->LaunchKernel(s, "noop", 1, {}).ok());
  ASSERT_TRUE(rt->Submit(s, {Task::Nop()}).ok());
  EXPECT_EQ(rt->SynchronizeStream(s, 30ms).code(), StatusCode::kTimeout);
  ASSERT_TRUE(rt->AbortStream(s).ok());
  Status aborted = rt->SynchronizeStream(s, 5s);
  EXPECT_EQ(aborted.code(), StatusCode::kAborted) << aborted;
  ASSERT_TRUE(rt->LaunchKernel(s, "noop", 1, {}).ok());  // the same AICore: its fault has fired
  EXPECT_TRUE(rt->SynchronizeStream(s, 5s).ok());
}

TEST(Streams, OutOfDeviceMemoryThroughTheHostApi) {
  auto rt = MakeRuntime({.chips = {"310P"}});
  const auto capacity = rt->chip(0).value()->hbm_capacity_bytes;
  auto big = rt->Malloc(0, capacity + 1);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kMemoryAllocation);
  // Host-placed memory is not the device's.
  auto host = rt->Malloc(0, 1 << 20, Placement::kHost, "pinned");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(rt->Stats(0)->memory.in_use, 0u);
  EXPECT_EQ(rt->Stats(0)->memory.host_in_use, 1u << 20);
}

TEST(Streams, SynchronizeTimesOutOnAHungTask) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, s.id, Fault{FaultKind::kHang, 2}).ok());
  ASSERT_TRUE(rt->Submit(s, {Task::Nop(), Task::Nop(), Task::Nop()}).ok());
  Status st = rt->SynchronizeStream(s, 50ms);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st;
  EXPECT_TRUE(rt->DestroyStream(s).ok());  // the hung stream is reset, not leaked
}

TEST(Faults, AUnitFailureReachesTheHostWithDeviceStreamUnitAndTask) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kFail, 1}).ok());
  // The first stream to run a kernel has its home at aicore 0.
  ASSERT_TRUE(rt->LaunchKernel(s, "noop", 1, {}).ok());
  Status st = rt->SynchronizeStream(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("device 0"), std::string_view::npos) << st;
  EXPECT_NE(st.message().find("stream 1"), std::string_view::npos) << st;
  EXPECT_NE(st.message().find("task 0"), std::string_view::npos) << st;
  EXPECT_NE(st.message().find("aicore 0"), std::string_view::npos) << st;
  EXPECT_EQ(rt->InjectFault(0, FaultTarget::kAICore, 99, Fault{}).code(), StatusCode::kParamInvalid);
}

TEST(Faults, ADelayMovesVirtualTimeOnly) {
  auto base = MakeRuntime();
  Stream s0 = base->CreateStream(0).value();
  ASSERT_TRUE(base->Submit(s0, {Task::Nop(), Task::Nop()}).ok());
  ASSERT_TRUE(base->SynchronizeStream(s0).ok());
  auto delayed = MakeRuntime();
  Stream s1 = delayed->CreateStream(0).value();
  ASSERT_TRUE(delayed->InjectFault(0, FaultTarget::kStream, s1.id, Fault{FaultKind::kDelay, 1, 1'000'000}).ok());
  ASSERT_TRUE(delayed->Submit(s1, {Task::Nop(), Task::Nop()}).ok());
  ASSERT_TRUE(delayed->SynchronizeStream(s1).ok());
  EXPECT_GE(delayed->HostClock() - base->HostClock(), 1'000'000 - 1);
}

// A stream's kernels start at its home unit, given with its first kernel: the first stream's is
// unit 0, the next ones as far as can be from those before (HomeUnit). Seen through the units an
// injected failure names.
TEST(Faults, EachStreamsKernelsStartAtItsHomeUnitAndTheStreamsHomesSpreadOverTheUnits) {
  auto rt = MakeRuntime();
  const int units = rt->chip(0).value()->aicore_count;
  ASSERT_EQ(units, 24);
  Stream a = rt->CreateStream(0).value();
  Stream b = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->LaunchKernel(a, "noop", 4, {}).ok());  // a: home 0, parts on 0-3
  ASSERT_TRUE(rt->SynchronizeStream(a).ok());
  ASSERT_TRUE(rt->LaunchKernel(b, "noop", 1, {}).ok());  // b: home 12
  ASSERT_TRUE(rt->SynchronizeStream(b).ok());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 12, Fault{FaultKind::kFail, 1}).ok());
    ASSERT_TRUE(rt->LaunchKernel(a, "noop", 1, {}).ok());  // on 0: unit 12's fault waits for b
    EXPECT_TRUE(rt->SynchronizeStream(a).ok());
    ASSERT_TRUE(rt->LaunchKernel(b, "noop", 1, {}).ok());
    Status st = rt->SynchronizeStream(b);
    ASSERT_EQ(st.code(), StatusCode::kFailed) << st;
    EXPECT_NE(st.message().find("aicore 12"), std::string_view::npos) << st;
    ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 1, Fault{FaultKind::kFail, 1}).ok());
    ASSERT_TRUE(rt->LaunchKernel(a, "noop", 2, {}).ok());  // on 0-1
    st = rt->SynchronizeStream(a);
    ASSERT_EQ(st.code(), StatusCode::kFailed) << st;
    EXPECT_TRUE(st.message().ends_with("on aicore 1")) << st;
  }
  // The third stream's home is between the first two: unit 6.
  Stream c = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 6, Fault{FaultKind::kFail, 1}).ok());
  ASSERT_TRUE(rt->LaunchKernel(c, "noop", 1, {}).ok());
  Status st = rt->SynchronizeStream(c);
  ASSERT_EQ(st.code(), StatusCode::kFailed) << st;
  EXPECT_NE(st.message().find("aicore 6"), std::string_view::npos) << st;
}

// A kernel's parts go as one message per worker thread: the first unit of each run of parts runs
// the run's others on their own units' states (SendKernelParts). So with one worker a 24-part
// kernel costs the actors what a one-part kernel does, with two workers one message more, and
// every part still runs on its own unit's clock: the same start, 24 unit tracks.
TEST(Units, AKernelsPartsGoAsOneMessagePerWorkerEachOnItsOwnUnitsClock) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    auto rt = MakeRuntime({.workers = workers, .trace = true});
    Stream s = rt->CreateStream(0).value();
    auto messages = [&](std::uint32_t block_dim) -> std::uint64_t {
      rt->system().WaitIdle();
      const std::uint64_t before = rt->system().Stats().handled;
      EXPECT_TRUE(rt->LaunchKernel(s, "noop", block_dim, {}).ok());
      EXPECT_TRUE(rt->SynchronizeStream(s).ok());
      rt->system().WaitIdle();
      return rt->system().Stats().handled - before;
    };
    (void)messages(24);  // the stream's home and its units' first use
    // The fewest of a few launches: a run of parts held up past its wall-time budget (a preempted
    // thread) sends the rest as messages.
    std::uint64_t one = ~std::uint64_t{0}, many = ~std::uint64_t{0};
    for (int i = 0; i < 5; ++i) {
      one = std::min(one, messages(1));
      many = std::min(many, messages(24));
    }
    EXPECT_EQ(many, one + static_cast<std::uint64_t>(workers - 1));
    auto doc = nlohmann::json::parse(rt->trace().ToJson());
    std::set<std::pair<double, double>> parts;  // (track, start) of the last kernel's parts
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "X" && e["args"].contains("block_dim") && e["args"]["block_dim"] == 24 && e["args"]["task"] == 2)
        parts.insert({e["tid"].get<double>(), e["ts"].get<double>()});
    ASSERT_EQ(parts.size(), 24u);
    std::set<double> tracks, starts;
    for (const auto& [track, start] : parts) {
      tracks.insert(track);
      starts.insert(start);
    }
    EXPECT_EQ(tracks.size(), 24u) << "every part on its own unit";
    EXPECT_EQ(starts.size(), 1u) << "every part starts at the kernel's start on its own idle unit";
  }
}

TEST(Units, HomeUnitsHalveTheGapsBetweenThoseBeforeAndTakeEveryUnitOnceBeforeAnyAgain) {
  const std::uint32_t want24[] = {0, 12, 6, 18, 3, 15, 9, 21, 1, 13, 7, 19, 4, 16, 10, 22};
  for (std::uint32_t k = 0; k < 16; ++k) EXPECT_EQ(HomeUnit(k, 24), want24[k]) << k;
  const std::uint32_t want8[] = {0, 4, 2, 6, 1, 5, 3, 7};
  for (std::uint32_t k = 0; k < 8; ++k) EXPECT_EQ(HomeUnit(k, 8), want8[k]) << k;
  const std::uint32_t want6[] = {0, 3, 1, 4, 2, 5};  // the 910B's AICPUs
  for (std::uint32_t k = 0; k < 6; ++k) EXPECT_EQ(HomeUnit(k, 6), want6[k]) << k;
  // However many units: the first `units` streams have a unit each, and then it starts again.
  for (std::uint32_t units : {1u, 2u, 3u, 6u, 7u, 10u, 24u, 33u, 1000u}) {
    std::set<std::uint32_t> seen;
    for (std::uint32_t k = 0; k < units; ++k) {
      const std::uint32_t home = HomeUnit(k, units);
      EXPECT_LT(home, units) << k << " of " << units;
      seen.insert(home);
      EXPECT_EQ(HomeUnit(k + units, units), home) << k << " of " << units;
    }
    EXPECT_EQ(seen.size(), units) << units;
    EXPECT_LT(HomeUnit(0xFFFFFFFFu, units), units);
  }
}

// A kernel of several parts is reported by the unit that ends its last part (the parts fold their
// ends and first error into the kernel's job): a delayed part moves the kernel's end, a failed part
// fails it, naming its unit. Real threads, repeated: which part ends last varies.
TEST(Faults, AKernelInManyPartsEndsWithItsLatestPartAndFailsWithAnyOfThem) {
  for (int round = 0; round < 8; ++round) {
    auto base = MakeRuntime({.workers = 2});
    Stream s0 = base->CreateStream(0).value();
    ASSERT_TRUE(base->LaunchKernel(s0, "noop", 8, {}).ok());
    ASSERT_TRUE(base->SynchronizeStream(s0).ok());
    // The stream's home is aicore 0: both kernels' 8 parts run on aicores 0-7.
    auto rt = MakeRuntime({.workers = 2});
    Stream s = rt->CreateStream(0).value();
    ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 5, Fault{FaultKind::kDelay, 1, 1'000'000}).ok());
    ASSERT_TRUE(rt->LaunchKernel(s, "noop", 8, {}).ok());
    ASSERT_TRUE(rt->SynchronizeStream(s).ok());
    EXPECT_GE(rt->HostClock() - base->HostClock(), 1'000'000 - 1);
    ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 4, Fault{FaultKind::kFail, 1}).ok());
    ASSERT_TRUE(rt->LaunchKernel(s, "noop", 8, {}).ok());
    Status st = rt->SynchronizeStream(s);
    ASSERT_EQ(st.code(), StatusCode::kFailed) << st;
    EXPECT_NE(st.message().find("task 1"), std::string_view::npos) << st;
    EXPECT_NE(st.message().find("aicore 4"), std::string_view::npos) << st;
  }
}

// ---- events across streams ---------------------------------------------------------------------------
// Perturbs every delivery a little, at random, so cross-stream order comes only from events.
class JitterTap : public actors::DeliveryTap {
 public:
  explicit JitterTap(std::uint32_t seed) : rng_(seed) {}
  std::chrono::nanoseconds OnDelivery(const actors::Delivery&) override {
    std::lock_guard<std::mutex> lock(mu_);
    return rng_() % 4 == 0 ? std::chrono::nanoseconds(rng_() % 20'000) : std::chrono::nanoseconds(0);
  }

 private:
  std::mutex mu_;
  std::mt19937 rng_;
};

TEST(Events, CrossStreamOrderHoldsUnder1000RandomizedSchedules) {
  auto rt = MakeRuntime({.workers = 2});
  constexpr std::uint64_t n = 256;
  DevicePtr x = rt->Malloc(0, n * 4).value(), y = rt->Malloc(0, n * 4).value(), zero = rt->Malloc(0, n * 4).value();
  Stream producer = rt->CreateStream(0).value(), consumer = rt->CreateStream(0).value();
  Event ready = rt->CreateEvent(0).value();
  JitterTap tap(7);
  ASSERT_TRUE(rt->system().SetTap(&tap).ok());
  for (int iter = 0; iter < 1000; ++iter) {
    const float v = static_cast<float>(iter);
    // producer: x = v (in two steps, so a reader that runs early sees a half-written state)
    ASSERT_TRUE(rt->LaunchKernel(producer, "fill_f32", 2, {x.value, n, FloatBits(-1.f)}).ok());
    ASSERT_TRUE(rt->LaunchKernel(producer, "fill_f32", 4, {x.value, n, FloatBits(v)}).ok());
    ASSERT_TRUE(rt->RecordEvent(ready, producer).ok());
    // consumer: waits, then y = x + 0
    ASSERT_TRUE(rt->StreamWaitEvent(consumer, ready).ok());
    ASSERT_TRUE(rt->LaunchKernel(consumer, "vector_add_f32", 3, {x.value, zero.value, y.value, n}).ok());
    ASSERT_TRUE(rt->SynchronizeStream(consumer).ok());
    ASSERT_TRUE(rt->SynchronizeStream(producer).ok());
    auto out = Read(*rt, y, n);
    for (float f : out) ASSERT_EQ(f, v) << "iteration " << iter;
  }
  ASSERT_TRUE(rt->system().SetTap(nullptr).ok());
}

TEST(Events, QueryAndHostSynchronize) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  Event e = rt->CreateEvent(0).value();
  EXPECT_FALSE(rt->QueryEvent(e).value());
  EXPECT_EQ(rt->SynchronizeEvent(e, 20ms).code(), StatusCode::kTimeout);
  ASSERT_TRUE(rt->RecordEvent(e, s).ok());
  EXPECT_TRUE(rt->SynchronizeEvent(e, 5s).ok());
  EXPECT_TRUE(rt->QueryEvent(e).value());
  EXPECT_TRUE(rt->ResetEvent(e).ok());
  EXPECT_FALSE(rt->QueryEvent(e).value());
  EXPECT_TRUE(rt->DestroyEvent(e).ok());
  EXPECT_EQ(rt->QueryEvent(e).status().code(), StatusCode::kNotFound);
}

// ---- prefetch and task update (the tiling-sink hazard) -----------------------------------------------
struct TilingSinkProgram {
  Model model;
  Stream main, tiling;
  DevicePtr out, data;
};

// tiling stream: AICPU tiling (writes block_dim 8, tiling_key 42) -> update -> record
// main stream:   wait -> NOP x nops -> record_launch kernel (placeholder) -> fill kernel
TilingSinkProgram BuildTilingSink(Runtime& rt, int nops) {
  TilingSinkProgram p;
  p.model = rt.CreateModel(0).value();
  p.main = rt.CreateStream(0).value();
  p.tiling = rt.CreateStream(0).value();
  EXPECT_TRUE(rt.BindStream(p.model, p.main).ok());
  EXPECT_TRUE(rt.BindStream(p.model, p.tiling).ok());
  DevicePtr ctx = rt.Malloc(0, 64, Placement::kHbm, "tiling context").value();
  p.out = rt.Malloc(0, 16, Placement::kHbm, "launch record").value();
  Event ev = rt.CreateEvent(0).value();
  std::vector<Task> main;
  main.push_back(Task::Wait(ev.id));
  for (int i = 0; i < nops; ++i) main.push_back(Task::Nop());
  const auto kernel_index = static_cast<std::uint32_t>(main.size());
  main.push_back(Task::Kernel(Kernel("record_launch"), kTilingSinkBlockDim, {p.out.value}));
  std::vector<Task> tiling;
  tiling.push_back(Task::Kernel(Kernel("tiling_write"), 1, {ctx.value, (ctx + 8).value, 8, 42}));
  tiling.push_back(Task::Update(p.main.id, kernel_index, ctx, ctx + 8));
  tiling.push_back(Task::Record(ev.id));
  EXPECT_TRUE(rt.LoadTasks(p.model, p.main, std::move(main)).ok());
  EXPECT_TRUE(rt.LoadTasks(p.model, p.tiling, std::move(tiling)).ok());
  return p;
}

TEST(Prefetch, EnoughNopsLetTheUpdateLandAndTheKernelRunsWithIt) {
  auto rt = MakeRuntime();
  ASSERT_EQ(rt->chip(0).value()->prefetch_num, 8);
  auto p = BuildTilingSink(*rt, 8);
  for (int run = 0; run < 20; ++run) {
    auto end = rt->ExecuteModel(p.model, 10s);
    ASSERT_TRUE(end.ok()) << end.status();
    std::uint64_t launch[2];
    ASSERT_TRUE(rt->MemcpyD2H(0, launch, p.out, sizeof(launch)).ok());
    EXPECT_EQ(launch[0], 8u);   // block_dim from the AICPU tiling
    EXPECT_EQ(launch[1], 42u);  // tiling_key
  }
}

// An untraced model stream runs a row of NOPs at once (Task::nop_row); a traced one runs
// them one by one. Both reach the same virtual times, and the update still lands. (With the race
// detector forced on for the process, NPUFLOW_RACE_DETECT, both run them one by one.)
TEST(Prefetch, ARowOfNopsEndsAtTheSameVirtualTimeTracedOrNot) {
  std::vector<VTime> ends;
  for (bool trace : {false, true}) {
    auto rt = MakeRuntime({.deterministic = true, .trace = trace});
    auto p = BuildTilingSink(*rt, 12);
    VTime last = 0;
    for (int run = 0; run < 3; ++run) {
      auto end = rt->ExecuteModel(p.model, 10s);
      ASSERT_TRUE(end.ok()) << end.status();
      std::uint64_t launch[2];
      ASSERT_TRUE(rt->MemcpyD2H(0, launch, p.out, sizeof(launch)).ok());
      EXPECT_EQ(launch[0], 8u);
      EXPECT_EQ(launch[1], 42u);
      last = *end;
    }
    ends.push_back(last);
    if (trace) {  // the traced stream shows every NOP
      const std::string json = rt->trace().ToJson();
      std::size_t nops = 0;
      for (std::size_t at = json.find("\"nop\""); at != std::string::npos; at = json.find("\"nop\"", at + 1)) ++nops;
      EXPECT_EQ(nops, 3u * 12u);
    }
  }
  EXPECT_EQ(ends[0], ends[1]);
}

TEST(Prefetch, AnUpdateAfterTheKernelWasFetchedIsADetectedRace) {
  for (int nops : {0, 3, 7}) {
    auto rt = MakeRuntime();
    auto p = BuildTilingSink(*rt, nops);
    auto end = rt->ExecuteModel(p.model, 10s);
    ASSERT_FALSE(end.ok()) << "nops " << nops;
    const std::string msg(end.status().message());
    EXPECT_NE(msg.find("task update race"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("stream {} task 1", p.tiling.id)), std::string::npos) << msg;  // the update
    EXPECT_NE(msg.find(fmt::format("stream {} task {}", p.main.id, nops + 1)), std::string::npos) << msg;  // the kernel
  }
}

// The outcome must not depend on message timing: with the main stream's StartModel held back by
// the tap, the tiling stream's update arrives while the main stream has not started the run. On
// the device both streams start together, so the update still finds the kernel fetched (too few
// NOPs) or not yet fetched (enough). (A parked receiver delivers its held message first, so this
// does not make the update overtake StartModel; what does is a pass that finds both queued and
// takes the tiling stream's lane first, seen once under ThreadSanitizer: PatchTask::run covers it.)
class DelayStartOf : public actors::DeliveryTap {
 public:
  explicit DelayStartOf(std::string receiver) : receiver_(std::move(receiver)) {}
  std::chrono::nanoseconds OnDelivery(const actors::Delivery& d) override {
    if (d.kind == "StartModel" && d.receiver_name == receiver_) return 20ms;
    return std::chrono::nanoseconds(0);
  }

 private:
  std::string receiver_;
};

TEST(Prefetch, TheRaceDoesNotDependOnWhenTheTargetStreamHearsOfTheRun) {
  for (int nops : {3, 8}) {
    auto rt = MakeRuntime();
    auto p = BuildTilingSink(*rt, nops);
    DelayStartOf tap(fmt::format("dev0.stream{}", p.main.id));
    ASSERT_TRUE(rt->system().SetTap(&tap).ok());
    for (int run = 0; run < 3; ++run) {
      auto end = rt->ExecuteModel(p.model, 10s);
      if (nops < 8) {
        ASSERT_FALSE(end.ok()) << "nops " << nops;
        EXPECT_NE(std::string(end.status().message()).find("task update race"), std::string::npos) << end.status();
      } else {
        ASSERT_TRUE(end.ok()) << end.status();
        std::uint64_t launch[2];
        ASSERT_TRUE(rt->MemcpyD2H(0, launch, p.out, sizeof(launch)).ok());
        EXPECT_EQ(launch[0], 8u);
        EXPECT_EQ(launch[1], 42u);
      }
    }
    rt->system().WaitIdle();
    EXPECT_TRUE(rt->system().SetTap(nullptr).ok());
  }
}

TEST(Prefetch, TaskUpdateIsRefusedOnAChipWithoutTheFeature) {
  auto rt = MakeRuntime({.chips = {"310P"}});
  Stream s = rt->CreateStream(0).value();
  DevicePtr words = rt->Malloc(0, 16).value();
  ASSERT_TRUE(rt->Submit(s, {Task::Nop(), Task::Update(s.id, 0, words, words + 8)}).ok());
  Status st = rt->SynchronizeStream(s);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st;
  EXPECT_NE(st.message().find("310P"), std::string_view::npos) << st;
}

TEST(Prefetch, AKernelStartingWithThePlaceholderFails) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  DevicePtr out = rt->Malloc(0, 16).value();
  ASSERT_TRUE(rt->Submit(s, {Task::Kernel(Kernel("record_launch"), kTilingSinkBlockDim, {out.value})}).ok());
  Status st = rt->SynchronizeStream(s);
  EXPECT_NE(st.message().find("kernel record_launch on stream 1 task 0 started with unresolved tiling placeholder"),
            std::string_view::npos)
      << st;
}

// ---- device models ----------------------------------------------------------------------------------
TEST(DeviceModel, OneExecuteIsOneHostInteraction) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value(), b = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->BindStream(m, b).ok());
  Event e = rt->CreateEvent(0).value();
  std::vector<Task> ta, tb;
  for (int i = 0; i < 50; ++i) ta.push_back(Task::Kernel(Kernel("noop"), 2, {}));
  ta.push_back(Task::Record(e.id));
  tb.push_back(Task::Wait(e.id));
  for (int i = 0; i < 50; ++i) tb.push_back(Task::Kernel(Kernel("noop"), 1, {}));
  ASSERT_TRUE(rt->LoadTasks(m, a, ta).ok());
  ASSERT_TRUE(rt->LoadTasks(m, b, tb).ok());
  ASSERT_TRUE(rt->ExecuteModel(m).ok());  // warm
  const auto before = rt->Stats(0)->host_interactions;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(rt->ExecuteModel(m).ok());
  EXPECT_EQ(rt->Stats(0)->host_interactions - before, 10u);
  EXPECT_EQ(rt->Submit(a, {Task::Nop()}).status().code(), StatusCode::kParamInvalid);  // bound: no host launches
}

TEST(DeviceModel, AHangEndsInTimeoutAndAbortAndTheModelRunsAgain) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Kernel(Kernel("noop"), 1, {}), Task::Nop()}).ok());
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kHang, 1}).ok());
  auto end = rt->ExecuteModel(m, 50ms);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().code(), StatusCode::kTimeout);
  EXPECT_NE(end.status().message().find("aborted"), std::string_view::npos) << end.status();
  // The fault fired once; the next run, on the same AICore (the stream's home), completes.
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
  // Queued executions fail on abort rather than hang.
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, a.id, Fault{FaultKind::kHang, 1}).ok());
  auto first = rt->ExecuteModelAsync(m);
  auto second = rt->ExecuteModelAsync(m);
  ASSERT_TRUE(rt->AbortModel(m).ok());
  EXPECT_EQ(first.Get().status().code(), StatusCode::kAborted);
  EXPECT_EQ(second.Get().status().code(), StatusCode::kAborted);
}

// ---- runs of kernels ------------------------------------------------------------------------------
// An untraced model stream starts the fetched kernels after a kernel, with only NOPs between them,
// as one run (StreamActor::StartKernelRun): the run of parts that ends one starts the next, and the
// stream hears once, from the last or from one that fails. A traced stream runs them one by one.
// Whether NPUFLOW_KERNEL_RUNS=0 turns runs of kernels off for this process (Runtime::Init).
bool KernelRunsOffByEnv() {
  const char* v = std::getenv("NPUFLOW_KERNEL_RUNS");
  return v != nullptr && std::string_view(v) == "0";
}

struct KernelRunProgram {
  static constexpr std::uint64_t kN = 4096;
  Model model;
  Stream stream;
  DevicePtr a, b, c;
  std::uint64_t tasks = 0;
  std::uint64_t kernels = 0;
};

KernelRunProgram BuildKernelRun(Runtime& rt) {
  KernelRunProgram p;
  p.model = rt.CreateModel(0).value();
  p.stream = rt.CreateStream(0).value();
  EXPECT_TRUE(rt.BindStream(p.model, p.stream).ok());
  const std::uint64_t n = KernelRunProgram::kN, bytes = n * sizeof(float);
  p.a = rt.Malloc(0, bytes, Placement::kHbm, "a").value();
  p.b = rt.Malloc(0, bytes, Placement::kHbm, "b").value();
  p.c = rt.Malloc(0, bytes, Placement::kHbm, "c").value();
  const Event e = rt.CreateEvent(0).value();
  const std::uint64_t a = p.a.value, b = p.b.value, c = p.c.value;
  std::vector<Task> t;
  t.push_back(Task::Kernel(Kernel("fill_f32"), 4, {a, n, FloatBits(1.5f)}));
  t.push_back(Task::Nop());
  t.push_back(Task::Kernel(Kernel("fill_f32"), 24, {b, n, FloatBits(2.0f)}));  // a part on every unit
  t.push_back(Task::Kernel(Kernel("vector_add_f32"), 3, {a, b, c, n}));       // c = 3.5
  for (int i = 0; i < 3; ++i) t.push_back(Task::Nop());
  t.push_back(Task::Kernel(Kernel("vector_add_f32"), 30, {c, a, b, n}));      // b = 5, 24 parts
  for (int i = 0; i < 9; ++i) t.push_back(Task::Nop());                        // past the prefetch window
  t.push_back(Task::Kernel(Kernel("vector_add_f32"), 2, {b, c, a, n}));       // a = 8.5
  t.push_back(Task::Record(e.id));                                            // a run stops here
  t.push_back(Task::Wait(e.id));
  t.push_back(Task::Kernel(Kernel("vector_add_f32"), 5, {a, b, c, n}));       // c = 13.5
  for (int i = 0; i < 8; ++i) t.push_back(Task::Kernel(Kernel("noop"), 1 + i % 3, {}));
  p.tasks = t.size();
  p.kernels = static_cast<std::uint64_t>(std::count_if(t.begin(), t.end(), [](const Task& x) { return x.kind == TaskKind::kKernel; }));
  EXPECT_TRUE(rt.LoadTasks(p.model, p.stream, std::move(t)).ok());
  return p;
}

TEST(KernelRuns, GiveTheSameResultsVirtualTimesAndCountsAsKernelsOneByOne) {
  std::vector<VTime> ends;
  for (int workers : {1, 2}) {
    for (auto [runs, trace] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
      SCOPED_TRACE(fmt::format("{} workers, kernel runs {}, traced {}", workers, runs, trace));
      auto rt = MakeRuntime({.workers = workers, .trace = trace, .kernel_runs = runs});
      auto p = BuildKernelRun(*rt);
      for (int run = 0; run < 5; ++run) {
        const DeviceStats before = rt->Stats(0).value();
        auto end = rt->ExecuteModel(p.model, 10s);
        ASSERT_TRUE(end.ok()) << end.status();
        const DeviceStats after = rt->Stats(0).value();
        EXPECT_EQ(after.kernels_executed - before.kernels_executed, p.kernels);
        // The runs [fill, fill, add, add(30)] and [add(5), noop x 8]: 3 + 8 kernels started by
        // units; add(2), 10 tasks after add(30), runs alone. One by one without runs, when traced,
        // and with the race detector forced on for the process (NPUFLOW_RACE_DETECT).
        const bool one_by_one = !runs || trace || RaceDetector::ProcessDefault() || KernelRunsOffByEnv();
        EXPECT_EQ(after.run_kernels - before.run_kernels, one_by_one ? 0u : 3u + 8u);
        EXPECT_EQ(after.tasks_executed - before.tasks_executed, p.tasks);
        const std::vector<float> c = Read(*rt, p.c, KernelRunProgram::kN);
        EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](float x) { return x == 13.5f; })) << c[0];
        // Every run starts where the last ended: compare the first run's length.
        if (run == 0) ends.push_back(*end);
      }
    }
  }
  for (VTime end : ends) EXPECT_EQ(end, ends[0]);
}

// A model of one stream running six one-block kernels back to back: one run of kernels.
std::pair<Model, Stream> SixKernelModel(Runtime& rt) {
  Model m = rt.CreateModel(0).value();
  Stream s = rt.CreateStream(0).value();
  EXPECT_TRUE(rt.BindStream(m, s).ok());
  std::vector<Task> t;
  for (int i = 0; i < 6; ++i) t.push_back(Task::Kernel(Kernel("noop"), 1, {}));
  EXPECT_TRUE(rt.LoadTasks(m, s, std::move(t)).ok());
  return {m, s};
}

// What a model run left behind: its end (or the next run's, after a failed one), and the counts.
struct RunRecord {
  VTime next_end = 0;
  std::uint64_t tasks = 0, kernels = 0, in_runs = 0;
  friend bool operator==(const RunRecord&, const RunRecord&) = default;
};

// A kernel that fails inside a run stops it: the error names that kernel's task, the kernels after
// it never start, and the stream is where it would be one by one (its clock before the failed
// kernel: the next run ends at the same virtual time). Then the model runs all of them again.
TEST(KernelRuns, AFailedKernelStopsItsRunAndNamesItsTask) {
  std::vector<RunRecord> records;
  for (bool runs : {true, false}) {
    SCOPED_TRACE(fmt::format("kernel runs {}", runs));
    auto rt = MakeRuntime({.deterministic = true, .kernel_runs = runs});
    auto [m, s] = SixKernelModel(*rt);
    RunRecord rec;
    for (int round = 0; round < 3; ++round) {
      // The first stream to run a kernel has its home at aicore 0: kernel k is that unit's run k + 1.
      ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kFail, 3}).ok());
      const DeviceStats before = rt->Stats(0).value();
      auto end = rt->ExecuteModel(m, 10s);
      ASSERT_FALSE(end.ok());
      EXPECT_EQ(end.status().code(), StatusCode::kFailed) << end.status();
      EXPECT_NE(end.status().message().find(fmt::format("stream {} task 2 ", s.id)), std::string_view::npos)
          << end.status();
      EXPECT_NE(end.status().message().find("aicore 0"), std::string_view::npos) << end.status();
      const DeviceStats after = rt->Stats(0).value();
      EXPECT_EQ(after.kernels_executed - before.kernels_executed, 3u);
      rec.tasks += after.tasks_executed - before.tasks_executed;
      rec.kernels += after.kernels_executed - before.kernels_executed;
      const std::uint64_t in_runs = after.run_kernels;
      auto next = rt->ExecuteModel(m, 10s);
      ASSERT_TRUE(next.ok()) << next.status();
      rec.next_end += *next;
      EXPECT_EQ(rt->Stats(0)->kernels_executed - after.kernels_executed, 6u);
      // One run: the stream started the first kernel.
      const bool one_by_one = !runs || RaceDetector::ProcessDefault() || KernelRunsOffByEnv();
      EXPECT_EQ(rt->Stats(0)->run_kernels - in_runs, one_by_one ? 0u : 5u);
      rec.in_runs += rt->Stats(0)->run_kernels - in_runs;
    }
    records.push_back(rec);
  }
  EXPECT_EQ(records[0].next_end, records[1].next_end);
  EXPECT_EQ(records[0].tasks, records[1].tasks);
  EXPECT_EQ(records[0].kernels, records[1].kernels);
}

// A run takes every back-to-back kernel up to kMaxKernelRun, far past the fetch window (it stopped
// at prefetch_num + 1 kernels until issue 21): 600 kernels, some with NOPs between them, are three
// runs, and end where the kernels one by one do.
TEST(KernelRuns, ARunTakesBackToBackKernelsUpToItsLimitFarPastTheFetchWindow) {
  constexpr std::uint64_t kKernels = 600;
  std::vector<VTime> ends;
  for (int workers : {1, 2}) {
    for (bool runs : {true, false}) {
      SCOPED_TRACE(fmt::format("{} workers, kernel runs {}", workers, runs));
      auto rt = MakeRuntime({.workers = workers, .kernel_runs = runs});
      Model m = rt->CreateModel(0).value();
      Stream s = rt->CreateStream(0).value();
      ASSERT_TRUE(rt->BindStream(m, s).ok());
      std::vector<Task> t;
      for (std::uint64_t i = 0; i < kKernels; ++i) {
        t.push_back(Task::Kernel(Kernel("noop"), 1 + static_cast<std::uint32_t>(i % 2), {}));
        if (i % 50 == 49)
          for (int k = 0; k < 3; ++k) t.push_back(Task::Nop());
      }
      const std::uint64_t tasks = t.size();
      ASSERT_TRUE(rt->LoadTasks(m, s, std::move(t)).ok());
      for (int round = 0; round < 3; ++round) {
        const DeviceStats before = rt->Stats(0).value();
        auto end = rt->ExecuteModel(m, 10s);
        ASSERT_TRUE(end.ok()) << end.status();
        const DeviceStats after = rt->Stats(0).value();
        EXPECT_EQ(after.kernels_executed - before.kernels_executed, kKernels);
        EXPECT_EQ(after.tasks_executed - before.tasks_executed, tasks);
        // The stream starts kernels 0, 256 and 512; the units the rest.
        const bool one_by_one = !runs || RaceDetector::ProcessDefault() || KernelRunsOffByEnv();
        const std::uint64_t by_stream = (kKernels + kMaxKernelRun - 1) / kMaxKernelRun;
        EXPECT_EQ(after.run_kernels - before.run_kernels, one_by_one ? 0u : kKernels - by_stream);
        if (round == 0) ends.push_back(*end);
      }
    }
  }
  for (VTime end : ends) EXPECT_EQ(end, ends[0]);
}

// A kernel that hangs inside a run: the execution times out and is aborted; the kernels after it
// never start, the stream counts the tasks that ran and takes the clock it would have one by one,
// and it runs the model again (the hung kernel's run keeps its jobs).
TEST(KernelRuns, AHungKernelInARunTimesOutAndTheModelRunsAgain) {
  std::vector<RunRecord> records;
  for (bool runs : {true, false}) {
    SCOPED_TRACE(fmt::format("kernel runs {}", runs));
    auto rt = MakeRuntime({.kernel_runs = runs});
    auto [m, s] = SixKernelModel(*rt);
    RunRecord rec;
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kHang, 4}).ok());
      const DeviceStats before = rt->Stats(0).value();
      auto end = rt->ExecuteModel(m, 50ms);
      ASSERT_FALSE(end.ok());
      EXPECT_EQ(end.status().code(), StatusCode::kTimeout) << end.status();
      const DeviceStats after = rt->Stats(0).value();
      EXPECT_EQ(after.kernels_executed - before.kernels_executed, 4u);
      EXPECT_EQ(after.tasks_executed - before.tasks_executed, 3u);  // the three before the hung one
      rec.tasks += after.tasks_executed - before.tasks_executed;
      auto next = rt->ExecuteModel(m, 10s);
      ASSERT_TRUE(next.ok()) << next.status();
      EXPECT_EQ(rt->Stats(0)->kernels_executed - after.kernels_executed, 6u);
    }
    records.push_back(rec);
  }
  EXPECT_EQ(records[0].tasks, records[1].tasks);
}

// An actor that hands executions on with its asker's reply slot (as the ModelActor does), counting
// the runs the device reports ended through the hook.
class ReplyToRunner {
 public:
  struct Run {
    Model model;
    std::vector<std::uint64_t> io;
  };
  using Message = std::variant<Run>;
  ReplyToRunner(Runtime* rt, std::atomic<int>* ends) : rt_(rt), ends_(ends) {}
  void Receive(Message& msg, actors::Context<Message>& ctx) {
    Run& run = std::get<Run>(msg);
    ScopedHostClient charge(host_);
    rt_->ExecuteModelReplyTo(run.model, std::move(run.io), ctx.TakeReply<VTime>(), RunEndHook{&Ended, ends_, 7});
  }
  static void Ended(void* ends, std::uint64_t tag) {
    if (tag == 7) static_cast<std::atomic<int>*>(ends)->fetch_add(1, std::memory_order_release);
  }

 private:
  Runtime* rt_;
  std::atomic<int>* ends_;
  HostSide host_;
};

TEST(DeviceModel, AnExecutionAnsweredToAnotherAskerRunsItsEndHookOnceBeforeTheAnswer) {
  auto rt = MakeRuntime();
  std::atomic<int> ends{0};
  auto runner = rt->system().Spawn<ReplyToRunner>("reply-to", rt.get(), &ends);
  Model m = rt->CreateModel(0).value();
  // Refused before the device (no stream bound yet): the hook runs, the asker gets the error.
  auto refused = runner.Ask<VTime>(ReplyToRunner::Run{m, {}}).Get();
  EXPECT_EQ(refused.status().code(), StatusCode::kParamInvalid) << refused.status();
  EXPECT_EQ(ends.load(), 1);
  Stream a = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Kernel(Kernel("noop"), 1, {}), Task::Nop()}).ok());
  // Refused by the runtime (I/O addresses the model does not take): hook, then error.
  auto bad_io = runner.Ask<VTime>(ReplyToRunner::Run{m, {1, 2, 3}}).Get();
  EXPECT_EQ(bad_io.status().code(), StatusCode::kParamInvalid) << bad_io.status();
  EXPECT_EQ(ends.load(), 2);
  // Runs: each answer finds its run's hook already run.
  for (int i = 0; i < 200; ++i) {
    auto end = runner.Ask<VTime>(ReplyToRunner::Run{m, {}}).Get();
    ASSERT_TRUE(end.ok()) << end.status();
    EXPECT_GT(*end, 0);
    EXPECT_EQ(ends.load(std::memory_order_acquire), 3 + i);
  }
  // A run that fails on the device ends too, once, before its error is answered.
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kAICore, 0, Fault{FaultKind::kFail, 1}).ok());
  int runs = 0;
  Status failed;
  while (failed.ok() && runs < 256) {
    auto end = runner.Ask<VTime>(ReplyToRunner::Run{m, {}}).Get();
    ++runs;
    if (!end.ok()) failed = end.status();
    EXPECT_EQ(ends.load(std::memory_order_acquire), 202 + runs);
  }
  EXPECT_EQ(failed.code(), StatusCode::kFailed) << failed;
}

TEST(DeviceModel, ElidedWaitsBecomeNopsAndOnlyWaitsCanBeElided) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value(), host = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  Event latch = rt->CreateEvent(0, EventKind::kLatch).value();
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Wait(latch.id), Task::Kernel(Kernel("noop"), 1, {})}).ok());
  ASSERT_TRUE(rt->RecordEvent(latch, host).ok());
  ASSERT_TRUE(rt->ExecuteModel(m, 10s).ok());
  // Only event waits (or NOPs), only tasks the list has, only on a stream bound to the model.
  Status st = rt->ElideWaits(m, a, {1});
  EXPECT_EQ(st.code(), StatusCode::kParamInvalid) << st;
  EXPECT_NE(st.message().find("cannot elide task 1: it is a kernel task, not an event wait"), std::string_view::npos)
      << st;
  st = rt->ElideWaits(m, a, {7});
  EXPECT_NE(st.message().find("cannot elide task 7: the program has 2 tasks"), std::string_view::npos) << st;
  EXPECT_EQ(rt->ElideWaits(m, host, {0}).code(), StatusCode::kParamInvalid);
  // A refused call changed nothing: with the latch forgotten the gate holds the run.
  ASSERT_TRUE(rt->ResetEvent(latch).ok());
  EXPECT_EQ(rt->ExecuteModel(m, 100ms).status().code(), StatusCode::kTimeout);
  // Elided, the run no longer waits (twice: a NOP may be elided again).
  ASSERT_TRUE(rt->ElideWaits(m, a, {0}).ok());
  ASSERT_TRUE(rt->ElideWaits(m, a, {0}).ok());
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
}

TEST(DeviceModel, AFailingStreamFailsTheRunAndStopsTheOthers) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value(), b = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->BindStream(m, b).ok());
  Event never = rt->CreateEvent(0).value();
  DevicePtr tiny = rt->Malloc(0, 4, Placement::kHbm, "tiny").value();
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Kernel(Kernel("fill_f32"), 1, {tiny.value, 100, 0})}).ok());
  ASSERT_TRUE(rt->LoadTasks(m, b, {Task::Wait(never.id)}).ok());  // would wait forever
  auto end = rt->ExecuteModel(m, 10s);
  ASSERT_FALSE(end.ok());
  EXPECT_NE(end.status().message().find("'tiny'"), std::string_view::npos) << end.status();
}

// ---- trace and determinism ----------------------------------------------------------------------------
std::string RunTracedProgram() {
  auto rt = MakeRuntime({.chips = {"910B"}, .deterministic = true, .trace = true});
  constexpr std::uint64_t n = 4096;
  DevicePtr a = rt->Malloc(0, n * 4).value(), b = rt->Malloc(0, n * 4).value(), c = rt->Malloc(0, n * 4).value();
  std::vector<float> host(n, 2.f);
  Stream s1 = rt->CreateStream(0).value(), s2 = rt->CreateStream(0).value();
  Event e = rt->CreateEvent(0).value();
  EXPECT_TRUE(rt->MemcpyH2DAsync(s1, a, host.data(), n * 4).ok());
  EXPECT_TRUE(rt->LaunchKernel(s1, "vector_add_f32", 8, {a.value, a.value, b.value, n}).ok());
  EXPECT_TRUE(rt->RecordEvent(e, s1).ok());
  // Its own buffer: filling `a` here, before the wait, would race the copy on s1 (--race-detect
  // found that in an earlier version of this program).
  EXPECT_TRUE(rt->LaunchKernel(s2, "fill_f32", 4, {c.value, n, FloatBits(1.f)}).ok());
  EXPECT_TRUE(rt->StreamWaitEvent(s2, e).ok());
  EXPECT_TRUE(rt->LaunchKernel(s2, "vector_add_f32", 16, {b.value, b.value, b.value, n}).ok());
  EXPECT_TRUE(rt->Submit(s2, {Task::Nop(), Task::Nop()}).ok());
  EXPECT_TRUE(rt->SynchronizeStream(s2).ok());
  EXPECT_TRUE(rt->SynchronizeStream(s1).ok());
  return rt->trace().ToJson();
}

// A host client owns its virtual time: calls made while a ScopedHostClient names it advance its
// clock, on whichever thread they run, and leave the thread's own clock alone; its trace track
// carries its name.
TEST(HostClients, AScopedClientChargesItsOwnClockOnAnyThread) {
  auto rt = MakeRuntime({.chips = {"910B"}, .workers = 2, .trace = true});
  const VTime latency = rt->chip(0).value()->host_launch_latency_ns;
  HostClient loader("weight loader");
  const VTime thread_before = rt->HostClock();
  {
    ScopedHostClient scope(loader);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(rt->Malloc(0, 64).ok());
    EXPECT_EQ(rt->HostClock(), 3 * latency);
  }
  EXPECT_EQ(rt->HostClock(), thread_before);
  std::thread other([&] {
    ScopedHostClient scope(loader);
    ASSERT_TRUE(rt->Malloc(0, 64).ok());
  });
  other.join();
  EXPECT_EQ(loader.clock(), 4 * latency);
  EXPECT_EQ(rt->HostClock(), thread_before);
  // A synchronize merges the device's end into the client's clock, not the thread's.
  Stream s = rt->CreateStream(0).value();
  const VTime thread_clock = rt->HostClock();
  {
    ScopedHostClient scope(loader);
    ASSERT_TRUE(rt->LaunchKernel(s, "fill_f32", 4, {rt->Malloc(0, 4096).value().value, 1024, FloatBits(1.f)}).ok());
    ASSERT_TRUE(rt->SynchronizeStream(s).ok());
    EXPECT_GE(loader.clock(), 7 * latency);
  }
  EXPECT_EQ(rt->HostClock(), thread_clock);
  EXPECT_NE(rt->trace().ToJson().find("\"weight loader\""), std::string::npos);
}

// A host call from an actor's handler with no client in scope would run on the worker's clock:
// the runtime counts it (and logs the first), so tests can require that none happen.
TEST(HostClients, AHandlerWithoutAClientIsCounted) {
  auto rt = MakeRuntime({.chips = {"910B"}, .workers = 1});
  struct Caller {
    struct Call {
      bool scoped = false;
    };
    using Message = std::variant<Call>;
    explicit Caller(Runtime* r) : rt(r) {}
    Runtime* rt;
    HostClient client{"scoped"};
    void Receive(Message& m, actors::Context<Message>& ctx) {
      if (std::get<Call>(m).scoped) {
        ScopedHostClient scope(client);
        (void)rt->Malloc(0, 64);
      } else {
        (void)rt->Malloc(0, 64);
      }
      ctx.Reply();
    }
  };
  auto a = rt->system().Spawn<Caller>("caller", rt.get());
  ASSERT_TRUE(a.Ask(Caller::Call{true}).Get().ok());
  EXPECT_EQ(rt->unattributed_host_calls(), 0u) << "a scoped client is attributed";
  ASSERT_TRUE(a.Ask(Caller::Call{false}).Get().ok());
  EXPECT_EQ(rt->unattributed_host_calls(), 1u);
  (void)rt->Malloc(0, 64);
  EXPECT_EQ(rt->unattributed_host_calls(), 1u) << "a host thread's own calls are its own";
}

// Zero copy: the loaded list names the places of the I/O addresses; each run writes its own.
TEST(DeviceModel, IoPatchesPointEachRunAtItsOwnBuffers) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  constexpr std::size_t n = 64;
  DevicePtr own_a = rt->Malloc(0, n * 4).value(), own_b = rt->Malloc(0, n * 4).value(), own_c = rt->Malloc(0, n * 4).value();
  // c = a + b, then a copy of c into slot 2's buffer at offset 0 (the copy's dst is patched too)
  std::vector<Task> list;
  list.push_back(Task::Kernel(Kernel("vector_add_f32"), 4, {own_a.value, own_b.value, own_c.value, n}));
  Task copy = Task::Copy(CopyKind::kDeviceToDevice, n * 4);
  copy.src_dev = own_c;
  copy.dst_dev = own_c;
  list.push_back(copy);
  std::vector<IoPatch> patches = {{0, 0, 0, 0}, {0, 1, 1, 0}, {1, IoPatch::kCopyDst, 2, 0}};
  ASSERT_TRUE(rt->LoadTasks(m, a, list, patches).ok());
  for (int run = 0; run < 3; ++run) {
    DevicePtr x = rt->Malloc(0, n * 4).value(), y = rt->Malloc(0, n * 4).value(), z = rt->Malloc(0, n * 4).value();
    std::vector<float> xs(n, 1.0f + run), ys(n, 10.0f);
    ASSERT_TRUE(rt->MemcpyH2D(0, x, xs.data(), n * 4).ok());
    ASSERT_TRUE(rt->MemcpyH2D(0, y, ys.data(), n * 4).ok());
    const auto before = rt->Stats(0)->host_interactions;
    ASSERT_TRUE(rt->ExecuteModel(m, {x.value, y.value, z.value}, 10s).ok());
    EXPECT_EQ(rt->Stats(0)->host_interactions - before, 1u);
    EXPECT_EQ(Read(*rt, z, n), std::vector<float>(n, 11.0f + run));
  }
  // The number of addresses must match the slots the lists use; none may be null.
  EXPECT_EQ(rt->ExecuteModel(m, {own_a.value}, 10s).status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(rt->ExecuteModel(m, {own_a.value, 0, own_c.value}, 10s).status().code(), StatusCode::kParamInvalid);
  // A patch that names no task of the list is refused at load.
  Model m2 = rt->CreateModel(0).value();
  Stream b = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m2, b).ok());
  EXPECT_EQ(rt->LoadTasks(m2, b, {Task::Nop()}, {{0, 0, 0, 0}}).code(), StatusCode::kParamInvalid);
}

// rtModelExecute on a stream: the run waits for the stream's earlier work, later work waits for it.
TEST(DeviceModel, ExecuteOnAHostStreamOrdersWithTheStreamsWork) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream bound = rt->CreateStream(0).value(), user = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, bound).ok());
  constexpr std::size_t n = 256;
  DevicePtr in = rt->Malloc(0, n * 4).value(), out = rt->Malloc(0, n * 4).value();
  ASSERT_TRUE(rt->LoadTasks(m, bound, {Task::Kernel(Kernel("vector_add_f32"), 2, {in.value, in.value, out.value, n})}).ok());
  for (int run = 1; run <= 5; ++run) {
    std::vector<float> xs(n, static_cast<float>(run)), ys(n, 0.0f);
    ASSERT_TRUE(rt->MemcpyH2DAsync(user, in, xs.data(), n * 4).ok());
    ASSERT_TRUE(rt->ExecuteModelOnStream(m, user).ok());
    ASSERT_TRUE(rt->MemcpyD2HAsync(user, ys.data(), out, n * 4).ok());
    ASSERT_TRUE(rt->SynchronizeStream(user, 10s).ok());
    EXPECT_EQ(ys, std::vector<float>(n, 2.0f * run));
  }
  // A failed run fails the stream's synchronize.
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, static_cast<int>(bound.id), Fault{FaultKind::kFail, 1}).ok());
  ASSERT_TRUE(rt->ExecuteModelOnStream(m, user).ok());
  EXPECT_EQ(rt->SynchronizeStream(user, 10s).code(), StatusCode::kFailed);
}

TEST(DeviceModel, EndOfSequenceIsItsOwnStatus) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Nop(), Task::Nop()}).ok());
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, static_cast<int>(a.id), Fault{FaultKind::kEndOfSequence, 2}).ok());
  EXPECT_EQ(rt->ExecuteModel(m, 10s).status().code(), StatusCode::kEndOfSequence);
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
}

TEST(DeviceModel, DestroyReleasesStreamsAndStreamAndEventLimitsHold) {
  const std::string path = WriteTinyChip("tiny_chip.json", 4, 2);
  auto rt = MakeRuntime({.chips = {path}});
  Model m = rt->CreateModel(0).value();
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(rt->CreateStream(0).value());  // with the default stream: 4
    ASSERT_TRUE(rt->BindStream(m, streams.back()).ok());
  }
  auto fifth = rt->CreateStream(0);
  ASSERT_FALSE(fifth.ok());
  EXPECT_NE(fifth.status().message().find("all 4 streams"), std::string::npos) << fifth.status();
  ASSERT_TRUE(rt->CreateEvent(0).ok());
  ASSERT_TRUE(rt->CreateEvent(0).ok());
  EXPECT_EQ(rt->CreateEvent(0).status().code(), StatusCode::kMemoryAllocation);
  ASSERT_TRUE(rt->DestroyModel(m).ok());
  EXPECT_EQ(rt->Stats(0)->streams, 1u);
  EXPECT_EQ(rt->ExecuteModel(m, 1s).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(rt->CreateStream(0).ok());  // a stream of the destroyed model, reused
}

TEST(Streams, SynchronizeAsyncCompletesWithoutBlocking) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->LaunchKernel(s, "noop", 4, {}).ok());
  auto f = rt->SynchronizeStreamAsync(s);
  auto end = f.Get();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_GT(*end, 0);
}

// Work that arrives late in wall time but early in virtual time fills an idle gap.
TEST(BusyTimeline, ReservesTheEarliestGapAtOrAfterTheReadyTime) {
  BusyTimeline unit;
  EXPECT_EQ(unit.Reserve(1000, 100), 1000);  // [1000, 1100)
  EXPECT_EQ(unit.Reserve(0, 100), 0);        // before it: [0, 100)
  EXPECT_EQ(unit.Reserve(50, 100), 100);     // after the first busy stretch: [100, 200)
  EXPECT_EQ(unit.Reserve(150, 900), 1100);   // does not fit in [200, 1000): after 1100
  EXPECT_EQ(unit.Reserve(200, 800), 200);    // fits exactly in [200, 1000)
  EXPECT_EQ(unit.Reserve(0, 0), 0);          // zero work takes no time and any place
  EXPECT_EQ(unit.end(), 2000);
  // Beyond kMaxIntervals the oldest gaps may be forgotten (treated as busy), never double-booked;
  // the latest kMaxIntervals always stay.
  BusyTimeline many;
  for (int i = 0; i < 200; ++i) EXPECT_EQ(many.Reserve(i * 20, 10), i * 20);
  EXPECT_GE(many.Reserve(0, 10), 10);
  const VTime latest_gap = (200 - static_cast<VTime>(BusyTimeline::kMaxIntervals)) * 20 + 10;
  EXPECT_EQ(many.Reserve(latest_gap, 10), latest_gap) << "a gap among the latest kMaxIntervals is still free";
  // Work in virtual-time order, touching or not, and out of order after it.
  BusyTimeline ordered;
  EXPECT_EQ(ordered.Reserve(0, 10), 0);
  EXPECT_EQ(ordered.Reserve(10, 10), 10);   // merges with [0, 10)
  EXPECT_EQ(ordered.Reserve(5, 10), 20);    // inside the merged [0, 20): after it, [0, 30)
  EXPECT_EQ(ordered.Reserve(40, 10), 40);   // a gap [30, 40)
  EXPECT_EQ(ordered.Reserve(25, 10), 30);   // fits [30, 40) exactly
  EXPECT_EQ(ordered.Reserve(20, 5), 50);    // nothing is free before 50 any more
  EXPECT_EQ(ordered.Reserve(0, 100), 55);
  EXPECT_EQ(ordered.end(), 155);
}

TEST(Trace, DeterministicModeGivesAByteIdenticalTrace) {
  std::string first = RunTracedProgram();
  std::string second = RunTracedProgram();
  EXPECT_EQ(first, second);
  EXPECT_NE(first.find("\"stream 1\""), std::string::npos);
  EXPECT_NE(first.find("\"aicore 0\""), std::string::npos);
  EXPECT_NE(first.find("\"dma 0\""), std::string::npos);
  EXPECT_NE(first.find("\"host thread"), std::string::npos);
  EXPECT_NE(first.find("vector_add_f32"), std::string::npos);
  EXPECT_EQ(first.find("wall_us"), std::string::npos);  // wall times would differ run to run
}

TEST(Trace, NamesAreEscapedOnceAndTheFileParsesAsJson) {
  std::string out;
  AppendJsonString(out, "a\"b\\c\nd\x01");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001\"");
  auto doc = nlohmann::json::parse(RunTracedProgram());
  int kernels = 0, copies = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const auto& args = e["args"];
    if (args.contains("block_dim")) {
      ++kernels;
      EXPECT_TRUE(args.contains("stream") && args.contains("task") && args.contains("tiling_key")) << e.dump();
    }
    if (args.contains("bytes")) {
      ++copies;
      EXPECT_EQ(args["bytes"], 4096 * 4) << e.dump();
      EXPECT_TRUE(args.contains("task")) << e.dump();
    }
  }
  EXPECT_GT(kernels, 0);
  EXPECT_EQ(copies, 1);
}

TEST(Runtime, BadOptionsAreNamed) {
  EXPECT_EQ(Runtime::Create({.chips = {}}).status().code(), StatusCode::kParamInvalid);
  auto s = Runtime::Create({.chips = {"920Z"}}).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("'920Z'"), std::string_view::npos);
  EXPECT_EQ(Runtime::Create({.workers = -3}).status().code(), StatusCode::kParamInvalid);
}

TEST(Runtime, SeveralDevicesInOneProcess) {
  auto rt = MakeRuntime({.chips = {"910B", "310P"}});
  EXPECT_EQ(rt->device_count(), 2);
  EXPECT_TRUE(rt->GetDeviceCapability(0, Feature::kTaskUpdate).value());
  EXPECT_FALSE(rt->GetDeviceCapability(1, Feature::kTaskUpdate).value());
  DevicePtr p = rt->Malloc(1, 1024).value();
  std::vector<float> host(256, 3.f), back(256);
  ASSERT_TRUE(rt->MemcpyH2D(1, p, host.data(), 1024).ok());
  ASSERT_TRUE(rt->MemcpyD2H(1, back.data(), p, 1024).ok());
  EXPECT_EQ(back, host);
  EXPECT_FALSE(rt->MemcpyD2H(0, back.data(), p, 1024).ok());  // device 0 has no such allocation
}

}  // namespace
}  // namespace npuflow::npu_sim
