// GPT-2's tokenizer as ggml's gpt-2 example runs it (examples/common.cpp: gpt_split_words,
// gpt_tokenize): the text is split into words by GPT-2's pre-tokenization pattern, then each word
// is covered greedily by the longest vocabulary token starting at each position. This is not the
// BPE merge procedure of the reference tokenizer; ggml's greedy longest match gives the same ids
// for most English text and different ids for some words, and npuflow follows ggml.
//
// Tokens are raw bytes (as a ggml model file stores them), so Detokenize(Tokenize(text)) == text
// whenever every byte of the text is covered by some token (a vocabulary holding all 256 single
// bytes, as GPT-2's does, covers every text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/gpt2/vocab_bytes.h"

namespace npuflow::gpt2 {

using TokenId = std::int32_t;

// Splits `text` into the words of GPT-2's pre-tokenization pattern, as ggml matches it with
// std::regex (ECMAScript):
//   's|'t|'re|'ve|'m|'ll|'d| ?[[:alpha:]]+| ?[[:digit:]]+| ?[^\s[:alpha:][:digit:]]+|\s+(?!\S)|\s+
// At each position the first alternative that matches wins; character classes are ASCII ("C"
// locale): alpha is A-Z a-z, digit is 0-9, space is " \t\n\v\f\r", and a byte >= 0x80 is none of
// them. Every byte belongs to exactly one word and the words are in text order; their
// concatenation is `text`. A hand-written scanner, linear in the text and without recursion (the
// std::regex of libstdc++ recurses per character and overflows the stack on long inputs).
// The views point into `text`.
std::vector<std::string_view> SplitWords(std::string_view text);

// A byte of the text that no token covers. ggml prints it and drops it.
struct UnknownByte {
  std::size_t offset = 0;  // in the text
  std::uint8_t byte = 0;
};

struct Tokenization {
  std::vector<TokenId> ids;
  std::vector<UnknownByte> unknown_bytes;  // in text order; empty when every byte was covered
};

class Vocab {
 public:
  // `tokens[id]` is the raw bytes of token `id`. When two ids have the same bytes, lookups find the
  // last of them (ggml's token_to_id[word] = i overwrites). An empty token is never matched.
  // Move the file's vocabulary in (Vocab(std::move(file.vocab))): the tokens are held once, and
  // the lookup table holds only ids (a slot per id and as many empty ones, 4 bytes each).
  explicit Vocab(VocabBytes tokens);

  std::size_t size() const { return tokens_.size(); }
  // The id Tokenize would emit for exactly these bytes, if any token has them.
  std::optional<TokenId> Find(std::string_view token) const;
  // The bytes of `id`; ParamInvalid naming the id and the vocabulary size when it is out of range.
  StatusOr<std::string_view> TokenBytes(TokenId id) const;
  // The heap the tokens and the lookup table hold.
  std::size_t heap_bytes() const { return tokens_.heap_bytes() + slots_.capacity() * sizeof(TokenId); }

  // ggml's gpt_tokenize: for each word of SplitWords(text), from i = 0, the longest token equal to
  // word[i, j) is emitted and i = j; when no token starts with word[i], that byte is recorded in
  // unknown_bytes and skipped.
  Tokenization Tokenize(std::string_view text) const;
  // As Tokenize, but an uncovered byte is a NotFound error naming its offset and value.
  StatusOr<std::vector<TokenId>> TokenizeStrict(std::string_view text) const;

  // The tokens' bytes, concatenated. An id outside [0, size()) is a ParamInvalid error naming the
  // id, its position in `ids` and the vocabulary size.
  StatusOr<std::string> Detokenize(std::span<const TokenId> ids) const;

 private:
  // The slot that holds the id of `token`, else the empty slot where probing for it stopped.
  std::size_t Slot(std::string_view token) const;

  VocabBytes tokens_;
  // Open addressing with linear probing: a token id, or kEmptySlot. A power of two, at least
  // twice the tokens, so probes stay short and an empty slot always ends them.
  static constexpr TokenId kEmptySlot = -1;
  std::vector<TokenId> slots_;
  std::size_t max_token_bytes_ = 0;  // no token is longer, so longer candidates are not looked up
};

// GPT-2's bytes_to_unicode(): the code point that stands for `byte` in encoder.json's keys. Bytes
// 33..126, 161..172 and 174..255 stand for themselves; the other 68 bytes, in increasing order, are
// 256, 257, ... 323 (so ' ' = 0x20 is U+0120 'Ġ' and '\n' = 0x0A is U+010A 'Ċ').
char32_t ByteToUnicode(std::uint8_t byte);

// The tokens of GPT-2's encoder.json ({"token": id, ...}), by id, each key turned back into raw
// bytes through the inverse of ByteToUnicode. Errors (ParamInvalid, naming `source`): the text is
// not JSON or not an object; a value is not an integer; a key holds a character ByteToUnicode does
// not produce (the error names the key); the ids are not exactly 0..N-1 for N keys (the error names
// the duplicate id and both keys, or the missing id).
StatusOr<std::vector<std::string>> ParseEncoderJson(std::string_view json_text,
                                                    std::string_view source = "encoder.json");

}  // namespace npuflow::gpt2
