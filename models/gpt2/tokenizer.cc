#include "models/gpt2/tokenizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

namespace npuflow::gpt2 {
namespace {

// The classes of the pre-tokenization pattern, in the "C" locale std::regex uses by default.
enum class ByteClass : std::uint8_t { kSpace, kAlpha, kDigit, kOther };

constexpr std::array<ByteClass, 256> MakeByteClasses() {
  std::array<ByteClass, 256> classes{};
  for (int c = 0; c < 256; ++c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r') {
      classes[c] = ByteClass::kSpace;
    } else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
      classes[c] = ByteClass::kAlpha;
    } else if (c >= '0' && c <= '9') {
      classes[c] = ByteClass::kDigit;
    } else {
      classes[c] = ByteClass::kOther;
    }
  }
  return classes;
}
constexpr std::array<ByteClass, 256> kByteClasses = MakeByteClasses();

ByteClass Classify(char c) { return kByteClasses[static_cast<unsigned char>(c)]; }

// The length of the word the pattern matches at `pos` (< text.size()); always >= 1, because every
// byte is space, alpha, digit or other and each class has an alternative that matches it.
std::size_t WordLength(std::string_view text, std::size_t pos) {
  const std::size_t n = text.size();
  const char c = text[pos];
  // 's|'t|'re|'ve|'m|'ll|'d
  if (c == '\'' && pos + 1 < n) {
    const char a = text[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < n) {
      const char b = text[pos + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  // ' ?[[:alpha:]]+| ?[[:digit:]]+| ?[^\s[:alpha:][:digit:]]+': a ' ' joins the run after it when
  // that run is not whitespace; which of the three alternatives matches is the run's class.
  std::size_t start = pos;
  if (c == ' ' && pos + 1 < n && Classify(text[pos + 1]) != ByteClass::kSpace) start = pos + 1;
  const ByteClass run_class = Classify(text[start]);
  std::size_t end = start + 1;
  while (end < n && Classify(text[end]) == run_class) ++end;
  if (run_class != ByteClass::kSpace) return end - pos;
  // '\s+(?!\S)': the whole whitespace run at the end of the text, else the run but its last byte
  // (so that byte can lead the next word), which needs a run of two or more. '\s+': a lone
  // whitespace byte before a non-space.
  if (end == n || end - pos == 1) return end - pos;
  return end - pos - 1;
}

// GPT-2's bytes_to_unicode(): the 188 printable bytes stand for themselves, the other 68 are
// 256 + their rank among the non-printable bytes.
constexpr bool IsPrintableByte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

constexpr int kMaxByteCodePoint = 256 + 68 - 1;

constexpr std::array<char32_t, 256> MakeByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = IsPrintableByte(b) ? static_cast<char32_t>(b) : next++;
  return table;
}
constexpr std::array<char32_t, 256> kByteToUnicode = MakeByteToUnicode();

// The inverse: code point -> byte, -1 for a code point bytes_to_unicode does not produce.
constexpr std::array<std::int16_t, kMaxByteCodePoint + 1> MakeUnicodeToByte() {
  std::array<std::int16_t, kMaxByteCodePoint + 1> table{};
  for (auto& entry : table) entry = -1;
  for (int b = 0; b < 256; ++b) table[kByteToUnicode[b]] = static_cast<std::int16_t>(b);
  return table;
}
constexpr std::array<std::int16_t, kMaxByteCodePoint + 1> kUnicodeToByte = MakeUnicodeToByte();

// Decodes the UTF-8 sequence at text[pos]; returns the code point and its length, or length 0 when
// the bytes there are not well-formed UTF-8.
std::pair<char32_t, std::size_t> DecodeUtf8(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  std::size_t length = 0;
  char32_t cp = 0;
  if (lead < 0x80) return {lead, 1};
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    cp = lead & 0x07;
  } else {
    return {0, 0};
  }
  if (pos + length > text.size()) return {0, 0};
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  return {cp, length};
}

StatusOr<std::string> KeyToBytes(const std::string& key, std::string_view source) {
  std::string bytes;
  bytes.reserve(key.size());
  for (std::size_t pos = 0; pos < key.size();) {
    const auto [cp, length] = DecodeUtf8(key, pos);
    if (length == 0) {
      return Status::ParamInvalid("{}: key '{}' is not valid UTF-8 at byte {}", source, key, pos);
    }
    if (cp > static_cast<char32_t>(kMaxByteCodePoint) || kUnicodeToByte[cp] < 0) {
      return Status::ParamInvalid(
          "{}: key '{}' has U+{:04X} at byte {}, which is not in GPT-2's byte-to-unicode table", source,
          key, static_cast<std::uint32_t>(cp), pos);
    }
    bytes.push_back(static_cast<char>(kUnicodeToByte[cp]));
    pos += length;
  }
  return bytes;
}

}  // namespace

std::vector<std::string_view> SplitWords(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t length = WordLength(text, pos);
    words.push_back(text.substr(pos, length));
    pos += length;
  }
  return words;
}

Vocab::Vocab(VocabBytes tokens) : tokens_(std::move(tokens)) {
  slots_.assign(std::bit_ceil(std::max<std::size_t>(2, 2 * tokens_.size())), kEmptySlot);
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    const std::string_view token = tokens_[id];
    slots_[Slot(token)] = static_cast<TokenId>(id);  // a later id with the same bytes replaces the earlier
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
  }
}

std::size_t Vocab::Slot(std::string_view token) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t s = std::hash<std::string_view>()(token) & mask;; s = (s + 1) & mask) {
    const TokenId id = slots_[s];
    if (id == kEmptySlot || tokens_[static_cast<std::size_t>(id)] == token) return s;
  }
}

std::optional<TokenId> Vocab::Find(std::string_view token) const {
  const TokenId id = slots_[Slot(token)];
  if (id == kEmptySlot) return std::nullopt;
  return id;
}

StatusOr<std::string_view> Vocab::TokenBytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
    return Status::ParamInvalid("token id {} is out of range: the vocabulary has {} tokens", id, tokens_.size());
  }
  return tokens_[static_cast<std::size_t>(id)];
}

Tokenization Vocab::Tokenize(std::string_view text) const {
  Tokenization result;
  for (std::size_t word_start = 0; word_start < text.size();) {
    const std::string_view word = text.substr(word_start, WordLength(text, word_start));
    for (std::size_t i = 0; i < word.size();) {
      // No token is longer than max_token_bytes_, so starting there finds the same longest match
      // as ggml's start at the word's end.
      std::size_t j = std::min(word.size(), i + max_token_bytes_);
      for (; j > i; --j) {
        const TokenId id = slots_[Slot(word.substr(i, j - i))];
        if (id != kEmptySlot) {
          result.ids.push_back(id);
          break;
        }
      }
      if (j == i) {
        result.unknown_bytes.push_back({word_start + i, static_cast<std::uint8_t>(word[i])});
        ++i;
      } else {
        i = j;
      }
    }
    word_start += word.size();
  }
  return result;
}

StatusOr<std::vector<TokenId>> Vocab::TokenizeStrict(std::string_view text) const {
  Tokenization result = Tokenize(text);
  if (!result.unknown_bytes.empty()) {
    const UnknownByte& first = result.unknown_bytes.front();
    return Status::NotFound("no token covers byte 0x{:02X} at offset {} of the text ({} such bytes)",
                            first.byte, first.offset, result.unknown_bytes.size());
  }
  return std::move(result.ids);
}

StatusOr<std::string> Vocab::Detokenize(std::span<const TokenId> ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
      return Status::ParamInvalid("token id {} at position {} is out of range: the vocabulary has {} tokens",
                                  id, i, tokens_.size());
    }
    text += tokens_[static_cast<std::size_t>(id)];
  }
  return text;
}

char32_t ByteToUnicode(std::uint8_t byte) { return kByteToUnicode[byte]; }

StatusOr<std::vector<std::string>> ParseEncoderJson(std::string_view json_text, std::string_view source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return Status::ParamInvalid("{}: not valid JSON: {}", source, e.what());
  }
  if (!json.is_object()) {
    return Status::ParamInvalid("{}: expected a JSON object of token -> id, got {}", source, json.type_name());
  }

  const std::size_t n = json.size();
  std::vector<std::string> tokens(n);
  std::vector<const std::string*> key_of_id(n, nullptr);
  const std::string* out_of_range_key = nullptr;  // the first key whose id is outside 0..n-1
  std::string out_of_range_id;
  for (auto it = json.cbegin(); it != json.cend(); ++it) {
    const std::string& key = it.key();  // lives in `json`, so &key stays valid
    const nlohmann::json& value = it.value();
    if (!value.is_number_integer()) {
      return Status::ParamInvalid("{}: key '{}' has value {}, expected an integer id", source, key, value.dump());
    }
    NPUFLOW_ASSIGN_OR_RETURN(std::string bytes, KeyToBytes(key, source));
    const bool in_range = value.is_number_unsigned() ? value.get<std::uint64_t>() < n : false;
    if (!in_range) {
      if (out_of_range_key == nullptr) {
        out_of_range_key = &key;
        out_of_range_id = value.dump();
      }
      continue;
    }
    const auto id = static_cast<std::size_t>(value.get<std::uint64_t>());
    if (key_of_id[id] != nullptr) {
      return Status::ParamInvalid("{}: id {} is given to both '{}' and '{}'", source, id, *key_of_id[id], key);
    }
    key_of_id[id] = &key;
    tokens[id] = std::move(bytes);
  }
  if (out_of_range_key != nullptr) {
    // n keys, none sharing an id and one outside 0..n-1: some id below n has no key.
    const auto missing = std::find(key_of_id.begin(), key_of_id.end(), nullptr) - key_of_id.begin();
    return Status::ParamInvalid("{}: id {} is missing: {} keys need ids 0..{}, but key '{}' has id {}", source,
                                missing, n, n - 1, *out_of_range_key, out_of_range_id);
  }
  return tokens;
}

}  // namespace npuflow::gpt2
