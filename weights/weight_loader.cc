#include "weights/weight_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <variant>

#include "actors/system.h"
#include "base/large_buffer.h"
#include "base/sha256.h"
#include "npu_sim/device_memory.h"

namespace npuflow::weights {
namespace {

using npu_sim::DeviceMemory;

using Clock = std::chrono::steady_clock;

// Adds the wall time since `t0` to `seconds`.
void AddSince(Clock::time_point t0, double& seconds) {
  seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads exactly `bytes` at `offset`, or says why not.
Status ReadAt(int fd, void* out, std::uint64_t bytes, std::uint64_t offset, const std::string& path) {
  auto* p = static_cast<std::uint8_t*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Failed("weight file '{}': read of {} bytes at offset {} failed: {}", path, bytes, offset,
                            std::strerror(errno));
    }
    if (n == 0)
      return Status::DataCorrupted("weight file '{}' ended at offset {} while {} more bytes were expected", path, offset,
                                   bytes);
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

// The open weight file, shared by a load and its I/O jobs: closed when the last one drops it.
struct OpenFile {
  int fd = -1;
  std::string path;
  OpenFile() = default;
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

// One chunk of a load. Chunks are numbered in the order their copies are submitted.
struct Chunk {
  std::size_t region = 0;      // plain files: its region
  std::uint64_t offset = 0;    // plain: within the region; encrypted: in the plaintext
  std::uint64_t bytes = 0;
  bool last_of_region = false;  // plain: the region's latch follows this chunk
};

// What an I/O job measured (WeightLoadReport's fields of the same names).
struct IoTimes {
  double read = 0, hash = 0, decrypt = 0;
  std::uint64_t bytes_read = 0;
};

struct StartLoad {
  WeightLoadRequest request;
  npu_sim::Stream stream;  // the device's loader stream
  actors::Promise<StatusOr<WeightLoadReport>> done;
  Clock::time_point start;
};
struct StagingFreed {
  int buffer = 0;  // -1: a nudge after a load ended
};
struct StopLoader {  // queued loads fail; answered once the load in flight has ended
  actors::Promise<Status> done;
};
// From the I/O job that opened the file (and, encrypted, read its header).
struct FileOpened {
  Status status;
  std::shared_ptr<const OpenFile> file;
  std::optional<GcmDecryptor> gcm;
  IoTimes times;
};
// From a chunk's I/O job. The state that must see bytes in order travels with the job and comes
// back here: a verified region's hasher (plain), or the decryptor and every region's hasher
// (encrypted).
struct ChunkDone {
  std::size_t chunk = 0;
  Status status;
  IoTimes times;
  std::optional<Sha256Hasher> hasher;
  std::optional<GcmDecryptor> gcm;
  std::vector<std::optional<Sha256Hasher>> hashers;
  int buffer = -1;  // encrypted: the staging buffer holding the plaintext
};
using LoaderMsg = std::variant<StartLoad, StagingFreed, StopLoader, FileOpened, ChunkDone>;

using IoHook = std::function<void(const WeightIoEvent&)>;

// One chunk's I/O job around its work: the test hook, then the work, then the report.
template <typename Work>
struct ChunkJob {
  actors::Address<LoaderMsg> self;
  const IoHook* hook = nullptr;  // the loader's options (the actor outlives its jobs)
  WeightIoEvent event;
  Work work;
  void operator()() {
    if (hook != nullptr) (*hook)(event);
    ChunkDone done;
    done.chunk = event.chunk;
    work(done);
    self.Send(std::move(done));
    event.phase = WeightIoEvent::Phase::kReported;
    if (hook != nullptr) (*hook)(event);
  }
};

// Plain file: read one chunk straight into its device slot; hash it when verifying.
struct PlainRead {
  std::shared_ptr<const OpenFile> file;
  std::optional<DeviceMemory::Mapping> dst;
  std::uint64_t file_offset = 0, bytes = 0;
  std::optional<Sha256Hasher> hasher;
  void operator()(ChunkDone& done) {
    if (bytes > 0) {
      auto* p = reinterpret_cast<std::uint8_t*>(dst->data());
      const Clock::time_point t0 = Clock::now();
      done.status = ReadAt(file->fd, p, bytes, file_offset, file->path);
      AddSince(t0, done.times.read);
      done.times.bytes_read = bytes;
      if (done.status.ok() && hasher) {
        const Clock::time_point t1 = Clock::now();
        hasher->Update(p, bytes);
        AddSince(t1, done.times.hash);
      }
    }
    done.hasher = std::move(hasher);
  }
};

// Encrypted file: read one chunk of ciphertext into a staging buffer, decrypt it in place, hash
// the parts regions need; after the last chunk, read the tag and check it.
struct DecryptRead {
  std::shared_ptr<const OpenFile> file;
  int buffer = -1;              // the actor's staging buffer, lent to this job
  std::uint8_t* buf = nullptr;  // its bytes
  std::uint64_t pos = 0, bytes = 0, end = 0;
  const std::vector<WeightRegion>* regions = nullptr;  // the load's, unchanged while it runs
  std::optional<GcmDecryptor> gcm;
  std::vector<std::optional<Sha256Hasher>> hashers;  // verifying: one per region
  void operator()(ChunkDone& done) {
    done.status = Run(done.times);
    done.buffer = buffer;
    done.gcm = std::move(gcm);
    done.hashers = std::move(hashers);
  }
  Status Run(IoTimes& times) {
    const Clock::time_point t0 = Clock::now();
    NPUFLOW_RETURN_IF_ERROR(ReadAt(file->fd, buf, bytes, kEncryptedHeaderBytes + pos, file->path));
    const Clock::time_point t1 = Clock::now();
    times.read += std::chrono::duration<double>(t1 - t0).count();
    times.bytes_read += bytes;
    NPUFLOW_RETURN_IF_ERROR(gcm->Update(buf, bytes, buf));
    AddSince(t1, times.decrypt);
    const std::uint64_t lo = pos, hi = pos + bytes;
    for (std::size_t i = 0; i < hashers.size(); ++i) {
      const WeightRegion& r = (*regions)[i];
      const std::uint64_t a = std::max(lo, r.file_offset), z = std::min(hi, r.file_offset + r.length);
      if (a >= z) continue;
      const Clock::time_point t2 = Clock::now();
      hashers[i]->Update(buf + (a - lo), z - a);
      AddSince(t2, times.hash);
    }
    if (hi < end) return Status::Ok();
    char tag[kGcmTagBytes];
    NPUFLOW_RETURN_IF_ERROR(ReadAt(file->fd, tag, sizeof(tag), kEncryptedHeaderBytes + end, file->path));
    times.bytes_read += kEncryptedHeaderBytes + kGcmTagBytes;
    return gcm->Finish(std::string_view(tag, sizeof(tag)));
  }
};

// Opens the file; an encrypted one's header is read and its decryptor begun.
FileOpened OpenWeightFile(const std::string& path, const std::optional<AesKey>& key) {
  FileOpened opened;
  auto file = std::make_shared<OpenFile>();
  file->path = path;
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0) {
    opened.status = Status::NotFound("weight file '{}': cannot open: {}", path, std::strerror(errno));
    return opened;
  }
  ::posix_fadvise(file->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (key) {
    char header[kEncryptedHeaderBytes];
    const Clock::time_point t0 = Clock::now();
    opened.status = ReadAt(file->fd, header, sizeof(header), 0, path);
    AddSince(t0, opened.times.read);
    if (!opened.status.ok()) return opened;
    StatusOr<GcmDecryptor> gcm =
        GcmDecryptor::Begin(std::string_view(header, sizeof(header)), *key, "weight file '" + path + "'");
    if (!gcm.ok()) {
      opened.status = gcm.status();
      return opened;
    }
    opened.gcm.emplace(std::move(gcm).value());
  }
  opened.file = std::move(file);
  return opened;
}

}  // namespace

struct WeightLoader::Shared {
  npu_sim::Runtime* rt = nullptr;
  WeightLoaderOptions options;
  std::mutex streams_mu;  // host side only: the actor never takes it
  std::vector<std::optional<npu_sim::Stream>> streams;  // per device, created by its first load
  actors::Address<LoaderMsg> actor;
  std::mutex mu;  // stats
  WeightLoaderStats stats;
};

namespace {

// The actor. One load at a time. It hands the file's opening and then its chunks to the I/O
// threads, and on each report submits, in chunk order, the copies whose chunks have landed.
class WeightLoaderActor {
 public:
  using Message = LoaderMsg;
  explicit WeightLoaderActor(std::shared_ptr<WeightLoader::Shared> shared)
      : shared_(std::move(shared)), client_("weight loader") {
    const int io = shared_->rt->system().io_threads();
    const int given = shared_->options.max_io_in_flight;
    max_in_flight_ = given > 0 ? given : io == 0 ? 1 : 16 * io;
  }

  void Receive(Message& msg, actors::Context<Message>& ctx) {
    // Every host call the loader makes is its own: a chunk's virtual time is a function of the
    // requests, never of the worker that ran this handler.
    npu_sim::ScopedHostClient charge(client_);
    std::visit([&](auto& m) { On(m); }, msg);
    Pump(ctx);
    if (!job_ && queue_.empty() && in_use_ == 0) ReleaseIdleStaging();
    if (!job_ && !stops_.empty()) {
      for (auto& p : stops_) p.Set(Status::Ok());
      stops_.clear();
    }
  }

 private:
  struct Job {
    WeightLoadRequest req;
    npu_sim::Stream stream;
    actors::Promise<StatusOr<WeightLoadReport>> done;
    Clock::time_point start;
    WeightLoadReport report;
    std::shared_ptr<const OpenFile> file;  // set once the open job reported
    std::optional<GcmDecryptor> gcm;       // encrypted: here, or with the one chunk job in flight
    std::vector<std::optional<Sha256Hasher>> hashers;  // verifying: per region, here or with its job
    std::vector<Chunk> chunks;
    std::vector<char> landed;      // per chunk: read (and hashed) into place
    std::size_t next_post = 0;     // the next chunk to hand to the I/O threads
    std::size_t next_submit = 0;   // the next chunk whose copy goes to the stream
    int in_flight = 0;             // chunk jobs handed out and not reported
    bool opening = false;          // the open job has not reported
    std::vector<bool> recorded;    // latch recorded, per region
    Status error;
    bool submitted_all = false;
    bool syncing = false;
  };

  void On(StartLoad& start) {
    if (stopped_) start.done.Set(Status::Aborted("weight file '{}': the weight loader is stopped", start.request.path));
    else queue_.push_back(std::move(start));
  }
  void On(StopLoader& stop) {
    stopped_ = true;
    for (StartLoad& q : queue_) q.done.Set(Status::Aborted("weight file '{}': the weight loader stopped", q.request.path));
    queue_.clear();
    stops_.push_back(std::move(stop.done));
  }
  void On(StagingFreed& freed) {
    if (freed.buffer < 0) return;
    free_.push_back(freed.buffer);
    --in_use_;
  }
  void On(FileOpened& opened);
  void On(ChunkDone& done);

  // Moves the load in flight on as far as it can go now: the next load, the open job, chunk jobs,
  // and, once every chunk is submitted (or the load failed and its jobs have reported), the
  // remaining latches and the wait for the stream.
  void Pump(actors::Context<Message>& ctx) {
    for (;;) {
      if (!job_) {
        if (queue_.empty()) return;
        StartNext();
        continue;
      }
      Job& job = *job_;
      if (job.error.ok() && !job.submitted_all) {
        if (!job.file) {
          if (!job.opening) Open(job, ctx);
        } else if (job.req.key) {
          PostEncryptedChunk(job, ctx);
        } else {
          PostPlainChunks(job, ctx);
        }
        if (job.error.ok() && !job.submitted_all) return;  // a report or a staging buffer comes back
      }
      if (job.opening || job.in_flight > 0 || job.syncing) return;
      // Everything is submitted (or the load failed): unblock every latch not yet recorded, then
      // wait for the stream. The staging buffers come back as the copies end.
      for (std::size_t r = 0; r < job.req.regions.size(); ++r) RecordLatch(job, r);
      job.syncing = true;
      npu_sim::Runtime& rt = *shared_->rt;
      ctx.Then(rt.SynchronizeStreamAsync(Stream()), [this, self = ctx.self()](StatusOr<npu_sim::VTime> r) {
        npu_sim::ScopedHostClient charge(client_);
        if (r.ok()) client_.Merge(*r);
        Finish(std::move(r));
        self.Send(StagingFreed{-1});  // a nudge: start the next load
      });
      return;
    }
  }

  void StartNext() {
    StartLoad next = std::move(queue_.front());
    queue_.pop_front();
    auto job = std::make_unique<Job>();
    job->req = std::move(next.request);
    client_.Merge(job->req.at);
    job->stream = next.stream;
    job->done = std::move(next.done);
    job->start = next.start;
    // Plain files: in the order the model needs them (its first readers' order), then by offset;
    // an encrypted file is decrypted front to back, so its regions go by offset.
    const bool by_need = !job->req.key;
    std::sort(job->req.regions.begin(), job->req.regions.end(), [by_need](const WeightRegion& a, const WeightRegion& b) {
      if (by_need && a.order != b.order) return a.order < b.order;
      return a.file_offset < b.file_offset;
    });
    job->recorded.assign(job->req.regions.size(), false);
    if (job->req.regions.empty() && !job->req.key) job->submitted_all = true;
    job_ = std::move(job);
  }

  // Hands `work` to the I/O threads; false (and the load failed) when the system is going down.
  bool RunIo(Job& job, UniqueFunction<void()> work) {
    if (shared_->rt->system().RunIo(std::move(work))) return true;
    if (job.error.ok())
      job.error = Status::Aborted("weight file '{}': the actor system shut down during the load", job.req.path);
    return false;
  }

  void Open(Job& job, actors::Context<Message>& ctx) {
    job.opening = RunIo(job, [self = ctx.self(), path = job.req.path, key = job.req.key]() mutable {
      self.Send(OpenWeightFile(path, key));
    });
  }

  // Plain file: hands out chunk reads while fewer than max_in_flight_ are out. A verified
  // region's next chunk waits for the one before it (the hasher is with that job).
  void PostPlainChunks(Job& job, actors::Context<Message>& ctx) {
    while (job.error.ok() && job.next_post < job.chunks.size() && job.in_flight < max_in_flight_) {
      const std::size_t k = job.next_post;
      const Chunk& c = job.chunks[k];
      if (job.req.verify && k > 0 && job.chunks[k - 1].region == c.region && !job.landed[k - 1]) return;
      const WeightRegion& region = job.req.regions[c.region];
      PlainRead work{.file = job.file, .file_offset = region.file_offset + c.offset, .bytes = c.bytes};
      if (c.bytes > 0) {
        StatusOr<DeviceMemory::Mapping> dst = shared_->rt->MapForHostWrite(job.req.device, region.dst + c.offset, c.bytes);
        if (!dst.ok()) {
          job.error = dst.status().WithContext("weight file '" + job.req.path + "', " + region.name);
          return;
        }
        work.dst = std::move(dst).value();
      }
      if (job.req.verify) work.hasher = std::exchange(job.hashers[c.region], std::nullopt);
      if (!RunIo(job, ChunkJob<PlainRead>{ctx.self(), Hook(), Event(job, k, region.name, work.file_offset, c.bytes),
                                         std::move(work)}))
        return;
      ++job.next_post;
      ++job.in_flight;
    }
  }

  // Encrypted file: one chunk job at a time (GCM is sequential), each into a free staging buffer.
  void PostEncryptedChunk(Job& job, actors::Context<Message>& ctx) {
    if (job.in_flight > 0 || job.next_post == job.chunks.size()) return;
    const int b = TakeBuffer();
    if (b < 0) {
      if (in_use_ == 0)
        job.error = Status::MemoryAllocation("weight file '{}': no host memory for a {}-byte staging buffer",
                                             job.req.path, shared_->options.chunk_bytes);
      return;  // else a copy in flight returns one
    }
    const std::size_t k = job.next_post;
    const Chunk& c = job.chunks[k];
    Touch(b, c.bytes);
    DecryptRead work{.file = job.file,
                     .buffer = b,
                     .buf = reinterpret_cast<std::uint8_t*>(buffers_[b].get()),
                     .pos = c.offset,
                     .bytes = c.bytes,
                     .end = job.gcm->plaintext_bytes(),
                     .regions = &job.req.regions,
                     .gcm = std::exchange(job.gcm, std::nullopt),
                     .hashers = std::move(job.hashers)};
    job.hashers.clear();
    if (!RunIo(job, ChunkJob<DecryptRead>{ctx.self(), Hook(), Event(job, k, {}, c.offset, c.bytes), std::move(work)})) {
      GiveBack(b);
      return;
    }
    ++job.next_post;
    ++job.in_flight;
  }

  const IoHook* Hook() const { return shared_->options.io_hook ? &shared_->options.io_hook : nullptr; }
  static WeightIoEvent Event(const Job& job, std::size_t k, std::string_view region, std::uint64_t offset,
                             std::uint64_t bytes) {
    return {WeightIoEvent::Phase::kBeforeRead, job.file->path, k, region, offset, bytes};
  }

  // Plain: the chunks that have landed, from the first not yet submitted on, in order: each
  // one's copy task, and after a region's last chunk its digest check and latch.
  void SubmitLanded(Job& job) {
    while (job.error.ok() && job.next_submit < job.chunks.size() && job.landed[job.next_submit]) {
      const Chunk& c = job.chunks[job.next_submit];
      const WeightRegion& region = job.req.regions[c.region];
      if (c.bytes > 0) {
        if (Status s = SubmitInPlace(job, region.dst + c.offset, c.bytes); !s.ok()) job.error = std::move(s);
      }
      if (job.error.ok() && c.last_of_region) {
        if (job.req.verify) {
          if (Status s = CheckDigest(job, region, *job.hashers[c.region]); !s.ok()) job.error = std::move(s);
        }
        if (job.error.ok()) RecordLatch(job, c.region);
      }
      ++job.next_submit;
    }
    if (job.error.ok() && job.next_submit == job.chunks.size()) job.submitted_all = true;
  }

  // Encrypted: the copies out of the staging buffer the chunk was decrypted into; after the last
  // chunk (the tag checked) the digests.
  void SubmitDecrypted(Job& job, std::size_t k, int b) {
    const Chunk& c = job.chunks[k];
    const std::uint64_t lo = c.offset, hi = c.offset + c.bytes;
    const auto* buf = reinterpret_cast<const std::uint8_t*>(buffers_[b].get());
    // The staging buffer goes back once every copy from it has ended: one keep-alive for all.
    std::shared_ptr<void> keep = Lease(b);
    for (const WeightRegion& r : job.req.regions) {
      const std::uint64_t a = std::max(lo, r.file_offset), z = std::min(hi, r.file_offset + r.length);
      if (a >= z) continue;
      if (Status s = Submit(job, keep, r.dst + (a - r.file_offset), buf + (a - lo), z - a); !s.ok()) {
        job.error = std::move(s);
        return;
      }
    }
    job.next_submit = k + 1;
    if (job.next_submit < job.chunks.size()) return;
    for (std::size_t i = 0; i < job.req.regions.size() && job.req.verify; ++i) {
      if (Status s = CheckDigest(job, job.req.regions[i], *job.hashers[i]); !s.ok()) {
        job.error = std::move(s);
        return;
      }
    }
    job.submitted_all = true;
  }

  void Finish(StatusOr<npu_sim::VTime> synced) {
    Job& job = *job_;
    Status status = job.error;
    if (status.ok() && !synced.ok()) status = synced.status().WithContext("weight file '" + job.req.path + "'");
    if (!synced.ok()) {
      // A failed stream dropped the records queued behind the failure: record every latch again
      // (a latch recorded twice is still just set), so no device stream waits forever.
      for (const WeightRegion& r : job.req.regions) {
        if (!r.ready) continue;
        npu_sim::Task t = npu_sim::Task::Record(r.ready->id);
        t.name = "weight ready (after a failure)";
        (void)shared_->rt->Submit(Stream(), {std::move(t)});
      }
    }
    job.report.seconds = std::chrono::duration<double>(Clock::now() - job.start).count();
    if (synced.ok()) job.report.device_end = *synced;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stats.loads += 1;
      shared_->stats.chunks += job.report.chunks;
      shared_->stats.bytes += job.report.bytes;
      shared_->stats.read_seconds += job.report.read_seconds;
      shared_->stats.hash_seconds += job.report.hash_seconds;
      shared_->stats.decrypt_seconds += job.report.decrypt_seconds;
      shared_->stats.out_of_order_chunks += job.report.out_of_order_chunks;
    }
    if (status.ok()) job.done.Set(job.report);
    else job.done.Set(std::move(status));
    job_.reset();  // drops the file (closed once no job holds it)
  }

  static void AddTimes(WeightLoadReport& report, const IoTimes& t) {
    report.read_seconds += t.read;
    report.hash_seconds += t.hash;
    report.decrypt_seconds += t.decrypt;
    report.bytes_read += t.bytes_read;
  }
  static std::vector<Chunk> PlanPlain(const std::vector<WeightRegion>& regions, std::uint64_t chunk_bytes);
  static std::vector<Chunk> PlanEncrypted(std::uint64_t plaintext, std::uint64_t chunk_bytes);

  static Status CheckDigest(const Job& job, const WeightRegion& region, Sha256Hasher& hasher) {
    const std::string got = ToHex(hasher.Finish());
    if (region.sha256.empty() || got == region.sha256) return Status::Ok();
    return Status::DataCorrupted(
        "weight file '{}': the {} bytes at offset {} ({}) have SHA-256 {}, expected {}: the file is corrupted or not "
        "the one the model was compiled with",
        job.req.path, region.length, region.file_offset, region.name, got, region.sha256);
  }

  Status SubmitInPlace(Job& job, npu_sim::DevicePtr dst, std::uint64_t n) {
    npu_sim::Task t = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, n);
    t.dst_dev = dst;
    t.data_in_place = true;
    t.name = "weight chunk";
    NPUFLOW_RETURN_IF_ERROR(shared_->rt->Submit(Stream(), {std::move(t)}).status());
    job.report.chunks += 1;
    job.report.bytes += n;
    return Status::Ok();
  }

  Status Submit(Job& job, std::shared_ptr<void> keep, npu_sim::DevicePtr dst, const std::uint8_t* src,
                std::uint64_t n) {
    npu_sim::Task t = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, n);
    t.dst_dev = dst;
    t.src_host = src;
    t.keep_alive = std::move(keep);
    t.name = "weight chunk";
    NPUFLOW_RETURN_IF_ERROR(shared_->rt->Submit(Stream(), {std::move(t)}).status());
    job.report.chunks += 1;
    job.report.bytes += n;
    return Status::Ok();
  }

  void RecordLatch(Job& job, std::size_t r) {
    if (job.recorded[r]) return;
    job.recorded[r] = true;
    const WeightRegion& region = job.req.regions[r];
    if (!region.ready) return;
    npu_sim::Task t = npu_sim::Task::Record(region.ready->id);
    t.name = "weight ready";
    if (Status s = shared_->rt->Submit(Stream(), {std::move(t)}).status(); !s.ok() && job.error.ok()) job.error = s;
  }

  // Staging memory follows what the chunks in flight need: a buffer about to take `n` bytes gives
  // back the pages an earlier, larger chunk left resident beyond them (after a big region, small
  // ones then hold little), and an idle loader holds none.
  void Touch(int b, std::uint64_t n) {
    std::uint64_t& resident = resident_[static_cast<std::size_t>(b)];
    if (resident > n) ReleaseLargeBufferPages(buffers_[b], n, resident - n);
    resident = n;
  }
  void ReleaseIdleStaging() {
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      ReleaseLargeBufferPages(buffers_[b], 0, resident_[b]);
      resident_[b] = 0;
    }
  }

  // A staging buffer, or -1 when all are lent out.
  int TakeBuffer() {
    if (free_.empty()) {
      if (static_cast<int>(buffers_.size()) >= shared_->options.staging_chunks) return -1;
      buffers_.push_back(AllocateLargeBuffer(shared_->options.chunk_bytes));
      if (!buffers_.back()) {
        buffers_.pop_back();
        return -1;
      }
      resident_.push_back(0);
      free_.push_back(static_cast<int>(buffers_.size()) - 1);
    }
    const int b = free_.back();
    free_.pop_back();
    ++in_use_;
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stats.peak_staging_bytes =
        std::max<std::uint64_t>(shared_->stats.peak_staging_bytes, in_use_ * shared_->options.chunk_bytes);
    return b;
  }
  void GiveBack(int b) {
    free_.push_back(b);
    --in_use_;
  }
  // The buffer's owner for the DMA engine: when the last copy from it ends, it comes back to the
  // pool through a message (the deleter runs on whichever thread drops it).
  std::shared_ptr<void> Lease(int b) {
    actors::Address<Message> self = shared_->actor;
    return std::shared_ptr<void>(buffers_[b].get(), [self, b](void*) mutable { self.Send(StagingFreed{b}); });
  }

  npu_sim::Stream Stream() const { return job_->stream; }

  std::shared_ptr<WeightLoader::Shared> shared_;  // outlives the handle: copies may end after it is gone
  npu_sim::HostClient client_;  // the loader's own host clock and trace track
  int max_in_flight_ = 1;       // plain chunk jobs out at once
  std::deque<StartLoad> queue_;
  // The load in flight. It ends only once its open job and every chunk job have reported, so
  // a report always belongs to it, and the state a job points at (its staging buffer, the
  // regions) outlives the job. (At shutdown the system stops its I/O before destroying actors.)
  std::unique_ptr<Job> job_;
  bool stopped_ = false;
  std::vector<actors::Promise<Status>> stops_;
  std::vector<LargeBuffer> buffers_;  // staging, chunk_bytes each
  std::vector<std::uint64_t> resident_;  // per buffer: the bytes its last chunk touched
  std::vector<int> free_;
  int in_use_ = 0;
};

void WeightLoaderActor::On(FileOpened& opened) {
  if (!job_) return;
  Job& job = *job_;
  job.opening = false;
  AddTimes(job.report, opened.times);
  if (opened.status.ok() && job.req.verify) opened.status = CryptoAvailable().WithContext("verifying the weights");
  if (!opened.status.ok()) {
    if (job.error.ok()) job.error = std::move(opened.status);
    return;
  }
  job.file = std::move(opened.file);
  const std::uint64_t chunk_bytes = shared_->options.chunk_bytes;
  if (job.req.key) {
    job.gcm = std::move(opened.gcm);
    job.chunks = PlanEncrypted(job.gcm->plaintext_bytes(), chunk_bytes);
  } else {
    job.chunks = PlanPlain(job.req.regions, chunk_bytes);
  }
  job.landed.assign(job.chunks.size(), 0);
  if (job.req.verify) {
    job.hashers.resize(job.req.regions.size());
    for (auto& h : job.hashers) h.emplace();
  }
}

void WeightLoaderActor::On(ChunkDone& done) {
  if (!job_) return;
  Job& job = *job_;
  --job.in_flight;
  AddTimes(job.report, done.times);
  const Chunk& c = job.chunks[done.chunk];
  if (job.req.key) {
    job.gcm = std::move(done.gcm);
    job.hashers = std::move(done.hashers);
  } else if (done.hasher) {
    job.hashers[c.region] = std::move(done.hasher);
  }
  if (!done.status.ok()) {
    if (done.buffer >= 0) GiveBack(done.buffer);
    if (job.error.ok()) job.error = std::move(done.status);
    return;
  }
  if (job.req.key) {
    if (job.error.ok()) SubmitDecrypted(job, done.chunk, done.buffer);
    else GiveBack(done.buffer);
    return;
  }
  job.landed[done.chunk] = 1;
  if (done.chunk != job.next_submit) job.report.out_of_order_chunks += 1;
  SubmitLanded(job);
}

std::vector<Chunk> WeightLoaderActor::PlanPlain(const std::vector<WeightRegion>& regions, std::uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  for (std::size_t r = 0; r < regions.size(); ++r) {
    std::uint64_t pos = 0;
    do {  // an empty region still gets one (empty) chunk: its latch and digest follow it
      const std::uint64_t n = std::min(chunk_bytes, regions[r].length - pos);
      chunks.push_back({r, pos, n, pos + n == regions[r].length});
      pos += n;
    } while (pos < regions[r].length);
  }
  return chunks;
}

std::vector<Chunk> WeightLoaderActor::PlanEncrypted(std::uint64_t plaintext, std::uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  std::uint64_t pos = 0;
  do {  // an empty plaintext still gets one chunk: it reads and checks the tag
    const std::uint64_t n = std::min(chunk_bytes, plaintext - pos);
    chunks.push_back({0, pos, n, false});
    pos += n;
  } while (pos < plaintext);
  return chunks;
}

}  // namespace

StatusOr<std::unique_ptr<WeightLoader>> WeightLoader::Create(npu_sim::Runtime* rt, WeightLoaderOptions options) {
  if (rt == nullptr) return Status::ParamInvalid("WeightLoader: no runtime");
  if (options.chunk_bytes == 0) return Status::ParamInvalid("WeightLoader: chunk_bytes must be positive");
  if (options.staging_chunks < 1 || options.staging_chunks > 1024)
    return Status::ParamInvalid("WeightLoader: staging_chunks must be 1 to 1024, got {}", options.staging_chunks);
  if (options.max_io_in_flight < 0 || options.max_io_in_flight > 1024)
    return Status::ParamInvalid("WeightLoader: max_io_in_flight must be 0 (automatic) to 1024, got {}",
                                options.max_io_in_flight);
  std::unique_ptr<WeightLoader> loader(new WeightLoader());
  loader->options_ = options;
  loader->shared_ = std::make_shared<Shared>();
  Shared& sh = *loader->shared_;
  sh.rt = rt;
  sh.options = options;
  sh.streams.resize(static_cast<std::size_t>(rt->device_count()));
  sh.actor = rt->system().Spawn<WeightLoaderActor>("weight-loader", loader->shared_);
  return loader;
}

WeightLoader::~WeightLoader() {
  if (!shared_) return;
  // The load in flight ends (queued ones fail), its copies drain, then the loader streams go.
  actors::Promise<Status> stopped;
  auto done = stopped.GetFuture();
  shared_->actor.Send(StopLoader{std::move(stopped)});
  (void)done.Get();  // fails at once if the actor system is already down
  std::vector<std::optional<npu_sim::Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(shared_->streams_mu);
    streams.swap(shared_->streams);
  }
  for (const auto& s : streams) {
    if (!s) continue;
    (void)shared_->rt->SynchronizeStream(*s);
    (void)shared_->rt->DestroyStream(*s);
  }
}

actors::Future<StatusOr<WeightLoadReport>> WeightLoader::Load(WeightLoadRequest request) {
  using Result = StatusOr<WeightLoadReport>;
  const Clock::time_point start = Clock::now();
  const std::string& path = request.path;
  if (request.device < 0 || request.device >= shared_->rt->device_count())
    return actors::Future<Result>::Ready(Status::ParamInvalid("weight file '{}': no device {}", path, request.device));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return actors::Future<Result>::Ready(
        Status::NotFound("weight file '{}' cannot be read: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return actors::Future<Result>::Ready(Status::ParamInvalid("weight file '{}' is not a regular file", path));
  std::uint64_t plain = static_cast<std::uint64_t>(st.st_size);
  // Encrypted or not: the first bytes tell.
  {
    char head[kEncryptedHeaderBytes] = {};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return actors::Future<Result>::Ready(
          Status::NotFound("weight file '{}' cannot be opened: {}", path, std::strerror(errno)));
    const ssize_t got = ::pread(fd, head, sizeof(head), 0);
    ::close(fd);
    const bool encrypted = got >= static_cast<ssize_t>(kEncryptedMagic.size()) &&
                           IsEncrypted(std::string_view(head, static_cast<std::size_t>(got)));
    if (encrypted && !request.key)
      return actors::Future<Result>::Ready(
          Status::ParamInvalid("weight file '{}' is encrypted (AES-256-GCM): give its key", path));
    if (!encrypted && request.key)
      return actors::Future<Result>::Ready(Status::DataCorrupted(
          "weight file '{}' is not encrypted, but a key was given: refusing plain weights where encrypted ones were "
          "expected",
          path));
    if (encrypted) {
      if (got != static_cast<ssize_t>(kEncryptedHeaderBytes))
        return actors::Future<Result>::Ready(
            Status::DataCorrupted("weight file '{}': truncated encrypted header", path));
      std::uint64_t n = 0;
      for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(head[20 + i])) << (8 * i);
      // Compared by subtracting from the file's size: n + header + tag wraps around for an n near
      // 2^64, and a file shorter than header + tag would have passed with such an n.
      constexpr std::uint64_t kFraming = kEncryptedHeaderBytes + kGcmTagBytes;
      if (plain < kFraming)
        return actors::Future<Result>::Ready(Status::DataCorrupted(
            "weight file '{}': the envelope announces {} bytes of weights, but the file has {} bytes, shorter than the "
            "{}-byte header and {}-byte tag",
            path, n, plain, kEncryptedHeaderBytes, kGcmTagBytes));
      if (n != plain - kFraming)
        return actors::Future<Result>::Ready(Status::DataCorrupted(
            "weight file '{}': the envelope announces {} bytes of weights, the file has {} bytes (room for {})", path, n,
            plain, plain - kFraming));
      plain = n;
    }
  }
  for (const WeightRegion& r : request.regions) {
    if (r.file_offset + r.length > plain || r.file_offset + r.length < r.file_offset)
      return actors::Future<Result>::Ready(Status::ParamInvalid(
          "weight file '{}' has {} bytes, but {} reads offset {} + length {} = {}: the file is truncated or not the "
          "one the model was compiled with",
          path, plain, r.name.empty() ? std::string("a region") : "'" + r.name + "'", r.file_offset, r.length,
          r.file_offset + r.length));
    if (!r.dst && r.length > 0)
      return actors::Future<Result>::Ready(
          Status::ParamInvalid("weight file '{}': region at offset {} ({}) has no device address", path, r.file_offset,
                               r.name));
  }
  npu_sim::Stream stream;
  {
    std::lock_guard<std::mutex> lock(shared_->streams_mu);
    auto& slot = shared_->streams[static_cast<std::size_t>(request.device)];
    if (!slot) {
      auto created = shared_->rt->CreateStream(request.device);
      if (!created.ok())
        return actors::Future<Result>::Ready(created.status().WithContext("weight loader stream"));
      slot = *created;
    }
    stream = *slot;
  }
  actors::Promise<Result> done;
  auto future = done.GetFuture();
  shared_->actor.Send(StartLoad{std::move(request), stream, std::move(done), start});
  return future;
}

WeightLoaderStats WeightLoader::stats() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->stats;
}

}  // namespace npuflow::weights
