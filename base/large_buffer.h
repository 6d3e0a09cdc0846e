// Large buffers straight from the kernel: zeroed, 2 MiB aligned, backed by transparent huge pages
// where the kernel allows them (madvise mode), for simulated device memory and staging buffers.
//
// Why: on the machines npuflow runs on, a first touch of a 4 KiB page can cost ~15 us, so filling
// 500 MB of fresh malloc'd memory spends seconds in page faults; with 2 MiB pages the same fill
// takes tens of milliseconds. The kernel's pages are already zero, so no memset is needed, and
// pages nobody touches never become resident.
#pragma once

#include <cstddef>
#include <memory>

namespace npuflow {

struct LargeBufferDeleter {
  std::size_t bytes = 0;  // as mapped
  void operator()(void* p) const;
};
using LargeBuffer = std::unique_ptr<std::byte[], LargeBufferDeleter>;

// Buffers at least this big are mapped; smaller ones come from the heap (zeroed too).
inline constexpr std::size_t kLargeBufferThreshold = std::size_t{1} << 20;

// kYes: transparent huge pages where the kernel allows them (fewer faults and TLB misses, but a
// first touch anywhere in 2 MiB makes all of it resident). kNo: 4 KiB pages only (MADV_NOHUGEPAGE,
// which also keeps khugepaged away), for memory used sparsely, such as a KV cache whose heads'
// rows grow one position at a time: only the pages written become resident.
enum class HugePages : bool { kNo, kYes };

// `bytes` zeroed bytes (null when the memory cannot be had). bytes > 0. A mapped buffer starts on a
// 2 MiB boundary and ends on the 4 KiB page after its last byte: with kYes, every whole 2 MiB
// inside it may become a huge page, the rest stays on 4 KiB pages.
LargeBuffer AllocateLargeBuffer(std::size_t bytes, HugePages huge = HugePages::kYes);

// How many bytes of [data, data + bytes) are resident (mincore; 4 KiB pages partly inside count
// whole). For tests and reports; 0 when the kernel does not say.
std::size_t ResidentBytes(const void* data, std::size_t bytes);

// Gives the pages of [offset, offset + bytes) of a mapped buffer (one of at least
// kLargeBufferThreshold bytes) back to the kernel: they read as zero and take no memory until
// touched again. Only whole huge pages inside the range are released; a heap buffer is left as is.
void ReleaseLargeBufferPages(const LargeBuffer& buffer, std::size_t offset, std::size_t bytes);

}  // namespace npuflow
