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

struct StartLoad {
  WeightLoadRequest request;
  npu_sim::Stream stream;  // the device's loader stream
  actors::Promise<StatusOr<WeightLoadReport>> done;
  Clock::time_point start;
};
struct StagingFreed {
  int buffer = 0;
};
struct StopLoader {  // queued loads fail; answered once the load in flight has ended
  actors::Promise<Status> done;
};
using LoaderMsg = std::variant<StartLoad, StagingFreed, StopLoader>;

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

// The actor. One load at a time; within a load, chunks are read in file order while staging
// buffers are free, each chunk's copy returning its buffer when the DMA engine is done with it.
class WeightLoaderActor {
 public:
  using Message = LoaderMsg;
  explicit WeightLoaderActor(std::shared_ptr<WeightLoader::Shared> shared)
      : shared_(std::move(shared)), client_("weight loader") {}
  ~WeightLoaderActor() { CloseFile(); }

  void Receive(Message& msg, actors::Context<Message>& ctx) {
    // Every host call the loader makes is its own: a chunk's virtual time is a function of the
    // requests, never of the worker that ran this handler.
    npu_sim::ScopedHostClient charge(client_);
    if (auto* start = std::get_if<StartLoad>(&msg)) {
      if (stopped_) start->done.Set(Status::Aborted("weight file '{}': the weight loader is stopped", start->request.path));
      else queue_.push_back(std::move(*start));
    } else if (auto* stop = std::get_if<StopLoader>(&msg)) {
      stopped_ = true;
      for (StartLoad& q : queue_) q.done.Set(Status::Aborted("weight file '{}': the weight loader stopped", q.request.path));
      queue_.clear();
      stops_.push_back(std::move(stop->done));
    } else if (const int b = std::get<StagingFreed>(msg).buffer; b >= 0) {
      free_.push_back(b);
      --in_use_;
    }
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
    std::size_t region = 0;      // next region (plain files)
    std::uint64_t pos = 0;       // plain: offset within the region; encrypted: plaintext offset
    std::uint64_t end = 0;       // encrypted: bytes of plaintext
    std::optional<GcmDecryptor> gcm;
    Sha256Hasher hasher;                 // plain files: the current region's digest
    std::vector<Sha256Hasher> hashers;   // encrypted files: one per region
    std::vector<bool> recorded;  // latch recorded, per region
    Status error;
    bool submitted_all = false;
    bool syncing = false;
  };

  void Pump(actors::Context<Message>& ctx) {
    for (;;) {
      if (!job_) {
        if (queue_.empty()) return;
        StartNext();
        if (!job_) continue;
      }
      Job& job = *job_;
      if (!job.gcm && job.error.ok() && !job.submitted_all) {
        // A plain file: one chunk read straight into its device slot, then the handler yields
        // (a nudge brings it back) so one load never holds a worker for long.
        if (Status s = NextPlainChunk(job); !s.ok()) job.error = std::move(s);
        if (job.error.ok() && !job.submitted_all) {
          ctx.self().Send(StagingFreed{-1});
          return;
        }
      }
      while (job.error.ok() && !job.submitted_all) {
        const int b = TakeBuffer();
        if (b < 0 && in_use_ == 0) {
          job.error = Status::MemoryAllocation("weight file '{}': no host memory for a {}-byte staging buffer",
                                               job.req.path, shared_->options.chunk_bytes);
          break;
        }
        if (b < 0) return;  // a copy in flight returns one
        if (Status s = NextEncryptedChunk(job, b); !s.ok()) job.error = std::move(s);
      }
      if (job.syncing) return;
      // Everything is submitted (or the load failed): unblock every latch not yet recorded, then
      // wait for the stream. The staging buffers come back as the copies end.
      for (std::size_t r = 0; r < job.req.regions.size(); ++r) RecordLatch(job, r);
      job.syncing = true;
      npu_sim::Runtime& rt = *shared_->rt;
      ctx.Then(rt.SynchronizeStreamAsync(Stream()), [this, self = ctx.self()](StatusOr<npu_sim::VTime> r) {
        npu_sim::ScopedHostClient charge(client_);
        if (r.ok()) client_.Merge(*r);
        Finish(std::move(r));
        self.Send(StagingFreed{-1});  // a nudge: start the next load (-1 is not a buffer)
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
    fd_ = ::open(job->req.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      // Through the normal end (latches recorded, stream drained), so no device stream waits on it.
      job->error = Status::NotFound("weight file '{}': cannot open: {}", job->req.path, std::strerror(errno));
      job->submitted_all = true;
      job_ = std::move(job);
      return;
    }
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (job->req.key) {
      char header[kEncryptedHeaderBytes];
      Status s = ReadAt(fd_, header, sizeof(header), 0, job->req.path);
      StatusOr<GcmDecryptor> gcm = s.ok() ? GcmDecryptor::Begin(std::string_view(header, sizeof(header)),
                                                                *job->req.key, "weight file '" + job->req.path + "'")
                                          : StatusOr<GcmDecryptor>(s);
      if (!gcm.ok()) {
        job->error = gcm.status();
        job->submitted_all = true;
      } else {
        job->end = gcm->plaintext_bytes();
        job->gcm.emplace(std::move(gcm).value());
        if (job->req.verify) job->hashers = std::vector<Sha256Hasher>(job->req.regions.size());
      }
    }
    job_ = std::move(job);
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
    }
    if (status.ok()) job.done.Set(job.report);
    else job.done.Set(std::move(status));
    CloseFile();
    job_.reset();
  }

  // Plain file: the next chunk of the current region, at most chunk_bytes, never crossing regions,
  // read from the file straight into its device slot (one copy: page cache -> device memory; no
  // staging). The copy task then only accounts the transfer's virtual time (data_in_place), and
  // the region's latch still follows its last chunk.
  Status NextPlainChunk(Job& job) {
    const WeightRegion& region = job.req.regions[job.region];
    const std::uint64_t n = std::min(shared_->options.chunk_bytes, region.length - job.pos);
    if (n > 0) {
      NPUFLOW_ASSIGN_OR_RETURN(DeviceMemory::Mapping dst,
                               shared_->rt->MapForHostWrite(job.req.device, region.dst + job.pos, n));
      auto* bytes = reinterpret_cast<std::uint8_t*>(dst.data());
      const Clock::time_point t0 = Clock::now();
      NPUFLOW_RETURN_IF_ERROR(ReadAt(fd_, bytes, n, region.file_offset + job.pos, job.req.path));
      AddSince(t0, job.report.read_seconds);
      job.report.bytes_read += n;
      if (job.req.verify) {
        const Clock::time_point t1 = Clock::now();
        job.hasher.Update(bytes, n);
        AddSince(t1, job.report.hash_seconds);
      }
      NPUFLOW_RETURN_IF_ERROR(SubmitInPlace(job, region.dst + job.pos, n));
    }
    job.pos += n;
    if (job.pos == region.length) {
      if (job.req.verify) NPUFLOW_RETURN_IF_ERROR(CheckDigest(job, region, job.hasher));
      RecordLatch(job, job.region);
      job.pos = 0;
      if (++job.region == job.req.regions.size()) job.submitted_all = true;
    }
    return Status::Ok();
  }

  // Encrypted file: the next chunk of the whole plaintext, decrypted, with the parts regions need
  // copied to the device. Latches wait for the tag (recorded in Pump once everything is in).
  Status NextEncryptedChunk(Job& job, int b) {
    const std::uint64_t n = std::min(shared_->options.chunk_bytes, job.end - job.pos);
    Touch(b, n);
    auto* buf = reinterpret_cast<std::uint8_t*>(buffers_[b].get());
    const Clock::time_point t0 = Clock::now();
    if (Status s = ReadAt(fd_, buf, n, kEncryptedHeaderBytes + job.pos, job.req.path); !s.ok()) {
      GiveBack(b);
      return s;
    }
    const Clock::time_point t1 = Clock::now();
    job.report.read_seconds += std::chrono::duration<double>(t1 - t0).count();
    job.report.bytes_read += n;
    if (Status s = job.gcm->Update(buf, n, buf); !s.ok()) {
      GiveBack(b);
      return s;
    }
    AddSince(t1, job.report.decrypt_seconds);
    const std::uint64_t lo = job.pos, hi = job.pos + n;
    // The staging buffer goes back once every copy from it has ended: one keep-alive for all.
    std::shared_ptr<void> keep = Lease(b);
    for (std::size_t i = 0; i < job.req.regions.size(); ++i) {
      const WeightRegion& r = job.req.regions[i];
      const std::uint64_t a = std::max(lo, r.file_offset), z = std::min(hi, r.file_offset + r.length);
      if (a >= z) continue;
      if (job.req.verify) {
        const Clock::time_point t2 = Clock::now();
        job.hashers[i].Update(buf + (a - lo), z - a);
        AddSince(t2, job.report.hash_seconds);
      }
      if (Status s = Submit(job, keep, r.dst + (a - r.file_offset), buf + (a - lo), z - a); !s.ok()) return s;
    }
    job.pos = hi;
    if (job.pos < job.end) return Status::Ok();
    char tag[kGcmTagBytes];
    NPUFLOW_RETURN_IF_ERROR(ReadAt(fd_, tag, sizeof(tag), kEncryptedHeaderBytes + job.end, job.req.path));
    job.report.bytes_read += kEncryptedHeaderBytes + kGcmTagBytes;
    NPUFLOW_RETURN_IF_ERROR(job.gcm->Finish(std::string_view(tag, sizeof(tag))));
    if (job.req.verify) {
      for (std::size_t i = 0; i < job.req.regions.size(); ++i)
        NPUFLOW_RETURN_IF_ERROR(CheckDigest(job, job.req.regions[i], job.hashers[i]));
    }
    job.submitted_all = true;
    return Status::Ok();
  }

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
  void CloseFile() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::shared_ptr<WeightLoader::Shared> shared_;  // outlives the handle: copies may end after it is gone
  npu_sim::HostClient client_;  // the loader's own host clock and trace track
  std::deque<StartLoad> queue_;
  std::unique_ptr<Job> job_;
  bool stopped_ = false;
  std::vector<actors::Promise<Status>> stops_;
  int fd_ = -1;
  std::vector<LargeBuffer> buffers_;  // staging, chunk_bytes each
  std::vector<std::uint64_t> resident_;  // per buffer: the bytes its last chunk touched
  std::vector<int> free_;
  int in_use_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<WeightLoader>> WeightLoader::Create(npu_sim::Runtime* rt, WeightLoaderOptions options) {
  if (rt == nullptr) return Status::ParamInvalid("WeightLoader: no runtime");
  if (options.chunk_bytes == 0) return Status::ParamInvalid("WeightLoader: chunk_bytes must be positive");
  if (options.staging_chunks < 1 || options.staging_chunks > 1024)
    return Status::ParamInvalid("WeightLoader: staging_chunks must be 1 to 1024, got {}", options.staging_chunks);
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
      if (n + kEncryptedHeaderBytes + kGcmTagBytes != plain)
        return actors::Future<Result>::Ready(Status::DataCorrupted(
            "weight file '{}': the envelope announces {} bytes of weights, the file has {} bytes (expected {})", path, n,
            plain, n + kEncryptedHeaderBytes + kGcmTagBytes));
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
