// A vocabulary's tokens, id -> raw bytes, held as one byte string and the end offset of each
// token: token `id` is bytes[ends[id - 1], ends[id]) (from 0 for id 0). GPT-2's 50257 tokens take
// their bytes plus 4 bytes each here; as 50257 std::strings they took 32 bytes each for the
// strings alone (1.6 MB), plus a heap block for every token longer than 15 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace npuflow::gpt2 {

class VocabBytes {
 public:
  // The most bytes all tokens together may hold (the offsets are 32-bit).
  static constexpr std::size_t kMaxTotalBytes = std::numeric_limits<std::uint32_t>::max();

  VocabBytes() = default;
  // Copies of `tokens`, in order (for tests and tools: a list of strings reads as a vocabulary).
  VocabBytes(const std::vector<std::string>& tokens);  // NOLINT(google-explicit-constructor)
  VocabBytes(std::initializer_list<std::string_view> tokens);

  // Room for `tokens` tokens' offsets, so that appending them does not reallocate the table.
  void ReserveTokens(std::size_t tokens) { ends_.reserve(tokens); }
  // Appends a token of `n` bytes and returns where to write them (zeroed until written); valid
  // until the next Append. total_bytes() + n <= kMaxTotalBytes (ReadGpt2File checks it).
  char* Append(std::size_t n);
  void Append(std::string_view token);
  // Gives back the room that appending one token at a time left spare.
  void ShrinkToFit();

  std::size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::size_t total_bytes() const { return bytes_.size(); }
  // id < size().
  std::string_view operator[](std::size_t id) const {
    const std::size_t begin = id == 0 ? 0 : ends_[id - 1];
    return std::string_view(bytes_).substr(begin, ends_[id] - begin);
  }
  // The heap this holds (capacity, not size): what a vocabulary costs the process.
  std::size_t heap_bytes() const { return bytes_.capacity() + ends_.capacity() * sizeof(std::uint32_t); }
  std::vector<std::string> ToStrings() const;

  friend bool operator==(const VocabBytes& a, const VocabBytes& b) {
    return a.ends_ == b.ends_ && a.bytes_ == b.bytes_;
  }

 private:
  std::string bytes_;
  std::vector<std::uint32_t> ends_;
};

}  // namespace npuflow::gpt2
