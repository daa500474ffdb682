#pragma once
// Regex to grammar: the JSON Schema `pattern` subset (ECMA-262 without backreferences or
// lookaround) written as a GBNF expression, for a grammar of its own (regex_grammar: the whole
// output must match) or inside a JSON string (the schema converter: characters JSON must escape,
// " \ and U+0000..U+001F, are written escaped there). Supported: literals, escapes \d \D \w \W \s
// \S \t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation, [...] classes with ranges and ^, `.`
// (any character but \n), groups ( ) and (?: ), |, the quantifiers * + ? {m} {m,} {m,n} (lazy
// forms match the same language), ^ at the start and $ at the end. Anything else is an error
// naming the byte offset.
//
//   const inferkit::Grammar g = inferkit::regex_grammar("[A-Z]{3}-[0-9]{2,4}");
//   // JSON Schema: "pattern" matches anywhere unless anchored; see json_schema.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/grammar.hpp"
#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit {

/// How a regex's characters are written in the output.
enum class RegexText : std::uint8_t {
  kRaw,         ///< as themselves
  kJsonString,  ///< inside a JSON string: " \ and control characters as JSON escapes
};

/// A converted pattern: its GBNF expression and whether it was anchored at each end.
struct RegexExpression {
  std::string gbnf;     ///< a GBNF expression (no rule definitions)
  bool anchored_start;  ///< the pattern began with ^
  bool anchored_end;    ///< the pattern ended with $
};

/// The GBNF expression of one character class written as `text` (file comment); "" when the class
/// is empty.
inline std::string gbnf_chars(const CharClass& c, RegexText text) {
  if (text == RegexText::kRaw) return gbnf_class(c);
  std::vector<std::string> alts;
  const CharClass plain = CharClass::from_ranges(
      [&] {
        std::vector<CharClass::Range> r;
        for (const auto& x : c.ranges()) r.push_back(x);
        return r;
      }(),
      false);
  // Remove " \ and controls from the plain class; add their escaped forms.
  std::vector<CharClass::Range> kept;
  for (const auto& r : plain.ranges()) {
    auto add = [&](char32_t lo, char32_t hi) {
      if (lo <= hi) kept.push_back({lo, hi});
    };
    char32_t lo = std::max<char32_t>(r.lo, 0x20), hi = r.hi;
    if (lo > hi) continue;
    for (const char32_t cut : {char32_t{'"'}, char32_t{'\\'}}) {
      if (cut >= lo && cut <= hi) {
        add(lo, cut - 1);
        lo = cut + 1;
      }
    }
    add(lo, hi);
  }
  if (!kept.empty()) alts.push_back(gbnf_class(CharClass::from_ranges(kept)));
  if (c.contains('"')) alts.push_back(gbnf_quote("\\\""));
  if (c.contains('\\')) alts.push_back(gbnf_quote("\\\\"));
  static constexpr char kHex[] = "0123456789abcdef";
  for (char32_t k = 0; k < 0x20; ++k) {
    if (!c.contains(k)) continue;
    std::string up = "[";
    up += kHex[k & 15];
    if (kHex[k & 15] >= 'a') up += static_cast<char>(kHex[k & 15] - 'a' + 'A');
    up += ']';
    alts.push_back(gbnf_quote(std::string("\\u00") + kHex[k >> 4]) + " " + up);
    const char* short_form = k == '\n'   ? "\\n"
                             : k == '\t' ? "\\t"
                             : k == '\r' ? "\\r"
                             : k == '\b' ? "\\b"
                             : k == '\f' ? "\\f"
                                         : nullptr;
    if (short_form) alts.push_back(gbnf_quote(short_form));
  }
  if (alts.empty()) return {};
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

namespace detail {

/// Recursive-descent reader of the pattern subset, writing GBNF as it goes.
class RegexConverter {
 public:
  RegexConverter(std::string_view p, RegexText text) : p_(p), text_(text) {}

  RegexExpression run() {
    RegexExpression r{{}, false, false};
    if (!p_.empty() && p_[0] == '^') {
      r.anchored_start = true;
      ++i_;
    }
    std::size_t end = p_.size();
    if (end > i_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) {
      r.anchored_end = true;
      --end;
    }
    p_ = p_.substr(0, end);
    r.gbnf = alternation(0);
    if (i_ != p_.size()) fail("end of pattern (unbalanced ')')");
    if (r.gbnf.empty()) r.gbnf = "\"\"";
    return r;
  }

 private:
  [[noreturn]] void fail(std::string_view expected) const {
    const std::string found = i_ < p_.size() ? "'" + std::string(1, p_[i_]) + "'" : "end of pattern";
    throw_invalid_argument("regex at byte " + std::to_string(i_), found, "expected " + std::string(expected));
  }
  bool more() const { return i_ < p_.size(); }

  std::string alternation(int depth) {
    if (depth > 64) fail("groups nested at most 64 deep");
    std::vector<std::string> alts{concat(depth)};
    while (more() && p_[i_] == '|') {
      ++i_;
      alts.push_back(concat(depth));
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (std::size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + (alts[k].empty() ? "\"\"" : alts[k]);
    return out + ")";
  }

  std::string concat(int depth) {
    std::string out;
    while (more() && p_[i_] != '|' && p_[i_] != ')') {
      std::string a = atom(depth);
      a += quantifier();
      out += (out.empty() ? "" : " ") + a;
    }
    return out;
  }

  std::string quantifier() {
    if (!more()) return {};
    const char c = p_[i_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      q = std::string(1, c);
    } else if (c == '{') {
      const std::size_t save = i_;
      ++i_;
      auto number = [&]() -> long {
        long v = -1;
        while (more() && p_[i_] >= '0' && p_[i_] <= '9') {
          v = (v < 0 ? 0 : v) * 10 + (p_[i_] - '0');
          if (v > static_cast<long>(kMaxGbnfRepetition)) fail("a count at most " + std::to_string(kMaxGbnfRepetition));
          ++i_;
        }
        return v;
      };
      const long lo = number();
      if (lo < 0) {
        i_ = save;
        fail("a count after '{'");
      }
      long hi = lo;
      if (more() && p_[i_] == ',') {
        ++i_;
        hi = number();
      }
      if (!more() || p_[i_] != '}') fail("'}'");
      ++i_;
      if (hi >= 0 && hi < lo) fail("{m,n} with m <= n");
      q = "{" + std::to_string(lo) + (hi == lo ? "" : "," + (hi < 0 ? std::string() : std::to_string(hi))) + "}";
    } else {
      return {};
    }
    if (more() && p_[i_] == '?') ++i_;  // lazy: same language
    if (more() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '{')) fail("one quantifier per atom");
    return q;
  }

  std::string chars(const CharClass& c) {
    const std::string s = gbnf_chars(c, text_);
    if (s.empty()) fail("a class matching some character");
    return s;
  }

  static CharClass digit() { return CharClass::range('0', '9'); }
  static CharClass word() { return CharClass::from_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
  static CharClass space() { return CharClass::from_ranges({{'\t', '\r'}, {' ', ' '}}); }
  static CharClass negated(const CharClass& c) {
    std::vector<CharClass::Range> r(c.ranges().begin(), c.ranges().end());
    return CharClass::from_ranges(r, true);
  }

  unsigned hex(int digits) {
    unsigned v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (!more()) fail("hex digits");
      const char h = p_[i_];
      const int d = hex_digit_value(h);
      if (d < 0) fail("a hex digit");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }

  // After a backslash: a class escape (returned in `cls`) or one code point.
  CharClass escape() {
    if (!more()) fail("an escaped character");
    const char e = p_[i_++];
    switch (e) {
      case 'd':
        return digit();
      case 'D':
        return negated(digit());
      case 'w':
        return word();
      case 'W':
        return negated(word());
      case 's':
        return space();
      case 'S':
        return negated(space());
      case 't':
        return CharClass::single('\t');
      case 'n':
        return CharClass::single('\n');
      case 'r':
        return CharClass::single('\r');
      case 'f':
        return CharClass::single('\f');
      case 'v':
        return CharClass::single('\v');
      case '0':
        return CharClass::single(0);
      case 'x':
        return CharClass::single(hex(2));
      case 'u': {
        const unsigned v = hex(4);
        if (v >= 0xD800 && v <= 0xDFFF) fail("a \\u escape that is not a surrogate");
        return CharClass::single(v);
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          --i_;
          fail("a supported escape (no backreferences, \\b, \\p or other letter escapes)");
        }
        return CharClass::single(static_cast<unsigned char>(e));
    }
  }

  char32_t literal_char() {
    const Utf8Char u = utf8_decode(p_, i_);
    if (!u.valid) fail("well-formed UTF-8");
    i_ += u.length;
    return u.cp;
  }

  std::string atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.substr(i_, 2) == "?:") {
        i_ += 2;
      } else if (more() && p_[i_] == '?') {
        fail("a group without lookaround or names ((?: ) or ( ))");
      }
      std::string inner = alternation(depth + 1);
      if (!more() || p_[i_] != ')') fail("')'");
      ++i_;
      return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
    }
    if (c == '[') {
      ++i_;
      const bool negate = more() && p_[i_] == '^';
      if (negate) ++i_;
      std::vector<CharClass::Range> ranges;
      bool first = true;
      while (true) {
        if (!more()) fail("']' closing the class");
        if (p_[i_] == ']' && !first) break;
        first = false;
        CharClass lo_class;
        char32_t lo;
        if (p_[i_] == '\\') {
          ++i_;
          lo_class = escape();
          if (lo_class.ranges().size() != 1 || lo_class.ranges()[0].lo != lo_class.ranges()[0].hi) {
            for (const auto& r : lo_class.ranges()) ranges.push_back(r);
            continue;
          }
          lo = lo_class.ranges()[0].lo;
        } else {
          lo = literal_char();
        }
        char32_t hi = lo;
        if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
          ++i_;
          if (p_[i_] == '\\') {
            ++i_;
            const CharClass h = escape();
            if (h.ranges().size() != 1 || h.ranges()[0].lo != h.ranges()[0].hi)
              fail("a single character ending the range");
            hi = h.ranges()[0].lo;
          } else {
            hi = literal_char();
          }
          if (hi < lo) fail("a range end not below its start");
        }
        ranges.push_back({lo, hi});
      }
      ++i_;
      return chars(CharClass::from_ranges(std::move(ranges), negate));
    }
    if (c == '.') {
      ++i_;
      return chars(negated(CharClass::single('\n')));
    }
    if (c == '\\') {
      ++i_;
      return chars(escape());
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("an atom before the quantifier");
    if (c == '^' || c == '$') fail("anchors only at the start and end of the pattern");
    return chars(CharClass::single(literal_char()));
  }

  std::string_view p_;
  RegexText text_;
  std::size_t i_ = 0;
};

}  // namespace detail

/// Converts `pattern` (file comment) to a GBNF expression with its anchors; std::invalid_argument
/// naming the byte offset for anything outside the subset.
inline RegexExpression regex_to_gbnf(std::string_view pattern, RegexText text = RegexText::kRaw) {
  return detail::RegexConverter(pattern, text).run();
}

/// A grammar whose sentences are the strings `pattern` matches whole (^ and $ optional).
inline Grammar regex_grammar(std::string_view pattern) {
  return parse_gbnf("root ::= " + regex_to_gbnf(pattern).gbnf + "\n");
}

/// A grammar whose sentences are exactly `choices` (each non-empty or not; duplicates fine;
/// at least one: std::invalid_argument). For enums, tool names, labels.
inline Grammar choice_grammar(const std::vector<std::string>& choices) {
  require(!choices.empty(), "choice list size", 0, "must be at least 1");
  std::string g = "root ::= ";
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const Utf8Char bad = [&] {
      for (std::size_t p = 0; p < choices[i].size();) {
        const Utf8Char u = utf8_decode(choices[i], p);
        if (!u.valid) return u;
        p += u.length;
      }
      return Utf8Char{0, 1, true};
    }();
    require(bad.valid, "choice " + std::to_string(i), choices[i], "must be well-formed UTF-8");
    g += (i ? " | " : "") + gbnf_quote(choices[i]);
  }
  return parse_gbnf(g + "\n");
}

}  // namespace inferkit
