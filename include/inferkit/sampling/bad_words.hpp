#pragma once
// Hugging Face's bad words (NoBadWordsLogitsProcessor, bad_words_ids) over the request's
// history: the last token of a banned sequence whose prefix just appeared is -inf (sequence
// bias's match, sequence_bias.hpp, with bias -inf). As in Hugging Face, a one-token bad word
// equal to one of `eos_token_ids` is ignored (EOS stays reachable).
// The rule (a chain stage): BadWords{{{5, 6}}, {2}}; alone on a row:
// apply_bad_words(logits, history, BadWords{{{5, 6}}, {2}}).

#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"
#include "inferkit/sampling/sequence_bias.hpp"

namespace inferkit {

/// HF's bad_words_ids.
struct BadWords {
  std::vector<std::vector<TokenId>> sequences{};  ///< each non-empty
  std::vector<TokenId> eos_token_ids{};           ///< one-token bad words equal to these are ignored

  /// The registered name, "bad_words": describe() starts with it.
  static constexpr std::string_view kName = "bad_words";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "bad_words(n)", n = the number of sequences.
  std::string describe() const { return describe_rule(kName, {double(sequences.size())}); }
  /// apply_bad_words() over the step's history (a sequence's last token is banned where the history ends in its
  /// prefix).
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks the bad words; throws std::invalid_argument naming the bad one.
inline void validate_bad_words(const BadWords& q) {
  for (std::size_t i = 0; i < q.sequences.size(); ++i)
    detail::validate_sequence(q.sequences[i], [i] { return "bad_words[" + std::to_string(i) + "]"; });
}

/// Bans the last token of each bad word whose prefix just appeared.
inline void apply_bad_words(Candidates& c, std::span<const TokenId> history, const BadWords& q) {
  validate_bad_words(q);
  const Index vocab = c.vocab_size();
  for (std::size_t i = 0; i < q.sequences.size(); ++i)
    for (std::size_t j = 0; j < q.sequences[i].size(); ++j)
      if (const TokenId t = q.sequences[i][j]; t >= vocab)  // the name is built on failure only
        detail::check_token(t, vocab, "bad_words[" + std::to_string(i) + "][" + std::to_string(j) + "]");
  bool changed = false;
  for (const auto& s : q.sequences) {
    if (s.size() == 1 && std::find(q.eos_token_ids.begin(), q.eos_token_ids.end(), s[0]) != q.eos_token_ids.end())
      continue;
    if (!detail::prefix_just_appeared(history, s)) continue;
    c.logits()[static_cast<std::size_t>(s.back())] = -std::numeric_limits<float>::infinity();
    changed = true;
  }
  if (changed) c.logits_changed();
}

/// In place on one row.
inline void apply_bad_words(std::span<float> logits, std::span<const TokenId> history, const BadWords& q) {
  Candidates c(logits);
  apply_bad_words(c, history, q);
  c.materialize();
}

inline void BadWords::validate() const { validate_bad_words(*this); }
inline void BadWords::apply(Candidates& c, const StepInputs& in) const { apply_bad_words(c, in.history, *this); }

}  // namespace inferkit
