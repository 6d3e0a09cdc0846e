#include "base/sha256.h"

#include <algorithm>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace npuflow {
namespace {

// FIPS 180-2's examples.
constexpr std::string_view kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr std::string_view kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

TEST(Sha256Test, OneShotGivesTheStandardDigests) {
  EXPECT_EQ(ToHex(Sha256("")), kEmpty);
  EXPECT_EQ(Sha256Hex("abc", 3), kAbc);
}

TEST(Sha256HasherTest, PiecesGiveTheDigestOfTheWhole) {
  const std::string text(100000, 'x');
  Sha256Hasher hasher;
  for (std::size_t at = 0; at < text.size(); at += 4099)
    hasher.Update(text.data() + at, std::min<std::size_t>(4099, text.size() - at));
  EXPECT_EQ(hasher.Finish(), Sha256(text));
}

// The context is made on first use: a hasher that never saw data still gives the empty digest,
// and Finish starts over, whether or not the hasher was used before.
TEST(Sha256HasherTest, AnUnusedHasherGivesTheEmptyDigestAndFinishStartsOver) {
  Sha256Hasher unused;
  EXPECT_EQ(ToHex(unused.Finish()), kEmpty);
  EXPECT_EQ(ToHex(unused.Finish()), kEmpty);
  unused.Update("abc", 3);
  EXPECT_EQ(ToHex(unused.Finish()), kAbc);
  EXPECT_EQ(ToHex(unused.Finish()), kEmpty);
}

TEST(Sha256HasherTest, AMovedHasherKeepsItsState) {
  Sha256Hasher a;
  a.Update("ab", 2);
  Sha256Hasher b(std::move(a));
  b.Update("c", 1);
  EXPECT_EQ(ToHex(b.Finish()), kAbc);
  Sha256Hasher never_used;
  Sha256Hasher c(std::move(never_used));
  c.Update("abc", 3);
  EXPECT_EQ(ToHex(c.Finish()), kAbc);
}

}  // namespace
}  // namespace npuflow
