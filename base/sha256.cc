#include "base/sha256.h"

#include "base/libcrypto.h"

namespace npuflow {

Status CryptoAvailable() { return internal::CryptoStatus(); }

using internal::Crypto;

Sha256Digest Sha256(const void* data, std::size_t bytes) {
  Sha256Digest d{};
  unsigned int len = 0;
  Crypto().EVP_Digest(data, bytes, d.data(), &len, Crypto().EVP_sha256(), nullptr);
  return d;
}

std::string ToHex(const void* data, std::size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::string out(2 * bytes, '0');
  for (std::size_t i = 0; i < bytes; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 0xf];
  }
  return out;
}

struct Sha256Hasher::Impl {
  EVP_MD_CTX* ctx = Crypto().EVP_MD_CTX_new();
  Impl() { Crypto().EVP_DigestInit_ex(ctx, Crypto().EVP_sha256(), nullptr); }
  ~Impl() { Crypto().EVP_MD_CTX_free(ctx); }
};

Sha256Hasher::Sha256Hasher() = default;
Sha256Hasher::~Sha256Hasher() = default;
Sha256Hasher::Sha256Hasher(Sha256Hasher&&) noexcept = default;
Sha256Hasher& Sha256Hasher::operator=(Sha256Hasher&&) noexcept = default;

Sha256Hasher::Impl& Sha256Hasher::Context() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  return *impl_;
}

void Sha256Hasher::Update(const void* data, std::size_t bytes) {
  Crypto().EVP_DigestUpdate(Context().ctx, data, bytes);
}

Sha256Digest Sha256Hasher::Finish() {
  Sha256Digest d{};
  unsigned int len = 0;
  Crypto().EVP_DigestFinal_ex(Context().ctx, d.data(), &len);
  Crypto().EVP_DigestInit_ex(impl_->ctx, Crypto().EVP_sha256(), nullptr);
  return d;
}

}  // namespace npuflow
