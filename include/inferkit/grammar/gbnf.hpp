#pragma once
// GBNF (llama.cpp's grammar format, grammars/README.md there) to a Grammar: `name ::= body` rules,
// `|` alternatives, `( )` groups, "literals" and [classes] (ranges, ^ negation) with the escapes
// \x.. \u.... \U........ \t \n \r \\ \" \[ \] \- \^, `.` (any character), the repetitions * + ?
// {m} {m,} {m,n}, # comments. Newlines end a rule except inside parentheses and after `|` or
// `::=`. The start rule is `root`. Every error names the line and column (1-based, in bytes) and
// what was expected.
//
//   const inferkit::Grammar g = inferkit::parse_gbnf(R"(root ::= [a-z]+ ("," [a-z]+)*)");
//
// Repetitions become helper rules as llama.cpp builds them: x* is R ::= x R | (empty),
// x{m,n} is m copies of x then n - m nested optional copies (so a matcher holds one stack per
// count, not one per combination). Counts above kMaxGbnfRepetition are errors.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/grammar.hpp"
#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit {

/// The largest m or n GBNF's {m,n} accepts (bounds the rules a grammar text can generate).
inline constexpr std::uint32_t kMaxGbnfRepetition = 10000;

namespace detail {

/// Recursive-descent GBNF reader; one per parse_gbnf call.
class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  GrammarBuilder run() {
    skip_space(true);
    while (pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    if (builder_.rule_count() == 0) fail("a rule (the grammar is empty)");
    for (const auto& [id, at] : references_)
      if (!builder_.defined(id))
        throw_invalid_argument("GBNF rule '" + builder_.name(id) + "' at " + where(at), "undefined",
                               "is referenced but never defined");
    const std::uint32_t root = builder_.rule("root");
    require(builder_.defined(root), "GBNF rule 'root'", "missing", "must be defined (it is the start rule)");
    return std::move(builder_);
  }

  /// Line and column of byte `at` (1-based).
  std::string where(std::size_t at) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
  }

 private:
  using Sequence = std::vector<GrammarSymbol>;

  [[noreturn]] void fail(std::string_view expected) const { fail_at(pos_, expected); }
  [[noreturn]] void fail_at(std::size_t at, std::string_view expected) const {
    std::string found = at < text_.size() ? "'" + std::string(1, text_[at]) + "'" : "end of text";
    if (at < text_.size() && (static_cast<unsigned char>(text_[at]) < 0x20 || text_[at] == 0x7F))
      found = "byte " + std::to_string(static_cast<unsigned char>(text_[at]));
    throw_invalid_argument("GBNF at " + where(at), found, "expected " + std::string(expected));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(std::size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  // Skips blanks and comments; newlines too when `newlines` (between rules, inside parentheses).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const std::size_t start = pos_;
    while (!at_end() && is_word_char(peek())) ++pos_;
    if (pos_ == start) fail("a rule name (letters, digits, '-', '_')");
    return text_.substr(start, pos_ - start);
  }

  void parse_rule() {
    const std::size_t name_at = pos_;
    const std::string_view name = parse_name();
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") fail("'::=' after the rule name");
    pos_ += 3;
    skip_space(true);
    const std::uint32_t id = builder_.rule(name);
    if (builder_.defined(id)) fail_at(name_at, "a rule not defined before ('" + std::string(name) + "' is)");
    builder_.define(id);
    parse_alternatives(id, false);
    if (!at_end() && peek() != '\n' && peek() != '\r') fail("end of line after the rule");
  }

  // Alternatives of rule `id` up to ')' (nested) or the end of the line.
  void parse_alternatives(std::uint32_t id, bool nested) {
    builder_.add_alternative(id, parse_sequence(nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      builder_.add_alternative(id, parse_sequence(nested));
    }
  }

  Sequence parse_sequence(bool nested) {
    Sequence seq;
    std::size_t last_start = 0;  // where the symbols of the last item begin (a repetition repeats them)
    bool have_item = false;
    while (!at_end()) {
      const char c = peek();
      const std::size_t item_at = pos_;
      if (c == '"') {
        ++pos_;
        last_start = seq.size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') fail("'\"' closing the literal");
          seq.push_back(GrammarSymbol::chars_of(CharClass::single(parse_char())));
        }
        ++pos_;
        have_item = true;
      } else if (c == '[') {
        ++pos_;
        const bool negate = peek() == '^';
        if (negate) ++pos_;
        std::vector<CharClass::Range> ranges;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') fail("']' closing the character class");
          const char32_t lo = parse_char();
          char32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
            ++pos_;
            const std::size_t hi_at = pos_;
            hi = parse_char();
            if (hi < lo) fail_at(hi_at, "a range end not below its start");
          }
          ranges.push_back({lo, hi});
        }
        ++pos_;
        last_start = seq.size();
        seq.push_back(GrammarSymbol::chars_of(CharClass::from_ranges(std::move(ranges), negate)));
        have_item = true;
      } else if (c == '.') {
        ++pos_;
        last_start = seq.size();
        seq.push_back(GrammarSymbol::chars_of(CharClass::range(0, kMaxCodePoint)));
        have_item = true;
      } else if (is_word_char(c)) {
        const std::string_view name = parse_name();
        last_start = seq.size();
        seq.push_back(GrammarSymbol::ref(builder_.rule(name)));
        references_.push_back({builder_.rule(name), item_at});
        have_item = true;
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        const std::uint32_t group = builder_.fresh_rule("group");
        parse_alternatives(group, true);
        if (peek() != ')') fail("')' closing the group");
        ++pos_;
        last_start = seq.size();
        seq.push_back(GrammarSymbol::ref(group));
        have_item = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) fail("a symbol before the repetition operator");
        std::uint32_t lo = 0, hi = kUnbounded;
        ++pos_;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          skip_space(false);
          lo = parse_count();
          skip_space(false);
          hi = lo;
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            hi = peek() == '}' ? kUnbounded : parse_count();
            skip_space(false);
            if (hi < lo) fail_at(item_at, "{m,n} with m <= n");
          }
          if (peek() != '}') fail("'}' closing the repetition");
          ++pos_;
        }
        Sequence item(seq.begin() + static_cast<std::ptrdiff_t>(last_start), seq.end());
        seq.resize(last_start);
        repeat(seq, std::move(item), lo, hi);
        last_start = seq.size();
        have_item = false;  // x** is not GBNF
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  static constexpr std::uint32_t kUnbounded = 0xFFFFFFFFu;

  std::uint32_t parse_count() {
    const std::size_t start = pos_;
    std::uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
      if (v > kMaxGbnfRepetition) fail_at(start, "a count at most " + std::to_string(kMaxGbnfRepetition));
      ++pos_;
    }
    if (pos_ == start) fail("a repetition count");
    return static_cast<std::uint32_t>(v);
  }

  // Appends `item` repeated [lo, hi] times to `seq` (hi = kUnbounded: no upper bound).
  void repeat(Sequence& seq, Sequence item, std::uint32_t lo, std::uint32_t hi) {
    if (item.size() > 1 && (lo > 1 || hi != lo)) {  // repeat one reference, not the whole literal
      const std::uint32_t r = builder_.fresh_rule("seq");
      builder_.add_alternative(r, std::move(item));
      item = {GrammarSymbol::ref(r)};
    }
    for (std::uint32_t i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (hi == kUnbounded) {  // R ::= item R | (empty)
      const std::uint32_t r = builder_.fresh_rule("star");
      Sequence body = item;
      body.push_back(GrammarSymbol::ref(r));
      builder_.add_alternative(r, std::move(body));
      builder_.add_alternative(r, {});
      seq.push_back(GrammarSymbol::ref(r));
      return;
    }
    if (hi == lo) return;
    // O_1 ::= item | (empty); O_k ::= item O_{k-1} | (empty)
    std::uint32_t inner = 0;
    for (std::uint32_t k = 1; k <= hi - lo; ++k) {
      const std::uint32_t r = builder_.fresh_rule("opt");
      Sequence body = item;
      if (k > 1) body.push_back(GrammarSymbol::ref(inner));
      builder_.add_alternative(r, std::move(body));
      builder_.add_alternative(r, {});
      inner = r;
    }
    seq.push_back(GrammarSymbol::ref(inner));
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  char32_t parse_char() {
    const std::size_t at = pos_;
    if (peek() == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      int digits = 0;
      switch (e) {
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        case 't':
          return '\t';
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return static_cast<char32_t>(e);
        default:
          fail_at(at, "an escape \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\- or \\^");
      }
      std::uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = hex_digit_value(peek());
        if (h < 0) fail(std::to_string(digits) + " hex digits in the escape");
        v = v * 16 + static_cast<std::uint32_t>(h);
        ++pos_;
      }
      if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail_at(at, "a code point (not a surrogate, <= U+10FFFF)");
      return v;
    }
    const Utf8Char u = utf8_decode(text_, pos_);
    if (!u.valid) fail("well-formed UTF-8");
    pos_ += u.length;
    return u.cp;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  GrammarBuilder builder_;
  std::vector<std::pair<std::uint32_t, std::size_t>> references_;  // (rule, where) for undefined-rule errors
};

}  // namespace detail

/// `bytes` as a GBNF literal ("...", with \" \\ and \xHH for bytes below 0x20 and 0x7F; other
/// bytes as they are): how the converters (JSON Schema, regex, choice lists) write literal text.
/// Bytes must be well-formed UTF-8 for the result to parse.
inline std::string gbnf_quote(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

/// A GBNF character class ([...], every bound as \UXXXXXXXX) for `c`; "" for the empty class
/// (GBNF cannot write it: callers treat it as "matches nothing").
inline std::string gbnf_class(const CharClass& c) {
  if (c.empty()) return {};
  static constexpr char kHex[] = "0123456789ABCDEF";
  auto esc = [&](char32_t cp, std::string& out) {
    out += "\\U";
    for (int s = 28; s >= 0; s -= 4) out += kHex[(cp >> s) & 15];
  };
  std::string out = "[";
  for (const auto& r : c.ranges()) {
    esc(r.lo, out);
    if (r.hi != r.lo) {
      out += '-';
      esc(r.hi, out);
    }
  }
  out += ']';
  return out;
}

/// Parses GBNF `text` (file comment) into a Grammar whose start rule is `root`. Throws
/// std::invalid_argument naming line and column for a syntax error, the first reference to an
/// undefined rule (with its position), a missing root, and left recursion (naming the rule).
inline Grammar parse_gbnf(std::string_view text) { return Grammar(detail::GbnfParser(text).run(), "root"); }

}  // namespace inferkit
