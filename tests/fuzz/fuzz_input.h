// What every fuzz target shares: the input written to a file (the readers take paths, as the
// commands do), in a scratch directory of the process that is removed at exit.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "base/aes_gcm.h"

namespace npuflow::fuzz {

// The key of every encrypted seed and of the encrypted targets: bytes 0, 1, ..., 31.
inline AesKey FuzzKey() {
  AesKey key;
  for (std::size_t i = 0; i < key.bytes.size(); ++i) key.bytes[i] = static_cast<std::uint8_t>(i);
  return key;
}

// Where the scratch directories go: memory (/dev/shm) when the machine has it. Every input is
// written to a file before it is read, and on a disk file system that write cost this machine
// about 2.7 ms (a fuzz target ran at ~350 inputs/s); in memory it costs microseconds.
inline std::filesystem::path ScratchRoot() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

// "<ScratchRoot>/npuflow-fuzz-<name>-<pid>", created on first use, removed when the process
// exits normally (libFuzzer exits through exit() after -max_total_time or -runs; a crash keeps
// it, with the input that crashed beside the reader's other files).
inline const std::filesystem::path& ScratchDir(std::string_view name) {
  static const std::filesystem::path dir = [&] {
    std::filesystem::path d = ScratchRoot() / ("npuflow-fuzz-" + std::string(name) + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  static const int removed_at_exit = std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  });
  (void)removed_at_exit;
  return dir;
}

// Writes `size` bytes to `path`, replacing what was there. Aborts if it cannot: a harness that
// cannot write its input would report nothing useful.
inline void WriteInput(const std::filesystem::path& path, const void* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

inline void WriteInput(const std::filesystem::path& path, std::string_view bytes) {
  WriteInput(path, bytes.data(), bytes.size());
}

}  // namespace npuflow::fuzz
