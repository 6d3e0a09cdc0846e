// WeightLoaderActor: moves regions of weight files into device memory (seed 000,
// CopyWeightFromFileAsync): 10 MiB chunks of asynchronous host-to-device copies through the
// device's DMA engine, with bounded host staging memory.
//
//   auto loader = WeightLoader::Create(&rt).value();
//   auto done = loader->Load({.device = 0, .path = "w.bin", .regions = {{0, 4096, dst, ready}}});
//   ... kernels that read dst wait (on the device) for the latch event `ready` ...
//   StatusOr<WeightLoadReport> r = done.Get();
//
// The actor only sequences. Every blocking step (opening the file, each chunk's pread, SHA-256,
// AES-GCM) is an I/O job on the actor system's I/O threads (actors::System::RunIo), never on the
// workers that run kernels; a job's completion is a message back to the actor, which then submits
// that chunk's copy task and, after a region's last chunk, records its latch, in file order
// whatever order the jobs completed in. With io_threads = 0 (deterministic mode) a job runs
// inline in the handler, one per message.
//
// Plain files: each chunk is read from the file straight into its device slot
// (Runtime::MapForHostWrite: one copy, page cache -> device memory, no staging), then one H2D copy
// task with data_in_place goes to the device's loader stream: it moves nothing and takes the
// transfer's virtual time. Up to max_io_in_flight chunks are read at once; when verifying, a
// region's chunks are read one after another (its SHA-256 sees the bytes in file order), while
// different regions still overlap.
// Encrypted files go through staging, because their plaintext must be authenticated before any
// of it is exposed: the actor owns a pool of `staging_chunks` host buffers of `chunk_bytes` each;
// one chunk at a time (GCM is sequential) is read and decrypted into a free buffer, then the actor
// submits H2D copies that hold the buffer (Task::keep_alive), and the buffer comes back to the
// pool, as a message to the actor, when the DMA engine has finished with it. So at most
// staging_chunks * chunk_bytes of host memory is in use however large the file. A region's
// `ready` latch is recorded on the loader stream after its last chunk, so a consuming task that
// waits on it starts once the bytes are on the device (in virtual time) and not before.
//
// Checks. Load checks at once, on the caller's thread, that the file exists and holds every
// region (a file shorter than offset + length is an error naming the file, the region and both
// sizes, never a silent partial load), and that an encrypted file comes with a key.
// verify: each region's SHA-256 is compared with `sha256` before its latch is recorded.
// key: the file is an AES-256-GCM envelope (base/aes_gcm.h); it is decrypted as it streams and the
// latches are recorded only after the tag has been verified, so a wrong key or a tampered byte is
// an error and no kernel ever reads unauthenticated bytes.
// When a load fails after it started, the latches not yet recorded are recorded anyway (so no
// device stream waits forever) and the future carries the error; whoever loaded must not run
// the model (DavinciModel fails its load, or its executions, with that error). A failed load
// ends once its I/O jobs in flight have reported.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/future.h"
#include "base/aes_gcm.h"
#include "base/status.h"
#include "npu_sim/runtime.h"

namespace npuflow::weights {

inline constexpr std::uint64_t kWeightChunkBytes = 10ull * 1024 * 1024;  // 10,485,760

// One region of the file to place on the device.
struct WeightRegion {
  std::uint64_t file_offset = 0;  // in the plaintext
  std::uint64_t length = 0;
  npu_sim::DevicePtr dst;               // where its first byte goes
  std::optional<npu_sim::Event> ready;  // a latch event (npu_sim::EventKind::kLatch), recorded once it landed
  std::string sha256;                   // expected digest (hex) when verifying
  std::string name;                     // for messages: the FileConstant node(s)
  std::uint64_t order = 0;              // plain files load regions by (order, file_offset)
};

struct WeightLoadRequest {
  int device = 0;
  std::string path;
  std::vector<WeightRegion> regions;
  bool verify = false;
  std::optional<AesKey> key;
  // The requester's host clock when it asked (Runtime::HostClock): the loader, a host client of
  // its own ("weight loader"), issues no copy earlier in virtual time. Last, so that designated
  // initializers elsewhere keep working.
  npu_sim::VTime at = 0;
};

struct WeightLoadReport {
  std::uint64_t bytes = 0;         // copied to the device
  std::uint64_t chunks = 0;        // H2D copies issued
  std::uint64_t bytes_read = 0;    // read from the file (the whole file when encrypted)
  double seconds = 0;              // wall time from Load to the last copy's completion
  npu_sim::VTime device_end = 0;   // virtual time the last copy ended
  // Time inside the loader's I/O jobs (where the load time goes): reading the file (pread,
  // including first touches of device or staging pages), SHA-256, AES-GCM. Summed over the jobs:
  // with several I/O threads the sum can exceed the wall time.
  double read_seconds = 0;
  double hash_seconds = 0;
  double decrypt_seconds = 0;
  std::uint64_t out_of_order_chunks = 0;  // chunks whose read ended before an earlier chunk's
};

// What WeightLoaderOptions::io_hook hears, on the I/O thread that runs a chunk's job.
struct WeightIoEvent {
  enum class Phase { kBeforeRead, kReported };  // kReported: the completion has been sent to the actor
  Phase phase = Phase::kBeforeRead;
  std::string_view path;
  std::size_t chunk = 0;         // the chunk's place in the load's order (file order within a region)
  std::string_view region;       // its region's name (plain files; empty when encrypted)
  std::uint64_t file_offset = 0; // in the plaintext
  std::uint64_t bytes = 0;
};

struct WeightLoaderOptions {
  std::uint64_t chunk_bytes = kWeightChunkBytes;
  int staging_chunks = 2;  // host staging buffers (double buffering): staging_chunks * chunk_bytes bytes at most
  // Plain files: chunk reads handed to the I/O threads at once. 0: 16 per I/O thread, or 1 when
  // I/O runs inline. A plain chunk in flight holds no memory (it is read straight into device
  // memory); the depth keeps the I/O threads busy while the actor's answer to a report waits
  // behind kernels on the workers (with 2 per thread, a GPT-2 load lost ~100 ms that way).
  int max_io_in_flight = 0;
  // For tests: called by each chunk's I/O job (never on a worker unless I/O runs inline). It may
  // block to hold a read, or hold one chunk until another has reported to reorder completions.
  std::function<void(const WeightIoEvent&)> io_hook;
};

struct WeightLoaderStats {
  std::uint64_t loads = 0;
  std::uint64_t chunks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t peak_staging_bytes = 0;  // the most host staging memory held at once
  double read_seconds = 0;     // summed over loads, as in WeightLoadReport
  double hash_seconds = 0;
  double decrypt_seconds = 0;
  std::uint64_t out_of_order_chunks = 0;
};

class WeightLoader {
 public:
  // Spawns the actor on `rt`'s actor system and creates one loader stream per device.
  static StatusOr<std::unique_ptr<WeightLoader>> Create(npu_sim::Runtime* rt, WeightLoaderOptions options = {});
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  // Queues a load (loads run one after another). Errors found by the checks above come back in
  // the future at once.
  actors::Future<StatusOr<WeightLoadReport>> Load(WeightLoadRequest request);

  WeightLoaderStats stats() const;
  const WeightLoaderOptions& options() const { return options_; }

  struct Shared;  // what the actor and this handle share

 private:
  WeightLoader() = default;
  WeightLoaderOptions options_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace npuflow::weights
