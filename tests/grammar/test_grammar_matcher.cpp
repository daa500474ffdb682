// grammar/grammar_matcher.hpp and byte_matcher.hpp: accept rejects tokens outside the mask naming
// them and leaves the state unchanged; rollback(n) returns exactly to the state n tokens back
// (masks compared with a matcher that never saw the rolled-back tokens); copies are independent;
// forced bytes equal the only continuation (checked against every byte); partial UTF-8 follows
// Unicode's well-formed sequences (Table 3-7, enumerated independently here).

#include <catch2/catch.hpp>

#include <algorithm>
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

namespace {

// Table 3-7 of Unicode 15, written out independently of the matcher: decodes `s` into code points,
// allowing the last character to be cut short (`open` receives its bytes). False when ill-formed.
bool decode_utf8_prefix(const std::string& s, std::vector<char32_t>& cps, std::string& open) {
  cps.clear();
  open.clear();
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned lo2 = 0x80, hi2 = 0xBF;
    if (b < 0x80)
      n = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      n = 2;
    else if (b == 0xE0)
      n = 3, lo2 = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
      n = 3;
    else if (b == 0xED)
      n = 3, hi2 = 0x9F;
    else if (b == 0xF0)
      n = 4, lo2 = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      n = 4;
    else if (b == 0xF4)
      n = 4, hi2 = 0x8F;
    else
      return false;
    char32_t cp = n == 1 ? b : b & (0x7F >> n);
    std::size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo2 || c > hi2) : (c < 0x80 || c > 0xBF)) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (k < n) {
      open = s.substr(i);
      return true;
    }
    cps.push_back(cp);
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("ByteMatcher: open characters merge only where every character of their length is taken",
          "[grammar][matcher][utf8]") {
  // Inside [^"] (every character but the quote, as in a JSON string) which multi-byte character
  // is open changes nothing, so the matcher keeps one state per length; a class that takes only
  // some characters must keep them apart. Random byte strings (leads, continuation bytes, ASCII)
  // are compared with the language written out here: prefixes of [^"]* "\"" and of
  // ([a] | [é] | [一] | [😀])* "!".
  const Grammar str = inferkit::parse_gbnf(R"(root ::= [^"]* "\"")");
  const Grammar few = inferkit::parse_gbnf("root ::= [a\\u00E9\\u4E00\\U0001F600]* \"!\"");
  const std::vector<char32_t> few_set = {U'a', 0xE9, 0x4E00, 0x1F600};
  std::vector<std::string> few_enc;
  for (const char32_t cp : few_set) inferkit::utf8_append(few_enc.emplace_back(), cp);
  const unsigned char pool[] = {'a',  'b',  '"',  '!',  0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xA9, 0xB8, 0xBF, 0xC2, 0xC3,
                                0xDF, 0xE0, 0xE1, 0xE4, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0x9F, 0x98, 0x80, 0xC0, 0xF5};
  std::mt19937 rng(30);
  std::size_t accepted_str = 0, accepted_few = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s;
    const std::size_t len = 1 + rng() % 7;
    for (std::size_t i = 0; i < len; ++i) s += static_cast<char>(pool[rng() % sizeof pool]);
    std::vector<char32_t> cps;
    std::string open;
    const bool wf = decode_utf8_prefix(s, cps, open);
    // [^"]* "\"": no quote but possibly the last character, which then ends the output.
    bool want_str = wf;
    for (std::size_t i = 0; want_str && i < cps.size(); ++i)
      if (cps[i] == U'"' && (i + 1 != cps.size() || !open.empty())) want_str = false;
    // (few)* "!": complete characters from the set, "!" only last, an open one a prefix of one.
    bool want_few = wf;
    for (std::size_t i = 0; want_few && i < cps.size(); ++i) {
      const bool last = i + 1 == cps.size() && open.empty();
      const bool in = std::find(few_set.begin(), few_set.end(), cps[i]) != few_set.end();
      want_few = in || (cps[i] == U'!' && last);
    }
    if (want_few && !open.empty())
      want_few = std::any_of(few_enc.begin(), few_enc.end(), [&](const std::string& e) { return e.starts_with(open); });
    std::string shown;
    for (const char c : s) shown += std::to_string(static_cast<unsigned char>(c)) + " ";
    INFO("bytes " << shown);
    ByteMatcher a(str), b(few);
    CHECK(a.accept_bytes(s) == want_str);
    CHECK(b.accept_bytes(s) == want_few);
    accepted_str += want_str;
    accepted_few += want_few;
  }
  CHECK(accepted_str > 2000);  // the pool reaches deep into both languages
  CHECK(accepted_few > 200);
  // The merge itself: two different open 3-byte characters inside [^"] are one state, and both
  // complete to the same state; in the narrow class they stay apart.
  ByteMatcher x(str), y(str);
  REQUIRE(x.accept_bytes("\xE4\xB8"));  // 一 (E4 B8 80) open
  REQUIRE(y.accept_bytes("\xE6\x97"));  // 日 (E6 97 A5) open
  CHECK(x == y);
  REQUIRE(x.accept_bytes("\x80"));
  REQUIRE(y.accept_bytes("\xA5"));
  CHECK(x == y);
  ByteMatcher e4(str), e6(str), e0(str);
  REQUIRE(e4.accept_bytes("\xE4"));
  REQUIRE(e6.accept_bytes("\xE6"));
  REQUIRE(e0.accept_bytes("\xE0"));  // E0 constrains the next byte (A0-BF): kept exact
  CHECK(e4 == e6);
  CHECK_FALSE(e0 == e4);
  CHECK_FALSE(e0.accept_byte(0x80));
  CHECK(e4.accept_byte(0x80));
  ByteMatcher n1(few), n2(few);
  REQUIRE(n1.accept_bytes("\xE4"));
  REQUIRE(n2.accept_bytes("\xE6") == false);  // no character of the set starts E6
  REQUIRE(n2.accept_bytes("\xC3"));
  CHECK_FALSE(n1 == n2);
}
