// The GPT-2 tokenizer: the hand-written pre-tokenizer splits exactly as ggml's std::regex does on
// tricky and random text, Tokenize gives ggml's greedy-longest-match ids (checked against a
// transcription of ggml's gpt_tokenize), unknown bytes are reported, and encoder.json keys decode
// through GPT-2's byte-to-unicode table.
#include "models/gpt2/tokenizer.h"
#include "models/gpt2/vocab_bytes.h"

#include <cstring>
#include <map>
#include <set>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace npuflow::gpt2 {


namespace {

// ggml's gpt_split_words: std::regex_search, then search again in the suffix.
std::vector<std::string> RegexSplit(const std::string& text) {
  static const std::regex re(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?[[:alpha:]]+| ?[[:digit:]]+| ?[^\s[:alpha:][:digit:]]+|\s+(?!\S)|\s+)");
  std::vector<std::string> words;
  std::string str = text;
  std::smatch m;
  while (std::regex_search(str, m, re)) {
    words.push_back(m[0]);
    str = m.suffix();
  }
  return words;
}

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> words;
  for (std::string_view word : SplitWords(text)) words.emplace_back(word);
  return words;
}

// ggml's gpt_tokenize (without special tokens): std::map lookups, j from the word's end down.
std::vector<TokenId> GgmlTokenize(const std::vector<std::string>& id_to_token, const std::string& text) {
  std::map<std::string, TokenId> token_to_id;
  for (std::size_t i = 0; i < id_to_token.size(); ++i) token_to_id[id_to_token[i]] = static_cast<TokenId>(i);
  std::vector<TokenId> tokens;
  for (const std::string& word : RegexSplit(text)) {
    for (int i = 0; i < static_cast<int>(word.size());) {
      for (int j = static_cast<int>(word.size()) - 1; j >= i; j--) {
        auto it = token_to_id.find(word.substr(i, j - i + 1));
        if (it != token_to_id.end()) {
          tokens.push_back(it->second);
          i = j + 1;
          break;
        } else if (j == i) {
          i++;
        }
      }
    }
  }
  return tokens;
}

// Text pieces chosen to hit every branch of the pattern: contractions and near-contractions,
// each whitespace byte, runs, digits, punctuation, UTF-8 and stray high bytes, NUL.
const std::vector<std::string> kPieces = {
    "a",  "Z",  "hello", "0",  "42", " ",  "  ", "\t", "\n", "\r", "\v", "\f", "'",      "s",      "t",
    "re", "ve", "m",     "ll", "d",  "S",  "!",  ".",  ",",  "-",  "_",  "?!", "\xC3\xA9", "\xE2\x82\xAC",
    "\x80", "\xFF", std::string(1, '\0'), "'s", "'ll", "'re", "'ve", "'d", "'m", "'t", "'x", "''"};

std::string RandomText(std::mt19937& rng, int max_pieces) {
  std::uniform_int_distribution<int> count(0, max_pieces);
  std::uniform_int_distribution<std::size_t> pick(0, kPieces.size() - 1);
  std::string text;
  for (int n = count(rng); n > 0; --n) text += kPieces[pick(rng)];
  return text;
}

std::string RandomBytes(std::mt19937& rng, int max_length) {
  std::uniform_int_distribution<int> length(0, max_length);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string text;
  for (int n = length(rng); n > 0; --n) text.push_back(static_cast<char>(byte(rng)));
  return text;
}

std::vector<std::string> AllBytes() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  return tokens;
}

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

TEST(SplitWords, FollowsThePatternOnHandPickedText) {
  using Words = std::vector<std::string>;
  EXPECT_EQ(Split("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(Split("don't"), (Words{"don", "'t"}));
  EXPECT_EQ(Split("we'll they're I've she'd I'm it's"),
            (Words{"we", "'ll", " they", "'re", " I", "'ve", " she", "'d", " I", "'m", " it", "'s"}));
  EXPECT_EQ(Split("'sup"), (Words{"'s", "up"}));  // the contraction wins even inside a word
  EXPECT_EQ(Split("IT'S"), (Words{"IT", "'", "S"}));  // contractions are lower case only
  EXPECT_EQ(Split("!'s"), (Words{"!'", "s"}));       // a punctuation run swallows the apostrophe
  EXPECT_EQ(Split("a  b"), (Words{"a", " ", " b"}));  // the last space of a run leads the next word
  EXPECT_EQ(Split("a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(Split("a b  "), (Words{"a", " b", "  "}));  // trailing whitespace is one word
  EXPECT_EQ(Split("a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Split("a \tb"), (Words{"a", " ", "\t", "b"}));  // only ' ' joins the next word
  EXPECT_EQ(Split("x = 42;"), (Words{"x", " =", " 42", ";"}));
  EXPECT_EQ(Split("abc123def"), (Words{"abc", "123", "def"}));
  EXPECT_EQ(Split(" ...!?"), (Words{" ...!?"}));
  EXPECT_EQ(Split("caf\xC3\xA9 ok"), (Words{"caf", "\xC3\xA9", " ok"}));  // UTF-8 bytes are "other"
  EXPECT_EQ(Split(""), Words{});
}

TEST(SplitWords, EqualsStdRegexOnEveryByteInContext) {
  for (int b = 0; b < 256; ++b) {
    const std::string c(1, static_cast<char>(b));
    for (const std::string& text : {c, " " + c, c + c, c + " ", "  " + c, "x" + c + "y", "'" + c, c + "s",
                                    "1" + c + "2", c + "\n\n", " " + c + c + " "}) {
      EXPECT_EQ(Split(text), RegexSplit(text)) << "byte " << b;
    }
  }
}

TEST(SplitWords, EqualsStdRegexOnRandomText) {
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const std::string text = RandomText(rng, 30);
    ASSERT_EQ(Split(text), RegexSplit(text)) << "text '" << text << "'";
  }
  for (int i = 0; i < 2000; ++i) {
    const std::string text = RandomBytes(rng, 40);
    ASSERT_EQ(Split(text), RegexSplit(text)) << "random bytes #" << i;
  }
}

TEST(SplitWords, HandlesLongTextWithoutRecursion) {
  // A megabyte of one word and of one whitespace run; std::regex would recurse per byte here.
  for (const char c : {'a', ' ', '!'}) {
    const std::string text(1 << 20, c);
    const auto words = SplitWords(text);
    ASSERT_EQ(words.size(), 1u) << "byte '" << c << "'";
    EXPECT_EQ(words[0].size(), text.size());
  }
  std::mt19937 rng(11);
  std::string text;
  while (text.size() < (1 << 20)) text += RandomText(rng, 50);
  std::string joined;
  for (std::string_view word : SplitWords(text)) joined += word;
  EXPECT_EQ(joined, text);
}

TEST(Vocab, GreedyLongestMatch) {
  std::vector<std::string> tokens = AllBytes();
  tokens.insert(tokens.end(), {"hel", "lo", "hello", " world", "ab", "bc", "don", "'t"});
  const Vocab vocab(tokens);
  const TokenId hello = 258, world = 259, ab = 260, don = 262, apostrophe_t = 263;

  EXPECT_EQ(vocab.Tokenize("hello").ids, (std::vector<TokenId>{hello}));
  EXPECT_EQ(vocab.Tokenize("hello world").ids, (std::vector<TokenId>{hello, world}));
  // "helloo": the longest match first, then what remains.
  EXPECT_EQ(vocab.Tokenize("helloo").ids, (std::vector<TokenId>{hello, 'o'}));
  // Greedy from the left, not BPE: "abc" is "ab" + "c" although "bc" is a token too.
  EXPECT_EQ(vocab.Tokenize("abc").ids, (std::vector<TokenId>{ab, 'c'}));
  EXPECT_EQ(vocab.Tokenize("don't").ids, (std::vector<TokenId>{don, apostrophe_t}));
  // " lo" is no token: its space and "lo" separately.
  EXPECT_EQ(vocab.Tokenize("hel lo").ids, (std::vector<TokenId>{256, ' ', 257}));
  EXPECT_TRUE(vocab.Tokenize("anything at all").unknown_bytes.empty());
}

TEST(Vocab, TokensSpanningWordsAreNeverUsed) {
  const Vocab vocab({"a", " b", "a b"});
  EXPECT_EQ(vocab.Tokenize("a b").ids, (std::vector<TokenId>{0, 1}));
  EXPECT_EQ(vocab.Find("a b"), TokenId{2});
}

TEST(Vocab, RoundTripsAnyTextWhenEveryByteIsAToken) {
  std::vector<std::string> tokens = AllBytes();
  tokens.insert(tokens.end(), {"the", " the", "  ", "\n\n", "'s", "\xC3\xA9", " 42", "...", "hello"});
  const Vocab vocab(tokens);
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = i % 2 == 0 ? RandomText(rng, 40) : RandomBytes(rng, 60);
    const Tokenization result = vocab.Tokenize(text);
    EXPECT_TRUE(result.unknown_bytes.empty());
    const auto back = vocab.Detokenize(result.ids);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, text);
  }
}

TEST(Vocab, EqualsGgmlTokenizeOnRandomVocabularies) {
  std::mt19937 rng(5);
  for (int round = 0; round < 40; ++round) {
    // Some single bytes missing, multi-byte tokens made of pieces (some repeated, so duplicates
    // occur), one long token that bounds the search.
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
      if (rng() % 8 != 0) tokens.emplace_back(1, static_cast<char>(b));
    }
    for (int i = 0; i < 60; ++i) tokens.push_back(RandomText(rng, 3));
    tokens.push_back(std::string(12, 'a'));
    std::shuffle(tokens.begin(), tokens.end(), rng);
    const Vocab vocab(tokens);
    for (int i = 0; i < 50; ++i) {
      std::string text = RandomText(rng, 30);
      if (i % 5 == 0) text += " " + std::string(30, 'a');
      ASSERT_EQ(vocab.Tokenize(text).ids, GgmlTokenize(tokens, text)) << "round " << round << " text '" << text << "'";
    }
  }
}

TEST(Vocab, ReportsUnknownBytes) {
  const Vocab vocab({"a", "b", " b", "c"});
  const Tokenization result = vocab.Tokenize("azb\xFF c");
  EXPECT_EQ(result.ids, (std::vector<TokenId>{0, 1, 3}));
  ASSERT_EQ(result.unknown_bytes.size(), 3u);
  EXPECT_EQ(result.unknown_bytes[0].offset, 1u);
  EXPECT_EQ(result.unknown_bytes[0].byte, 'z');
  EXPECT_EQ(result.unknown_bytes[1].offset, 3u);
  EXPECT_EQ(result.unknown_bytes[1].byte, 0xFF);
  EXPECT_EQ(result.unknown_bytes[2].offset, 4u);  // " c": no " c" token and no " " token
  EXPECT_EQ(result.unknown_bytes[2].byte, ' ');

  const auto strict = vocab.TokenizeStrict("azb\xFF c");
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(strict.status().message(), "no token covers byte 0x7A at offset 1 of the text (3 such bytes)");

  const auto clean = vocab.TokenizeStrict("ab b");
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(*clean, (std::vector<TokenId>{0, 1, 2}));
}

TEST(Vocab, DuplicateTokenResolvesToTheLastId) {
  const Vocab vocab({"a", "b", "a", "ab", "x", "ab"});
  EXPECT_EQ(vocab.Find("a"), TokenId{2});
  EXPECT_EQ(vocab.Find("ab"), TokenId{5});
  EXPECT_EQ(vocab.Tokenize("ab a").unknown_bytes.size(), 1u);  // no " " token
  EXPECT_EQ(vocab.Tokenize("aba").ids, (std::vector<TokenId>{5, 2}));
  // Every id still detokenizes to its own bytes.
  EXPECT_EQ(*vocab.Detokenize(std::vector<TokenId>{0, 1, 2, 3}), "abaab");
}

TEST(VocabBytes, HoldsEachTokenAtItsIdInOneString) {
  const std::vector<std::string> tokens = {"a", std::string("\0\xff", 2), "", " hello world", "", "a"};
  VocabBytes bytes(tokens);
  ASSERT_EQ(bytes.size(), tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) EXPECT_EQ(bytes[id], tokens[id]) << id;
  EXPECT_EQ(bytes.ToStrings(), tokens);
  EXPECT_EQ(bytes.total_bytes(), 1u + 2 + 0 + 12 + 0 + 1);
  EXPECT_EQ(bytes, VocabBytes({"a", std::string_view("\0\xff", 2), "", " hello world", "", "a"}));
  EXPECT_FALSE(bytes == VocabBytes({"a", std::string_view("\0\xff", 2), " hello world", "", "", "a"}));

  VocabBytes appended;
  appended.ReserveTokens(2);
  std::memcpy(appended.Append(3), "xyz", 3);
  appended.Append("");
  appended.ShrinkToFit();
  EXPECT_EQ(appended.ToStrings(), (std::vector<std::string>{"xyz", ""}));
  EXPECT_TRUE(VocabBytes().empty());
}

// GPT-2's size: 50257 tokens, the 256 bytes then distinct words of 2-8 letters, every other one
// with a leading space (as make-gpt2 writes them). Each token is found at its id, text round
// trips, and the whole vocabulary (bytes, offsets, lookup table) takes under 1 MB of heap; as
// std::strings in a node-based hash map it took about 4 MB.
TEST(Vocab, AGpt2SizedVocabularyFindsEveryTokenInUnderAMegabyte) {
  std::vector<std::string> tokens = AllBytes();
  std::set<std::string> seen(tokens.begin(), tokens.end());
  std::mt19937 rng(11);
  while (tokens.size() < 50257) {
    std::string word = tokens.size() % 2 == 0 ? " " : "";
    const int letters = 2 + static_cast<int>(rng() % 7);
    for (int i = 0; i < letters; ++i) word.push_back(static_cast<char>('a' + rng() % 26));
    if (seen.insert(word).second) tokens.push_back(std::move(word));
  }
  const Vocab vocab(tokens);
  ASSERT_EQ(vocab.size(), tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id)
    ASSERT_EQ(vocab.Find(tokens[id]), static_cast<TokenId>(id)) << "'" << tokens[id] << "'";
  EXPECT_EQ(vocab.Find("no such token"), std::nullopt);
  for (int i = 0; i < 200; ++i) {
    const std::string text = i % 2 == 0 ? RandomText(rng, 80) : RandomBytes(rng, 80);
    const Tokenization t = vocab.Tokenize(text);
    ASSERT_TRUE(t.unknown_bytes.empty());
    ASSERT_EQ(*vocab.Detokenize(t.ids), text);
    if (i < 4) ASSERT_EQ(t.ids, GgmlTokenize(tokens, text));
  }
  EXPECT_LT(vocab.heap_bytes(), std::size_t{1} << 20);
}

TEST(Vocab, EmptyVocabularyCoversNothing) {
  const Vocab vocab({});
  const Tokenization result = vocab.Tokenize("hi");
  EXPECT_TRUE(result.ids.empty());
  EXPECT_EQ(result.unknown_bytes.size(), 2u);
}

TEST(Vocab, DetokenizeRejectsOutOfRangeIds) {
  const Vocab vocab({"a", "b", "c"});
  EXPECT_EQ(*vocab.Detokenize(std::vector<TokenId>{2, 0, 1}), "cab");
  EXPECT_EQ(*vocab.Detokenize(std::vector<TokenId>{}), "");

  const auto high = vocab.Detokenize(std::vector<TokenId>{0, 3});
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(high.status().message(), "token id 3 at position 1 is out of range: the vocabulary has 3 tokens");
  const auto negative = vocab.Detokenize(std::vector<TokenId>{-1});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(), "token id -1 at position 0 is out of range: the vocabulary has 3 tokens");

  EXPECT_EQ(*vocab.TokenBytes(1), "b");
  EXPECT_EQ(vocab.TokenBytes(7).status().message(), "token id 7 is out of range: the vocabulary has 3 tokens");
}

TEST(ByteToUnicode, MatchesGpt2Table) {
  EXPECT_EQ(ByteToUnicode('!'), U'!');
  EXPECT_EQ(ByteToUnicode('~'), U'~');
  EXPECT_EQ(ByteToUnicode(0xA1), char32_t{0xA1});
  EXPECT_EQ(ByteToUnicode(0xFF), char32_t{0xFF});
  EXPECT_EQ(ByteToUnicode(0x00), char32_t{0x100});
  EXPECT_EQ(ByteToUnicode('\n'), char32_t{0x10A});  // 'Ċ'
  EXPECT_EQ(ByteToUnicode(' '), char32_t{0x120});   // 'Ġ'
  EXPECT_EQ(ByteToUnicode(0x7F), char32_t{0x121});
  EXPECT_EQ(ByteToUnicode(0xAD), char32_t{0x143});  // the last of the 68
  std::vector<bool> seen(0x144, false);
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = ByteToUnicode(static_cast<std::uint8_t>(b));
    ASSERT_LT(cp, 0x144u);
    EXPECT_FALSE(seen[cp]) << "byte " << b;
    seen[cp] = true;
  }
}

TEST(ParseEncoderJson, DecodesKeysToBytes) {
  // As in GPT-2's encoder.json: 'Ġ' (U+0120) is a space, 'Ċ' (U+010A) a newline, written raw or
  // as a \u escape.
  const std::string json = R"({"!": 0, "Ġthe": 1, "Ċ": 2, "<|endoftext|>": 3, "\u0120a": 4, "\"": 5, "caf\u00c3\u00a9": 6})";
  const auto tokens = ParseEncoderJson(json);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<std::string>{"!", " the", "\n", "<|endoftext|>", " a", "\"", "caf\xC3\xA9"}));

  const Vocab vocab(*tokens);
  EXPECT_EQ(vocab.Tokenize("! the").ids, (std::vector<TokenId>{0, 1}));
}

TEST(ParseEncoderJson, RoundTripsAllBytes) {
  std::string json = "{";
  for (int b = 0; b < 256; ++b) {
    if (b > 0) json += ", ";
    std::string key = Utf8(ByteToUnicode(static_cast<std::uint8_t>(b)));
    if (key == "\"" || key == "\\") key = "\\" + key;
    json += "\"" + key + "\": " + std::to_string(b);
  }
  json += "}";
  const auto tokens = ParseEncoderJson(json);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, AllBytes());
}

TEST(ParseEncoderJson, ReportsErrors) {
  const auto message = [](std::string_view json) {
    const auto result = ParseEncoderJson(json, "vocab/encoder.json");
    EXPECT_FALSE(result.ok()) << json;
    EXPECT_EQ(result.status().code(), StatusCode::kParamInvalid) << json;
    return std::string(result.status().message());
  };
  EXPECT_NE(message("{\"a\": 0,").find("vocab/encoder.json: not valid JSON"), std::string::npos);
  EXPECT_EQ(message("[1, 2]"), "vocab/encoder.json: expected a JSON object of token -> id, got array");
  EXPECT_EQ(message(R"({"a b": 0})"),
            "vocab/encoder.json: key 'a b' has U+0020 at byte 1, which is not in GPT-2's byte-to-unicode table");
  EXPECT_EQ(message(R"({"a": 0, "x€": 1})"),
            "vocab/encoder.json: key 'x€' has U+20AC at byte 1, which is not in GPT-2's byte-to-unicode table");
  EXPECT_EQ(message(R"({"\u0144": 0})"),
            "vocab/encoder.json: key 'ń' has U+0144 at byte 0, which is not in GPT-2's byte-to-unicode table");
  EXPECT_EQ(message(R"({"a": 0, "b": 0})"), "vocab/encoder.json: id 0 is given to both 'a' and 'b'");
  EXPECT_EQ(message(R"({"a": 0, "b": 2})"),
            "vocab/encoder.json: id 1 is missing: 2 keys need ids 0..1, but key 'b' has id 2");
  EXPECT_EQ(message(R"({"a": -1, "b": 1})"),
            "vocab/encoder.json: id 0 is missing: 2 keys need ids 0..1, but key 'a' has id -1");
  EXPECT_EQ(message(R"({"a": 0, "b": 1.5})"), "vocab/encoder.json: key 'b' has value 1.5, expected an integer id");
  EXPECT_EQ(message(R"({"a": "0"})"), "vocab/encoder.json: key 'a' has value \"0\", expected an integer id");
  // nlohmann reports a number beyond a double's range as out_of_range, not parse_error (the same
  // uncaught exception fuzz_meta_json found in weights/convert.cc).
  EXPECT_EQ(message(R"({"a": 1e400})"),
            "vocab/encoder.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");

  const auto empty = ParseEncoderJson("{}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace npuflow::gpt2
