#pragma once
// Hugging Face's sequence bias (SequenceBiasLogitsProcessor) over the request's history: each
// entry (sequence s, bias b) adds b to the logit of s's last token when s's prefix s[0 .. n-1) is
// what the history ends with; a one-token sequence always applies. As in Hugging Face, a sequence
// of n > 1 tokens is considered only when the history holds at least n tokens, and the biases of
// every matching entry are summed before they are added (score + sum of biases). Bad words
// (bad_words.hpp) are the same match with bias -inf.
// The history is what the caller passes (prompt and generated tokens, or their tail): only its
// last (longest sequence - 1) tokens matter. Cost: O(sum of sequence lengths) per call.
// The rule (a chain stage): SequenceBias{{{{5, 6}, -2.0f}}}; alone on a row:
// apply_sequence_bias(logits, history, SequenceBias{{{{5, 6}, -2.0f}}}).

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"

namespace inferkit {

/// One biased sequence.
struct SequenceBiasEntry {
  std::vector<TokenId> sequence{};  ///< non-empty token ids
  float bias = 0.0f;                ///< added to the last token's logit; finite or -inf
};

/// HF's sequence_bias.
struct SequenceBias {
  std::vector<SequenceBiasEntry> entries{};  ///< the biased sequences

  /// The registered name, "sequence_bias": describe() starts with it.
  static constexpr std::string_view kName = "sequence_bias";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "sequence_bias(n)", n = the number of entries.
  std::string describe() const { return describe_rule(kName, {double(entries.size())}); }
  /// apply_sequence_bias() over the step's history.
  void apply(Candidates& c, const StepInputs& in) const;
};

namespace detail {
/// Checks one sequence (non-empty, ids >= 0); `name` builds the parameter name, on failure only.
template <class Name>
void validate_sequence(const std::vector<TokenId>& s, Name&& name) {
  if (s.empty()) throw_invalid_argument(name() + ".size()", 0, "must be > 0");
  for (std::size_t j = 0; j < s.size(); ++j)
    if (s[j] < 0) throw_invalid_argument(name() + "[" + std::to_string(j) + "]", s[j], "must be >= 0");
}

/// True when the history ends with s's prefix (all but s's last token) and, for n > 1, holds at
/// least n = s.size() tokens (Hugging Face's condition).
inline bool prefix_just_appeared(std::span<const TokenId> history, const std::vector<TokenId>& s) {
  const std::size_t n = s.size();
  if (n == 1) return true;
  if (history.size() < n) return false;
  const std::size_t start = history.size() - (n - 1);
  for (std::size_t j = 0; j + 1 < n; ++j)
    if (history[start + j] != s[j]) return false;
  return true;
}
}  // namespace detail

/// Checks the entries; throws std::invalid_argument naming the bad one.
inline void validate_sequence_bias(const SequenceBias& q) {
  for (std::size_t i = 0; i < q.entries.size(); ++i) {
    const auto name = [i] { return "sequence_bias[" + std::to_string(i) + "]"; };
    detail::validate_sequence(q.entries[i].sequence, [&] { return name() + ".sequence"; });
    const float b = q.entries[i].bias;
    if (std::isnan(b) || b == std::numeric_limits<float>::infinity())
      throw_invalid_argument(name() + ".bias", b, "must be finite or -inf");
  }
}

/// Applies the sequence biases given the history.
inline void apply_sequence_bias(Candidates& c, std::span<const TokenId> history, const SequenceBias& q) {
  validate_sequence_bias(q);
  const Index vocab = c.vocab_size();
  for (std::size_t i = 0; i < q.entries.size(); ++i)
    for (std::size_t j = 0; j < q.entries[i].sequence.size(); ++j)
      if (const TokenId t = q.entries[i].sequence[j]; t >= vocab)  // the name is built on failure only
        detail::check_token(t, vocab, "sequence_bias[" + std::to_string(i) + "].sequence[" + std::to_string(j) + "]");
  // Sum the matching biases per token first (HF builds a bias row), then add once.
  std::vector<std::pair<TokenId, float>> add;
  for (const SequenceBiasEntry& e : q.entries) {
    if (!detail::prefix_just_appeared(history, e.sequence)) continue;
    const TokenId t = e.sequence.back();
    bool found = false;
    for (auto& [id, b] : add)
      if (id == t) {
        b += e.bias;
        found = true;
      }
    if (!found) add.emplace_back(t, e.bias);
  }
  if (add.empty()) return;
  for (const auto& [id, b] : add) {  // clamped below +inf: a row holds no +inf
    float& l = c.logits()[static_cast<std::size_t>(id)];
    l = std::min(l + b, std::numeric_limits<float>::max());
  }
  c.logits_changed();
}

/// In place on one row.
inline void apply_sequence_bias(std::span<float> logits, std::span<const TokenId> history, const SequenceBias& q) {
  Candidates c(logits);
  apply_sequence_bias(c, history, q);
  c.materialize();
}

inline void SequenceBias::validate() const { validate_sequence_bias(*this); }
inline void SequenceBias::apply(Candidates& c, const StepInputs& in) const {
  apply_sequence_bias(c, in.history, *this);
}

}  // namespace inferkit
