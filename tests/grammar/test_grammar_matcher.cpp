// grammar/grammar_matcher.hpp and byte_matcher.hpp: accept rejects tokens outside the mask naming
// them and leaves the state unchanged; rollback(n) returns exactly to the state n tokens back
// (masks compared with a matcher that never saw the rolled-back tokens); copies are independent;
// forced bytes equal the only continuation (checked against every byte); partial UTF-8 follows
// Unicode's well-formed sequences (Table 3-7, enumerated independently here).

#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar_test_util.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar_matcher.hpp"
#include "inferkit/tokenizer/unicode.hpp"

using inferkit::ByteMatcher;
using inferkit::Grammar;
using inferkit::GrammarMatcher;
using inferkit::TokenBitset;
using inferkit::TokenId;
using inferkit::TokenMasker;
using inferkit::TokenTrie;

namespace {

struct Fixture {
  std::shared_ptr<const Grammar> grammar;
  inferkit::Vocabulary vocab;
  std::shared_ptr<const TokenMasker> masker;
  Fixture(const std::string& gbnf, const std::vector<std::string>& pieces)
      : grammar(std::make_shared<const Grammar>(inferkit::parse_gbnf(gbnf))),
        vocab(grammar_test::synthetic_vocabulary(pieces)),
        masker(std::make_shared<const TokenMasker>(
            grammar, std::make_shared<const TokenTrie>(TokenTrie::from_vocabulary(vocab)))) {}
  TokenId id(const std::string& piece) const { return *vocab.find(piece); }
};

TokenBitset mask_of(const GrammarMatcher& m) {
  TokenBitset b;
  m.fill_mask(b);
  return b;
}

}  // namespace

TEST_CASE("GrammarMatcher: accept, reject naming the token, EOS and termination", "[grammar][matcher]") {
  const Fixture f(R"(root ::= "{" [0-9]+ "}")", {"{", "}", "1", "12", "{1", "x", "2}"});
  GrammarMatcher m(f.masker);
  CHECK_THROWS_WITH(m.accept(f.id("x")),
                    Catch::Contains("token") && Catch::Contains("\"x\"") && Catch::Contains("not allowed"));
  CHECK(m.accepted_tokens() == 0);
  CHECK_THROWS_AS(m.accept(2), std::invalid_argument);  // EOS before the end
  CHECK_THROWS_AS(m.accept(99999), std::out_of_range);
  m.accept(f.id("{1"));
  CHECK_FALSE(m.is_complete());
  m.accept(f.id("2}"));
  CHECK(m.is_complete());
  CHECK(mask_of(m).count() == 1);  // only EOS
  m.accept(2);
  CHECK(m.is_terminated());
  CHECK(mask_of(m).count() == 0);
  CHECK_FALSE(m.try_accept(f.id("1")));
  m.rollback(1);
  CHECK_FALSE(m.is_terminated());
  CHECK(m.allows(2));
}

TEST_CASE("GrammarMatcher: rollback returns to the earlier state; copies are independent", "[grammar][matcher]") {
  std::vector<std::string> pieces = {"{\"", "\":", " [", "1", ", ", "]}", "\"a", "b\"", "true", "é", "\xC3", "\xA9"};
  const std::string json = grammar_test::grammar_dir()
                               ? grammar_test::read_file(*grammar_test::grammar_dir() + "/json.gbnf")
                               : std::string(R"(root ::= "{" [^}]* "}")");
  const Fixture f(json, pieces);
  std::mt19937 rng(5);
  for (int walk = 0; walk < 40; ++walk) {
    GrammarMatcher m(f.masker);
    std::vector<TokenId> taken;
    for (int step = 0; step < 30; ++step) {
      const TokenBitset mask = mask_of(m);
      std::vector<TokenId> ids;
      mask.for_each([&](TokenId t) {
        if (t != 2) ids.push_back(t);
      });
      if (ids.empty()) break;
      const TokenId t = ids[rng() % ids.size()];
      m.accept(t);
      taken.push_back(t);
    }
    // Roll back k tokens and compare with a matcher that only saw the first taken.size() - k.
    const std::size_t k = rng() % (taken.size() + 1);
    GrammarMatcher copy = m;
    const TokenBitset before = mask_of(m);
    m.rollback(k);
    GrammarMatcher fresh(f.masker);
    for (std::size_t i = 0; i + k < taken.size(); ++i) fresh.accept(taken[i]);
    CHECK(mask_of(m) == mask_of(fresh));
    CHECK(m.state() == fresh.state());
    CHECK(m.accepted_tokens() == taken.size() - k);
    // The copy still has every token.
    CHECK(copy.accepted_tokens() == taken.size());
    CHECK(mask_of(copy) == before);
  }
  GrammarMatcher m(f.masker, 2);
  m.accept(f.id("{\""));
  m.accept(f.id("é"));
  m.accept(f.id("b\""));
  CHECK(m.rollback_window() == 2);
  CHECK_THROWS_WITH(m.rollback(3), Catch::Contains("rollback count = 3"));
}

TEST_CASE("ByteMatcher: forced bytes are the only continuation", "[grammar][matcher]") {
  const Grammar g = inferkit::parse_gbnf(R"(root ::= "{\"name\": \"" [a-z]+ "\", \"kind\": " ("1" | "2") "}")");
  ByteMatcher m(g);
  CHECK(m.forced_bytes() == "{\"name\": \"");
  CHECK(m.accept_bytes("{\"name\": \"bob"));
  CHECK(m.forced_bytes().empty());  // more letters or the quote
  CHECK(m.accept_bytes("\""));
  CHECK(m.forced_bytes() == ", \"kind\": ");
  CHECK(m.forced_bytes(3) == ", \"");
  // Independent check: at every prefix, forced bytes are forced: exactly one byte is accepted.
  ByteMatcher walk(g);
  const std::string forced = walk.forced_bytes();
  for (const char c : forced) {
    int accepted = 0;
    for (int b = 0; b < 256; ++b) accepted += walk.can_accept_byte(static_cast<std::uint8_t>(b));
    CHECK(accepted == 1);
    CHECK(walk.accept_byte(static_cast<std::uint8_t>(c)));
  }
  const Grammar multibyte = inferkit::parse_gbnf(R"(root ::= "é€" [a-b])");
  CHECK(ByteMatcher(multibyte).forced_bytes() == "é€");
  const Grammar done = inferkit::parse_gbnf(R"(root ::= "a" "b"?)");
  ByteMatcher d(done);
  CHECK(d.accept_byte('a'));
  CHECK(d.forced_bytes().empty());  // "b" or the end
}

TEST_CASE("ByteMatcher: partial UTF-8 is accepted exactly when a well-formed character completes it",
          "[grammar][matcher][utf8]") {
  // Every 1- and 2-byte prefix against classes that hold one code point each, compared with the
  // set of prefixes of that code point's encoding (built here with utf8_append).
  const char32_t probes[] = {0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF, 0x1F600};
  for (const char32_t cp : probes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "root ::= [\\U%08X]", static_cast<unsigned>(cp));
    const Grammar g = inferkit::parse_gbnf(buf);
    std::string enc;
    inferkit::utf8_append(enc, cp);
    INFO("U+" << std::hex << static_cast<unsigned>(cp));
    for (int b0 = 0; b0 < 256; ++b0) {
      ByteMatcher m(g);
      const bool first = m.accept_byte(static_cast<std::uint8_t>(b0));
      CHECK(first == (static_cast<unsigned char>(enc[0]) == b0));
      if (!first || enc.size() < 2) continue;
      for (int b1 = 0; b1 < 256; ++b1) {
        ByteMatcher m2 = m;
        CHECK(m2.accept_byte(static_cast<std::uint8_t>(b1)) == (static_cast<unsigned char>(enc[1]) == b1));
      }
    }
    ByteMatcher whole(g);
    CHECK(whole.accept_bytes(enc));
    CHECK(whole.is_complete());
  }
  // A surrogate's encoding (ED A0 80) and overlong forms (C0 80, E0 80 80) are never accepted.
  const Grammar any = inferkit::parse_gbnf("root ::= .*");
  for (const char* bad : {"\xED\xA0", "\xC0", "\xC1", "\xE0\x80", "\xF0\x80", "\xF4\x90", "\xF5", "\x80"}) {
    ByteMatcher m(any);
    CHECK_FALSE(m.accept_bytes(bad));
    CHECK(m.is_complete());  // unchanged
  }
  ByteMatcher m(any);
  CHECK(m.accept_bytes("\xE2\x82"));
  CHECK_FALSE(m.is_complete());  // inside €
  CHECK(m.pending_bytes() == 2);
  CHECK(m.accept_byte(0xAC));
  CHECK(m.is_complete());
}
