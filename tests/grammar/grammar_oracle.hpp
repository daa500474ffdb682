#pragma once
// The tests' independent reference for grammar masks: an Earley recognizer (Earley 1970, with
// Aycock and Horspool's 2002 fix for nullable rules) over a Grammar's rules and code points, and a
// per-token brute-force mask: a token is allowed when output + its bytes decodes to characters
// the recognizer can extend, the last character possibly incomplete (then some code point whose
// UTF-8 encoding starts with those bytes, found by searching encodings, must be scannable).
// It shares nothing with the matcher but the Grammar's rule lists.

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/grammar/grammar.hpp"
#include "inferkit/grammar/token_bitset.hpp"
#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit::test {

/// Earley recognizer over code points.
class EarleyOracle {
 public:
  using Item = std::pair<std::uint32_t, std::uint32_t>;  // (dot position in elements, origin)
  /// One Earley set, with its items indexed by the rule they wait for (completion looks them up).
  struct Set {
    std::set<Item> items;
    std::map<std::uint32_t, std::vector<Item>> waiting;
    bool empty() const { return items.empty(); }
  };
  using Chart = std::vector<Set>;

  explicit EarleyOracle(const Grammar& g) : g_(g), nullable_(g.rule_count(), false) {
    for (bool changed = true; changed;) {
      changed = false;
      for (std::uint32_t r = 0; r < g.rule_count(); ++r) {
        if (nullable_[r]) continue;
        for (const std::uint32_t a : g.alternatives(r)) {
          std::uint32_t p = a;
          while (g.element(p).kind == Grammar::Element::Kind::kRule && nullable_[g.element(p).index]) ++p;
          if (g.element(p).kind == Grammar::Element::Kind::kEnd) {
            nullable_[r] = changed = true;
            break;
          }
        }
      }
    }
  }

  /// The chart after no input.
  Chart start() const {
    Chart c(1);
    for (const std::uint32_t a : g_.alternatives(g_.root())) insert(c[0], {a, 0});
    close(c, 0);
    return c;
  }
  /// Extends `c` by code point `cp`; false when the chart dies (then `c` has an empty last set).
  bool scan(Chart& c, char32_t cp) const {
    const std::size_t i = c.size() - 1;
    c.emplace_back();
    for (const Item& it : c[i].items) {
      const auto& e = g_.element(it.first);
      if (e.kind == Grammar::Element::Kind::kChars && g_.chars(e.index).contains(cp))
        insert(c[i + 1], {it.first + 1, it.second});
    }
    if (c[i + 1].empty()) return false;
    close(c, i + 1);
    return true;
  }
  /// Whether the input so far is a sentence.
  bool complete(const Chart& c) const {
    for (const Item& it : c.back().items) {
      const auto& e = g_.element(it.first);
      if (e.kind == Grammar::Element::Kind::kEnd && e.index == g_.root() && it.second == 0) return true;
    }
    return false;
  }
  /// Whether some item at the end of `c` scans a code point in [lo, hi].
  bool can_scan_range(const Chart& c, char32_t lo, char32_t hi) const {
    for (const Item& it : c.back().items) {
      const auto& e = g_.element(it.first);
      if (e.kind != Grammar::Element::Kind::kChars) continue;
      for (const auto& r : g_.chars(e.index).ranges())
        if (r.lo <= hi && lo <= r.hi) return true;
    }
    return false;
  }

 private:
  bool insert(Set& s, Item it) const {
    if (!s.items.insert(it).second) return false;
    const auto& e = g_.element(it.first);
    if (e.kind == Grammar::Element::Kind::kRule) s.waiting[e.index].push_back(it);
    return true;
  }

  void close(Chart& c, std::size_t i) const {
    std::vector<Item> work(c[i].items.begin(), c[i].items.end());
    auto add = [&](Item it) {
      if (insert(c[i], it)) work.push_back(it);
    };
    while (!work.empty()) {
      const Item it = work.back();
      work.pop_back();
      const auto& e = g_.element(it.first);
      if (e.kind == Grammar::Element::Kind::kRule) {
        for (const std::uint32_t a : g_.alternatives(e.index)) add({a, static_cast<std::uint32_t>(i)});
        if (nullable_[e.index]) add({it.first + 1, it.second});
      } else if (e.kind == Grammar::Element::Kind::kEnd) {
        const auto w = c[it.second].waiting.find(e.index);
        if (w == c[it.second].waiting.end()) continue;
        const std::vector<Item> from = w->second;  // copied: c[i] may grow while completing
        for (const Item& p : from) add({p.first + 1, p.second});
      }
    }
  }

  const Grammar& g_;
  std::vector<bool> nullable_;
};

/// The code points whose UTF-8 encoding starts with `tail` (1..3 bytes of an unfinished
/// character), found by bisection over encodings (encodings of one length sort like the code
/// points): [lo, hi] with surrogates still inside; false when none.
inline bool utf8_tail_range(std::string_view tail, char32_t& lo, char32_t& hi) {
  const auto b0 = static_cast<unsigned char>(tail[0]);
  const int n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  const char32_t first[5] = {0, 0, 0x80, 0x800, 0x10000}, last[5] = {0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
  auto enc = [](char32_t cp) {
    std::string s;
    utf8_append(s, cp);
    return s;
  };
  // Smallest cp of length n whose encoding's prefix is >= tail; then check it matches.
  auto lower = [&](bool strictly_greater) {
    char32_t a = first[n], b = last[n] + 1;
    while (a < b) {
      const char32_t m = a + (b - a) / 2;
      const std::string p = enc(m).substr(0, tail.size());
      if (strictly_greater ? p > tail : p >= tail)
        b = m;
      else
        a = m + 1;
    }
    return a;
  };
  lo = lower(false);
  if (lo > last[n] || enc(lo).substr(0, tail.size()) != tail) return false;
  hi = lower(true) - 1;
  return true;
}

/// Brute-force mask: each of `token_bytes` (empty = never) checked against `output` by the
/// Earley oracle; `eos` allowed when `output` is complete.
inline TokenBitset oracle_mask(const EarleyOracle& o, std::string_view output,
                               const std::vector<std::string>& token_bytes, const std::vector<TokenId>& eos) {
  TokenBitset mask(token_bytes.size());
  // Chart of the output's complete characters; its unfinished tail is carried to each token.
  EarleyOracle::Chart base = o.start();
  std::size_t pos = 0;
  while (pos < output.size()) {
    const Utf8Char u = utf8_decode(output, pos);
    if (!u.valid) break;
    if (!o.scan(base, u.cp)) return mask;
    pos += u.length;
  }
  const std::string tail(output.substr(pos));
  if (tail.empty() && o.complete(base))
    for (const TokenId e : eos) mask.set(e);
  for (std::size_t t = 0; t < token_bytes.size(); ++t) {
    if (token_bytes[t].empty()) continue;
    const std::string s = tail + token_bytes[t];
    EarleyOracle::Chart& c = base;  // extended for the token, then cut back (earlier sets never change)
    const std::size_t keep = base.size();
    std::size_t p = 0;
    bool ok = true;
    while (ok && p < s.size()) {
      const Utf8Char u = utf8_decode(s, p);
      if (u.valid) {
        ok = o.scan(c, u.cp);
        p += u.length;
        continue;
      }
      // Invalid here: allowed only as the unfinished last character.
      const std::string_view rest = std::string_view(s).substr(p);
      char32_t lo = 0, hi = 0;
      if (rest.size() > 3 || !utf8_tail_range(rest, lo, hi)) {
        ok = false;
        break;
      }
      ok = (lo < 0xD800 && o.can_scan_range(c, lo, std::min<char32_t>(hi, 0xD7FF))) ||
           (hi > 0xDFFF && o.can_scan_range(c, std::max<char32_t>(lo, 0xE000), hi));
      p = s.size();
    }
    c.resize(keep);
    if (ok) mask.set(static_cast<TokenId>(t));
  }
  return mask;
}

}  // namespace inferkit::test
