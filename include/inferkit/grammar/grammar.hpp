#pragma once
// Grammar: the intermediate form every grammar source compiles to (GBNF in grammar/gbnf.hpp; JSON
// Schema, regex and choice lists through GBNF text): rules of alternatives of symbols, a symbol
// being a character class (a set of Unicode code points) or a reference to a rule. Built through
// GrammarBuilder, checked once (every referenced rule defined, a root, no left recursion: a
// pushdown matcher would expand it forever), then flattened for the matcher: every alternative is
// a run of elements ending in an End element, a matcher position is an index into that array
// (the layout of llama.cpp's grammar stacks).
//
//   inferkit::GrammarBuilder b;
//   const auto root = b.rule("root");
//   b.add_alternative(root, {inferkit::GrammarSymbol::chars_of(inferkit::CharClass::range('a', 'z'))});
//   const inferkit::Grammar g(std::move(b), "root");   // throws naming the rule when malformed

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"

namespace inferkit {

/// The largest Unicode code point.
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// A set of Unicode code points as sorted, disjoint, non-adjacent closed ranges.
class CharClass {
 public:
  /// One closed range [lo, hi] of code points.
  struct Range {
    char32_t lo;                                    ///< first code point
    char32_t hi;                                    ///< last code point (>= lo)
    bool operator==(const Range&) const = default;  ///< same bounds
  };

  CharClass() = default;  ///< the empty set
  /// [lo, hi]; throws std::invalid_argument unless lo <= hi <= U+10FFFF.
  static CharClass range(char32_t lo, char32_t hi) { return from_ranges({{lo, hi}}); }
  /// The single code point `cp`.
  static CharClass single(char32_t cp) { return range(cp, cp); }
  /// The union of `ranges` (any order, may overlap), complemented within [0, U+10FFFF] when
  /// `negate` (GBNF's [^...]). Throws std::invalid_argument for a range with lo > hi or past U+10FFFF.
  static CharClass from_ranges(std::vector<Range> ranges, bool negate = false) {
    for (const Range& r : ranges) {
      require(r.hi <= kMaxCodePoint, "character class upper bound", static_cast<std::uint32_t>(r.hi),
              "must be at most U+10FFFF");
      require(r.lo <= r.hi, "character class range start", static_cast<std::uint32_t>(r.lo),
              "must not exceed its end " + std::to_string(static_cast<std::uint32_t>(r.hi)));
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
    CharClass c;
    for (const Range& r : ranges) {
      if (!c.ranges_.empty() && r.lo <= c.ranges_.back().hi + 1)
        c.ranges_.back().hi = std::max(c.ranges_.back().hi, r.hi);
      else
        c.ranges_.push_back(r);
    }
    if (negate) {
      std::vector<Range> out;
      char32_t next = 0;
      for (const Range& r : c.ranges_) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
      }
      if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
      c.ranges_ = std::move(out);
    }
    c.build_ascii();
    return c;
  }

  /// Whether `cp` is in the set.
  bool contains(char32_t cp) const {
    if (cp < 128) return (ascii_[cp >> 6] >> (cp & 63)) & 1;
    const auto it =
        std::upper_bound(ranges_.begin(), ranges_.end(), cp, [](char32_t v, const Range& r) { return v < r.lo; });
    return it != ranges_.begin() && cp <= std::prev(it)->hi;
  }
  /// Whether the set holds some code point in [lo, hi].
  bool intersects(char32_t lo, char32_t hi) const {
    for (const Range& r : ranges_)
      if (r.lo <= hi && lo <= r.hi) return true;
    return false;
  }
  /// Whether the set holds every code point of [lo, hi].
  bool covers(char32_t lo, char32_t hi) const {
    const auto it =
        std::upper_bound(ranges_.begin(), ranges_.end(), lo, [](char32_t v, const Range& r) { return v < r.lo; });
    return it != ranges_.begin() && hi <= std::prev(it)->hi;  // ranges are non-adjacent: one must hold it all
  }
  /// Membership of U+0000..U+007F as two words (bit c of word c / 64).
  std::uint64_t ascii_word(int w) const { return ascii_[w & 1]; }
  bool empty() const { return ranges_.empty(); }                              ///< no code point at all
  const std::vector<Range>& ranges() const { return ranges_; }                ///< sorted, disjoint, non-adjacent
  bool operator==(const CharClass& o) const { return ranges_ == o.ranges_; }  ///< same set

 private:
  void build_ascii() {
    ascii_[0] = ascii_[1] = 0;
    for (const Range& r : ranges_)
      for (char32_t c = r.lo; c <= r.hi && c < 128; ++c) ascii_[c >> 6] |= std::uint64_t{1} << (c & 63);
  }
  std::vector<Range> ranges_;
  std::uint64_t ascii_[2] = {0, 0};  // membership of U+0000..U+007F, the common case
};

/// One symbol of an alternative: a character class or a reference to a rule.
struct GrammarSymbol {
  /// Which of the two.
  enum class Kind : std::uint8_t { kChars, kRule };
  Kind kind = Kind::kChars;  ///< class or rule reference
  CharClass chars;           ///< kChars: the code points this symbol matches (one of them)
  std::uint32_t rule = 0;    ///< kRule: the referenced rule's id (GrammarBuilder::rule)

  /// A character-class symbol.
  static GrammarSymbol chars_of(CharClass c) { return {Kind::kChars, std::move(c), 0}; }
  /// A reference to rule `id`.
  static GrammarSymbol ref(std::uint32_t id) { return {Kind::kRule, {}, id}; }
};

/// Collects rules and alternatives before a Grammar checks and flattens them.
class GrammarBuilder {
 public:
  /// The id of rule `name`, creating it (with no alternatives yet) on first use.
  std::uint32_t rule(std::string_view name) {
    const auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(names_.size());
    names_.emplace_back(name);
    ids_.emplace(std::string(name), id);
    alternatives_.emplace_back();
    defined_.push_back(false);
    return id;
  }
  /// A fresh rule named `base`, '~' and a number not yet used (for generated helper rules; '~' is
  /// in no GBNF rule name, so they never collide with written ones).
  std::uint32_t fresh_rule(std::string_view base) {
    for (std::size_t i = names_.size();; ++i) {
      std::string name = std::string(base) + "~" + std::to_string(i);
      if (!ids_.count(name)) return rule(name);
    }
  }
  /// Adds one alternative (a sequence of symbols; empty = the empty string) to rule `id` and marks
  /// it defined. Throws std::out_of_range for an unknown id.
  void add_alternative(std::uint32_t id, std::vector<GrammarSymbol> symbols) {
    require_index(id, names_.size(), "grammar rule id");
    for (const GrammarSymbol& s : symbols)
      if (s.kind == GrammarSymbol::Kind::kRule) require_index(s.rule, names_.size(), "referenced rule id");
    symbol_count_ += symbols.size() + 1;
    require(symbol_count_ <= kMaxElements, "grammar size (elements)", symbol_count_,
            "must be at most " + std::to_string(kMaxElements));
    alternatives_[id].push_back(std::move(symbols));
    defined_[id] = true;
  }
  /// Marks rule `id` defined even with no alternative yet (GBNF's `name ::=` before its body).
  void define(std::uint32_t id) {
    require_index(id, names_.size(), "grammar rule id");
    defined_[id] = true;
  }
  /// Whether rule `id` has a definition.
  bool defined(std::uint32_t id) const { return defined_.at(id); }
  std::size_t rule_count() const { return names_.size(); }                   ///< rules named so far
  const std::string& name(std::uint32_t id) const { return names_.at(id); }  ///< rule id's name

  /// Most elements (symbols plus one End per alternative) a grammar may have: bounds the memory a
  /// grammar text can ask for (x{1000000} would otherwise expand without limit).
  static constexpr std::size_t kMaxElements = std::size_t{1} << 22;

 private:
  friend class Grammar;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<std::vector<std::vector<GrammarSymbol>>> alternatives_;
  std::vector<bool> defined_;
  std::size_t symbol_count_ = 0;
};

/// A checked, flattened grammar (file comment). Immutable; const access is thread-safe.
class Grammar {
 public:
  /// One flattened element.
  struct Element {
    /// End of an alternative, a character class, or a rule reference.
    enum class Kind : std::uint8_t { kEnd, kChars, kRule };
    Kind kind;            ///< what the element is
    std::uint32_t index;  ///< kChars: index into classes(); kRule: rule id; kEnd: the rule it ends
  };

  /// Checks and flattens `builder`'s rules with `root` as the start rule. Throws
  /// std::invalid_argument naming the rule for an undefined root or referenced rule, and for left
  /// recursion (a rule reaching itself before consuming any character).
  Grammar(GrammarBuilder builder, std::string_view root) : names_(std::move(builder.names_)) {
    const auto it = builder.ids_.find(std::string(root));
    require(it != builder.ids_.end() && builder.defined_[it->second], "grammar root rule", std::string(root),
            "is not defined");
    root_ = it->second;
    const std::size_t n = names_.size();
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& alt : builder.alternatives_[r])
        for (const GrammarSymbol& s : alt)
          if (s.kind == GrammarSymbol::Kind::kRule && !builder.defined_[s.rule])
            throw_invalid_argument("grammar rule '" + names_[s.rule] + "'", "undefined",
                                   "is referenced by rule '" + names_[r] + "' but never defined");
    check_left_recursion(builder.alternatives_);
    drop_unproductive(builder.alternatives_);
    rule_alternatives_.resize(n);
    for (std::size_t r = 0; r < n; ++r) {
      for (const auto& alt : builder.alternatives_[r]) {
        rule_alternatives_[r].push_back(static_cast<std::uint32_t>(elements_.size()));
        for (const GrammarSymbol& s : alt) {
          if (s.kind == GrammarSymbol::Kind::kRule) {
            elements_.push_back({Element::Kind::kRule, s.rule});
          } else {
            elements_.push_back({Element::Kind::kChars, intern(s.chars)});
          }
        }
        elements_.push_back({Element::Kind::kEnd, static_cast<std::uint32_t>(r)});
      }
    }
  }

  std::uint32_t root() const { return root_; }                                    ///< the start rule's id
  std::size_t rule_count() const { return names_.size(); }                        ///< number of rules
  const std::string& rule_name(std::uint32_t id) const { return names_.at(id); }  ///< rule id's name
  /// The start positions (indices into elements()) of rule id's alternatives.
  std::span<const std::uint32_t> alternatives(std::uint32_t id) const { return rule_alternatives_.at(id); }
  const std::vector<Element>& elements() const { return elements_; }             ///< every alternative, End-terminated
  const Element& element(std::uint32_t pos) const { return elements_[pos]; }     ///< elements()[pos], unchecked
  const CharClass& chars(std::uint32_t index) const { return classes_[index]; }  ///< class `index`
  std::size_t class_count() const { return classes_.size(); }                    ///< distinct classes

 private:
  std::uint32_t intern(const CharClass& c) {
    for (std::size_t i = classes_.size(); i-- > 0 && i + 64 >= classes_.size();)
      if (classes_[i] == c) return static_cast<std::uint32_t>(i);  // recent duplicates (literals repeat)
    classes_.push_back(c);
    return static_cast<std::uint32_t>(classes_.size() - 1);
  }

  void check_left_recursion(const std::vector<std::vector<std::vector<GrammarSymbol>>>& alts) const {
    const std::size_t n = alts.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {  // least fixpoint: a rule is nullable when an alternative is
      changed = false;
      for (std::size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : alts[r]) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const GrammarSymbol& s) {
            return s.kind == GrammarSymbol::Kind::kRule && nullable[s.rule];
          });
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s when s can be expanded before r consumes a character; a cycle is left recursion.
    std::vector<std::vector<std::uint32_t>> first(n);
    for (std::size_t r = 0; r < n; ++r)
      for (const auto& alt : alts[r])
        for (const GrammarSymbol& s : alt) {
          if (s.kind != GrammarSymbol::Kind::kRule) break;
          first[r].push_back(s.rule);
          if (!nullable[s.rule]) break;
        }
    std::vector<std::uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<std::uint32_t, std::size_t>> path;
    for (std::uint32_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      path.push_back({start, 0});
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, i] = path.back();
        if (i == first[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const std::uint32_t s = first[r][i++];
        if (color[s] == 1)
          throw_invalid_argument("grammar rule '" + names_[s] + "'", "left-recursive",
                                 "reaches itself before matching any character (rewrite it right-recursively)");
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }

  // Drops every alternative that derives no finite string (it holds an empty class or a rule with
  // no finite string: r ::= "a" r). Exact (such alternatives add nothing to the language) and it
  // makes every stack a matcher holds completable, so "some stack accepts the byte" means "the
  // output stays a prefix of a sentence". Throws when the root itself derives nothing.
  void drop_unproductive(std::vector<std::vector<std::vector<GrammarSymbol>>>& alts) const {
    const std::size_t n = alts.size();
    std::vector<bool> productive(n, false);
    auto alt_productive = [&](const std::vector<GrammarSymbol>& alt) {
      return std::all_of(alt.begin(), alt.end(), [&](const GrammarSymbol& s) {
        return s.kind == GrammarSymbol::Kind::kRule ? productive[s.rule] : !s.chars.empty();
      });
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < n; ++r)
        if (!productive[r] && std::any_of(alts[r].begin(), alts[r].end(), alt_productive))
          productive[r] = changed = true;
    }
    require(productive[root_], "grammar rule '" + names_[root_] + "'", "derives no string",
            "the start rule must match at least one finite string");
    for (auto& rule_alts : alts) std::erase_if(rule_alts, [&](const auto& alt) { return !alt_productive(alt); });
  }

  std::vector<std::string> names_;
  std::uint32_t root_ = 0;
  std::vector<std::vector<std::uint32_t>> rule_alternatives_;
  std::vector<Element> elements_;
  std::vector<CharClass> classes_;
};

}  // namespace inferkit
