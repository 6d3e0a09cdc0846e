#include "base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace npuflow {

std::filesystem::path UserCacheDirectory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "npuflow";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "npuflow";
  return ".npuflow-cache";
}

namespace {

// The process's umask, read from /proc/self/status (calling umask() to read it would change it for
// a moment under other threads); 022 where the kernel does not say.
mode_t ProcessUmask() {
  mode_t mask = 022;
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned value = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "Umask: %o", &value) == 1) {
        mask = static_cast<mode_t>(value & 0777);
        break;
      }
    std::fclose(f);
  }
  return mask;
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::function<Status(std::FILE*, const std::string&)>& write,
                           AtomicWriteOptions options) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return Status::Failed("{}: cannot create a temporary file next to it: {}", path, std::strerror(errno));
  // As open(O_CREAT, mode) would have made it; best effort: mkstemp's 0600 is the safe fallback.
  ::fchmod(fd, static_cast<mode_t>(options.mode) & ~ProcessUmask());
  std::FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    return Status::Failed("{}: cannot open '{}': {}", path, tmp, std::strerror(err));
  }
  Status status = write(f, tmp);
  int err = 0;
  if (status.ok() && (std::fflush(f) != 0 || (options.sync && ::fsync(fd) != 0))) err = errno;
  if (std::fclose(f) != 0 && status.ok() && err == 0) err = errno;
  if (status.ok() && err != 0) status = Status::Failed("{}: cannot write '{}': {}", path, tmp, std::strerror(err));
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    status = Status::Failed("{}: cannot rename '{}' over it: {}", path, tmp, std::strerror(errno));
  if (!status.ok()) std::remove(tmp.c_str());
  return status;
}

}  // namespace npuflow
