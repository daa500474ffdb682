// tokenizer/tokenizer.hpp (with vocabulary.hpp, gguf_vocabulary.hpp, spm.hpp, bpe.hpp): every test
// string of llama.cpp's vectors gives exactly llama.cpp's ids for the four vocabularies of
// ../shared/vocab (INFERKIT_TEST_VOCAB_DIR; skipped when unset); decode(encode(s)) == s; random byte
// strings encode without error and round-trip through byte fallback; special tokens only with
// parse_special; BOS / EOS flags.

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"
#include "naive_tokenizer.hpp"
#include "tokenizer_test_util.hpp"

using inferkit::EncodeOptions;
using inferkit::TokenId;
using inferkit::Tokenizer;

namespace {

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (auto i : ids) {
    s += ' ';
    s += std::to_string(i);
  }
  return s;
}

}  // namespace

TEST_CASE("Tokenizer reproduces llama.cpp's ids on its test vectors", "[tokenizer][vectors]") {
  const auto dir = tokenizer_test::vocab_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  for (const char* name : tokenizer_test::kVocabs) {
    INFO(name);
    const Tokenizer tok = tokenizer_test::load_tokenizer(*dir, name);
    const std::string base = tokenizer_test::vocab_path(*dir, name);
    const auto inp = tokenizer_test::read_inp(base + ".inp");
    const auto out = tokenizer_test::read_out(base + ".out");
    REQUIRE(inp.size() == out.size());
    REQUIRE(inp.size() > 30);
    for (std::size_t i = 0; i < inp.size(); ++i) {
      INFO("string " << i << ": '" << inp[i] << "'");
      const auto ids = tok.encode(inp[i], EncodeOptions{.add_bos = false, .add_eos = false});
      CHECK(show(ids) == show(out[i]));
    }
  }
}

namespace {

// Random byte strings: ASCII-heavy, with multi-byte characters, invalid bytes and whitespace runs.
std::string random_bytes(std::mt19937& rng, std::size_t max_len) {
  static const char* const kBits[] = {
      " ", "  ", "\n", "\t", "a", "Z", "'s",           "é",    "ü",    "ø",    "Ж",       "中",
      "😀", "1",  "22", "!",  "<", ">", "\xE2\x96\x81", "\xC3", "\xFF", "\x80", "\xF0\x9F"};
  std::string s;
  const std::size_t n = rng() % (max_len + 1);
  while (s.size() < n) {
    if (rng() % 3 == 0) {
      s += static_cast<char>(rng() & 0xFF);
    } else {
      s += kBits[rng() % (sizeof(kBits) / sizeof(*kBits))];
    }
  }
  return s;
}

}  // namespace

TEST_CASE("Tokenizer: decode(encode(s)) == s, random bytes included, and the naive loop agrees",
          "[tokenizer][roundtrip]") {
  const auto dir = tokenizer_test::vocab_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  std::mt19937 rng(27);
  for (const char* name : tokenizer_test::kVocabs) {
    INFO(name);
    const Tokenizer tok = tokenizer_test::load_tokenizer(*dir, name);
    std::vector<std::string> texts = tokenizer_test::read_inp(tokenizer_test::vocab_path(*dir, name) + ".inp");
    // Byte-level BPE: a byte whose alphabet character is a user-defined piece (DeepSeek's 13 bytes
    // that never occur in UTF-8, C0 C1 F5..FF, are user-defined "ø", "ÿ", ...) decodes as that
    // piece's text, so such bytes cannot round-trip; every other byte must.
    std::vector<bool> ambiguous(256, false);
    if (tok.vocabulary().model() == inferkit::TokenizerModel::kBytePair)
      for (int b = 0; b < 256; ++b) {
        std::string m;
        inferkit::utf8_append(m, inferkit::byte_to_unicode(static_cast<std::uint8_t>(b)));
        const TokenId id = tok.vocabulary().text_token(m);
        ambiguous[static_cast<std::size_t>(b)] = id < 0 || tok.vocabulary().type(id) != inferkit::TokenType::kNormal;
      }
    for (int i = 0; i < 300; ++i) {
      std::string r = random_bytes(rng, 64);
      for (char& c : r)
        if (ambiguous[static_cast<unsigned char>(c)]) c = '?';
      texts.push_back(r);
    }
    const bool spm = tok.vocabulary().model() == inferkit::TokenizerModel::kSentencePiece;
    for (const auto& s : texts) {
      INFO("text '" << s << "'");
      // SentencePiece writes spaces as U+2581, so a U+2581 in the text comes back as a space: the
      // one normalization these vocabularies apply.
      std::string back;
      for (std::size_t k = 0; k < s.size(); ++k) {
        if (spm && s.compare(k, 3, "\xE2\x96\x81") == 0) {
          back.push_back(' ');
          k += 2;
        } else {
          back.push_back(s[k]);
        }
      }
      const auto ids = tok.encode(s, EncodeOptions{.add_bos = false});
      for (const TokenId id : ids) REQUIRE((id >= 0 && id < static_cast<TokenId>(tok.vocabulary().size())));
      CHECK(tok.decode(ids) == back);
      CHECK(show(ids) == show(naive::encode(tok, s)));
      // With BOS: the same ids after it and the same text back.
      const auto with_bos = tok.encode(s, EncodeOptions{.add_bos = true});
      REQUIRE(with_bos.size() == ids.size() + 1);
      CHECK(with_bos[0] == tok.vocabulary().bos());
      CHECK(tok.decode(with_bos) == back);
    }
  }
}

TEST_CASE("Tokenizer: special tokens only when asked; BOS / EOS flags; token bytes", "[tokenizer][special]") {
  const auto dir = tokenizer_test::vocab_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  {
    const Tokenizer spm = tokenizer_test::load_tokenizer(*dir, "llama-spm");
    const auto& v = spm.vocabulary();
    CHECK(v.add_bos());
    CHECK(spm.encode("Hello world") == std::vector<TokenId>{1, 15043, 3186});  // BOS by default
    const auto plain = spm.encode("<s>Hi</s>", EncodeOptions{.add_bos = false});
    CHECK(std::find(plain.begin(), plain.end(), 1) == plain.end());
    CHECK(std::find(plain.begin(), plain.end(), 2) == plain.end());
    const auto special = spm.encode("<s>Hi</s>", EncodeOptions{.add_bos = false, .parse_special = true});
    REQUIRE(special.size() >= 3);
    CHECK(special.front() == 1);
    CHECK(special.back() == 2);
    CHECK(spm.encode("x", EncodeOptions{.add_bos = false, .add_eos = true}).back() == 2);
    CHECK(v.token_bytes(15043) == " Hello");
    CHECK(v.token_bytes(3 + 0x41) == "A");  // <0x41>
    CHECK(v.type(3 + 0x41) == inferkit::TokenType::kByte);
    CHECK(v.token_bytes(1).empty());  // control
    CHECK(v.control_text(1) == "<s>");
    CHECK(spm.decode(std::vector<TokenId>{1, 15043, 2}, inferkit::DecodeOptions{.render_special = true}) ==
          "<s> Hello</s>");  // the space after BOS is the prefix of "▁Hello", kept after a rendered token
    CHECK(v.eos_token_ids() == std::vector<TokenId>{2});
  }
  {
    const Tokenizer gpt2 = tokenizer_test::load_tokenizer(*dir, "gpt-2");
    const auto& v = gpt2.vocabulary();
    CHECK(!v.add_bos());
    CHECK(gpt2.pre_tokenizer()->name() == "gpt-2");
    const auto plain = gpt2.encode("<|endoftext|>");
    CHECK(std::find(plain.begin(), plain.end(), 50256) == plain.end());
    CHECK(gpt2.encode("a<|endoftext|>b", EncodeOptions{.parse_special = true}).at(1) == 50256);
    CHECK(v.token_bytes(*v.find("\xC4\xA0world")) == " world");  // "Ġworld"
    CHECK(v.token_bytes(*v.find("\xC4\x8A")) == "\n");           // "Ċ"
    CHECK(v.token_bytes(50256).empty());
  }
  {
    const Tokenizer phi = tokenizer_test::load_tokenizer(*dir, "phi-3");
    const auto& ends = phi.vocabulary().eos_token_ids();
    CHECK(std::find(ends.begin(), ends.end(), 32000) != ends.end());  // <|endoftext|>, the EOS
    CHECK(std::find(ends.begin(), ends.end(), 32007) != ends.end());  // <|end|>, by its text
    // Phi-3's special tokens swallow the whitespace after them (llama.cpp's rule for this model).
    const auto ids = phi.encode("<|user|>\n  Hi", EncodeOptions{.add_bos = false, .parse_special = true});
    CHECK(ids == phi.encode("<|user|>Hi", EncodeOptions{.add_bos = false, .parse_special = true}));
  }
  {
    const Tokenizer ds = tokenizer_test::load_tokenizer(*dir, "deepseek-llm");
    CHECK(ds.vocabulary().add_bos());
    CHECK(ds.encode("x").front() == 100000);
    CHECK(ds.vocabulary().type(100003) == inferkit::TokenType::kUserDefined);
    CHECK(ds.vocabulary().token_bytes(100003) == "\xC3\xB6");  // user-defined pieces are raw text: "ö"
  }
}

TEST_CASE("Tokenizer on vocabularies from plain arrays: hand-derived SentencePiece and BPE cases",
          "[tokenizer][arrays]") {
  using inferkit::TokenType;
  using inferkit::Vocabulary;
  using inferkit::VocabularyConfig;
  {
    // "abc" -> "▁abc": candidate pairs ▁a (-1), ab (-2), bc (-0.5): bc merges first, then ▁a;
    // "▁abc" is no piece, so the result is ▁a, bc. 'z' is no piece: byte fallback <0x7A>.
    std::vector<std::string> pieces = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xE2\x96\x81",
                                       "a",
                                       "b",
                                       "c",
                                       "ab",
                                       "bc",
                                       "\xE2\x96\x81"
                                       "a",
                                       "<0x7A>"};
    std::vector<float> scores = {0, 0, 0, -3, -4, -4, -4, -2, -0.5f, -1, 0};
    std::vector<TokenType> types(pieces.size(), TokenType::kNormal);
    types[0] = TokenType::kUnknown;
    types[1] = types[2] = TokenType::kControl;
    types[10] = TokenType::kByte;
    VocabularyConfig cfg;
    cfg.bos = 1;
    cfg.eos = 2;
    cfg.unk = 0;
    const Tokenizer t(Vocabulary(pieces, scores, types, {}, cfg));
    CHECK(t.encode("abc") == std::vector<TokenId>{1, 9, 8});
    CHECK(t.encode("abz", EncodeOptions{.add_bos = false}) == std::vector<TokenId>{9, 5, 10});
    CHECK(t.encode("q", EncodeOptions{.add_bos = false}) == std::vector<TokenId>{3, 0});  // no byte token: <unk>
    CHECK(t.decode(std::vector<TokenId>{9, 8}) == "abc");
  }
  {
    // Byte-level BPE: merges by rank, "b c" before "a b": "abc" -> a, bc; " ab" with ignore_merges
    // off: Ġ a b -> (rank 2 "a b") Ġ, ab -> (rank 3 "Ġ ab") Ġab.
    std::vector<std::string> pieces = {"a",
                                       "b",
                                       "c",
                                       "\xC4\xA0",
                                       "bc",
                                       "ab",
                                       "\xC4\xA0"
                                       "ab",
                                       "<|end|>"};
    std::vector<TokenType> types(pieces.size(), TokenType::kNormal);
    types[7] = TokenType::kControl;
    std::vector<std::string> merges = {"x y", "b c", "a b", "\xC4\xA0 ab"};
    VocabularyConfig cfg;
    cfg.model = inferkit::TokenizerModel::kBytePair;
    cfg.pre = "gpt-2";
    cfg.add_bos = false;
    cfg.eos = 7;
    const Tokenizer t(Vocabulary(pieces, {}, types, merges, cfg));
    CHECK(t.encode("abc") == std::vector<TokenId>{0, 4});
    CHECK(t.encode(" ab") == std::vector<TokenId>{6});
    CHECK(t.encode("ab ab") == std::vector<TokenId>{5, 6});
    CHECK(t.decode(std::vector<TokenId>{5, 6}) == "ab ab");
    CHECK(t.vocabulary().eos_token_ids() == std::vector<TokenId>{7});
    CHECK(t.vocabulary().merge_count() == 3);  // "x y" names no pieces
  }
}

TEST_CASE("Vocabulary and vocabulary_from_gguf reject malformed input", "[tokenizer][errors]") {
  using Catch::Matchers::Contains;
  using inferkit::TokenType;
  using inferkit::Vocabulary;
  using inferkit::VocabularyConfig;
  VocabularyConfig cfg;
  cfg.add_bos = false;
  CHECK_THROWS_WITH(Vocabulary({"a", "a"}, {}, {}, {}, cfg), Contains("piece 1") && Contains("duplicates piece 0"));
  CHECK_THROWS_WITH(Vocabulary({"a", ""}, {}, {}, {}, cfg), Contains("piece 1"));
  CHECK_THROWS_WITH(Vocabulary({"a"}, {0, 0}, {}, {}, cfg), Contains("scores size"));
  CHECK_THROWS_WITH(Vocabulary({"a"}, {}, {static_cast<TokenType>(9)}, {}, cfg),
                    Contains("token type") && Contains("9"));
  CHECK_THROWS_WITH(Vocabulary({"a"}, {}, {TokenType::kByte}, {}, cfg), Contains("<0xNN>"));
  CHECK_THROWS_WITH(Vocabulary({"a", "b"}, {}, {}, {"ab"}, cfg), Contains("merge 0"));
  VocabularyConfig bad = cfg;
  bad.eos = 5;
  CHECK_THROWS_WITH(Vocabulary({"a"}, {}, {}, {}, bad), Contains("5"));
  VocabularyConfig bos = cfg;
  bos.add_bos = true;
  CHECK_THROWS_WITH(Vocabulary({"a"}, {}, {}, {}, bos), Contains("BOS"));
  VocabularyConfig pre = cfg;
  pre.model = inferkit::TokenizerModel::kBytePair;
  pre.pre = "made-up";
  CHECK_THROWS_WITH(Tokenizer(Vocabulary({"a"}, {}, {}, {}, pre)), Contains("made-up"));
  const Tokenizer t(Vocabulary({"a"}, {}, {}, {}, cfg));
  CHECK_THROWS_AS(t.decode(std::vector<TokenId>{1}), std::out_of_range);
}
