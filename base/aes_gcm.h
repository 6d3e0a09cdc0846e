// AES-256-GCM (OpenSSL EVP) for external weight files and model files encrypted under a user key.
// A wrong key or any changed byte fails with DataCorrupted; decryption never yields garbage.
//
// Envelope, all integers little-endian:
//
//   offset  size  field
//        0     8  magic "NPFWENC1"
//        8    12  IV (RAND_bytes, fresh for every encryption)
//       20     8  u64 plaintext size n in bytes
//       28     n  ciphertext (GCM is a stream mode: as long as the plaintext)
//     28+n    16  GCM tag
//
// The 28-byte header is the additional authenticated data, so a changed IV or size also fails the
// tag check. One IV encrypts at most kMaxGcmPlaintextBytes (about 64 GiB).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

struct evp_cipher_ctx_st;  // OpenSSL's EVP_CIPHER_CTX

namespace npuflow {

struct AesKey {
  std::array<std::uint8_t, 32> bytes{};
};

inline constexpr std::string_view kEncryptedMagic = "NPFWENC1";
inline constexpr std::size_t kEncryptedHeaderBytes = 28;
inline constexpr std::size_t kGcmTagBytes = 16;
inline constexpr std::uint64_t kMaxGcmPlaintextBytes = (std::uint64_t{1} << 36) - 32;  // NIST SP 800-38D

// A key: 64 hex digits (either case), or "@PATH" naming a file that holds 64 hex digits (surrounding
// whitespace ignored) or exactly 32 raw bytes. Errors are ParamInvalid, say what was wrong and
// never echo key material.
StatusOr<AesKey> ParseAesKey(std::string_view text);

// True if `first_bytes` begins with kEncryptedMagic.
bool IsEncrypted(std::string_view first_bytes);

StatusOr<std::string> EncryptBytes(std::string_view plain, const AesKey& key);

// Errors are DataCorrupted and begin with `source`: no magic ("not an encrypted envelope"), a
// length other than header + size + tag ("truncated" / "trailing bytes"), and an authentication
// failure ("<source>: decryption failed: wrong key or tampered data").
StatusOr<std::string> DecryptBytes(std::string_view envelope, const AesKey& key, std::string_view source);

namespace internal {
struct FreeCipherContext {
  void operator()(evp_cipher_ctx_st* ctx) const;
};
using CipherContext = std::unique_ptr<evp_cipher_ctx_st, FreeCipherContext>;
}  // namespace internal

// Decrypts an envelope that arrives in pieces (a weight file read 10 MiB at a time). The bytes
// Update writes are unauthenticated until Finish returns OK: the caller must not act on them
// before. Movable, not copyable; a moved-from object may only be destroyed or assigned to.
class GcmDecryptor {
 public:
  // `header`: the first kEncryptedHeaderBytes bytes of the envelope. Checks the magic; errors as
  // DecryptBytes's, naming `source`.
  static StatusOr<GcmDecryptor> Begin(std::string_view header, const AesKey& key, std::string_view source);

  std::uint64_t plaintext_bytes() const { return plaintext_bytes_; }

  // Decrypts the next `bytes` of ciphertext into `out`, which may equal `in` (but not overlap it
  // otherwise). More ciphertext than the header declares is DataCorrupted.
  Status Update(const void* in, std::size_t bytes, void* out);

  // `tag`: the envelope's last kGcmTagBytes bytes. Call once, after all the ciphertext.
  // DataCorrupted on missing ciphertext, a wrong key or tampering.
  Status Finish(std::string_view tag);

 private:
  GcmDecryptor(internal::CipherContext ctx, std::uint64_t plaintext_bytes, std::string_view source);

  internal::CipherContext ctx_;
  std::uint64_t plaintext_bytes_ = 0;
  std::uint64_t processed_bytes_ = 0;
  std::string source_;
};

// The mirror image of GcmDecryptor: write header(), then every Update's output, then Finish's tag.
class GcmEncryptor {
 public:
  // Draws a fresh IV. ParamInvalid if plaintext_bytes exceeds kMaxGcmPlaintextBytes.
  static StatusOr<GcmEncryptor> Begin(std::uint64_t plaintext_bytes, const AesKey& key);

  // The kEncryptedHeaderBytes-byte envelope header.
  const std::string& header() const { return header_; }

  // Encrypts the next `bytes` of plaintext into `out`, which may equal `in`. More plaintext than
  // declared at Begin is ParamInvalid.
  Status Update(const void* in, std::size_t bytes, void* out);

  // The kGcmTagBytes-byte tag. Call once; ParamInvalid if fewer bytes than declared were encrypted.
  StatusOr<std::string> Finish();

 private:
  GcmEncryptor(internal::CipherContext ctx, std::uint64_t plaintext_bytes, std::string header);

  internal::CipherContext ctx_;
  std::uint64_t plaintext_bytes_ = 0;
  std::uint64_t processed_bytes_ = 0;
  std::string header_;
};

// Encrypts a whole file in 10 MiB chunks (bounded memory) and writes `out_path` atomically: a
// temporary file in the same directory, synced, then renamed over it. `out_path` may equal
// `in_path`; the output keeps the input's permission bits. Errors name the paths.
Status EncryptFile(const std::string& in_path, const std::string& out_path, const AesKey& key);

// Decrypts a whole envelope file into memory (the model file is small). Errors name the path: as
// DecryptBytes's, or NotFound / Failed when the file cannot be read.
StatusOr<std::string> DecryptFile(const std::string& path, const AesKey& key);

}  // namespace npuflow
