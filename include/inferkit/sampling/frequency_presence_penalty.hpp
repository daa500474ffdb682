#pragma once
// Frequency and presence penalties (OpenAI) over an explicit token history:
//   logit -= count * frequency + (count > 0) * presence,
// count = the token's occurrences in the history (the chain stage windows it to its last
// `last_n` tokens). -inf logits stay -inf. History ids outside the vocabulary are
// std::out_of_range.
// The rule (a chain stage): FrequencyPresencePenalty{0.2f, 0.1f, 64}; alone on a row:
// apply_frequency_presence_penalty(logits, history, 0.2f, 0.1f).

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

/// Checks the two penalties (finite); throws std::invalid_argument.
inline void validate_frequency_presence_penalty(float frequency, float presence) {
  require(std::isfinite(frequency), "frequency_penalty", frequency, "must be finite");
  require(std::isfinite(presence), "presence_penalty", presence, "must be finite");
}

inline void apply_frequency_presence_penalty(std::span<float> logits, std::span<const TokenId> history, float frequency,
                                             float presence) {
  validate_frequency_presence_penalty(frequency, presence);
  const auto counts = detail::token_counts(history, static_cast<Index>(logits.size()));
  if (frequency == 0.0f && presence == 0.0f) return;
  for (const auto& [id, n] : counts)
    logits[static_cast<std::size_t>(id)] -= static_cast<float>(n) * frequency + presence;
}

inline void apply_frequency_presence_penalty(Candidates& c, std::span<const TokenId> history, float frequency,
                                             float presence) {
  apply_frequency_presence_penalty(c.logits(), history, frequency, presence);
  c.logits_changed();
}

/// Frequency / presence penalties over the last `last_n` history tokens.
struct FrequencyPresencePenalty {
  float frequency = 0.0f;  ///< subtracted per occurrence
  float presence = 0.0f;   ///< subtracted once when present
  Index last_n = -1;       ///< history window: -1 = all passed, 0 = none

  /// The registered name, "frequency_presence_penalty": describe() starts with it.
  static constexpr std::string_view kName = "frequency_presence_penalty";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const {
    validate_frequency_presence_penalty(frequency, presence);
    detail::validate_penalty_last_n(last_n);
  }
  /// "frequency_presence_penalty(frequency, presence)", with ", last_n" when last_n >= 0.
  std::string describe() const {
    return last_n < 0 ? describe_rule(kName, {frequency, presence})
                      : describe_rule(kName, {frequency, presence, double(last_n)});
  }
  /// apply_frequency_presence_penalty() over the last `last_n` tokens of the step's history (none when 0).
  void apply(Candidates& c, const StepInputs& in) const {
    if (last_n != 0) apply_frequency_presence_penalty(c, history_tail(in.history, last_n), frequency, presence);
  }
};

}  // namespace inferkit
