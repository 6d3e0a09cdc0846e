#include "base/large_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace npuflow {
namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kSmallPage = 4096;
}  // namespace

void LargeBufferDeleter::operator()(void* p) const {
  if (p == nullptr) return;
  if (bytes == 0) {
    std::free(p);  // a small buffer, from the heap
    return;
  }
  ::munmap(p, bytes);
}

LargeBuffer AllocateLargeBuffer(std::size_t bytes, HugePages huge) {
  if (bytes < kLargeBufferThreshold) {
    void* p = std::calloc(1, bytes == 0 ? 1 : bytes);
    return LargeBuffer(static_cast<std::byte*>(p), LargeBufferDeleter{0});
  }
  // Map a huge page more than asked, keep the 2 MiB-aligned part, give the rest back. The mapping
  // ends at the last 4 KiB page asked for, not at a huge page boundary: the kernel backs only whole
  // 2 MiB extents inside a mapping with huge pages, so the tail beyond the last one takes 4 KiB pages
  // and only those written become resident (up to 2 MiB less than a rounded-up mapping).
  const std::size_t rounded = (bytes + kSmallPage - 1) / kSmallPage * kSmallPage;
  const std::size_t mapped = rounded + kHugePage;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return LargeBuffer(nullptr, LargeBufferDeleter{0});
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) ::munmap(raw, aligned - base);
  const std::uintptr_t end = base + mapped, keep_end = aligned + rounded;
  if (end > keep_end) ::munmap(reinterpret_cast<void*>(keep_end), end - keep_end);
  void* p = reinterpret_cast<void*>(aligned);
  // A hint: without THP the pages are just 4 KiB.
  (void)::madvise(p, rounded, huge == HugePages::kYes ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return LargeBuffer(static_cast<std::byte*>(p), LargeBufferDeleter{rounded});
}

std::size_t ResidentBytes(const void* data, std::size_t bytes) {
  constexpr std::uintptr_t kPage = 4096;
  if (data == nullptr || bytes == 0) return 0;
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / kPage * kPage;
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(data) + bytes + kPage - 1) / kPage * kPage;
  std::vector<unsigned char> pages((end - begin) / kPage);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) != 0) return 0;
  std::size_t resident = 0;
  for (unsigned char p : pages) resident += (p & 1) ? kPage : 0;
  return resident;
}

void ReleaseLargeBufferPages(const LargeBuffer& buffer, std::size_t offset, std::size_t bytes) {
  const std::size_t mapped = buffer.get_deleter().bytes;
  if (!buffer || mapped == 0 || offset >= mapped) return;
  const std::size_t begin = (offset + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t end = std::min(mapped, offset + bytes) / kHugePage * kHugePage;
  if (end > begin) (void)::madvise(buffer.get() + begin, end - begin, MADV_DONTNEED);
}

}  // namespace npuflow
