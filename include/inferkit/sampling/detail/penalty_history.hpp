#pragma once
// What the repetition and frequency / presence penalties share: the (token, count) pairs of a
// history and the check of their history window.

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit::detail {

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

/// Checks a penalty's history window (`penalty_last_n`: -1 = all, 0 = none); throws
/// std::invalid_argument.
inline void validate_penalty_last_n(Index last_n) {
  require(last_n >= -1, "penalty_last_n", last_n, "must be >= -1 (-1 = all of the history, 0 = none)");
}

}  // namespace inferkit::detail
