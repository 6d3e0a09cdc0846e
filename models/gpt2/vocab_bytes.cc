#include "models/gpt2/vocab_bytes.h"

#include <cstring>

namespace npuflow::gpt2 {

VocabBytes::VocabBytes(const std::vector<std::string>& tokens) {
  std::size_t total = 0;
  for (const std::string& t : tokens) total += t.size();
  bytes_.reserve(total);
  ends_.reserve(tokens.size());
  for (const std::string& t : tokens) Append(t);
}

VocabBytes::VocabBytes(std::initializer_list<std::string_view> tokens) {
  for (std::string_view t : tokens) Append(t);
}

char* VocabBytes::Append(std::size_t n) {
  const std::size_t begin = bytes_.size();
  bytes_.resize(begin + n);
  ends_.push_back(static_cast<std::uint32_t>(begin + n));
  return bytes_.data() + begin;
}

void VocabBytes::Append(std::string_view token) {
  char* dst = Append(token.size());
  if (!token.empty()) std::memcpy(dst, token.data(), token.size());
}

void VocabBytes::ShrinkToFit() {
  bytes_.shrink_to_fit();
  ends_.shrink_to_fit();
}

std::vector<std::string> VocabBytes::ToStrings() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (std::size_t id = 0; id < size(); ++id) out.emplace_back((*this)[id]);
  return out;
}

}  // namespace npuflow::gpt2
