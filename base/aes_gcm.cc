#include "base/aes_gcm.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/files.h"
#include "base/libcrypto.h"

namespace npuflow {

using internal::Crypto;
namespace {

constexpr std::size_t kIvBytes = 12;
constexpr std::size_t kIvOffset = kEncryptedMagic.size();
constexpr std::size_t kSizeOffset = kIvOffset + kIvBytes;
static_assert(kSizeOffset + 8 == kEncryptedHeaderBytes);
constexpr std::size_t kFileChunkBytes = std::size_t{10} << 20;
constexpr std::size_t kMaxKeyFileBytes = 4096;  // a key file is 32 or ~65 bytes; stops at @/dev/zero
constexpr std::string_view kWhitespace = " \t\r\n\v\f";

struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, CloseFile>;

std::uint64_t LoadLe64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

void AppendLe64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `what` says where the digits came from ("key", "key file k.hex"); messages never quote them.
StatusOr<AesKey> ParseHexKey(std::string_view hex, std::string_view what) {
  AesKey key;
  if (hex.size() != 2 * key.bytes.size())
    return Status::ParamInvalid("{}: expected 64 hex digits (a 32-byte AES-256 key), got {} characters", what,
                                hex.size());
  for (std::size_t i = 0; i < hex.size(); ++i) {
    if (HexValue(hex[i]) < 0) return Status::ParamInvalid("{}: character {} is not a hex digit", what, i + 1);
  }
  for (std::size_t i = 0; i < key.bytes.size(); ++i)
    key.bytes[i] = static_cast<std::uint8_t>(HexValue(hex[2 * i]) << 4 | HexValue(hex[2 * i + 1]));
  return key;
}

// A key file holds exactly 32 raw bytes, or 64 hex digits with surrounding whitespace.
StatusOr<AesKey> KeyFromFile(std::string_view bytes, const std::string& path) {
  AesKey key;
  if (bytes.size() == key.bytes.size()) {
    std::memcpy(key.bytes.data(), bytes.data(), key.bytes.size());
    return key;
  }
  bytes.remove_prefix(std::min(bytes.size(), bytes.find_first_not_of(kWhitespace)));
  bytes.remove_suffix(bytes.size() - (bytes.find_last_not_of(kWhitespace) + 1));
  if (bytes.size() != 2 * key.bytes.size())
    return Status::ParamInvalid("key file {}: holds {} characters besides surrounding whitespace, expected 64 hex "
                                "digits or exactly 32 raw bytes",
                                path, bytes.size());
  return ParseHexKey(bytes, fmt::format("key file {}", path));
}

// Reads all of `path`, or fails once it holds more than `max_bytes`.
StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("{}: cannot open: {}", path, std::strerror(err));
    return Status::Failed("{}: cannot open: {}", path, std::strerror(err));
  }
  std::string bytes;
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) == 0 && S_ISREG(st.st_mode))
    bytes.reserve(std::min<std::uint64_t>(st.st_size, max_bytes));
  char buffer[1 << 16];
  std::size_t n = 0;
  while (bytes.size() <= max_bytes && (n = std::fread(buffer, 1, sizeof(buffer), f.get())) > 0)
    bytes.append(buffer, n);
  if (std::ferror(f.get()) != 0) return Status::Failed("{}: cannot read: {}", path, std::strerror(errno));
  if (bytes.size() > max_bytes) return Status::Failed("{}: larger than {} bytes", path, max_bytes);
  return bytes;
}

// A context set up for AES-256-GCM under `key` and the header's IV, with the header as AAD.
StatusOr<internal::CipherContext> NewGcmContext(const AesKey& key, std::string_view header, bool encrypt) {
  NPUFLOW_RETURN_IF_ERROR(internal::CryptoStatus());
  internal::CipherContext ctx(Crypto().EVP_CIPHER_CTX_new());
  int unused = 0;
  const auto* iv = reinterpret_cast<const unsigned char*>(header.data() + kIvOffset);
  const internal::LibCrypto& c = Crypto();
  if (!ctx ||
      c.EVP_CipherInit_ex(ctx.get(), c.EVP_aes_256_gcm(), nullptr, key.bytes.data(), iv, encrypt ? 1 : 0) != 1 ||
      c.EVP_CipherUpdate(ctx.get(), nullptr, &unused, reinterpret_cast<const unsigned char*>(header.data()),
                         static_cast<int>(kEncryptedHeaderBytes)) != 1)
    return Status::Internal("OpenSSL could not set up AES-256-GCM");
  return ctx;
}

// EVP_CipherUpdate takes int lengths; larger buffers go in pieces.
bool CipherUpdate(evp_cipher_ctx_st* ctx, const void* in, std::size_t bytes, void* out) {
  constexpr std::size_t kMaxPiece = std::size_t{1} << 30;
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    const int piece = static_cast<int>(std::min(bytes, kMaxPiece));
    int written = 0;
    if (Crypto().EVP_CipherUpdate(ctx, dst, &written, src, piece) != 1 || written != piece) return false;
    src += piece;
    dst += piece;
    bytes -= piece;
  }
  return true;
}

// Begins decrypting `envelope` after checking that its length matches the size its header declares.
StatusOr<GcmDecryptor> BeginEnvelope(std::string_view envelope, const AesKey& key, std::string_view source) {
  NPUFLOW_ASSIGN_OR_RETURN(GcmDecryptor decryptor,
                           GcmDecryptor::Begin(envelope.substr(0, kEncryptedHeaderBytes), key, source));
  const std::uint64_t n = decryptor.plaintext_bytes();
  const std::size_t after_header = envelope.size() - kEncryptedHeaderBytes;
  if (after_header < kGcmTagBytes || after_header - kGcmTagBytes < n)
    return Status::DataCorrupted(
        "{}: truncated: the envelope is {} bytes, too short for the {} plaintext bytes its header declares "
        "plus the {}-byte header and {}-byte tag",
        source, envelope.size(), n, kEncryptedHeaderBytes, kGcmTagBytes);
  if (after_header - kGcmTagBytes > n)
    return Status::DataCorrupted("{}: {} trailing bytes after the envelope's {} plaintext bytes and tag", source,
                                 after_header - kGcmTagBytes - n, n);
  return decryptor;
}

// Encrypts `plaintext_bytes` of `in` into `out` (header, ciphertext, tag), then syncs `out`.
// `out_name` is the path errors name for `out`.
Status WriteEnvelope(std::FILE* in, const std::string& in_path, std::uint64_t plaintext_bytes, std::FILE* out,
                     const std::string& out_name, const AesKey& key) {
  NPUFLOW_ASSIGN_OR_RETURN(GcmEncryptor encryptor, GcmEncryptor::Begin(plaintext_bytes, key));
  const auto write = [&](const void* data, std::size_t bytes) {
    if (std::fwrite(data, 1, bytes, out) == bytes) return Status::Ok();
    return Status::Failed("{}: cannot write: {}", out_name, std::strerror(errno));
  };
  NPUFLOW_RETURN_IF_ERROR(write(encryptor.header().data(), kEncryptedHeaderBytes));
  std::vector<char> chunk(std::min<std::uint64_t>(plaintext_bytes, kFileChunkBytes));
  for (std::uint64_t left = plaintext_bytes; left > 0;) {
    const std::size_t want = std::min<std::uint64_t>(left, chunk.size());
    if (std::fread(chunk.data(), 1, want, in) != want) {
      if (std::ferror(in) != 0) return Status::Failed("{}: cannot read: {}", in_path, std::strerror(errno));
      return Status::Failed("{}: the file shrank while being encrypted", in_path);
    }
    NPUFLOW_RETURN_IF_ERROR(encryptor.Update(chunk.data(), want, chunk.data()));
    NPUFLOW_RETURN_IF_ERROR(write(chunk.data(), want));
    left -= want;
  }
  if (std::fgetc(in) != EOF) return Status::Failed("{}: the file grew while being encrypted", in_path);
  NPUFLOW_ASSIGN_OR_RETURN(std::string tag, encryptor.Finish());
  NPUFLOW_RETURN_IF_ERROR(write(tag.data(), tag.size()));
  if (std::fflush(out) != 0 || ::fsync(::fileno(out)) != 0)
    return Status::Failed("{}: cannot write: {}", out_name, std::strerror(errno));
  return Status::Ok();
}

}  // namespace

void internal::FreeCipherContext::operator()(evp_cipher_ctx_st* ctx) const {
  Crypto().EVP_CIPHER_CTX_free(ctx);
}

StatusOr<AesKey> ParseAesKey(std::string_view text) {
  if (!text.starts_with('@')) return ParseHexKey(text, "key");
  const std::string path(text.substr(1));
  if (path.empty()) return Status::ParamInvalid("key: '@' must be followed by the path of a key file");
  auto contents = ReadFile(path, kMaxKeyFileBytes);
  if (!contents.ok()) return Status::ParamInvalid("key file {}", contents.status().message());
  StatusOr<AesKey> key = KeyFromFile(*contents, path);
  Crypto().OPENSSL_cleanse(contents->data(), contents->size());
  return key;
}

bool IsEncrypted(std::string_view first_bytes) { return first_bytes.starts_with(kEncryptedMagic); }

StatusOr<std::string> EncryptBytes(std::string_view plain, const AesKey& key) {
  NPUFLOW_ASSIGN_OR_RETURN(GcmEncryptor encryptor, GcmEncryptor::Begin(plain.size(), key));
  std::string envelope = encryptor.header();
  envelope.resize(kEncryptedHeaderBytes + plain.size());
  NPUFLOW_RETURN_IF_ERROR(encryptor.Update(plain.data(), plain.size(), envelope.data() + kEncryptedHeaderBytes));
  NPUFLOW_ASSIGN_OR_RETURN(std::string tag, encryptor.Finish());
  return envelope + tag;
}

StatusOr<std::string> DecryptBytes(std::string_view envelope, const AesKey& key, std::string_view source) {
  NPUFLOW_ASSIGN_OR_RETURN(GcmDecryptor decryptor, BeginEnvelope(envelope, key, source));
  std::string plain(decryptor.plaintext_bytes(), '\0');
  NPUFLOW_RETURN_IF_ERROR(decryptor.Update(envelope.data() + kEncryptedHeaderBytes, plain.size(), plain.data()));
  NPUFLOW_RETURN_IF_ERROR(decryptor.Finish(envelope.substr(kEncryptedHeaderBytes + plain.size())));
  return plain;
}

GcmDecryptor::GcmDecryptor(internal::CipherContext ctx, std::uint64_t plaintext_bytes, std::string_view source)
    : ctx_(std::move(ctx)), plaintext_bytes_(plaintext_bytes), source_(source) {}

StatusOr<GcmDecryptor> GcmDecryptor::Begin(std::string_view header, const AesKey& key, std::string_view source) {
  if (!IsEncrypted(header))
    return Status::DataCorrupted("{}: not an encrypted envelope (it does not begin with '{}')", source,
                                 kEncryptedMagic);
  if (header.size() < kEncryptedHeaderBytes)
    return Status::DataCorrupted("{}: truncated: {} bytes, shorter than the {}-byte envelope header", source,
                                 header.size(), kEncryptedHeaderBytes);
  header = header.substr(0, kEncryptedHeaderBytes);
  const std::uint64_t n = LoadLe64(header.data() + kSizeOffset);
  if (n > kMaxGcmPlaintextBytes)
    return Status::DataCorrupted("{}: the header declares {} plaintext bytes, more than AES-GCM allows ({})", source,
                                 n, kMaxGcmPlaintextBytes);
  NPUFLOW_ASSIGN_OR_RETURN(internal::CipherContext ctx, NewGcmContext(key, header, /*encrypt=*/false));
  return GcmDecryptor(std::move(ctx), n, source);
}

Status GcmDecryptor::Update(const void* in, std::size_t bytes, void* out) {
  if (bytes > plaintext_bytes_ - processed_bytes_)
    return Status::DataCorrupted("{}: {} bytes of ciphertext, more than the {} its header declares", source_,
                                 processed_bytes_ + bytes, plaintext_bytes_);
  if (!CipherUpdate(ctx_.get(), in, bytes, out))
    return Status::Internal("{}: OpenSSL AES-256-GCM decryption failed", source_);
  processed_bytes_ += bytes;
  return Status::Ok();
}

Status GcmDecryptor::Finish(std::string_view tag) {
  if (processed_bytes_ != plaintext_bytes_)
    return Status::DataCorrupted("{}: truncated: {} bytes of ciphertext, its header declares {}", source_,
                                 processed_bytes_, plaintext_bytes_);
  if (tag.size() != kGcmTagBytes)
    return Status::DataCorrupted("{}: truncated: the GCM tag is {} bytes, expected {}", source_, tag.size(),
                                 kGcmTagBytes);
  std::array<unsigned char, kGcmTagBytes> expected;
  std::memcpy(expected.data(), tag.data(), expected.size());
  unsigned char no_output[EVP_MAX_BLOCK_LENGTH];  // GCM's final step writes nothing
  int unused = 0;
  const internal::LibCrypto& c = Crypto();
  if (c.EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(kGcmTagBytes), expected.data()) != 1 ||
      c.EVP_CipherFinal_ex(ctx_.get(), no_output, &unused) != 1)
    return Status::DataCorrupted("{}: decryption failed: wrong key or tampered data", source_);
  return Status::Ok();
}

GcmEncryptor::GcmEncryptor(internal::CipherContext ctx, std::uint64_t plaintext_bytes, std::string header)
    : ctx_(std::move(ctx)), plaintext_bytes_(plaintext_bytes), header_(std::move(header)) {}

StatusOr<GcmEncryptor> GcmEncryptor::Begin(std::uint64_t plaintext_bytes, const AesKey& key) {
  if (plaintext_bytes > kMaxGcmPlaintextBytes)
    return Status::ParamInvalid("cannot encrypt {} bytes under one IV: AES-GCM allows at most {}", plaintext_bytes,
                                kMaxGcmPlaintextBytes);
  NPUFLOW_RETURN_IF_ERROR(internal::CryptoStatus());
  std::array<unsigned char, kIvBytes> iv;
  if (Crypto().RAND_bytes(iv.data(), static_cast<int>(iv.size())) != 1)
    return Status::Failed("cannot draw a random IV: OpenSSL RAND_bytes failed");
  std::string header(kEncryptedMagic);
  header.append(reinterpret_cast<const char*>(iv.data()), iv.size());
  AppendLe64(header, plaintext_bytes);
  NPUFLOW_ASSIGN_OR_RETURN(internal::CipherContext ctx, NewGcmContext(key, header, /*encrypt=*/true));
  return GcmEncryptor(std::move(ctx), plaintext_bytes, std::move(header));
}

Status GcmEncryptor::Update(const void* in, std::size_t bytes, void* out) {
  if (bytes > plaintext_bytes_ - processed_bytes_)
    return Status::ParamInvalid("{} bytes of plaintext, more than the {} declared at Begin",
                                processed_bytes_ + bytes, plaintext_bytes_);
  if (!CipherUpdate(ctx_.get(), in, bytes, out)) return Status::Internal("OpenSSL AES-256-GCM encryption failed");
  processed_bytes_ += bytes;
  return Status::Ok();
}

StatusOr<std::string> GcmEncryptor::Finish() {
  if (processed_bytes_ != plaintext_bytes_)
    return Status::ParamInvalid("encrypted {} bytes of plaintext, {} were declared at Begin", processed_bytes_,
                                plaintext_bytes_);
  std::string tag(kGcmTagBytes, '\0');
  unsigned char no_output[EVP_MAX_BLOCK_LENGTH];  // GCM's final step writes nothing
  int unused = 0;
  const internal::LibCrypto& c = Crypto();
  if (c.EVP_CipherFinal_ex(ctx_.get(), no_output, &unused) != 1 ||
      c.EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(kGcmTagBytes), tag.data()) != 1)
    return Status::Internal("OpenSSL could not finish AES-256-GCM encryption");
  return tag;
}

Status EncryptFile(const std::string& in_path, const std::string& out_path, const AesKey& key) {
  File in(std::fopen(in_path.c_str(), "rb"));
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("{}: cannot open: {}", in_path, std::strerror(err));
    return Status::Failed("{}: cannot open: {}", in_path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(::fileno(in.get()), &st) != 0) return Status::Failed("{}: cannot stat: {}", in_path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::ParamInvalid("{}: not a regular file", in_path);

  return WriteFileAtomically(
      out_path,
      [&](std::FILE* out, const std::string& tmp_path) {
        return WriteEnvelope(in.get(), in_path, static_cast<std::uint64_t>(st.st_size), out, tmp_path, key);
      },
      {.mode = static_cast<unsigned>(st.st_mode & 0777)});
}

StatusOr<std::string> DecryptFile(const std::string& path, const AesKey& key) {
  NPUFLOW_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, SIZE_MAX));
  NPUFLOW_ASSIGN_OR_RETURN(GcmDecryptor decryptor, BeginEnvelope(bytes, key, path));
  // Decrypt in place, then drop the header and tag: one buffer of the file's size.
  const std::size_t n = decryptor.plaintext_bytes();
  char* text = bytes.data() + kEncryptedHeaderBytes;
  NPUFLOW_RETURN_IF_ERROR(decryptor.Update(text, n, text));
  NPUFLOW_RETURN_IF_ERROR(decryptor.Finish(std::string_view(bytes).substr(kEncryptedHeaderBytes + n)));
  bytes.resize(kEncryptedHeaderBytes + n);
  bytes.erase(0, kEncryptedHeaderBytes);
  return bytes;
}

}  // namespace npuflow
