#pragma once
// No-repeat n-gram (Paulus et al. 2017; Hugging Face's NoRepeatNGramLogitsProcessor): a token is
// banned (-inf) when it would complete an n-gram that already occurs in the history. With
// history h of length L, every i with h[i .. i+n-1) equal to the last n-1 tokens bans h[i+n-1].
// n == 1 bans every token of the history. n <= 0 is an error.
// The rule (a chain stage): NoRepeatNgram{3}; alone on a row: apply_no_repeat_ngram(logits, history, 3).

#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// Checks the n-gram size (>= 1); throws std::invalid_argument.
inline void validate_no_repeat_ngram(Index n) { require(n >= 1, "no_repeat_ngram_size", n, "must be >= 1"); }

/// The tokens that would repeat an n-gram of the history, in order of discovery.
inline std::vector<TokenId> repeated_ngram_tokens(std::span<const TokenId> history, Index n) {
  validate_no_repeat_ngram(n);
  std::vector<TokenId> banned;
  const Index len = static_cast<Index>(history.size());
  if (len + 1 < n) return banned;
  const Index prefix_start = len - (n - 1);
  for (Index i = 0; i + n <= len; ++i) {
    bool match = true;
    for (Index j = 0; j < n - 1 && match; ++j) match = history[i + j] == history[prefix_start + j];
    if (match) banned.push_back(history[i + n - 1]);
  }
  return banned;
}

inline void apply_no_repeat_ngram(std::span<float> logits, std::span<const TokenId> history, Index n) {
  const Index vocab = static_cast<Index>(logits.size());
  for (std::size_t i = 0; i < history.size(); ++i)
    if (history[i] < 0 || history[i] >= vocab)
      throw_out_of_range("history[" + std::to_string(i) + "]", history[i],
                         "must be in [0, " + std::to_string(vocab) + ")");
  for (TokenId id : repeated_ngram_tokens(history, n))
    logits[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

inline void apply_no_repeat_ngram(Candidates& c, std::span<const TokenId> history, Index n) {
  apply_no_repeat_ngram(c.logits(), history, n);
  c.logits_changed();
}

/// No-repeat n-gram stage.
struct NoRepeatNgram {
  Index n = 0;  ///< n-gram size, >= 1

  /// The registered name, "no_repeat_ngram": describe() starts with it.
  static constexpr std::string_view kName = "no_repeat_ngram";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_no_repeat_ngram(n); }
  /// "no_repeat_ngram(n)".
  std::string describe() const { return describe_rule(kName, {double(n)}); }
  /// apply_no_repeat_ngram() over the step's history.
  void apply(Candidates& c, const StepInputs& in) const { apply_no_repeat_ngram(c, in.history, n); }
};

}  // namespace inferkit
