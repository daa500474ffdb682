#pragma once
// Penalties over an explicit token history. Which tokens the history holds (the last N,
// prompt included or not) is the caller's choice; inferkit applies exactly what it is given.
//   Repetition (CTRL, Keskar et al. 2019; Hugging Face's rule): once per distinct token in the
//     history, a positive logit is divided by `penalty`, a negative one multiplied by it.
//   Frequency / presence (OpenAI): logit -= count * frequency + (count > 0) * presence.
// -inf logits stay -inf. History ids outside the vocabulary are std::out_of_range.

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

namespace detail {
/// (token, count) pairs of a history, ascending by token; ids checked against the vocabulary.
inline std::vector<std::pair<TokenId, Index>> token_counts(std::span<const TokenId> history, Index vocab) {
  std::vector<TokenId> sorted(history.begin(), history.end());
  for (std::size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] < 0 || sorted[i] >= vocab)
      throw_out_of_range("history[" + std::to_string(i) + "]", sorted[i],
                         "must be in [0, " + std::to_string(vocab) + ")");
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<TokenId, Index>> counts;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    counts.emplace_back(sorted[i], static_cast<Index>(j - i));
    i = j;
  }
  return counts;
}
}  // namespace detail

inline void apply_repetition_penalty(std::span<float> logits, std::span<const TokenId> history, float penalty) {
  require(std::isfinite(penalty) && penalty > 0.0f, "repetition_penalty", penalty, "must be finite and > 0 (1 = off)");
  const auto counts = detail::token_counts(history, static_cast<Index>(logits.size()));
  if (penalty == 1.0f) return;
  for (const auto& [id, n] : counts) {
    float& x = logits[static_cast<std::size_t>(id)];
    x = x > 0.0f ? x / penalty : x * penalty;
  }
}

inline void apply_frequency_presence_penalty(std::span<float> logits, std::span<const TokenId> history, float frequency,
                                             float presence) {
  require(std::isfinite(frequency), "frequency_penalty", frequency, "must be finite");
  require(std::isfinite(presence), "presence_penalty", presence, "must be finite");
  const auto counts = detail::token_counts(history, static_cast<Index>(logits.size()));
  if (frequency == 0.0f && presence == 0.0f) return;
  for (const auto& [id, n] : counts)
    logits[static_cast<std::size_t>(id)] -= static_cast<float>(n) * frequency + presence;
}

inline void apply_repetition_penalty(Candidates& c, std::span<const TokenId> history, float penalty) {
  apply_repetition_penalty(c.logits(), history, penalty);
  c.logits_changed();
}

inline void apply_frequency_presence_penalty(Candidates& c, std::span<const TokenId> history, float frequency,
                                             float presence) {
  apply_frequency_presence_penalty(c.logits(), history, frequency, presence);
  c.logits_changed();
}

}  // namespace inferkit
