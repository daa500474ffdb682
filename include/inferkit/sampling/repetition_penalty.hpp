#pragma once
// Repetition penalty (CTRL, Keskar et al. 2019; Hugging Face's rule) over an explicit token
// history: once per distinct token in the history, a positive logit is divided by `penalty`, a
// negative one multiplied by it. Which tokens the history holds (the last N, prompt included or
// not) is the caller's choice; inferkit applies exactly what it is given, and the chain stage
// windows it to its last `last_n` tokens. -inf logits stay -inf. History ids outside the
// vocabulary are std::out_of_range.
// The rule (a chain stage): RepetitionPenalty{1.1f, 64}; alone on a row:
// apply_repetition_penalty(logits, history, 1.1f).

#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/penalty_history.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// Checks a repetition penalty (finite, > 0); throws std::invalid_argument.
inline void validate_repetition_penalty(float penalty) {
  require(std::isfinite(penalty) && penalty > 0.0f, "repetition_penalty", penalty, "must be finite and > 0 (1 = off)");
}

inline void apply_repetition_penalty(std::span<float> logits, std::span<const TokenId> history, float penalty) {
  validate_repetition_penalty(penalty);
  const auto counts = detail::token_counts(history, static_cast<Index>(logits.size()));
  if (penalty == 1.0f) return;
  for (const auto& [id, n] : counts) {
    float& x = logits[static_cast<std::size_t>(id)];
    x = x > 0.0f ? x / penalty : x * penalty;
  }
}

inline void apply_repetition_penalty(Candidates& c, std::span<const TokenId> history, float penalty) {
  apply_repetition_penalty(c.logits(), history, penalty);
  c.logits_changed();
}

/// Repetition penalty over the last `last_n` history tokens.
struct RepetitionPenalty {
  float penalty = 1.0f;  ///< > 0 (1 = off)
  Index last_n = -1;     ///< history window: -1 = all passed, 0 = none

  /// The registered name, "repetition_penalty": describe() starts with it.
  static constexpr std::string_view kName = "repetition_penalty";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const {
    validate_repetition_penalty(penalty);
    detail::validate_penalty_last_n(last_n);
  }
  /// "repetition_penalty(penalty)", with ", last_n" when last_n >= 0.
  std::string describe() const {
    return last_n < 0 ? describe_rule(kName, {penalty}) : describe_rule(kName, {penalty, double(last_n)});
  }
  /// apply_repetition_penalty() over the last `last_n` tokens of the step's history (none when 0).
  void apply(Candidates& c, const StepInputs& in) const {
    if (last_n != 0) apply_repetition_penalty(c, history_tail(in.history, last_n), penalty);
  }
};

}  // namespace inferkit
