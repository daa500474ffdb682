// grammar/token_mask.hpp (with token_trie.hpp, grammar_matcher.hpp): masks equal the brute-force
// Earley oracle of grammar_oracle.hpp exactly, token by token, over thousands of states reached by
// random walks: llama.cpp's grammar files (INFERKIT_TEST_GRAMMAR_DIR) and random grammars, with a
// synthetic vocabulary (text pieces that split UTF-8 characters, byte tokens, control tokens)
// the converted schemas of data/schemas.json, and with subsets of the real llama-spm and deepseek-llm vocabularies
// (INFERKIT_TEST_VOCAB_DIR).

#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar_oracle.hpp"
#include "grammar_test_util.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar_matcher.hpp"
#include "inferkit/grammar/json_schema.hpp"
#include "inferkit/grammar/token_mask.hpp"
#include "inferkit/grammar/token_trie.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "schema_judge.hpp"

using inferkit::Grammar;
using inferkit::GrammarMatcher;
using inferkit::TokenBitset;
using inferkit::TokenId;
using inferkit::TokenMasker;
using inferkit::TokenTrie;

namespace {

struct WalkStats {
  std::size_t states = 0, allowed = 0, eos_states = 0, partial_states = 0;
};

// Random walks of `walks` x up to `steps` tokens; at every state the matcher's mask must equal the
// oracle's. Returns what was covered.
WalkStats compare_along_walks(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTrie>& trie,
                              std::size_t walks, std::size_t steps, std::mt19937& rng) {
  const auto masker = std::make_shared<const TokenMasker>(g, trie);
  const inferkit::test::EarleyOracle oracle(*g);
  std::vector<std::string> bytes(trie->vocab_size());
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::string(trie->bytes(static_cast<TokenId>(i)));
  WalkStats st;
  for (std::size_t w = 0; w < walks; ++w) {
    GrammarMatcher m(masker);
    std::string output;
    for (std::size_t s = 0; s < steps; ++s) {
      TokenBitset mask;
      m.fill_mask(mask);
      const TokenBitset want = inferkit::test::oracle_mask(oracle, output, bytes, trie->eos_ids());
      ++st.states;
      st.allowed += want.count();
      st.partial_states += m.state().pending_bytes() != 0;
      if (mask != want) {
        std::string diff;
        for (std::size_t t = 0; t < bytes.size() && diff.size() < 400; ++t)
          if (mask.test(static_cast<TokenId>(t)) != want.test(static_cast<TokenId>(t)))
            diff += " " + std::to_string(t) + "[" + bytes[t] + "]=" + (want.test(static_cast<TokenId>(t)) ? "1" : "0");
        FAIL("mask differs from the oracle after output [" << output << "]:" << diff);
      }
      std::vector<TokenId> choices;
      mask.for_each([&](TokenId t) {
        if (!trie->is_eos(t)) choices.push_back(t);
      });
      if (m.is_complete()) ++st.eos_states;
      if (choices.empty()) break;
      const TokenId t = choices[rng() % choices.size()];
      m.accept(t);
      output += bytes[static_cast<std::size_t>(t)];
    }
  }
  return st;
}

const std::vector<std::pair<const char*, std::vector<std::string>>>& file_samples() {
  static const std::vector<std::pair<const char*, std::vector<std::string>>> k = {
      {"json.gbnf",
       {"{\"a\": [1, -2.5, 3e1, \"x\\u00e9\\n\"],\n \"bé\": {\"c\": null, \"d\": true}}", "{ \"k\":\"v€\" }"}},
      {"json_arr.gbnf", {"[\n1,\n{\"a\": \"b\"},\n[true, false]]"}},
      {"arithmetic.gbnf", {"a+1=(b)\n", "x = 2\ny*z=3\n"}},
      {"chess.gbnf", {"1. e4 e5\n2. Nf3 Nc6\n", "1. O-O O-O-O\n2. exd5 Qxd5+\n"}},
      {"list.gbnf", {"- one\n- two é\n"}},
      {"japanese.gbnf", {"こんにちは 世界", "カタカナ、"}},
      {"english.gbnf", {"Hello, world!", "a b\nc"}},
      {"c.gbnf", {"int main(){return 0;}", "float f(int x){x = x*2;while(x<3){x = x+1;}}/* c */"}},
  };
  return k;
}

}  // namespace

TEST_CASE("Masks equal the brute-force oracle on llama.cpp's grammar files", "[grammar][mask][oracle]") {
  const auto dir = grammar_test::grammar_dir();
  if (!dir) {
    WARN("INFERKIT_TEST_GRAMMAR_DIR is not set: skipped");
    return;
  }
  std::mt19937 rng(1234);
  WalkStats total;
  for (const auto& [file, samples] : file_samples()) {
    INFO(file);
    const auto g = std::make_shared<const Grammar>(inferkit::parse_gbnf(grammar_test::read_file(*dir + "/" + file)));
    std::vector<std::string> texts = grammar_test::pieces_of(samples, 400, rng);
    for (const auto& s : samples) texts.push_back(s.substr(0, 3));
    const auto trie =
        std::make_shared<const TokenTrie>(TokenTrie::from_vocabulary(grammar_test::synthetic_vocabulary(texts)));
    const WalkStats st = compare_along_walks(g, trie, 12, 40, rng);
    total.states += st.states;
    total.eos_states += st.eos_states;
    total.partial_states += st.partial_states;
  }
  CHECK(total.states >= 2000);
  CHECK(total.eos_states > 0);
  CHECK(total.partial_states > 0);  // some walks stopped inside a UTF-8 character
}

TEST_CASE("Masks equal the brute-force oracle on random grammars", "[grammar][mask][oracle]") {
  std::mt19937 rng(99);
  std::size_t grammars = 0, states = 0, too_ambiguous = 0;
  while (grammars < 60) {
    const std::string text = grammar_test::random_gbnf(rng);
    std::shared_ptr<const Grammar> g;
    try {
      g = std::make_shared<const Grammar>(inferkit::parse_gbnf(text));
    } catch (const std::invalid_argument&) {
      continue;  // the generator can write a root deriving nothing
    }
    INFO(text);
    ++grammars;
    const std::vector<std::string> alphabet = {"a", "b", "c", "d",  "x",  "y",  "z",
                                               "é", "ë", "€", "ab", "ba", "aé", "zz"};
    std::vector<std::string> texts = alphabet;
    for (int i = 0; i < 60; ++i) {
      std::string s;
      for (int k = 1 + static_cast<int>(rng() % 4); k-- > 0;) s += alphabet[rng() % alphabet.size()];
      texts.push_back(s);
      texts.push_back(s.substr(0, s.size() - 1));  // may end inside é or €
    }
    const auto trie =
        std::make_shared<const TokenTrie>(TokenTrie::from_vocabulary(grammar_test::synthetic_vocabulary(texts)));
    try {
      states += compare_along_walks(g, trie, 4, 12, rng).states;
    } catch (const std::length_error&) {
      ++too_ambiguous;  // nested nullable repetitions: the stack count limit, a clear error
    }
  }
  CHECK(states >= 1500);
  CHECK(too_ambiguous <= 6);
}

TEST_CASE("Masks equal the brute-force oracle on converted JSON schemas", "[grammar][mask][oracle]") {
  std::mt19937 rng(55);
  std::size_t states = 0;
  const auto cases = grammar_test::schema_cases();
  for (std::size_t c = 0; c < cases.size(); c += 3) {
    INFO(cases[c].name);
    const auto g =
        std::make_shared<const Grammar>(inferkit::parse_gbnf(inferkit::json_schema_to_gbnf(*cases[c].schema)));
    std::vector<std::string> texts = grammar_test::pieces_of(cases[c].valid, 300, rng);
    const auto trie =
        std::make_shared<const TokenTrie>(TokenTrie::from_vocabulary(grammar_test::synthetic_vocabulary(texts)));
    states += compare_along_walks(g, trie, 4, 30, rng).states;
  }
  CHECK(states >= 1000);
}

TEST_CASE("Masks equal the oracle with real vocabularies (subsets)", "[grammar][mask][oracle]") {
  const auto gdir = grammar_test::grammar_dir();
  const auto vdir = grammar_test::vocab_dir();
  if (!gdir || !vdir) {
    WARN("INFERKIT_TEST_GRAMMAR_DIR or INFERKIT_TEST_VOCAB_DIR is not set: skipped");
    return;
  }
  std::mt19937 rng(7);
  for (const char* name : {"llama-spm", "deepseek-llm"}) {
    INFO(name);
    const auto file = inferkit::GgufFile::open(*vdir + "/ggml-vocab-" + std::string(name) + ".gguf");
    const inferkit::Vocabulary v = inferkit::vocabulary_from_gguf(file);
    const TokenTrie full = TokenTrie::from_vocabulary(v);
    std::vector<std::string_view> bytes(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      if (full.bytes(static_cast<TokenId>(i)).size() == 1 || rng() % 64 == 0)
        bytes[i] = full.bytes(static_cast<TokenId>(i));
    const auto trie = std::make_shared<const TokenTrie>(bytes, v.eos_token_ids());
    for (const char* g : {"json.gbnf", "japanese.gbnf", "c.gbnf"}) {
      INFO(g);
      const auto grammar =
          std::make_shared<const Grammar>(inferkit::parse_gbnf(grammar_test::read_file(*gdir + "/" + g)));
      CHECK(compare_along_walks(grammar, trie, 2, 20, rng).states > 10);
    }
  }
}

TEST_CASE("Control, unused and unknown tokens are never allowed; EOS only when complete", "[grammar][mask]") {
  const auto g = std::make_shared<const Grammar>(inferkit::parse_gbnf("root ::= \"ab\" | .+"));
  const inferkit::Vocabulary v = grammar_test::synthetic_vocabulary({"a", "b", "ab"});
  const auto trie = std::make_shared<const TokenTrie>(TokenTrie::from_vocabulary(v));
  GrammarMatcher m(std::make_shared<const TokenMasker>(g, trie));
  TokenBitset mask;
  m.fill_mask(mask);
  CHECK_FALSE(mask.test(0));  // <unk>
  CHECK_FALSE(mask.test(1));  // <s>
  CHECK_FALSE(mask.test(2));  // </s>: nothing is complete yet
  CHECK(mask.test(*v.find("ab")));
  m.accept(*v.find("a"));
  m.fill_mask(mask);
  CHECK(mask.test(2));
  CHECK_FALSE(mask.test(0));
  CHECK_FALSE(mask.test(1));
}

namespace {

// One walk from `state` both ways (taking absorbed subtrees whole and node by node) against the
// oracle's mask after `output`; returns the subtrees taken whole.
std::size_t check_walk(const Grammar& g, const inferkit::ByteMatcher& state, const std::string& output,
                       const TokenTrie& trie, const std::vector<std::string>& bytes) {
  inferkit::TrieWalkResult fast{TokenBitset(trie.vocab_size()), {}}, plain{TokenBitset(trie.vocab_size()), {}};
  const inferkit::TrieWalkStats fs = inferkit::walk_token_trie(trie, state, fast, true);
  const inferkit::TrieWalkStats ps = inferkit::walk_token_trie(trie, state, plain, false);
  const inferkit::test::EarleyOracle oracle(g);
  TokenBitset want = inferkit::test::oracle_mask(oracle, output, bytes, {});
  INFO("after [" << output << "]: " << fs.subtrees << " subtrees taken, nodes " << fs.nodes << " vs " << ps.nodes);
  CHECK(fast.accepted == want);
  CHECK(plain.accepted == want);
  CHECK(fast.dependent.empty());
  CHECK(ps.subtrees == 0);
  CHECK(fs.nodes <= ps.nodes);
  return fs.subtrees;
}

}  // namespace

TEST_CASE("Walks that take whole subtrees equal the oracle (strings of every script)", "[grammar][mask][oracle]") {
  // A string grammar, a class that takes no non-ASCII character beside one that takes all, and
  // a bounded class (no loop: nothing is absorbed). Vocabulary: pieces of mixed-script text (so
  // tokens split characters) plus every prefix of a few long words (deep subtrees).
  const std::vector<std::string> samples = {"hello world \"quoted\" and \\ escapes",
                                            "日本語のテキストと English mixed 😀 emoji", "ελληνικά και русский текст",
                                            "naïve café résumé", "identifier_name_42 other-name"};
  std::mt19937 rng(99);
  std::vector<std::string> texts = grammar_test::pieces_of(samples, 400, rng);
  for (const std::string w : {"abcdefghij", "日本語のテキスト", "résumé_café", "xyz\"tail", "ab\\cd"})
    for (std::size_t k = 1; k <= w.size(); ++k) texts.push_back(w.substr(0, k));
  const inferkit::Vocabulary v = grammar_test::synthetic_vocabulary(texts);
  const TokenTrie trie = TokenTrie::from_vocabulary(v);
  std::vector<std::string> bytes(trie.vocab_size());
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::string(trie.bytes(static_cast<TokenId>(i)));
  std::size_t taken = 0;
  for (const char* src : {R"(root ::= "\"" [^"\\]* "\"" " "?)", R"(root ::= ([a-z_] | [^\x00-\x7F])+ ("-" [0-9]+)?)",
                          R"(root ::= "x" [^"]{1,3} "y")"}) {
    INFO(src);
    const Grammar g = inferkit::parse_gbnf(src);
    for (const char* out : {"", "\"", "\"ab", "\"日本", "\"caf\xC3\xA9 ", "a", "ab\xC3\xA9", "x", "xa"}) {
      inferkit::ByteMatcher m(g);
      if (!m.accept_bytes(out)) continue;
      taken += check_walk(g, m, out, trie, bytes);
    }
  }
  CHECK(taken > 20);  // the walks did take subtrees whole
  // deepseek-llm, one token in 8: inside json.gbnf's strings.
  const auto gdir = grammar_test::grammar_dir();
  const auto vdir = grammar_test::vocab_dir();
  if (!gdir || !vdir) {
    WARN("INFERKIT_TEST_GRAMMAR_DIR or INFERKIT_TEST_VOCAB_DIR is not set: real vocabulary skipped");
    return;
  }
  const auto file = inferkit::GgufFile::open(*vdir + "/ggml-vocab-deepseek-llm.gguf");
  const inferkit::Vocabulary dv = inferkit::vocabulary_from_gguf(file);
  const TokenTrie full = TokenTrie::from_vocabulary(dv);
  std::vector<std::string_view> sub(dv.size());
  for (std::size_t i = 0; i < dv.size(); ++i)
    if (rng() % 8 == 0) sub[i] = full.bytes(static_cast<TokenId>(i));
  const TokenTrie st(sub, {});
  std::vector<std::string> sb(st.vocab_size());
  for (std::size_t i = 0; i < sb.size(); ++i) sb[i] = std::string(st.bytes(static_cast<TokenId>(i)));
  const Grammar json = inferkit::parse_gbnf(grammar_test::read_file(*gdir + "/json.gbnf"));
  std::size_t real = 0;
  for (const char* out : {"{\"", "{\"key", "{\"a\": \"text \xE4\xB8\xAD", "{\"a\": [\"x\", \"", "{\"a\": 12"}) {
    inferkit::ByteMatcher m(json);
    REQUIRE(m.accept_bytes(out));
    real += check_walk(json, m, out, st, sb);
  }
  CHECK(real > 100);
}

TEST_CASE("ascii_representatives: bytes share a representative exactly when every class treats them alike",
          "[grammar][mask]") {
  const auto gdir = grammar_test::grammar_dir();
  std::vector<std::string> sources = {R"(root ::= "\"" [^"\\]* "\"" | [0-9a-fA-F]+ | "\\" ["\\/bfnrt])",
                                      "root ::= [a-z]{2,4} [^\\x00-\\x1F] .", "root ::= \"x\""};
  if (gdir)
    for (const char* f : {"json.gbnf", "c.gbnf", "arithmetic.gbnf", "chess.gbnf"})
      sources.push_back(grammar_test::read_file(*gdir + "/" + f));
  for (const std::string& src : sources) {
    const Grammar g = inferkit::parse_gbnf(src);
    const std::array<std::uint8_t, 128> rep = inferkit::ascii_representatives(g);
    // The definition, byte by byte: the same membership in every class, the lowest such byte.
    const auto alike = [&](int a, int b) {
      for (std::size_t i = 0; i < g.class_count(); ++i) {
        const inferkit::CharClass& c = g.chars(static_cast<std::uint32_t>(i));
        if (c.contains(static_cast<char32_t>(a)) != c.contains(static_cast<char32_t>(b))) return false;
      }
      return true;
    };
    std::size_t distinct = 0;
    for (int b = 0; b < 128; ++b) {
      int want = b;
      for (int a = 0; a < b; ++a)
        if (alike(a, b)) {
          want = a;
          break;
        }
      INFO("byte " << b);
      CHECK(static_cast<int>(rep[static_cast<std::size_t>(b)]) == want);
      distinct += want == b;
    }
    CHECK(distinct >= 2);
  }
}
