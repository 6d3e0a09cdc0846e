// SHA-256 (OpenSSL, opened on first use: base/libcrypto.h): the digest the model file's header
// carries and the name of every external weight (weights/). Hex is the standard 64-character
// lower-case form.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace npuflow {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Ok when hashing can run: OpenSSL's libcrypto loads (the first call opens it). Else an
// Unsupported status naming the library and what was missing. The functions below need it; every
// npuflow entry point that hashes or encrypts returns this error first instead of calling them.
Status CryptoAvailable();

Sha256Digest Sha256(const void* data, std::size_t bytes);
inline Sha256Digest Sha256(std::string_view data) { return Sha256(data.data(), data.size()); }
std::string ToHex(const void* data, std::size_t bytes);  // lower case, two digits per byte
inline std::string ToHex(const Sha256Digest& d) { return ToHex(d.data(), d.size()); }
inline std::string Sha256Hex(const void* data, std::size_t bytes) { return ToHex(Sha256(data, bytes)); }

// A digest over data that arrives in pieces (a file read in chunks). OpenSSL is first called at the
// first Update or Finish: a hasher that is made but never used (a weight load that does not verify)
// costs nothing, and a process that hashes nothing never initializes libcrypto (whose algorithm
// tables and code would otherwise add ~2 MB to its resident memory).
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;
  Sha256Hasher(Sha256Hasher&&) noexcept;
  Sha256Hasher& operator=(Sha256Hasher&&) noexcept;
  void Update(const void* data, std::size_t bytes);
  Sha256Digest Finish();  // the hasher starts over afterwards

 private:
  struct Impl;
  Impl& Context();  // made (and the digest started) on first use
  std::unique_ptr<Impl> impl_;
};

}  // namespace npuflow
