#pragma once
// SplitRegex: the regular expressions pre-tokenizers split text with (GPT-2's, Llama 3's, Qwen2's,
// DeepSeek's, ...), compiled once and run by a small backtracking matcher over code points with
// Perl / Python leftmost-first semantics, and the "isolated" split: every match is a piece, and
// so is the text between two matches.
//
//   const inferkit::SplitRegex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))");
//   std::vector<inferkit::TextSpan> pieces;
//   re.split("Hello world", 0, 11, pieces);  // {0, 5}, {5, 11}: "Hello", " world"
//
// Syntax: literals (UTF-8), `.`, escapes \r \n \t \f \v \0 \xHH \x{H..} \uHHHH \\ and any escaped
// punctuation, \s \S
// (White_Space), \d \D (\p{Nd}), \w \W (letters, marks, Nd, Pc), \p{X} \P{X} for the general
// categories and their one-letter groups (L, Lu, Ll, Lt, Lm, Lo, M, Mn, Mc, Me, N, Nd, Nl, No, P,
// Pc, Pd, Ps, Pe, Pi, Pf, Po, S, Sm, Sc, Sk, So, Z, Zs, Zl, Zp, C, Cc, Cf, Cs, Co, Cn), classes
// `[...]` with ranges, escapes and negation, groups `(...)` and `(?:...)` (no captures are
// kept), alternation, the greedy quantifiers ? * + {m} {m,} {m,n} (n <= 1000), lookahead (?=...)
// (?!...), anchors ^ and $ (start and end of the text being split). Anything else (lazy or
// possessive quantifiers, backreferences, lookbehind, inline flags, \b, scripts in \p{}) is an
// error naming the pattern offset. A quantified group that can match the empty string is refused
// (it could loop). An invalid UTF-8 byte in the text is a character of no category: only `.` and
// negated classes match it.
//
// Contract: const and thread-safe once built. A match attempt that runs more than
// kSplitRegexStepBudget backtracking steps per character of the text throws std::invalid_argument
// (none of the built-in patterns comes near: they backtrack at most once per character).

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/tokenizer/unicode.hpp"

namespace inferkit {

/// A byte range [begin, end) of a text.
struct TextSpan {
  std::size_t begin = 0;                                               ///< offset of the first byte
  std::size_t end = 0;                                                 ///< offset one past the last byte
  std::size_t size() const { return end - begin; }                     ///< length in bytes
  friend bool operator==(const TextSpan&, const TextSpan&) = default;  ///< same begin and end
};

/// Backtracking steps a match attempt may take per character from its start to the end of the range
/// being split.
inline constexpr std::size_t kSplitRegexStepBudget = 4096;

/// A split regex compiled once, and the "isolated" split it drives (file comment). Immutable once
/// built; const access is thread-safe.
class SplitRegex {
 public:
  /// Compiles `pattern`. Throws std::invalid_argument naming the offset and what is unsupported.
  explicit SplitRegex(std::string pattern) : pattern_(std::move(pattern)) {
    Parser p{pattern_, 0, *this};
    const int root = p.parse_alternation();
    if (p.pos != pattern_.size()) p.fail("unbalanced ')'");
    first_ = first_set(root);
    compile(root);
    emit({Op::kMatch, 0, 0});
  }

  const std::string& pattern() const { return pattern_; }  ///< the source pattern

  /// Buffers split() reuses across calls (one per thread).
  struct Scratch;

  /// Splits text[begin, end) into matches and the gaps between them (each non-empty, in order),
  /// appended to `out` as spans of `text`.
  void split(std::string_view text, std::size_t begin, std::size_t end, std::vector<TextSpan>& out) const;
  /// The same, with caller-owned buffers (no allocation once they have grown).
  void split(std::string_view text, std::size_t begin, std::size_t end, std::vector<TextSpan>& out,
             Scratch& scratch) const {
    split_impl(text, begin, end, out, scratch);
  }

 private:
  struct Char;
  struct Frame;

 public:
  /// Buffers split() reuses across calls: one per thread, never shared by concurrent calls.
  struct Scratch {
    std::vector<Char> chars;   ///< the range being split, decoded to code points (and a sentinel)
    std::vector<Frame> stack;  ///< the matcher's backtracking stack
  };

 private:
  void split_impl(std::string_view text, std::size_t begin, std::size_t end, std::vector<TextSpan>& out,
                  Scratch& scratch) const {
    std::vector<Char>& chars = scratch.chars;
    decode(text, begin, end, chars);
    std::vector<Frame>& stack = scratch.stack;
    stack.clear();
    const std::size_t n = chars.size() - 1;  // chars has a sentinel at the end
    std::size_t gap = 0, pos = 0;
    while (pos < n) {
      if (!first_.nullable && !first_.may_start(chars[pos], classes_)) {
        ++pos;
        continue;
      }
      const std::ptrdiff_t r = run(0, pos, chars, stack);
      if (r > static_cast<std::ptrdiff_t>(pos)) {
        if (gap < pos) out.push_back({chars[gap].offset, chars[pos].offset});
        out.push_back({chars[pos].offset, chars[static_cast<std::size_t>(r)].offset});
        pos = static_cast<std::size_t>(r);
        gap = pos;
      } else {
        ++pos;
      }
    }
    if (gap < n) out.push_back({chars[gap].offset, chars[n].offset});
  }

 public:
  /// The length in bytes of the match starting at text[begin], or -1 (for tests).
  std::ptrdiff_t match_at(std::string_view text, std::size_t begin) const {
    std::vector<Char> chars;
    decode(text, begin, text.size(), chars);
    std::vector<Frame> stack;
    const std::ptrdiff_t r = run(0, 0, chars, stack);
    return r < 0 ? -1 : static_cast<std::ptrdiff_t>(chars[static_cast<std::size_t>(r)].offset - begin);
  }

 private:
  // ---- characters and classes ------------------------------------------------------------------

  struct Char {
    char32_t cp;
    std::uint8_t props;  // unicode_properties(cp); 0xFF for an invalid byte
    std::size_t offset;  // byte offset in the text
  };
  static constexpr std::uint8_t kInvalidProps = 0xFF;

  static void decode(std::string_view text, std::size_t begin, std::size_t end, std::vector<Char>& chars) {
    chars.clear();
    chars.reserve(end - begin + 1);
    const std::string_view t = text.substr(0, end);
    for (std::size_t i = begin; i < end;) {
      const Utf8Char c = utf8_decode(t, i);
      chars.push_back({c.cp, c.valid ? unicode_properties(c.cp) : kInvalidProps, i});
      i += c.length;
    }
    chars.push_back({0, 0, end});
  }

  struct ClassItem {
    enum Kind : std::uint8_t { kRange, kCategory, kWhitespace } kind;
    bool negated;
    char32_t lo, hi;           // kRange
    UnicodeCategoryMask mask;  // kCategory
    bool matches(const Char& c) const {
      if (c.props == kInvalidProps) return negated;  // no range, category or space holds
      bool m = false;
      switch (kind) {
        case kRange:
          m = c.cp >= lo && c.cp <= hi;
          break;
        case kCategory:
          m = ((1u << (c.props & 0x1F)) & mask) != 0;
          break;
        case kWhitespace:
          m = (c.props & 0x80) != 0;
          break;
      }
      return m != negated;
    }
  };

  struct CharClass {
    bool negated = false;
    std::vector<ClassItem> items;
    std::array<std::uint64_t, 2> ascii{};  // precomputed answers for code points < 128
    void finish() {
      for (const auto& it : items) {
        if (it.kind == ClassItem::kRange) {
          ranges.emplace_back(it.lo, it.hi);
        } else {
          others.push_back(it);
        }
      }
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<char32_t, char32_t>> merged;
      for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second + 1) {
          merged.back().second = std::max(merged.back().second, r.second);
        } else {
          merged.push_back(r);
        }
      }
      ranges.swap(merged);
      for (char32_t cp = 0; cp < 128; ++cp)
        if (slow(Char{cp, unicode_properties(cp), 0})) ascii[cp >> 6] |= std::uint64_t{1} << (cp & 63);
    }
    // Built by finish(): the ranges sorted and merged (binary search), the other items apart.
    std::vector<std::pair<char32_t, char32_t>> ranges;
    std::vector<ClassItem> others;
    bool slow(const Char& c) const {
      bool any = false;
      if (c.props != kInvalidProps && !ranges.empty()) {
        auto it = std::upper_bound(ranges.begin(), ranges.end(), c.cp,
                                   [](char32_t cp, const std::pair<char32_t, char32_t>& r) { return cp < r.first; });
        any = it != ranges.begin() && c.cp <= std::prev(it)->second;
      }
      for (std::size_t i = 0; !any && i < others.size(); ++i) any = others[i].matches(c);
      return any != negated;
    }
    bool matches(const Char& c) const {
      if (c.cp < 128 && c.props != kInvalidProps) return (ascii[c.cp >> 6] >> (c.cp & 63)) & 1;
      return slow(c);
    }
  };

  // ---- syntax tree -----------------------------------------------------------------------------

  enum class Node : std::uint8_t { kEmpty, kClass, kConcat, kAlt, kRepeat, kLook, kStart, kEnd };
  struct Ast {
    Node kind;
    int cls = -1;           // kClass
    std::vector<int> kids;  // kConcat, kAlt, kRepeat (one), kLook (one)
    int min = 0, max = 0;   // kRepeat (max -1: unbounded)
    bool negative = false;  // kLook
  };

  struct Parser {
    const std::string& s;
    std::size_t pos;
    SplitRegex& re;

    [[noreturn]] void fail(std::string_view what) const {
      throw_invalid_argument("regex '" + s + "' at offset " + std::to_string(pos), std::string(what),
                             "is not supported by SplitRegex");
    }
    bool eof() const { return pos >= s.size(); }
    char peek() const { return s[pos]; }

    int node(Ast a) {
      re.ast_.push_back(std::move(a));
      return static_cast<int>(re.ast_.size() - 1);
    }
    int leaf(Node k, int cls = -1) { return node(Ast{k, cls, {}, 0, 0, false}); }

    int parse_alternation() {
      std::vector<int> alts{parse_concat()};
      while (!eof() && peek() == '|') {
        ++pos;
        alts.push_back(parse_concat());
      }
      if (alts.size() == 1) return alts[0];
      return node(Ast{Node::kAlt, -1, std::move(alts), 0, 0, false});
    }

    int parse_concat() {
      std::vector<int> items;
      while (!eof() && peek() != '|' && peek() != ')') items.push_back(parse_repeat());
      if (items.empty()) return leaf(Node::kEmpty);
      if (items.size() == 1) return items[0];
      return node(Ast{Node::kConcat, -1, std::move(items), 0, 0, false});
    }

    int parse_number() {
      if (eof() || peek() < '0' || peek() > '9') fail("a quantifier without a number");
      int v = 0;
      while (!eof() && peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > 1000) fail("a repetition count above 1000");
        ++pos;
      }
      return v;
    }

    int parse_repeat() {
      int atom = parse_atom();
      for (;;) {
        if (eof()) return atom;
        int lo, hi;
        const char c = peek();
        if (c == '?') {
          lo = 0, hi = 1, ++pos;
        } else if (c == '*') {
          lo = 0, hi = -1, ++pos;
        } else if (c == '+') {
          lo = 1, hi = -1, ++pos;
        } else if (c == '{') {
          ++pos;
          lo = parse_number();
          hi = lo;
          if (!eof() && peek() == ',') {
            ++pos;
            hi = !eof() && peek() == '}' ? -1 : parse_number();
          }
          if (eof() || peek() != '}') fail("an unterminated {m,n}");
          ++pos;
          if (hi != -1 && hi < lo) fail("{m,n} with n < m");
        } else {
          return atom;
        }
        if (!eof() && (peek() == '?' || peek() == '+')) fail("lazy or possessive quantifiers");
        const Node k = re.ast_[static_cast<std::size_t>(atom)].kind;
        if (k == Node::kStart || k == Node::kEnd || k == Node::kLook) fail("a quantified assertion");
        if (hi != 1 && re.first_set(atom).nullable) fail("a quantified subpattern that can match the empty string");
        atom = node(Ast{Node::kRepeat, -1, {atom}, lo, hi, false});
      }
    }

    int class_node(CharClass cc) {
      cc.finish();
      re.classes_.push_back(std::move(cc));
      return leaf(Node::kClass, static_cast<int>(re.classes_.size() - 1));
    }

    char32_t literal_cp() {
      const Utf8Char c = utf8_decode(s, pos);
      if (!c.valid) fail("invalid UTF-8 in the pattern");
      pos += c.length;
      return c.cp;
    }

    // An escape after '\': appends its items to `cc`; returns false for a single code point
    // (stored in `cp`).
    bool parse_escape(std::vector<ClassItem>& items, char32_t& cp) {
      if (eof()) fail("a trailing backslash");
      const char c = s[pos++];
      auto cat = [&](UnicodeCategoryMask m, bool neg) { items.push_back({ClassItem::kCategory, neg, 0, 0, m}); };
      switch (c) {
        case 'n':
          cp = '\n';
          return false;
        case 'r':
          cp = '\r';
          return false;
        case 't':
          cp = '\t';
          return false;
        case 'f':
          cp = '\f';
          return false;
        case 'v':
          cp = '\v';
          return false;
        case '0':
          cp = 0;
          return false;
        case 'x':
        case 'u': {
          // \xHH, \x{H...}, \uHHHH: a code point in hex.
          std::size_t digits = c == 'u' ? 4 : 2;
          bool braced = false;
          if (!eof() && peek() == '{') {
            braced = true;
            ++pos;
            digits = 8;
          }
          char32_t v = 0;
          std::size_t got = 0;
          while (got < digits && !eof() && std::isxdigit(static_cast<unsigned char>(peek()))) {
            const char h = s[pos++];
            v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
            ++got;
          }
          if (braced) {
            if (eof() || peek() != '}' || got == 0) fail("a malformed \\x{...}");
            ++pos;
          } else if (got != digits) {
            fail("a malformed hex escape");
          }
          if (v > kUnicodeMax) fail("a code point above U+10FFFF");
          cp = v;
          return false;
        }
        case 's':
          items.push_back({ClassItem::kWhitespace, false, 0, 0, 0});
          return true;
        case 'S':
          items.push_back({ClassItem::kWhitespace, true, 0, 0, 0});
          return true;
        case 'd':
          cat(unicode_mask(UnicodeCategory::kNd), false);
          return true;
        case 'D':
          cat(unicode_mask(UnicodeCategory::kNd), true);
          return true;
        case 'w':
        case 'W': {
          const UnicodeCategoryMask m =
              kUnicodeLetter | kUnicodeMark | unicode_mask(UnicodeCategory::kNd) | unicode_mask(UnicodeCategory::kPc);
          cat(m, c == 'W');
          return true;
        }
        case 'p':
        case 'P': {
          if (eof() || peek() != '{') fail("\\p without {name}");
          const std::size_t close = s.find('}', pos);
          if (close == std::string::npos) fail("an unterminated \\p{");
          const std::string name = s.substr(pos + 1, close - pos - 1);
          const UnicodeCategoryMask m = category_mask(name);
          if (m == 0) fail("the property \\p{" + name + "}");
          pos = close + 1;
          cat(m, c == 'P');
          return true;
        }
        default:
          if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            fail(std::string("the escape \\") + c);
          --pos;
          cp = literal_cp();  // escaped punctuation or a UTF-8 character: itself
          return false;
      }
    }

    int parse_atom() {
      const char c = peek();
      if (c == '(') {
        ++pos;
        bool look = false, negative = false;
        if (!eof() && peek() == '?') {
          ++pos;
          if (eof()) fail("an unterminated group");
          const char k = s[pos++];
          if (k == '=' || k == '!') {
            look = true;
            negative = k == '!';
          } else if (k != ':') {
            fail(std::string("the group (?") + k);
          }
        }
        const int inner = parse_alternation();
        if (eof() || peek() != ')') fail("an unterminated group");
        ++pos;
        if (look) return node(Ast{Node::kLook, -1, {inner}, 0, 0, negative});
        return inner;
      }
      if (c == ')' || c == '|') fail("an empty atom");
      if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier without an atom");
      if (c == '^') {
        ++pos;
        return leaf(Node::kStart);
      }
      if (c == '$') {
        ++pos;
        return leaf(Node::kEnd);
      }
      if (c == '.') {
        ++pos;
        CharClass cc;
        cc.negated = true;
        cc.items.push_back({ClassItem::kRange, false, '\n', '\n', 0});
        return class_node(std::move(cc));
      }
      if (c == '[') return parse_class();
      CharClass cc;
      char32_t cp = 0;
      if (c == '\\') {
        ++pos;
        if (parse_escape(cc.items, cp)) return class_node(std::move(cc));
      } else {
        cp = literal_cp();
      }
      cc.items.push_back({ClassItem::kRange, false, cp, cp, 0});
      return class_node(std::move(cc));
    }

    int parse_class() {
      ++pos;  // '['
      CharClass cc;
      if (!eof() && peek() == '^') {
        cc.negated = true;
        ++pos;
      }
      bool first = true;
      for (;;) {
        if (eof()) fail("an unterminated [");
        if (peek() == ']' && !first) {
          ++pos;
          break;
        }
        first = false;
        char32_t lo = 0;
        if (peek() == '\\') {
          ++pos;
          if (parse_escape(cc.items, lo)) continue;
        } else if (peek() == '[') {
          fail("nested classes");
        } else {
          lo = literal_cp();
        }
        char32_t hi = lo;
        if (pos + 1 < s.size() && peek() == '-' && s[pos + 1] != ']') {
          ++pos;
          if (peek() == '\\') {
            ++pos;
            std::vector<ClassItem> junk;
            if (parse_escape(junk, hi)) fail("a range ending in a class escape");
          } else {
            hi = literal_cp();
          }
          if (hi < lo) fail("a reversed range");
        }
        cc.items.push_back({ClassItem::kRange, false, lo, hi, 0});
      }
      return class_node(std::move(cc));
    }
  };

  static UnicodeCategoryMask category_mask(std::string_view name) {
    using C = UnicodeCategory;
    struct Entry {
      const char* name;
      UnicodeCategoryMask mask;
    };
    static const Entry kEntries[] = {
        {"L", kUnicodeLetter},        {"M", kUnicodeMark},          {"N", kUnicodeNumber},
        {"P", kUnicodePunctuation},   {"S", kUnicodeSymbol},        {"Z", kUnicodeSeparator},
        {"C", kUnicodeOther},         {"Lu", unicode_mask(C::kLu)}, {"Ll", unicode_mask(C::kLl)},
        {"Lt", unicode_mask(C::kLt)}, {"Lm", unicode_mask(C::kLm)}, {"Lo", unicode_mask(C::kLo)},
        {"Mn", unicode_mask(C::kMn)}, {"Mc", unicode_mask(C::kMc)}, {"Me", unicode_mask(C::kMe)},
        {"Nd", unicode_mask(C::kNd)}, {"Nl", unicode_mask(C::kNl)}, {"No", unicode_mask(C::kNo)},
        {"Pc", unicode_mask(C::kPc)}, {"Pd", unicode_mask(C::kPd)}, {"Ps", unicode_mask(C::kPs)},
        {"Pe", unicode_mask(C::kPe)}, {"Pi", unicode_mask(C::kPi)}, {"Pf", unicode_mask(C::kPf)},
        {"Po", unicode_mask(C::kPo)}, {"Sm", unicode_mask(C::kSm)}, {"Sc", unicode_mask(C::kSc)},
        {"Sk", unicode_mask(C::kSk)}, {"So", unicode_mask(C::kSo)}, {"Zs", unicode_mask(C::kZs)},
        {"Zl", unicode_mask(C::kZl)}, {"Zp", unicode_mask(C::kZp)}, {"Cc", unicode_mask(C::kCc)},
        {"Cf", unicode_mask(C::kCf)}, {"Cs", unicode_mask(C::kCs)}, {"Co", unicode_mask(C::kCo)},
        {"Cn", unicode_mask(C::kCn)},
    };
    for (const auto& e : kEntries)
      if (name == e.name) return e.mask;
    return 0;
  }

  // ---- first characters (a prefilter) ----------------------------------------------------------

  struct FirstSet {
    bool nullable = false;
    bool any = false;          // may start with any character (a negated or non-ASCII class)
    std::vector<int> classes;  // otherwise: starts with a character one of these classes matches
    bool may_start(const Char& c, const std::vector<CharClass>& table) const {
      if (any) return true;
      for (int k : classes)
        if (table[static_cast<std::size_t>(k)].matches(c)) return true;
      return false;
    }
  };

  FirstSet first_set(int n) const {
    const Ast& a = ast_[static_cast<std::size_t>(n)];
    FirstSet f;
    switch (a.kind) {
      case Node::kEmpty:
      case Node::kStart:
      case Node::kEnd:
      case Node::kLook:
        f.nullable = true;
        break;
      case Node::kClass:
        f.classes.push_back(a.cls);
        break;
      case Node::kConcat:
        f.nullable = true;
        for (int k : a.kids) {
          const FirstSet g = first_set(k);
          f.any = f.any || g.any;
          f.classes.insert(f.classes.end(), g.classes.begin(), g.classes.end());
          if (!g.nullable) {
            f.nullable = false;
            break;
          }
        }
        break;
      case Node::kAlt:
        for (int k : a.kids) {
          const FirstSet g = first_set(k);
          f.any = f.any || g.any;
          f.nullable = f.nullable || g.nullable;
          f.classes.insert(f.classes.end(), g.classes.begin(), g.classes.end());
        }
        break;
      case Node::kRepeat: {
        f = first_set(a.kids[0]);
        f.nullable = f.nullable || a.min == 0;
        break;
      }
    }
    if (f.classes.size() > 8) f.any = true;  // checking many classes costs more than it saves
    return f;
  }

  // ---- program ---------------------------------------------------------------------------------

  enum class Op : std::uint8_t { kClass, kSplit, kJmp, kMatch, kStart, kEnd, kLook, kNegLook };
  struct Inst {
    Op op;
    std::uint32_t a, b;  // kClass: class; kSplit: preferred, other; kJmp: target; kLook: body, next
  };

  std::uint32_t here() const { return static_cast<std::uint32_t>(prog_.size()); }
  std::uint32_t emit(Inst i) {
    prog_.push_back(i);
    return here() - 1;
  }

  void compile(int n) {
    const Ast a = ast_[static_cast<std::size_t>(n)];
    switch (a.kind) {
      case Node::kEmpty:
        break;
      case Node::kClass:
        emit({Op::kClass, static_cast<std::uint32_t>(a.cls), 0});
        break;
      case Node::kStart:
        emit({Op::kStart, 0, 0});
        break;
      case Node::kEnd:
        emit({Op::kEnd, 0, 0});
        break;
      case Node::kConcat:
        for (int k : a.kids) compile(k);
        break;
      case Node::kAlt: {
        std::vector<std::uint32_t> jumps;
        for (std::size_t i = 0; i < a.kids.size(); ++i) {
          std::uint32_t split = 0;
          if (i + 1 < a.kids.size()) split = emit({Op::kSplit, 0, 0});
          if (i + 1 < a.kids.size()) prog_[split].a = here();
          compile(a.kids[i]);
          if (i + 1 < a.kids.size()) {
            jumps.push_back(emit({Op::kJmp, 0, 0}));
            prog_[split].b = here();
          }
        }
        for (auto j : jumps) prog_[j].a = here();
        break;
      }
      case Node::kRepeat: {
        for (int i = 0; i < a.min; ++i) compile(a.kids[0]);
        if (a.max == -1) {
          const std::uint32_t loop = emit({Op::kSplit, 0, 0});
          prog_[loop].a = here();
          compile(a.kids[0]);
          emit({Op::kJmp, loop, 0});
          prog_[loop].b = here();
        } else {
          std::vector<std::uint32_t> splits;
          for (int i = a.min; i < a.max; ++i) {
            const std::uint32_t sp = emit({Op::kSplit, 0, 0});
            prog_[sp].a = here();
            splits.push_back(sp);
            compile(a.kids[0]);
          }
          for (auto sp : splits) prog_[sp].b = here();
        }
        break;
      }
      case Node::kLook: {
        const std::uint32_t look = emit({a.negative ? Op::kNegLook : Op::kLook, 0, 0});
        prog_[look].a = here();
        compile(a.kids[0]);
        emit({Op::kMatch, 0, 0});
        prog_[look].b = here();
        break;
      }
    }
  }

  struct Frame {
    std::uint32_t pc;
    std::size_t pos;
  };

  // Runs the program from `pc` at chars[pos]; returns the end position of the first match in
  // priority order, or -1.
  std::ptrdiff_t run(std::uint32_t pc, std::size_t pos, const std::vector<Char>& chars,
                     std::vector<Frame>& stack) const {
    const std::size_t n = chars.size() - 1;
    const std::size_t base = stack.size();
    std::size_t budget = kSplitRegexStepBudget * (n - pos + 1);
    for (;;) {
      if (budget-- == 0) [[unlikely]]
        throw_invalid_argument("regex '" + pattern_ + "' steps", kSplitRegexStepBudget * (n - pos + 1),
                               "exceeded the backtracking budget");
      const Inst& in = prog_[pc];
      bool ok = true;
      switch (in.op) {
        case Op::kClass:
          if (pos < n && classes_[in.a].matches(chars[pos])) {
            ++pos;
            ++pc;
          } else {
            ok = false;
          }
          break;
        case Op::kSplit:
          stack.push_back({in.b, pos});
          pc = in.a;
          break;
        case Op::kJmp:
          pc = in.a;
          break;
        case Op::kMatch:
          stack.resize(base);
          return static_cast<std::ptrdiff_t>(pos);
        case Op::kStart:
          ok = pos == 0;
          ++pc;
          break;
        case Op::kEnd:
          ok = pos == n;
          ++pc;
          break;
        case Op::kLook:
        case Op::kNegLook: {
          const bool found = run(in.a, pos, chars, stack) >= 0;
          ok = found == (in.op == Op::kLook);
          pc = in.b;
          break;
        }
      }
      if (!ok) {
        if (stack.size() == base) return -1;
        pc = stack.back().pc;
        pos = stack.back().pos;
        stack.pop_back();
      }
    }
  }

  std::string pattern_;
  std::vector<Ast> ast_;
  std::vector<CharClass> classes_;
  std::vector<Inst> prog_;
  FirstSet first_;
};

inline void SplitRegex::split(std::string_view text, std::size_t begin, std::size_t end,
                              std::vector<TextSpan>& out) const {
  Scratch scratch;
  split_impl(text, begin, end, out, scratch);
}

}  // namespace inferkit
