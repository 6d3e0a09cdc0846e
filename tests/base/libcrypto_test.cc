// libcrypto is opened on first use (base/libcrypto.h): a process that neither hashes nor encrypts
// never maps it. This binary holds only this test, so nothing else has used OpenSSL before it.
#include "base/libcrypto.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/aes_gcm.h"
#include "base/sha256.h"

namespace npuflow {
namespace {

bool LibcryptoMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("/libcrypto.so") != std::string::npos) return true;
  return false;
}

TEST(LibCrypto, IsMappedOnlyOnceSomethingHashesAndThenServesEveryCaller) {
  EXPECT_FALSE(LibcryptoMapped()) << "libcrypto is mapped before anything hashed: is it linked again?";
  Sha256Hasher unused;  // a hasher that is never fed does not load it either
  EXPECT_FALSE(LibcryptoMapped());

  EXPECT_EQ(Sha256Hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(LibcryptoMapped());
  const internal::LibCrypto& c = internal::Crypto();
  EXPECT_EQ(&c, &internal::Crypto());  // loaded once
  EXPECT_NE(c.EVP_sha256, nullptr);
  EXPECT_NE(c.RAND_bytes, nullptr);

  AesKey key;
  key.bytes.fill(7);
  auto sealed = EncryptBytes("npuflow", key);
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  auto opened = DecryptBytes(*sealed, key, "test");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, "npuflow");
}

}  // namespace
}  // namespace npuflow
