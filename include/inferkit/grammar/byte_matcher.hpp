#pragma once
// ByteMatcher: where a Grammar stands after some output bytes, as a set of pushdown stacks (one per
// way the output can be parsed, llama.cpp's grammar stacks), each stack's top a character class
// (or nothing: that parse is complete), plus the bytes of a UTF-8 character begun but not ended.
// A byte is accepted when some stack's class holds a code point whose encoding continues the
// bytes so far (a prefix of k of n bytes stands for a contiguous code point range, Unicode 15
// Table 3-7, so this is one interval test per class); a complete character advances every stack
// whose class holds it and expands rule references until each top is a class again. The Grammar
// drops alternatives that derive nothing, so every stack can still complete and "some stack
// accepts" is exactly "the output is still a prefix of a sentence". Fails closed: a rejected byte
// leaves the state as it was.
//
//   const inferkit::Grammar g = inferkit::parse_gbnf(R"(root ::= "a" [0-9]+)");
//   inferkit::ByteMatcher m(g);
//   bool ok = m.accept_bytes("a12");   // true; m.is_complete() == true
//
// The grammar must outlive the matcher. Copies are independent (a beam, a speculative branch).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/grammar.hpp"

namespace inferkit {

/// A stack position standing for "the rest of the stack, not known here": the bottom of the
/// partial stacks the mask cache (grammar/token_mask.hpp) walks from. A stack whose top it is
/// has finished everything known about it.
inline constexpr std::uint32_t kUnknownContext = 0xFFFFFFFFu;

/// Most stacks a matcher holds at once; a grammar ambiguous enough to need more is rejected with
/// std::length_error rather than slowing every token without bound.
inline constexpr std::size_t kMaxGrammarStacks = std::size_t{1} << 14;

/// One parse of the output: positions into Grammar::elements(), the top at the back.
using GrammarStack = std::vector<std::uint32_t>;

/// The grammar state after some bytes (file comment).
class ByteMatcher {
 public:
  /// The state before any output: the root rule's alternatives expanded.
  explicit ByteMatcher(const Grammar& grammar) : grammar_(&grammar) {
    for (const std::uint32_t start : grammar.alternatives(grammar.root())) expand(GrammarStack{start}, stacks_);
    normalize();
  }
  /// A state from explicit stacks (each top a class, kUnknownContext or nothing once expanded):
  /// the mask cache starts walks from partial stacks. Each stack is expanded first.
  ByteMatcher(const Grammar& grammar, std::vector<GrammarStack> stacks) : grammar_(&grammar) {
    for (GrammarStack& s : stacks) expand(std::move(s), stacks_);
    normalize();
  }

  /// Consumes byte `b` when the grammar allows it and returns true; otherwise returns false and
  /// leaves the state unchanged.
  bool accept_byte(std::uint8_t b) {
    ByteMatcher next(*grammar_, Empty{});
    if (!step(b, next)) return false;
    swap(next);
    return true;
  }
  /// Consumes all of `bytes` or, returning false, none of them.
  bool accept_bytes(std::string_view bytes) {
    ByteMatcher cur = *this, next(*grammar_, Empty{});
    for (const char c : bytes) {
      if (!cur.step(static_cast<std::uint8_t>(c), next)) return false;
      cur.swap(next);
    }
    swap(cur);
    return true;
  }

  /// Writes the state after byte `b` into `out` (reusing its storage) and returns true, or
  /// returns false (out unspecified) when no stack accepts `b`. `*unknown_hit`, when given, is set
  /// when a stack whose top is kUnknownContext met the byte (its outcome depends on context).
  bool step(std::uint8_t b, ByteMatcher& out, bool* unknown_hit = nullptr) const {
    out.grammar_ = grammar_;
    out.stacks_.clear();
    if (unknown_hit) *unknown_hit = false;
    if (need_ == 0 && b >= 0x80) {  // a lead byte: keep the stacks, remember the prefix
      const int n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
      if (n == 0) return false;
      out.bits_ = b & (0x7Fu >> n);
      out.have_ = 1;
      out.need_ = static_cast<std::uint8_t>(n);
      return out.keep_viable(*this, unknown_hit);
    }
    if (need_ != 0) {
      if ((b & 0xC0) != 0x80) return false;
      out.bits_ = (bits_ << 6) | (b & 0x3Fu);
      out.have_ = static_cast<std::uint8_t>(have_ + 1);
      out.need_ = need_;
      if (out.have_ < out.need_) return out.keep_viable(*this, unknown_hit);
      char32_t lo = 0, hi = 0;
      if (!out.prefix_range(lo, hi)) return false;  // overlong, surrogate or past U+10FFFF
    } else {
      out.bits_ = b;
    }
    const auto cp = static_cast<char32_t>(out.bits_);
    out.bits_ = 0;
    out.have_ = out.need_ = 0;
    for (const GrammarStack& s : stacks_) {
      if (s.empty()) continue;
      if (s.back() == kUnknownContext) {
        if (unknown_hit) *unknown_hit = true;
        continue;
      }
      const Grammar::Element& e = grammar_->element(s.back());
      if (!grammar_->chars(e.index).contains(cp)) continue;
      GrammarStack t = s;
      ++t.back();
      expand(std::move(t), out.stacks_);
    }
    if (out.stacks_.empty()) return false;
    out.normalize();
    return true;
  }

  /// Whether byte `b` would be accepted (no state change; cheaper than step: classes only).
  bool can_accept_byte(std::uint8_t b) const {
    ByteMatcher probe(*grammar_, Empty{});
    return step(b, probe);
  }
  /// Whether the output so far is a complete sentence (some parse is finished, no character open).
  bool is_complete() const {
    return need_ == 0 && std::any_of(stacks_.begin(), stacks_.end(), [](const GrammarStack& s) { return s.empty(); });
  }
  /// Whether no byte and no end is possible (never true of a state reached by accepting bytes).
  bool dead() const { return stacks_.empty(); }
  /// The bytes every continuation must start with (up to `max_bytes`): the matcher state has one
  /// possible next byte and the output is not complete, repeatedly. An engine can append them
  /// without running the model.
  std::string forced_bytes(std::size_t max_bytes = 256) const {
    std::string out;
    ByteMatcher cur = *this, next(*grammar_, Empty{});
    while (out.size() < max_bytes && !cur.is_complete()) {
      int only = -1;
      for (int b = 0; b < 256; ++b) {
        if (!cur.step(static_cast<std::uint8_t>(b), next)) continue;
        if (only >= 0) return out;
        only = b;
      }
      if (only < 0) return out;
      cur.step(static_cast<std::uint8_t>(only), next);
      cur.swap(next);
      out += static_cast<char>(only);
    }
    return out;
  }

  const std::vector<GrammarStack>& stacks() const { return stacks_; }  ///< sorted, unique
  /// Bytes of the UTF-8 character begun but not ended (0 when none).
  std::size_t pending_bytes() const { return have_; }
  const Grammar& grammar() const { return *grammar_; }  ///< the grammar matched against
  /// Same stacks and same open character (the grammar is not compared).
  bool operator==(const ByteMatcher& o) const {
    return stacks_ == o.stacks_ && bits_ == o.bits_ && have_ == o.have_ && need_ == o.need_;
  }
  /// A hash of what operator== compares (the mask walk interns the states it meets by it).
  std::size_t hash() const {
    std::uint64_t h = 1469598103934665603ull ^ (bits_ | std::uint64_t{have_} << 32 | std::uint64_t{need_} << 40);
    for (const GrammarStack& s : stacks_) {
      h = (h ^ s.size()) * 1099511628211ull;
      for (const std::uint32_t v : s) h = (h ^ v) * 1099511628211ull;
    }
    return static_cast<std::size_t>(h);
  }
  /// Exchanges states.
  void swap(ByteMatcher& o) noexcept {
    std::swap(grammar_, o.grammar_);
    stacks_.swap(o.stacks_);
    std::swap(bits_, o.bits_);
    std::swap(have_, o.have_);
    std::swap(need_, o.need_);
  }

  /// Expands `s` until its top is a class, kUnknownContext or nothing, adding each result to `out`
  /// (a reference is replaced by its rule's alternatives, its return position below them; an
  /// alternative's End pops). Iterative: rule chains as deep as the grammar is long are fine.
  void expand(GrammarStack s, std::vector<GrammarStack>& out) const {
    std::vector<GrammarStack> work;
    work.push_back(std::move(s));
    while (!work.empty()) {
      GrammarStack t = std::move(work.back());
      work.pop_back();
      while (true) {
        if (t.empty() || t.back() == kUnknownContext) break;
        const Grammar::Element& e = grammar_->element(t.back());
        if (e.kind == Grammar::Element::Kind::kChars) break;
        if (e.kind == Grammar::Element::Kind::kEnd) {
          t.pop_back();
          continue;
        }
        ++t.back();  // return position; dropped when it is the End (tail call: x* stays flat)
        if (grammar_->element(t.back()).kind == Grammar::Element::Kind::kEnd) t.pop_back();
        const auto alts = grammar_->alternatives(e.index);
        if (alts.empty()) {
          t.clear();
          t.push_back(kDeadStack);
          break;
        }
        for (std::size_t i = 1; i < alts.size(); ++i) {
          GrammarStack u = t;
          u.push_back(alts[i]);
          work.push_back(std::move(u));
        }
        t.push_back(alts[0]);
      }
      if (!(t.size() == 1 && t.back() == kDeadStack)) out.push_back(std::move(t));
      if (out.size() + work.size() > 4 * kMaxGrammarStacks)
        throw std::length_error("inferkit: grammar state needs more than " + std::to_string(kMaxGrammarStacks) +
                                " parse stacks (the grammar is too ambiguous)");
    }
  }

 private:
  struct Empty {};
  ByteMatcher(const Grammar& grammar, Empty) : grammar_(&grammar) {}
  static constexpr std::uint32_t kDeadStack = 0xFFFFFFFEu;  // a rule with no alternative left

  void normalize() {
    std::sort(stacks_.begin(), stacks_.end());
    stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
    if (stacks_.size() > kMaxGrammarStacks)
      throw std::length_error("inferkit: grammar state needs " + std::to_string(stacks_.size()) +
                              " parse stacks, more than " + std::to_string(kMaxGrammarStacks) +
                              " (the grammar is too ambiguous)");
  }

  // The code points whose encodings start with the open prefix, or false when none is valid.
  bool prefix_range(char32_t& lo, char32_t& hi) const {
    const int rest = 6 * (need_ - have_);
    lo = static_cast<char32_t>(bits_ << rest);
    hi = static_cast<char32_t>((bits_ << rest) | ((1u << rest) - 1));
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    static constexpr char32_t kMax[5] = {0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
    lo = std::max(lo, kMin[need_]);
    hi = std::min(hi, kMax[need_]);
    if (lo > hi) return false;
    if (lo >= 0xD800 && hi <= 0xDFFF) return false;  // only surrogates
    return true;
  }

  // Copies the stacks of `from` whose class meets the open prefix's range; false when none.
  bool keep_viable(const ByteMatcher& from, bool* unknown_hit) {
    char32_t lo = 0, hi = 0;
    if (!prefix_range(lo, hi)) return false;
    for (const GrammarStack& s : from.stacks_) {
      if (s.empty()) continue;
      if (s.back() == kUnknownContext) {
        if (unknown_hit) *unknown_hit = true;
        continue;
      }
      const CharClass& c = grammar_->chars(grammar_->element(s.back()).index);
      const bool meets = need_ == 3 ? (lo < 0xD800 && c.intersects(lo, std::min<char32_t>(hi, 0xD7FF))) ||
                                          (hi > 0xDFFF && c.intersects(std::max<char32_t>(lo, 0xE000), hi))
                                    : c.intersects(lo, hi);
      if (meets) stacks_.push_back(s);
    }
    if (stacks_.empty()) return false;
    canonicalize_prefix();
    return true;
  }

  // When every stack's class holds every code point of the open character's length (JSON string
  // content: [^"\\] and the like) and the bytes still to come are unconstrained by UTF-8 (any
  // continuation byte completes a valid character: not after a lead E0, ED, F0 or F4, Unicode 15
  // Table 3-7), which character this is changes nothing: every stack takes it. The open bits are
  // then replaced by one fixed valid prefix of the same length, so the ~400 distinct prefixes of a
  // vocabulary's multi-byte tokens become a handful of equal states (the mask walk interns
  // states: token_mask.hpp).
  void canonicalize_prefix() {
    if (have_ == 1) {
      const std::uint32_t lead = bits_ | (0xFF00u >> need_ & 0xFFu);  // the lead byte back
      if (lead == 0xE0 || lead == 0xED || lead == 0xF0 || lead == 0xF4) return;
    }
    for (const GrammarStack& s : stacks_) {
      const CharClass& c = grammar_->chars(grammar_->element(s.back()).index);
      const bool all = need_ == 2   ? c.covers(0x80, 0x7FF)
                       : need_ == 3 ? c.covers(0x800, 0xD7FF) && c.covers(0xE000, 0xFFFF)
                                    : c.covers(0x10000, kMaxCodePoint);
      if (!all) return;
    }
    // need 2: C2; need 3 and 4: E1 / F1 followed by 80 bytes (all valid leads of their length).
    bits_ = need_ == 2 ? 2u : std::uint32_t{1} << (6 * (have_ - 1));
  }

  const Grammar* grammar_;
  std::vector<GrammarStack> stacks_;
  std::uint32_t bits_ = 0;  // payload bits of the open character
  std::uint8_t have_ = 0;   // its bytes so far
  std::uint8_t need_ = 0;   // its length (0: no character open)
};

}  // namespace inferkit
