// For the encrypted targets: an AES-256-GCM envelope (base/aes_gcm.h) whose size field and tag
// are made to match its bytes under a known key, as if it had been encrypted that way. A mutated
// ciphertext then authenticates and decrypts (GCM is a stream mode: a flipped ciphertext bit is
// the same plaintext bit flipped), so the fuzzer reaches what reads the plaintext.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/aes_gcm.h"

namespace npuflow::fuzz {

// Rewrites `envelope` in place: the size field to the bytes between header and tag, the tag to
// GCM's tag over the header (as additional data) and that ciphertext, under `key` and the
// header's IV. False, unchanged, when it is too short to hold a header and a tag or does not
// begin with the envelope's magic.
inline bool RetagEnvelope(std::string& envelope, const AesKey& key) {
  constexpr std::size_t kIvOffset = 8, kSizeOffset = 20;
  if (envelope.size() < kEncryptedHeaderBytes + kGcmTagBytes || !IsEncrypted(envelope)) return false;
  const std::uint64_t n = envelope.size() - kEncryptedHeaderBytes - kGcmTagBytes;
  for (int i = 0; i < 8; ++i) envelope[kSizeOffset + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  const auto* header = reinterpret_cast<const unsigned char*>(envelope.data());
  const auto* cipher = header + kEncryptedHeaderBytes;
  std::string plain(n, '\0');
  auto* p = reinterpret_cast<unsigned char*>(plain.data());
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int len = 0;
  // Decrypting (without the tag) gives the plaintext; encrypting it again gives the same
  // ciphertext and the tag that goes with it.
  bool ok = ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes.data(), header + kIvOffset) &&
            EVP_DecryptUpdate(ctx.get(), nullptr, &len, header, kEncryptedHeaderBytes) &&
            EVP_DecryptUpdate(ctx.get(), p, &len, cipher, static_cast<int>(n)) &&
            EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes.data(), header + kIvOffset) &&
            EVP_EncryptUpdate(ctx.get(), nullptr, &len, header, kEncryptedHeaderBytes);
  std::string again(n, '\0');
  unsigned char final_block[16];  // GCM's final step writes no bytes, but takes a buffer
  auto* again_bytes = reinterpret_cast<unsigned char*>(again.data());
  ok = ok && EVP_EncryptUpdate(ctx.get(), again_bytes, &len, p, static_cast<int>(n)) &&
       EVP_EncryptFinal_ex(ctx.get(), final_block, &len) &&
       EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kGcmTagBytes,
                           envelope.data() + kEncryptedHeaderBytes + n);
  if (!ok || again.compare(0, n, envelope, kEncryptedHeaderBytes, n) != 0) std::abort();  // OpenSSL misbehaved
  return true;
}

}  // namespace npuflow::fuzz
