#include "base/large_buffer.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace npuflow {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

struct MappingInfo {
  std::uintptr_t begin = 0, end = 0;
  std::size_t rss_bytes = 0;
};

// The mapping of /proc/self/smaps that holds `p`, with its resident bytes.
MappingInfo MappingOf(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  MappingInfo found;
  bool inside = false;
  while (std::getline(in, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' && line.find(' ') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
      if (inside) found = {begin, end, 0};
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      found.rss_bytes = std::stoull(line.substr(4)) * 1024;
    }
  }
  return found;
}

TEST(LargeBuffer, IsZeroedAndHugePageAligned) {
  const std::size_t bytes = 3 * kHugePage + 5000;
  LargeBuffer b = AllocateLargeBuffer(bytes);
  ASSERT_TRUE(b);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.get()) % kHugePage, 0u);
  for (std::size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(std::to_integer<int>(b[i]), 0) << i;
  EXPECT_EQ(std::to_integer<int>(b[bytes - 1]), 0);
}

// The mapping ends at the 4 KiB page after the last byte, so writing all of a buffer whose size is
// not a multiple of 2 MiB makes its bytes resident and no more: the tail is not a huge page.
TEST(LargeBuffer, WritingEveryByteMakesOnlyTheBufferResident) {
  const std::size_t bytes = 3 * kHugePage + 300 * 1024 + 17;
  const std::size_t pages = (bytes + 4095) / 4096 * 4096;
  LargeBuffer b = AllocateLargeBuffer(bytes, HugePages::kYes);
  ASSERT_TRUE(b);
  std::memset(b.get(), 1, bytes);
  const MappingInfo m = MappingOf(b.get());
  ASSERT_EQ(m.begin, reinterpret_cast<std::uintptr_t>(b.get()));
  EXPECT_EQ(m.end - m.begin, pages);
  EXPECT_LE(m.rss_bytes, pages);
  EXPECT_EQ(ResidentBytes(b.get(), bytes), pages);
}

TEST(LargeBuffer, ReleasedHugePagesReadAsZeroAndLeaveTheRest) {
  const std::size_t bytes = 4 * kHugePage + 12345;
  LargeBuffer b = AllocateLargeBuffer(bytes);
  ASSERT_TRUE(b);
  std::memset(b.get(), 9, bytes);
  // [1 MiB, end): the whole huge pages 1..3 go back; the first half page and the tail stay.
  ReleaseLargeBufferPages(b, kHugePage / 2, bytes - kHugePage / 2);
  EXPECT_EQ(std::to_integer<int>(b[kHugePage / 2]), 9);
  EXPECT_EQ(std::to_integer<int>(b[kHugePage]), 0);
  EXPECT_EQ(std::to_integer<int>(b[4 * kHugePage - 1]), 0);
  EXPECT_EQ(std::to_integer<int>(b[4 * kHugePage]), 9);
  EXPECT_EQ(std::to_integer<int>(b[bytes - 1]), 9);
}

TEST(LargeBuffer, SmallBuffersComeFromTheHeapZeroed) {
  LargeBuffer b = AllocateLargeBuffer(1000);
  ASSERT_TRUE(b);
  EXPECT_EQ(b.get_deleter().bytes, 0u);
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(std::to_integer<int>(b[i]), 0);
}

}  // namespace
}  // namespace npuflow
