// The WeightLoaderActor and the ExternalWeightManager on a simulated device: chunking, bounded
// staging, latch ordering, the checks (truncated, missing, corrupted, encrypted), one copy per
// device, and concurrent loads; reads on the I/O threads (a held read does not stop kernels,
// out-of-order completions keep latch order, a read failing mid-load).
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "actors/system.h"

#include "base/aes_gcm.h"
#include "base/sha256.h"
#include "npu_sim/runtime.h"
#include "weights/external_weight_manager.h"
#include "weights/weight_loader.h"

namespace npuflow::weights {
namespace {

namespace fs = std::filesystem;
using npu_sim::DevicePtr;

std::vector<std::uint8_t> RandomBytes(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t r = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = static_cast<std::uint8_t>(r >> (8 * k));
  }
  return v;
}

class WeightLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = fs::temp_directory_path() / ("npuflow_loader_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
    auto rt = npu_sim::Runtime::Create({.chips = {"910B", "910B"}});
    ASSERT_TRUE(rt.ok()) << rt.status();
    rt_ = std::move(rt).value();
  }
  void TearDown() override {
    loader_.reset();
    rt_.reset();
    fs::remove_all(dir_);
  }
  WeightLoader& Loader(WeightLoaderOptions options = {}) {
    if (!loader_) loader_ = WeightLoader::Create(rt_.get(), options).value();
    return *loader_;
  }
  std::string Write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }
  std::vector<std::uint8_t> ReadDevice(DevicePtr p, std::size_t n, int device = 0) {
    std::vector<std::uint8_t> out(n);
    EXPECT_TRUE(rt_->MemcpyD2H(device, out.data(), p, n).ok());
    return out;
  }

  fs::path dir_;
  std::unique_ptr<npu_sim::Runtime> rt_;
  std::unique_ptr<WeightLoader> loader_;
};

TEST_F(WeightLoaderTest, A25MbRegionGoesInThreeChunksAndLandsIntact) {
  const std::size_t n = 25 * 1000 * 1000;
  const auto bytes = RandomBytes(n + 100, 1);
  const std::string path = Write("w25", bytes);
  DevicePtr dst = rt_->Malloc(0, n).value();
  auto r = Loader().Load({.device = 0, .path = path, .regions = {{100, n, dst, std::nullopt, "", "w"}}}).Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks, 3u);  // 10 MiB + 10 MiB + the rest
  EXPECT_EQ(r->bytes, n);
  EXPECT_EQ(ReadDevice(dst, n), std::vector<std::uint8_t>(bytes.begin() + 100, bytes.end()));
  EXPECT_EQ(kWeightChunkBytes, 10485760u);
}

TEST_F(WeightLoaderTest, StagingMemoryIsBoundedByTheBudgetNotTheFile) {
  // An encrypted file goes through staging (its plaintext is authenticated before any latch).
  const std::size_t n = 9 * kWeightChunkBytes / 2;  // 45 MiB
  const auto bytes = RandomBytes(n, 2);
  const std::string plain = Write("big.plain", bytes), path = (dir_ / "big").string();
  const AesKey key = ParseAesKey(std::string(64, 'b')).value();
  ASSERT_TRUE(EncryptFile(plain, path, key).ok());
  DevicePtr dst = rt_->Malloc(0, n).value();
  WeightLoader& loader = Loader({.chunk_bytes = kWeightChunkBytes, .staging_chunks = 2});
  auto r = loader.Load({.device = 0, .path = path, .regions = {{0, n, dst, std::nullopt, "", "w"}}, .key = key}).Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks, 5u);
  EXPECT_LE(loader.stats().peak_staging_bytes, 2 * kWeightChunkBytes);
  EXPECT_GT(loader.stats().peak_staging_bytes, 0u);
  EXPECT_EQ(ReadDevice(dst, n), bytes);
}

TEST_F(WeightLoaderTest, APlainFileIsReadStraightIntoDeviceMemoryWithoutStaging) {
  // One copy (file -> device slot): no staging, no DMA memcpy; the copy tasks still take the
  // virtual time of a 45 MiB transfer, and the bytes are the file's.
  const std::size_t n = 9 * kWeightChunkBytes / 2;
  const auto bytes = RandomBytes(n + 3, 4);
  const std::string path = Write("direct", bytes);
  DevicePtr dst = rt_->Malloc(0, n).value();
  WeightLoader& loader = Loader();
  const npu_sim::DeviceStats before = rt_->Stats(0).value();
  auto r = loader.Load({.device = 0, .path = path, .regions = {{3, n, dst, std::nullopt, "", "w"}}, .verify = true}).Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks, 5u);
  EXPECT_EQ(r->bytes, n);
  EXPECT_GT(r->device_end, 0u);
  EXPECT_EQ(loader.stats().peak_staging_bytes, 0u);
  EXPECT_EQ(rt_->Stats(0).value().dma_copy_bytes, before.dma_copy_bytes);  // the DMA channels moved nothing
  EXPECT_EQ(ReadDevice(dst, n), std::vector<std::uint8_t>(bytes.begin() + 3, bytes.end()));
}

TEST_F(WeightLoaderTest, ATaskWaitingOnTheLatchSeesTheLoadedBytes) {
  const std::size_t n = 3 * kWeightChunkBytes + 17;
  const auto bytes = RandomBytes(n, 3);
  const std::string path = Write("latched", bytes);
  DevicePtr dst = rt_->Malloc(0, n).value();
  npu_sim::Event ready = rt_->CreateEvent(0, npu_sim::EventKind::kLatch).value();
  // The consumer is queued first: it waits on the device, not on the host.
  npu_sim::Stream consumer = rt_->CreateStream(0).value();
  std::vector<std::uint8_t> seen(n);
  ASSERT_TRUE(rt_->StreamWaitEvent(consumer, ready).ok());
  ASSERT_TRUE(rt_->MemcpyD2HAsync(consumer, seen.data(), dst, n).ok());
  auto done = Loader().Load({.device = 0, .path = path, .regions = {{0, n, dst, ready, "", "w"}}});
  ASSERT_TRUE(rt_->SynchronizeStream(consumer, std::chrono::seconds(60)).ok());
  EXPECT_EQ(seen, bytes);
  ASSERT_TRUE(done.Get().ok());
  // A latch is not consumed: later waits pass at once.
  ASSERT_TRUE(rt_->StreamWaitEvent(consumer, ready).ok());
  ASSERT_TRUE(rt_->StreamWaitEvent(consumer, ready).ok());
  EXPECT_TRUE(rt_->SynchronizeStream(consumer, std::chrono::seconds(60)).ok());
}

TEST_F(WeightLoaderTest, ATruncatedOrMissingFileIsAnErrorNamingIt) {
  const std::string path = Write("short", RandomBytes(1000, 4));
  DevicePtr dst = rt_->Malloc(0, 4096).value();
  auto r = Loader().Load({.device = 0, .path = path, .regions = {{512, 600, dst, std::nullopt, "", "layer0/w"}}}).Get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(r.status().message(), "weight file '" + path +
                                      "' has 1000 bytes, but 'layer0/w' reads offset 512 + length 600 = 1112: the file "
                                      "is truncated or not the one the model was compiled with");
  auto missing = Loader().Load({.device = 0, .path = path + ".gone", .regions = {{0, 1, dst, std::nullopt, "", "w"}}}).Get();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path + ".gone"), std::string::npos);
}

TEST_F(WeightLoaderTest, VerifyCatchesACorruptedRegion) {
  auto bytes = RandomBytes(5000, 5);
  const std::string good = Sha256Hex(bytes.data() + 1000, 3000);
  const std::string path = Write("v", bytes);
  DevicePtr dst = rt_->Malloc(0, 3000).value();
  auto ok = Loader().Load({.device = 0, .path = path, .regions = {{1000, 3000, dst, std::nullopt, good, "w"}}, .verify = true}).Get();
  ASSERT_TRUE(ok.ok()) << ok.status();
  bytes[2500] ^= 0x40;
  Write("v", bytes);
  auto bad = Loader().Load({.device = 0, .path = path, .regions = {{1000, 3000, dst, std::nullopt, good, "w"}}, .verify = true}).Get();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataCorrupted);
  EXPECT_NE(bad.status().message().find("expected " + good), std::string::npos) << bad.status();
}

TEST_F(WeightLoaderTest, EncryptedFilesNeedTheRightKeyAndAnUntamperedFile) {
  const std::size_t n = kWeightChunkBytes + 4096;
  const auto bytes = RandomBytes(n, 6);
  const std::string plain = Write("e.plain", bytes);
  const AesKey key = ParseAesKey(std::string(64, 'a')).value();
  const AesKey wrong = ParseAesKey(std::string(64, 'b')).value();
  const std::string path = (dir_ / "e").string();
  ASSERT_TRUE(EncryptFile(plain, path, key).ok());
  DevicePtr dst = rt_->Malloc(0, n).value();
  npu_sim::Event ready = rt_->CreateEvent(0, npu_sim::EventKind::kLatch).value();
  WeightRegion region{512, n - 1024, dst, ready, Sha256Hex(bytes.data() + 512, n - 1024), "w"};

  auto ok = Loader().Load({.device = 0, .path = path, .regions = {region}, .verify = true, .key = key}).Get();
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ReadDevice(dst, n - 1024), std::vector<std::uint8_t>(bytes.begin() + 512, bytes.end() - 512));

  auto no_key = Loader().Load({.device = 0, .path = path, .regions = {region}}).Get();
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("is encrypted (AES-256-GCM): give its key"), std::string::npos);

  auto bad_key = Loader().Load({.device = 0, .path = path, .regions = {region}, .key = wrong}).Get();
  ASSERT_FALSE(bad_key.ok());
  EXPECT_EQ(bad_key.status().code(), StatusCode::kDataCorrupted);
  EXPECT_NE(bad_key.status().message().find("wrong key or tampered data"), std::string::npos) << bad_key.status();

  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    char c = 0;
    f.read(&c, 1);
    c ^= 1;
    f.seekp(5000);
    f.write(&c, 1);
  }
  auto tampered = Loader().Load({.device = 0, .path = path, .regions = {region}, .key = key}).Get();
  ASSERT_FALSE(tampered.ok());
  EXPECT_NE(tampered.status().message().find("wrong key or tampered data"), std::string::npos);

  auto plain_with_key = Loader().Load({.device = 0, .path = plain, .regions = {region}, .key = key}).Get();
  ASSERT_FALSE(plain_with_key.ok());
  EXPECT_NE(plain_with_key.status().message().find("is not encrypted"), std::string::npos);
}

// An envelope's announced size is checked against the file's size without adding to it: a 40-byte
// file announcing 2^64 - 4 bytes passed the check (2^64 - 4 + 44 wraps around to 40), and its load
// failed later, reading past the end, with a message about something else. Crafted while writing
// fuzz_value_bin.
TEST_F(WeightLoaderTest, AnEnvelopeAnnouncingMoreThanTheFileHoldsIsRefusedAtOnce) {
  const AesKey key = ParseAesKey(std::string(64, 'a')).value();
  DevicePtr dst = rt_->Malloc(0, 64).value();
  auto envelope = [&](const std::string& name, std::uint64_t announced, std::size_t size) {
    std::vector<std::uint8_t> bytes(size, 0);
    std::memcpy(bytes.data(), "NPFWENC1", 8);
    for (int i = 0; i < 8; ++i) bytes[20 + i] = static_cast<std::uint8_t>(announced >> (8 * i));
    return Write(name, bytes);
  };
  auto load = [&](const std::string& path) {
    auto r = Loader().Load({.device = 0, .path = path, .regions = {{0, 8, dst, std::nullopt, "", "w"}}, .key = key}).Get();
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataCorrupted);
    return std::string(r.status().message());
  };
  const std::string wraps = envelope("wraps", ~std::uint64_t{0} - 3, 40);
  EXPECT_EQ(load(wraps), "weight file '" + wraps +
                             "': the envelope announces 18446744073709551612 bytes of weights, but the file has 40 "
                             "bytes, shorter than the 28-byte header and 16-byte tag");
  const std::string longer = envelope("longer", 1000, 500);
  EXPECT_EQ(load(longer),
            "weight file '" + longer + "': the envelope announces 1000 bytes of weights, the file has 500 bytes (room "
                                       "for 456)");
}

TEST_F(WeightLoaderTest, AFailedCopyStillRecordsTheLatchSoNoStreamWaitsForever) {
  const std::size_t n = 2 * kWeightChunkBytes;
  const std::string path = Write("f", RandomBytes(n, 9));
  DevicePtr dst = rt_->Malloc(0, n).value();
  npu_sim::Event ready = rt_->CreateEvent(0, npu_sim::EventKind::kLatch).value();
  npu_sim::Stream consumer = rt_->CreateStream(0).value();
  ASSERT_TRUE(rt_->StreamWaitEvent(consumer, ready).ok());
  const int channels = rt_->chip(0).value()->dma_channels;
  for (int c = 0; c < channels; ++c)
    ASSERT_TRUE(rt_->InjectFault(0, npu_sim::FaultTarget::kDma, c, {npu_sim::FaultKind::kFail, 1, 0}).ok());
  auto r = Loader().Load({.device = 0, .path = path, .regions = {{0, n, dst, ready, "", "w"}}}).Get();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
  // The consumer is released (the load's error is what its user checks).
  EXPECT_TRUE(rt_->SynchronizeStream(consumer, std::chrono::seconds(60)).ok());
}

TEST_F(WeightLoaderTest, CopiesLoadedWithOtherChecksAreNotShared) {
  const auto bytes = RandomBytes(4096, 8);
  const std::string path = Write("checks", bytes);
  ExternalWeightManager manager(rt_.get(), &Loader());
  const std::vector<RegionNeed> needs = {{0, 4096, Sha256Hex(bytes.data(), bytes.size()), "w"}};
  auto plain = manager.Place(0, path, 0, 4096, needs, {});
  auto verified = manager.Place(0, path, 0, 4096, needs, {.verify = true});
  ASSERT_TRUE(plain.ok() && verified.ok());
  EXPECT_NE(plain->file, verified->file);
  EXPECT_TRUE(verified->regions[0].copied_here);
  EXPECT_TRUE(verified->regions[0].state->Wait().ok());
  EXPECT_TRUE(plain->regions[0].state->Wait().ok());
}

TEST_F(WeightLoaderTest, ManagerCopiesARegionOncePerDevice) {
  const auto bytes = RandomBytes(8192, 7);
  const std::string path = Write("shared", bytes);
  ExternalWeightManager manager(rt_.get(), &Loader());
  const std::vector<RegionNeed> needs = {{0, 4096, "", "a"}, {4096, 4096, "", "b"}};
  auto first = manager.Place(0, path, 0, 8192, needs, {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = manager.Place(0, path, 0, 8192, needs, {});
  ASSERT_TRUE(second.ok()) << second.status();
  auto other_device = manager.Place(1, path, 0, 8192, needs, {});
  ASSERT_TRUE(other_device.ok()) << other_device.status();
  EXPECT_EQ(first->file, second->file);
  EXPECT_NE(first->file, other_device->file);
  EXPECT_TRUE(first->regions[0].copied_here);
  EXPECT_FALSE(second->regions[0].copied_here);
  EXPECT_TRUE(other_device->regions[1].copied_here);
  const ExternalWeightStats st = manager.stats();
  EXPECT_EQ(st.files_allocated, 2u);
  EXPECT_EQ(st.regions_copied, 4u);  // 2 regions x 2 devices
  EXPECT_EQ(st.regions_shared, 2u);
  for (const auto* p : {&*first, &*other_device})
    for (const auto& r : p->regions) ASSERT_TRUE(r.state->Wait().ok());
  EXPECT_EQ(ReadDevice(first->file->AddressOf(0), 8192, 0), bytes);
  EXPECT_EQ(ReadDevice(other_device->file->AddressOf(0), 8192, 1), bytes);
  EXPECT_TRUE(manager.CheckAndSetWeightLoaded(fs::weakly_canonical(path).string() + ":0", 0));
  EXPECT_FALSE(manager.CheckAndSetWeightLoaded("elsewhere:0", 0));
  EXPECT_TRUE(manager.CheckAndSetWeightLoaded("elsewhere:0", 0));
  // The memory goes with the last user: a new placement after both are dropped copies again.
  first->file.reset();
  second->file.reset();
  auto again = manager.Place(0, path, 0, 8192, needs, {});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->regions[0].copied_here);
  for (const auto& r : again->regions) ASSERT_TRUE(r.state->Wait().ok());
}

// Regions at unaligned file offsets (a ggml file): a packed copy gives each an aligned slot.
TEST_F(WeightLoaderTest, PackedCopyAlignsRegionsAtOddOffsets) {
  const auto bytes = RandomBytes(9000, 9);
  const std::string path = Write("odd", bytes);
  ExternalWeightManager manager(rt_.get(), &Loader());
  const std::vector<RegionNeed> needs = {{13, 1000, "", "a"}, {1013, 4003, "", "b"}, {7001, 1999, "", "c"}};
  auto first = manager.Place(0, path, 13, 9000, needs, {}, /*packed=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->file->packed());
  for (std::size_t i = 0; i < needs.size(); ++i) {
    ASSERT_TRUE(first->regions[i].state->Wait().ok());
    // Allocations start aligned (npu_sim), so an aligned offset within one is an aligned address.
    EXPECT_EQ(first->regions[i].address.offset() % ExternalWeightManager::kPackedAlignment, 0u) << i;
    EXPECT_EQ(ReadDevice(first->regions[i].address, needs[i].length, 0),
              std::vector<std::uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(needs[i].offset),
                                        bytes.begin() + static_cast<std::ptrdiff_t>(needs[i].offset + needs[i].length)));
  }
  // The same needs share the copy; a region it has no slot for gets a new one.
  auto second = manager.Place(0, path, 13, 9000, needs, {}, true);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->file, first->file);
  EXPECT_FALSE(second->regions[1].copied_here);
  auto other = manager.Place(0, path, 13, 9000, {{14, 10, "", "d"}}, {}, true);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->file, first->file);
  ASSERT_TRUE(other->regions[0].state->Wait().ok());
}

TEST_F(WeightLoaderTest, ConcurrentLoadsFromManyThreadsAllLand) {
  constexpr int kThreads = 4, kRounds = 10;
  std::vector<std::vector<std::uint8_t>> files;
  std::vector<std::string> paths;
  for (int f = 0; f < kThreads; ++f) {
    files.push_back(RandomBytes(300000 + 4099 * f, 10 + f));
    std::string name = "c";
    name += std::to_string(f);
    paths.push_back(Write(name, files.back()));
  }
  WeightLoader& loader = Loader({.chunk_bytes = 65536, .staging_chunks = 3});
  ExternalWeightManager manager(rt_.get(), &loader);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int f = (t + r) % kThreads;
        const std::uint64_t n = files[f].size();
        auto placed = manager.Place(r % 2, paths[f], 0, n, {{0, n, "", "w"}}, {});
        if (!placed.ok() || !placed->regions[0].state->Wait().ok()) {
          failures.fetch_add(1);
          continue;
        }
        std::vector<std::uint8_t> got(n);
        if (!rt_->MemcpyD2H(r % 2, got.data(), placed->regions[0].address, n).ok() || got != files[f])
          failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(loader.stats().peak_staging_bytes, 3u * 65536);
}

// ---- reads on the I/O threads ----------------------------------------------------------------

// What the I/O hook saw, and a way to hold chunks: chunk k's read waits until `until(k)` has
// reported (then a little longer, so a loader that let a latch follow the wrong chunk would be
// caught exposing bytes not yet read).
class IoScript {
 public:
  std::function<std::optional<std::size_t>(std::size_t)> until = [](std::size_t) { return std::nullopt; };

  void operator()(const WeightIoEvent& e) {
    std::unique_lock<std::mutex> lock(mu_);
    if (e.phase == WeightIoEvent::Phase::kReported) {
      reported_.insert(e.chunk);
      cv_.notify_all();
      return;
    }
    started_.insert(e.chunk);
    threads_.insert(std::this_thread::get_id());
    cv_.notify_all();
    if (hold_all_) cv_.wait(lock, [&] { return !hold_all_; });
    if (std::optional<std::size_t> other = until(e.chunk)) {
      cv_.wait(lock, [&] { return reported_.count(*other) > 0; });
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void HoldAll() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_all_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_all_ = false;
    cv_.notify_all();
  }
  void WaitStarted(std::size_t chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return started_.count(chunk) > 0; });
  }
  std::set<std::thread::id> Threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_all_ = false;
  std::set<std::size_t> started_, reported_;
  std::set<std::thread::id> threads_;
};

std::uint64_t FloatBits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

TEST_F(WeightLoaderTest, AKernelCompletesOnOneWorkerWhileAWeightReadIsHeld) {
  // One worker runs every handler and kernel. The loader's read is held in the I/O job: when the
  // read ran in the loader's handler, this held the only worker and nothing else could run.
  auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 1, .io_threads = 1});
  ASSERT_TRUE(rt.ok()) << rt.status();
  const std::size_t n = 2 * kWeightChunkBytes;
  const auto bytes = RandomBytes(n, 20);
  const std::string path = Write("held", bytes);
  DevicePtr dst = (*rt)->Malloc(0, n).value();
  auto script = std::make_shared<IoScript>();
  script->HoldAll();
  auto loader = WeightLoader::Create(rt->get(), {.io_hook = [script](const WeightIoEvent& e) { (*script)(e); }});
  ASSERT_TRUE(loader.ok()) << loader.status();
  auto done = (*loader)->Load({.device = 0, .path = path, .regions = {{0, n, dst, std::nullopt, "", "w"}}});
  script->WaitStarted(0);

  constexpr std::uint64_t m = 4096;
  DevicePtr a = (*rt)->Malloc(0, m * 4).value(), c = (*rt)->Malloc(0, m * 4).value();
  npu_sim::Stream s = (*rt)->CreateStream(0).value();
  ASSERT_TRUE((*rt)->LaunchKernel(s, "fill_f32", 4, {a.value, m, FloatBits(1.5f)}).ok());
  ASSERT_TRUE((*rt)->LaunchKernel(s, "fill_f32", 4, {c.value, m, FloatBits(1.0f)}).ok());
  ASSERT_TRUE((*rt)->LaunchKernel(s, "vector_add_f32", 4, {c.value, a.value, c.value, m}).ok());
  ASSERT_TRUE((*rt)->SynchronizeStream(s, std::chrono::seconds(60)).ok());
  std::vector<float> out(m);
  ASSERT_TRUE((*rt)->MemcpyD2H(0, out.data(), c, m * 4).ok());
  EXPECT_EQ(out, std::vector<float>(m, 2.5f));
  EXPECT_FALSE(done.WaitFor(std::chrono::milliseconds(0)));  // the load is still held

  script->Release();
  auto r = done.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::uint8_t> got(n);
  ASSERT_TRUE((*rt)->MemcpyD2H(0, got.data(), dst, n).ok());
  EXPECT_EQ(got, bytes);
  EXPECT_EQ(script->Threads().count(std::this_thread::get_id()), 0u);
  loader->reset();
}

// Three regions in 1 MiB chunks: r0 = chunks 0-2, r1 = 3-4, r2 = 5-7. Each region has a latch and
// a consumer stream that waits on it and reads the region back.
struct Reordered {
  std::vector<std::uint8_t> bytes;
  std::vector<WeightRegion> regions;
  std::vector<std::vector<std::uint8_t>> seen;
};

void LoadWhileReordering(npu_sim::Runtime& rt, const std::string& path, Reordered& t, bool verify,
                         std::function<std::optional<std::size_t>(std::size_t)> until) {
  auto script = std::make_shared<IoScript>();
  script->until = std::move(until);
  constexpr std::uint64_t kChunk = 1 << 20;
  auto loader = WeightLoader::Create(
      &rt, {.chunk_bytes = kChunk, .max_io_in_flight = 2, .io_hook = [script](const WeightIoEvent& e) { (*script)(e); }});
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<npu_sim::Stream> consumers;
  t.seen.assign(t.regions.size(), {});
  for (std::size_t i = 0; i < t.regions.size(); ++i) {
    WeightRegion& r = t.regions[i];
    r.dst = rt.Malloc(0, r.length).value();
    r.ready = rt.CreateEvent(0, npu_sim::EventKind::kLatch).value();
    r.sha256 = Sha256Hex(t.bytes.data() + r.file_offset, r.length);
    consumers.push_back(rt.CreateStream(0).value());
    t.seen[i].resize(r.length);
    ASSERT_TRUE(rt.StreamWaitEvent(consumers[i], *r.ready).ok());
    ASSERT_TRUE(rt.MemcpyD2HAsync(consumers[i], t.seen[i].data(), r.dst, r.length).ok());
  }
  auto report = (*loader)->Load({.device = 0, .path = path, .regions = t.regions, .verify = verify}).Get();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->chunks, 8u);
  EXPECT_GT(report->out_of_order_chunks, 0u) << "the hook did not reorder any completion";
  for (std::size_t i = 0; i < t.regions.size(); ++i) {
    ASSERT_TRUE(rt.SynchronizeStream(consumers[i], std::chrono::seconds(60)).ok());
    const WeightRegion& r = t.regions[i];
    EXPECT_TRUE(t.seen[i] == std::vector<std::uint8_t>(t.bytes.begin() + r.file_offset,
                                                       t.bytes.begin() + r.file_offset + r.length))
        << "region " << i << " was read before all of its bytes had landed";
  }
}

TEST_F(WeightLoaderTest, LatchesFollowTheirRegionsLastChunkWhenReadsCompleteOutOfOrder) {
  auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2, .io_threads = 2});
  ASSERT_TRUE(rt.ok()) << rt.status();
  constexpr std::uint64_t M = 1 << 20;
  Reordered t;
  t.bytes = RandomBytes(7 * M + 5000, 21);
  t.regions = {{100, 3 * M - 7, {}, std::nullopt, "", "r0"},
               {3 * M + 200, 2 * M, {}, std::nullopt, "", "r1"},
               {5 * M + 300, 2 * M + 4000, {}, std::nullopt, "", "r2"}};
  const std::string path = Write("reorder", t.bytes);
  // Unverified: every even chunk's read waits until the next chunk has reported, inside a region
  // (0 after 1) and across regions (2, the end of r0, after 3).
  LoadWhileReordering(**rt, path, t, /*verify=*/false,
                      [](std::size_t k) { return k % 2 == 0 && k + 1 < 8 ? std::optional<std::size_t>(k + 1) : std::nullopt; });
  // Verified: a region's chunks are read in order (its SHA-256 sees file order), so only a region's
  // last chunk can be overtaken, by the next region's first; the digests still match.
  LoadWhileReordering(**rt, path, t, /*verify=*/true, [](std::size_t k) {
    return k == 2 || k == 4 ? std::optional<std::size_t>(k + 1) : std::nullopt;
  });
}

TEST_F(WeightLoaderTest, AReadFailingMidLoadFailsItNamingTheFileAndReleasesTheLatch) {
  // The file shrinks after Load checked it: chunk 0's job truncates it, so the reads after it
  // (several in flight) fail. The load ends once they have all reported, with the error.
  const std::size_t n = 4 * kWeightChunkBytes;
  const std::string path = Write("shrinks", RandomBytes(n, 22));
  DevicePtr dst = rt_->Malloc(0, n).value();
  npu_sim::Event ready = rt_->CreateEvent(0, npu_sim::EventKind::kLatch).value();
  npu_sim::Stream consumer = rt_->CreateStream(0).value();
  ASSERT_TRUE(rt_->StreamWaitEvent(consumer, ready).ok());
  // Chunks after 0 (on the other I/O thread too) read only once the file has shrunk.
  auto script = std::make_shared<IoScript>();
  script->HoldAll();
  WeightLoader& loader = Loader({.max_io_in_flight = 3, .io_hook = [path, script](const WeightIoEvent& e) {
                                   if (e.phase == WeightIoEvent::Phase::kBeforeRead && e.chunk == 0) {
                                     fs::resize_file(path, kWeightChunkBytes + 10);
                                     script->Release();
                                     return;
                                   }
                                   (*script)(e);
                                 }});
  auto r = loader.Load({.device = 0, .path = path, .regions = {{0, n, dst, ready, "", "layer0/w"}}}).Get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataCorrupted) << r.status();
  EXPECT_NE(r.status().message().find("weight file '" + path + "' ended at offset"), std::string::npos) << r.status();
  EXPECT_TRUE(rt_->SynchronizeStream(consumer, std::chrono::seconds(60)).ok());
  // The loader serves the next load.
  const auto bytes = RandomBytes(5000, 23);
  Write("after", bytes);
  auto next = loader.Load({.device = 0, .path = (dir_ / "after").string(), .regions = {{0, 5000, dst, std::nullopt, "", "w"}}}).Get();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(ReadDevice(dst, 5000), bytes);
}

TEST_F(WeightLoaderTest, BadMaxIoInFlightIsRejected) {
  auto bad = WeightLoader::Create(rt_.get(), {.max_io_in_flight = -1});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_io_in_flight"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace npuflow::weights
