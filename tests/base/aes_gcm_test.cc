#include "base/aes_gcm.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace npuflow {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kAuthFailure = ": decryption failed: wrong key or tampered data";
constexpr std::string_view kKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

AesKey MakeKey(std::uint8_t seed) {
  AesKey key;
  for (std::size_t i = 0; i < key.bytes.size(); ++i) key.bytes[i] = static_cast<std::uint8_t>(seed + 7 * i);
  return key;
}

// Deterministic bytes that are not all alike (an LCG's high byte).
std::string Pattern(std::size_t bytes, std::uint32_t seed = 1) {
  std::string out(bytes, '\0');
  for (char& c : out) {
    seed = seed * 1664525u + 1013904223u;
    c = static_cast<char>(seed >> 24);
  }
  return out;
}

std::uint64_t DeclaredSize(std::string_view envelope) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(envelope[20 + i]);
  return n;
}

std::string Encrypt(std::string_view plain, const AesKey& key) {
  auto envelope = EncryptBytes(plain, key);
  EXPECT_TRUE(envelope.ok()) << envelope.status();
  return envelope.ok() ? *envelope : std::string();
}

TEST(AesGcmTest, RoundTripsEmptyOneByteHundredKbAndTwentyFiveMib) {
  const AesKey key = MakeKey(1);
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{100'000}, std::size_t{25} << 20}) {
    SCOPED_TRACE(size);
    const std::string plain = Pattern(size);
    const std::string envelope = Encrypt(plain, key);
    ASSERT_EQ(envelope.size(), kEncryptedHeaderBytes + size + kGcmTagBytes);
    EXPECT_EQ(envelope.substr(0, 8), "NPFWENC1");
    EXPECT_TRUE(IsEncrypted(envelope));
    EXPECT_EQ(DeclaredSize(envelope), size);
    if (size >= 16) {
      EXPECT_NE(envelope.substr(kEncryptedHeaderBytes, size), plain);
    }
    auto decrypted = DecryptBytes(envelope, key, "w.bin");
    ASSERT_TRUE(decrypted.ok()) << decrypted.status();
    EXPECT_TRUE(*decrypted == plain);
  }
}

TEST(AesGcmTest, IsEncryptedChecksTheMagicPrefix) {
  EXPECT_TRUE(IsEncrypted("NPFWENC1"));
  EXPECT_TRUE(IsEncrypted("NPFWENC1 and more"));
  EXPECT_FALSE(IsEncrypted("NPFWENC"));
  EXPECT_FALSE(IsEncrypted("NPFWENC2"));
  EXPECT_FALSE(IsEncrypted(""));
}

TEST(AesGcmTest, TwoEncryptionsOfTheSameDataDifferInIvAndCiphertext) {
  const AesKey key = MakeKey(2);
  const std::string plain = Pattern(1000);
  const std::string a = Encrypt(plain, key);
  const std::string b = Encrypt(plain, key);
  EXPECT_NE(a.substr(8, 12), b.substr(8, 12));
  EXPECT_NE(a.substr(kEncryptedHeaderBytes), b.substr(kEncryptedHeaderBytes));
  EXPECT_EQ(*DecryptBytes(a, key, "a"), plain);
  EXPECT_EQ(*DecryptBytes(b, key, "b"), plain);
}

TEST(AesGcmTest, StreamingInOddChunksMatchesOneShot) {
  const AesKey key = MakeKey(3);
  const std::string plain = Pattern(300'007);
  const std::vector<std::size_t> chunks = {1, 7, 4093, 15, 65'537, 3};

  // Streaming encryption, decrypted in one shot.
  auto encryptor = GcmEncryptor::Begin(plain.size(), key);
  ASSERT_TRUE(encryptor.ok()) << encryptor.status();
  std::string envelope = encryptor->header();
  ASSERT_EQ(envelope.size(), kEncryptedHeaderBytes);
  envelope.resize(kEncryptedHeaderBytes + plain.size());
  for (std::size_t done = 0, i = 0; done < plain.size(); ++i) {
    const std::size_t n = std::min(chunks[i % chunks.size()], plain.size() - done);
    ASSERT_TRUE(encryptor->Update(plain.data() + done, n, envelope.data() + kEncryptedHeaderBytes + done).ok());
    done += n;
  }
  auto tag = encryptor->Finish();
  ASSERT_TRUE(tag.ok()) << tag.status();
  ASSERT_EQ(tag->size(), kGcmTagBytes);
  envelope += *tag;
  auto one_shot = DecryptBytes(envelope, key, "streamed");
  ASSERT_TRUE(one_shot.ok()) << one_shot.status();
  EXPECT_TRUE(*one_shot == plain);

  // One-shot encryption, decrypted in place in other odd chunks.
  std::string buffer = Encrypt(plain, key);
  auto decryptor = GcmDecryptor::Begin(std::string_view(buffer).substr(0, kEncryptedHeaderBytes), key, "one-shot");
  ASSERT_TRUE(decryptor.ok()) << decryptor.status();
  ASSERT_EQ(decryptor->plaintext_bytes(), plain.size());
  char* text = buffer.data() + kEncryptedHeaderBytes;
  for (std::size_t done = 0, i = 3; done < plain.size(); ++i) {
    const std::size_t n = std::min(chunks[i % chunks.size()], plain.size() - done);
    ASSERT_TRUE(decryptor->Update(text + done, n, text + done).ok());
    done += n;
  }
  ASSERT_TRUE(decryptor->Finish(std::string_view(buffer).substr(kEncryptedHeaderBytes + plain.size())).ok());
  EXPECT_TRUE(std::string_view(text, plain.size()) == plain);
}

TEST(AesGcmTest, WrongKeyFailsWithAClearMessage) {
  const std::string envelope = Encrypt("weights of layer 0", MakeKey(4));
  auto decrypted = DecryptBytes(envelope, MakeKey(5), "weights/a.bin");
  ASSERT_FALSE(decrypted.ok());
  EXPECT_EQ(decrypted.status().code(), StatusCode::kDataCorrupted);
  EXPECT_EQ(decrypted.status().message(), "weights/a.bin: decryption failed: wrong key or tampered data");

  auto decryptor = GcmDecryptor::Begin(envelope, MakeKey(5), "weights/a.bin");
  ASSERT_TRUE(decryptor.ok()) << decryptor.status();
  std::string out(decryptor->plaintext_bytes(), '\0');
  ASSERT_TRUE(decryptor->Update(envelope.data() + kEncryptedHeaderBytes, out.size(), out.data()).ok());
  const Status finish = decryptor->Finish(std::string_view(envelope).substr(kEncryptedHeaderBytes + out.size()));
  EXPECT_EQ(finish, Status::DataCorrupted("weights/a.bin: decryption failed: wrong key or tampered data"));
}

TEST(AesGcmTest, FlippingAnyOneByteFails) {
  const AesKey key = MakeKey(6);
  const std::string envelope = Encrypt(Pattern(64), key);
  ASSERT_EQ(envelope.size(), 108u);
  for (std::size_t i = 0; i < envelope.size(); ++i) {
    for (std::uint8_t bit : {0x01, 0x80}) {
      SCOPED_TRACE(fmt::format("byte {} ^ {:#x}", i, bit));
      std::string tampered = envelope;
      tampered[i] = static_cast<char>(tampered[i] ^ bit);
      auto decrypted = DecryptBytes(tampered, key, "m.om");
      ASSERT_FALSE(decrypted.ok());
      EXPECT_EQ(decrypted.status().code(), StatusCode::kDataCorrupted);
      const std::string_view message = decrypted.status().message();
      if (i < 8) {
        EXPECT_EQ(message, "m.om: not an encrypted envelope (it does not begin with 'NPFWENC1')");
      } else if (i >= 20 && i < 28) {
        // The size no longer matches the envelope's length, or exceeds what GCM can encrypt.
        EXPECT_TRUE(message.starts_with("m.om: truncated: ") || message.starts_with("m.om: the header declares ") ||
                    message.find("trailing bytes") != message.npos)
            << message;
      } else {
        EXPECT_EQ(message, fmt::format("m.om{}", kAuthFailure));  // IV, ciphertext, tag
      }
    }
  }
}

TEST(AesGcmTest, TheSizeFieldIsAuthenticated) {
  // Declare one byte fewer and drop one ciphertext byte: the length is consistent, the tag is not.
  const AesKey key = MakeKey(7);
  std::string envelope = Encrypt(Pattern(64), key);
  envelope[20] = 63;
  envelope.erase(kEncryptedHeaderBytes + 63, 1);
  auto decrypted = DecryptBytes(envelope, key, "m.om");
  ASSERT_FALSE(decrypted.ok());
  EXPECT_EQ(decrypted.status().message(), fmt::format("m.om{}", kAuthFailure));
}

TEST(AesGcmTest, TruncatedAndTrailingBytesFailNamingTheSource) {
  const AesKey key = MakeKey(8);
  const std::string envelope = Encrypt(Pattern(100), key);
  const auto expect_corrupted = [&](std::string_view bytes, std::string_view expected_start) {
    auto decrypted = DecryptBytes(bytes, key, "weights/b.bin");
    ASSERT_FALSE(decrypted.ok());
    EXPECT_EQ(decrypted.status().code(), StatusCode::kDataCorrupted);
    EXPECT_TRUE(decrypted.status().message().starts_with(expected_start)) << decrypted.status();
  };
  for (std::size_t size : {std::size_t{8}, std::size_t{27}, std::size_t{28}, std::size_t{28 + 100},
                           envelope.size() - 1}) {
    SCOPED_TRACE(size);
    expect_corrupted(std::string_view(envelope).substr(0, size), "weights/b.bin: truncated: ");
  }
  expect_corrupted(std::string_view(envelope).substr(0, 5), "weights/b.bin: not an encrypted envelope");
  expect_corrupted("", "weights/b.bin: not an encrypted envelope");
  expect_corrupted(envelope + "x", "weights/b.bin: 1 trailing bytes after");

  // The streaming decryptor: a short header, too much ciphertext, too little ciphertext, a short tag.
  auto short_header = GcmDecryptor::Begin(std::string_view(envelope).substr(0, 20), key, "weights/b.bin");
  EXPECT_EQ(short_header.status(),
            Status::DataCorrupted("weights/b.bin: truncated: 20 bytes, shorter than the 28-byte envelope header"));
  auto decryptor = GcmDecryptor::Begin(envelope, key, "weights/b.bin");
  ASSERT_TRUE(decryptor.ok());
  std::string out(200, '\0');
  EXPECT_EQ(decryptor->Update(envelope.data() + kEncryptedHeaderBytes, 101, out.data()),
            Status::DataCorrupted("weights/b.bin: 101 bytes of ciphertext, more than the 100 its header declares"));
  ASSERT_TRUE(decryptor->Update(envelope.data() + kEncryptedHeaderBytes, 99, out.data()).ok());
  EXPECT_EQ(decryptor->Finish(std::string_view(envelope).substr(envelope.size() - kGcmTagBytes)),
            Status::DataCorrupted("weights/b.bin: truncated: 99 bytes of ciphertext, its header declares 100"));
  ASSERT_TRUE(decryptor->Update(envelope.data() + kEncryptedHeaderBytes + 99, 1, out.data() + 99).ok());
  EXPECT_EQ(decryptor->Finish(std::string_view(envelope).substr(envelope.size() - 15)),
            Status::DataCorrupted("weights/b.bin: truncated: the GCM tag is 15 bytes, expected 16"));
}

TEST(AesGcmTest, EncryptorRejectsMoreOrLessPlaintextThanDeclared) {
  auto encryptor = GcmEncryptor::Begin(10, MakeKey(9));
  ASSERT_TRUE(encryptor.ok());
  char buffer[16] = {};
  EXPECT_EQ(encryptor->Update(buffer, 11, buffer).code(), StatusCode::kParamInvalid);
  ASSERT_TRUE(encryptor->Update(buffer, 9, buffer).ok());
  EXPECT_EQ(encryptor->Finish().status(),
            Status::ParamInvalid("encrypted 9 bytes of plaintext, 10 were declared at Begin"));
  EXPECT_EQ(GcmEncryptor::Begin(kMaxGcmPlaintextBytes + 1, MakeKey(9)).status().code(), StatusCode::kParamInvalid);
}

class AesGcmFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("npuflow_aes_gcm_test_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       static_cast<long>(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string PathOf(std::string_view name) const { return (dir_ / name).string(); }

  static void Write(const std::string& path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> Listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(AesGcmFileTest, EncryptFileInPlaceThenDecryptFile) {
  const AesKey key = MakeKey(10);
  const std::string plain = Pattern((std::size_t{25} << 20) + 3);  // three 10 MiB chunks, the last partial
  const std::string path = PathOf("w.bin");
  Write(path, plain);
  ::chmod(path.c_str(), 0640);

  ASSERT_TRUE(EncryptFile(path, path, key).ok());
  const std::string envelope = Read(path);
  ASSERT_EQ(envelope.size(), kEncryptedHeaderBytes + plain.size() + kGcmTagBytes);
  EXPECT_TRUE(IsEncrypted(envelope));
  EXPECT_EQ(DeclaredSize(envelope), plain.size());
  EXPECT_EQ(Listing(), std::vector<std::string>{"w.bin"});  // no temporary file left behind
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);

  auto decrypted = DecryptFile(path, key);
  ASSERT_TRUE(decrypted.ok()) << decrypted.status();
  EXPECT_TRUE(*decrypted == plain);
}

TEST_F(AesGcmFileTest, EncryptFileToAnotherPathLeavesTheInputAlone) {
  const AesKey key = MakeKey(11);
  const std::string plain = Pattern(100'000);
  const std::string in = PathOf("plain.bin");
  const std::string out = PathOf("plain.bin.enc");
  Write(in, plain);
  ASSERT_TRUE(EncryptFile(in, out, key).ok());
  EXPECT_EQ(Read(in), plain);
  EXPECT_EQ(Listing(), (std::vector<std::string>{"plain.bin", "plain.bin.enc"}));
  auto decrypted = DecryptFile(out, key);
  ASSERT_TRUE(decrypted.ok()) << decrypted.status();
  EXPECT_EQ(*decrypted, plain);

  // An empty file round-trips too.
  Write(in, "");
  ASSERT_TRUE(EncryptFile(in, out, key).ok());
  EXPECT_EQ(Read(out).size(), kEncryptedHeaderBytes + kGcmTagBytes);
  EXPECT_EQ(*DecryptFile(out, key), "");
}

TEST_F(AesGcmFileTest, FileErrorsNameThePath) {
  const AesKey key = MakeKey(12);
  const std::string missing = PathOf("missing.bin");
  const Status encrypt = EncryptFile(missing, PathOf("out.bin"), key);
  EXPECT_EQ(encrypt.code(), StatusCode::kNotFound);
  EXPECT_TRUE(encrypt.message().starts_with(missing + ": cannot open")) << encrypt;
  EXPECT_EQ(Listing(), std::vector<std::string>{});

  auto decrypt = DecryptFile(missing, key);
  EXPECT_EQ(decrypt.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(decrypt.status().message().starts_with(missing + ": cannot open")) << decrypt.status();

  const std::string model = PathOf("model.om");
  Write(model, Encrypt("graph", key));
  EXPECT_EQ(DecryptFile(model, MakeKey(13)).status(),
            Status::DataCorrupted("{}: decryption failed: wrong key or tampered data", model));
  Write(model, "graph");
  EXPECT_EQ(DecryptFile(model, key).status(),
            Status::DataCorrupted("{}: not an encrypted envelope (it does not begin with 'NPFWENC1')", model));
}

TEST(AesKeyTest, ParsesHexInEitherCase) {
  auto lower = ParseAesKey(kKeyHex);
  ASSERT_TRUE(lower.ok()) << lower.status();
  for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(lower->bytes[i], i);
  std::string upper(kKeyHex);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) { return std::toupper(c); });
  ASSERT_NE(upper, kKeyHex);
  auto parsed_upper = ParseAesKey(upper);
  ASSERT_TRUE(parsed_upper.ok()) << parsed_upper.status();
  EXPECT_EQ(parsed_upper->bytes, lower->bytes);
}

TEST(AesKeyTest, RejectsWrongLengthAndNonHexWithoutEchoingTheKey) {
  const std::string short_key(kKeyHex.substr(0, 63));
  auto wrong_length = ParseAesKey(short_key);
  EXPECT_EQ(wrong_length.status(),
            Status::ParamInvalid("key: expected 64 hex digits (a 32-byte AES-256 key), got 63 characters"));
  EXPECT_EQ(ParseAesKey(std::string(kKeyHex) + "0").status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(ParseAesKey("").status().code(), StatusCode::kParamInvalid);

  std::string non_hex(kKeyHex);
  non_hex[10] = 'g';
  auto bad_digit = ParseAesKey(non_hex);
  EXPECT_EQ(bad_digit.status(), Status::ParamInvalid("key: character 11 is not a hex digit"));
  EXPECT_EQ(bad_digit.status().message().find("0a0b"), std::string_view::npos);

  EXPECT_EQ(ParseAesKey("@").status().code(), StatusCode::kParamInvalid);
}

TEST_F(AesGcmFileTest, ParsesKeyFiles) {
  const std::string hex_file = PathOf("key.hex");
  Write(hex_file, fmt::format("  {}\n", kKeyHex));
  auto from_hex = ParseAesKey("@" + hex_file);
  ASSERT_TRUE(from_hex.ok()) << from_hex.status();
  EXPECT_EQ(from_hex->bytes, ParseAesKey(kKeyHex)->bytes);

  const std::string raw_file = PathOf("key.bin");
  std::string raw(32, '\0');
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(0xff - i);  // includes whitespace bytes
  raw[0] = '\n';
  Write(raw_file, raw);
  auto from_raw = ParseAesKey("@" + raw_file);
  ASSERT_TRUE(from_raw.ok()) << from_raw.status();
  EXPECT_EQ(std::string(from_raw->bytes.begin(), from_raw->bytes.end()), raw);

  const std::string missing = PathOf("no.key");
  auto not_there = ParseAesKey("@" + missing);
  EXPECT_EQ(not_there.status().code(), StatusCode::kParamInvalid);
  EXPECT_TRUE(not_there.status().message().starts_with("key file " + missing + ": cannot open")) << not_there.status();

  const std::string short_file = PathOf("short.key");
  Write(short_file, "secret-ish\n");
  auto too_short = ParseAesKey("@" + short_file);
  EXPECT_EQ(too_short.status(),
            Status::ParamInvalid("key file {}: holds 10 characters besides surrounding whitespace, expected 64 hex "
                                 "digits or exactly 32 raw bytes",
                                 short_file));

  std::string bad_hex(kKeyHex);
  bad_hex[0] = 'z';
  Write(short_file, bad_hex);
  EXPECT_EQ(ParseAesKey("@" + short_file).status(),
            Status::ParamInvalid("key file {}: character 1 is not a hex digit", short_file));
}

}  // namespace
}  // namespace npuflow
