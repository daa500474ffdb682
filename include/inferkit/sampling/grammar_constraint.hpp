#pragma once
// The grammar stage: keeps only the candidates a grammar allows next (grammar/token_mask.hpp) and
// advances the request's grammar state with every committed token. Add it first in a chain, so
// the mask applies before penalties, temperature and truncation (a truncation that ran first
// could leave no allowed token). Fails closed: when no candidate is allowed, apply() throws
// std::invalid_argument rather than letting a token through.
//
//   auto masker = std::make_shared<const inferkit::TokenMasker>(grammar, trie);
//   inferkit::SamplerChain chain;
//   chain.add(inferkit::GrammarConstraint{masker}).add(inferkit::Temperature{0.8f}).add(inferkit::TopP{0.95f});
//
// Per-request state (GrammarConstraintState, in the SamplerState): the tokens committed since
// admission and the GrammarMatcher they lead to. A copy (a beam, a preempted request) shares the
// matcher until either side commits a token (copy on write); its bytes record the tokens, and a
// state read back from bytes rebuilds the matcher by replaying them on first use (the bytes do not
// name the grammar: the chain's stage does). rollback(n) undoes drafted tokens a speculative
// verifier rejected.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/grammar/grammar_matcher.hpp"
#include "inferkit/grammar/masked_argmax.hpp"
#include "inferkit/grammar/token_bitset.hpp"
#include "inferkit/grammar/token_mask.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/bytes.hpp"

namespace inferkit {

/// A request's grammar state (file comment). Record tag 2 of SamplerState::to_bytes(): the token
/// count (u32) then each id (u32, little-endian).
struct GrammarConstraintState {
  std::vector<TokenId> tokens;                      ///< committed since admission, in order
  mutable std::shared_ptr<GrammarMatcher> matcher;  ///< where `tokens` lead; null until first use

  /// Its record tag in SamplerState's bytes (never reused for another state).
  static constexpr std::uint16_t kTag = 2;
  /// Appends the payload (the tokens).
  void write(std::vector<std::uint8_t>& out) const {
    detail::append_le(out, tokens.size(), 4);
    for (const TokenId t : tokens) detail::append_le(out, static_cast<std::uint32_t>(t), 4);
  }
  /// Reads a payload written by write(); std::invalid_argument for a size that does not match
  /// its count or a negative id.
  static GrammarConstraintState read(std::span<const std::uint8_t> payload) {
    require(payload.size() >= 4, "bytes grammar record size", payload.size(), "must be at least 4");
    const std::uint64_t n = detail::read_le(payload, 0, 4);
    require(payload.size() == 4 + 4 * n, "bytes grammar record size", payload.size(),
            "must be 4 + 4 x its token count (" + std::to_string(n) + ")");
    GrammarConstraintState s;
    s.tokens.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto id = static_cast<std::int32_t>(static_cast<std::uint32_t>(detail::read_le(payload, 4 + 4 * i, 4)));
      require(id >= 0, "bytes grammar token " + std::to_string(i), id, "must be >= 0");
      s.tokens.push_back(id);
    }
    return s;
  }
  /// Equal when the same tokens were committed (the matcher is a function of them).
  friend bool operator==(const GrammarConstraintState& a, const GrammarConstraintState& b) {
    return a.tokens == b.tokens;
  }
};

/// Sets every logit of a token outside `mask` to -inf (the stage's effect on a whole row; mask
/// size must equal the row's: std::invalid_argument).
inline void apply_grammar_mask(std::span<float> logits, const TokenBitset& mask) {
  require(mask.size() == logits.size(), "grammar mask size", mask.size(),
          "must equal the logits size " + std::to_string(logits.size()));
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (!mask.test(static_cast<TokenId>(i))) logits[i] = -std::numeric_limits<float>::infinity();
}

/// The grammar stage's parameters: the masker of the grammar and vocabulary (shared by requests).
struct GrammarConstraint {
  std::shared_ptr<const TokenMasker> masker;  ///< never null (validate())
  /// Keep only the allowed token of largest logit (lowest id among ties): the stage then equals
  /// grammar -> temperature(0), for a chain decoding greedily with no stage after it that
  /// changes logits. On the full row it is one pass of masked_argmax over logits and mask
  /// (grammar/masked_argmax.hpp), not a list of every allowed id.
  bool greedy = false;

  /// The registered name, "grammar": describe() starts with it.
  static constexpr std::string_view kName = "grammar";
  /// Keeps its own State in the request's SamplerState.
  static constexpr bool kStateful = true;
  /// The per-request state (committed tokens and their matcher).
  using State = GrammarConstraintState;
  /// Throws std::invalid_argument when the masker is missing.
  void validate() const { require(masker != nullptr, "grammar masker", "null", "must be given"); }
  /// "grammar(rules)": the grammar's rule count (helper rules included); "grammar(rules, greedy)"
  /// on the greedy path.
  std::string describe() const {
    if (!masker) return "grammar()";
    std::string d = describe_rule(kName, {double(masker->grammar().rule_count())});
    if (greedy) {
      d.pop_back();  // ")"
      d += ", greedy)";
    }
    return d;
  }
  /// No token committed yet.
  State initial_state() const { return {}; }

  /// The matcher of `s`, rebuilt by replaying its tokens when absent (a state read from bytes).
  GrammarMatcher& matcher(const State& s) const {
    if (!s.matcher) {
      auto m = std::make_shared<GrammarMatcher>(masker, std::max<std::size_t>(64, s.tokens.size()));
      for (const TokenId t : s.tokens) m->accept(t);
      s.matcher = std::move(m);
    }
    return *s.matcher;
  }
  /// Keeps the candidates the grammar allows; throws std::invalid_argument when none is.
  void apply(Candidates& c, const StepInputs&, const State& s) const {
    require(c.vocab_size() == static_cast<Index>(masker->trie().vocab_size()), "logits size (grammar stage)",
            c.vocab_size(), "must equal the grammar's vocabulary size " + std::to_string(masker->trie().vocab_size()));
    TokenBitset mask;
    matcher(s).fill_mask(mask);
    if (greedy) {
      TokenId best = -1;
      if (c.dense()) {
        best = masked_argmax(c.logits(), mask);  // -inf never chosen; Candidates refused NaN
      } else {
        float best_v = -std::numeric_limits<float>::infinity();
        for (const TokenId id : c.ids())  // ascending: the first of equal logits stays
          if (mask.test(id) && c.logits()[static_cast<std::size_t>(id)] > best_v)
            best = id, best_v = c.logits()[static_cast<std::size_t>(id)];
      }
      if (best < 0) [[unlikely]]
        throw_none_allowed(mask);
      c.restrict_to({best});
      return;
    }
    std::vector<TokenId> kept;
    if (c.dense()) {  // the first stage: walk the mask's set bits, not the whole row
      const std::span<const float> l = c.logits();
      mask.for_each([&](TokenId id) {
        if (l[static_cast<std::size_t>(id)] > -std::numeric_limits<float>::infinity()) kept.push_back(id);
      });
    } else {
      for (const TokenId id : c.ids())
        if (mask.test(id)) kept.push_back(id);
    }
    if (kept.empty()) [[unlikely]]
      throw_none_allowed(mask);
    c.restrict_to(std::move(kept));
  }
  /// Advances the grammar by the committed token (std::invalid_argument naming it when the grammar
  /// does not allow it: a token forced past the mask).
  void accept(State& s, const AcceptedToken& t) const {
    GrammarMatcher& shared = matcher(s);
    if (s.matcher.use_count() > 1) s.matcher = std::make_shared<GrammarMatcher>(shared);  // copy on write
    s.matcher->accept(t.token);
    s.tokens.push_back(t.token);
  }
  /// Undoes the last `n` committed tokens (speculative decoding rejected them);
  /// std::invalid_argument for more than were committed.
  void rollback(State& s, std::size_t n) const {
    require(n <= s.tokens.size(), "grammar rollback count", n,
            "must be at most the committed tokens (" + std::to_string(s.tokens.size()) + ")");
    GrammarMatcher& shared = matcher(s);
    if (n <= shared.rollback_window()) {
      if (s.matcher.use_count() > 1) s.matcher = std::make_shared<GrammarMatcher>(shared);
      s.matcher->rollback(n);
      s.tokens.resize(s.tokens.size() - n);
    } else {
      s.tokens.resize(s.tokens.size() - n);
      s.matcher.reset();  // replayed on next use
    }
  }

 private:
  [[noreturn, gnu::noinline, gnu::cold]] static void throw_none_allowed(const TokenBitset& mask) {
    throw_invalid_argument("grammar stage candidates", 0,
                           mask.count() == 0
                               ? "no token of the vocabulary continues the output (the grammar's next bytes start "
                                 "no token: a dead end of this vocabulary)"
                               : "none of the candidates is allowed by the grammar (a stage before it removed "
                                 "them all)");
  }
};

}  // namespace inferkit
