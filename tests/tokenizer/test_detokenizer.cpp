// tokenizer/detokenizer.hpp: streamed chunks are whole UTF-8 characters while the text is valid,
// their concatenation is the encoded text itself (llama.cpp's vectors and random strings, the four
// vocabularies of INFERKIT_TEST_VOCAB_DIR), byte-fallback characters are held until complete,
// invalid bytes pass at once; options; a small vocabulary from plain arrays always.

#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "inferkit/tokenizer/detokenizer.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"
#include "tokenizer_test_util.hpp"

using inferkit::Detokenizer;
using inferkit::EncodeOptions;
using inferkit::TokenId;
using inferkit::Tokenizer;

namespace {

// Whole characters: every position starts a well-formed sequence that ends inside the chunk
// (Table 3-7 lead / continuation byte ranges, written out).
bool whole_characters(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t n = b < 0x80                   ? 1
                          : (b >= 0xC2 && b <= 0xDF) ? 2
                          : (b >= 0xE0 && b <= 0xEF) ? 3
                          : (b >= 0xF0 && b <= 0xF4) ? 4
                                                     : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

inferkit::Vocabulary byte_vocab() {
  // "<unk>", "<s>", "</s>", "▁a", then the 256 byte tokens.
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>",
                                     "\xE2\x96\x81"
                                     "a"};
  std::vector<inferkit::TokenType> types = {inferkit::TokenType::kUnknown, inferkit::TokenType::kControl,
                                            inferkit::TokenType::kControl, inferkit::TokenType::kNormal};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    pieces.emplace_back(buf);
    types.push_back(inferkit::TokenType::kByte);
  }
  inferkit::VocabularyConfig cfg;
  cfg.bos = 1;
  cfg.eos = 2;
  cfg.unk = 0;
  return inferkit::Vocabulary(pieces, {}, types, {}, cfg);
}

}  // namespace

TEST_CASE("Detokenizer holds a character's bytes until it completes", "[tokenizer][detokenizer]") {
  const auto v = byte_vocab();
  auto byte = [](int b) { return static_cast<TokenId>(4 + b); };
  Detokenizer d(v);
  CHECK(d.push(1).empty());  // BOS: no bytes
  CHECK(d.push(3) == "a");   // "▁a": the prefix space dropped at the start
  CHECK(d.push(byte(0xE1)).empty());
  CHECK(d.held() == "\xE1");
  CHECK(d.push(byte(0x9A)).empty());
  CHECK(d.push(byte(0xA0)) == "\xE1\x9A\xA0");  // U+16A0
  CHECK(d.held().empty());
  CHECK(d.push(3) == " a");             // later spaces stay
  CHECK(d.push(byte(0xFF)) == "\xFF");  // never completes: passes at once
  CHECK(d.push(byte(0xF0)).empty());
  CHECK(d.push(byte(0x41)) ==
        "\xF0"
        "A");  // F0 41 cannot complete: both pass
  CHECK(d.push(byte(0xC3)).empty());
  CHECK(d.flush() == "\xC3");  // the end of the stream releases what is held
  CHECK(d.held().empty());
  d.reset();
  CHECK(d.push(3) == "a");
  CHECK_THROWS_AS(d.push(100000), std::out_of_range);
  Detokenizer special(v, inferkit::DecodeOptions{.render_special = true, .strip_leading_space = false});
  CHECK(special.push(1) == "<s>");
  CHECK(special.push(3) == " a");
}

TEST_CASE("Detokenizer streams real vocabularies' tokens as whole characters", "[tokenizer][detokenizer]") {
  const auto dir = tokenizer_test::vocab_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  std::mt19937 rng(30);
  static const char* const kBits[] = {" ", "a", "Zq", "\n", "é", "Ж", "中文", "😀", "🚀x", "ᚠ", "ﷺ", "𝔘", "9", "'s"};
  for (const char* name : tokenizer_test::kVocabs) {
    INFO(name);
    const Tokenizer tok = tokenizer_test::load_tokenizer(*dir, name);
    auto texts = tokenizer_test::read_inp(tokenizer_test::vocab_path(*dir, name) + ".inp");
    for (int i = 0; i < 200; ++i) {
      std::string s;
      for (int k = static_cast<int>(rng() % 12); k >= 0; --k) s += kBits[rng() % (sizeof(kBits) / sizeof(*kBits))];
      texts.push_back(s);
    }
    int held_somewhere = 0;
    for (const auto& text : texts) {
      INFO("text '" << text << "'");
      const auto ids = tok.encode(text);
      Detokenizer d(tok.vocabulary());
      std::string joined;
      for (const TokenId id : ids) {
        const std::string chunk(d.push(id));
        CHECK(whole_characters(chunk));
        if (!d.held().empty()) ++held_somewhere;
        joined += chunk;
      }
      joined += d.flush();
      CHECK(joined == tok.decode(ids));
      CHECK(joined == text);
    }
    CHECK(held_somewhere > 0);  // some token ended inside a character
  }
}
