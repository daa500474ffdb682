#pragma once
// Which token positions of a sequence a steering edit touches. Positions are 0-based indices
// into the sequence as the model sees it (BOS included when the model uses one). Every
// selection is an interval of positions:
//   all        [0, inf)
//   prompt     [0, prompt_length)
//   generated  [prompt_length, inf)   -- the tokens fed after the prompt; the first generated
//                                        token is predicted from the last prompt position, so
//                                        "generated only" first changes the second one
//   range      [begin, end)
// prompt_length belongs to the sequence, not to the selection (SequenceRows), so one plan
// serves many sequences.

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// A contiguous run of rows of one sequence: row r of the hidden-state matrix handed to a
/// steering call sits at position first_position + r.
struct SequenceRows {
  /// Position of the first row (>= 0).
  Index first_position = 0;
  /// Number of prompt tokens of the sequence (>= 0), BOS included if the model feeds one:
  /// positions below it are prompt, the rest generated.
  Index prompt_length = 0;

  /// Checks first_position >= 0 and prompt_length >= 0.
  /// @throws std::invalid_argument naming the field.
  void validate() const {
    require(first_position >= 0, "first_position", first_position, "must be >= 0");
    require(prompt_length >= 0, "prompt_length", prompt_length, "must be >= 0");
  }
};

/// The token positions a steering edit applies to (see the file comment).
struct PositionSelection {
  /// Which interval of positions.
  enum class Kind {
    kAll,        ///< every position
    kPrompt,     ///< positions < prompt_length
    kGenerated,  ///< positions >= prompt_length
    kRange,      ///< positions in [begin, end)
  };
  /// Which interval of positions.
  Kind kind = Kind::kAll;
  /// kRange only: first selected position (>= 0).
  Index begin = 0;
  /// kRange only: one past the last selected position (>= begin).
  Index end = 0;

  /// Every position.
  static PositionSelection all() { return {}; }
  /// The prompt's positions.
  static PositionSelection prompt() { return {.kind = Kind::kPrompt}; }
  /// The positions after the prompt.
  static PositionSelection generated() { return {.kind = Kind::kGenerated}; }
  /// Positions [first, last_exclusive).
  static PositionSelection range(Index first, Index last_exclusive) {
    return {.kind = Kind::kRange, .begin = first, .end = last_exclusive};
  }

  /// Checks a kRange selection: 0 <= begin <= end.
  /// @throws std::invalid_argument naming begin or end.
  void validate() const {
    if (kind != Kind::kRange) return;
    require(begin >= 0, "positions.begin", begin, "must be >= 0");
    require(end >= begin, "positions.end", end, "must be >= positions.begin (" + std::to_string(begin) + ")");
  }

  /// The selected positions [lo, hi) of a sequence with `prompt_length` prompt tokens.
  std::pair<Index, Index> interval(Index prompt_length) const {
    constexpr Index kEnd = std::numeric_limits<Index>::max();
    switch (kind) {
      case Kind::kPrompt:
        return {0, prompt_length};
      case Kind::kGenerated:
        return {prompt_length, kEnd};
      case Kind::kRange:
        return {begin, end};
      case Kind::kAll:
        break;
    }
    return {0, kEnd};
  }

  /// Whether `position` is selected in a sequence with `prompt_length` prompt tokens.
  bool contains(Index position, Index prompt_length) const {
    const auto [lo, hi] = interval(prompt_length);
    return position >= lo && position < hi;
  }

  /// Rows [first, last) of `rows` (positions rows.first_position + r) that are selected.
  std::pair<Index, Index> selected_rows(SequenceRows seq, Index rows) const {
    const auto [lo, hi] = interval(seq.prompt_length);
    // Clamp in position space first: hi may be "infinite" and must not overflow.
    const Index first = std::clamp(lo - seq.first_position, Index{0}, rows);
    const Index last = hi - seq.first_position >= rows ? rows : std::clamp(hi - seq.first_position, Index{0}, rows);
    return {first, std::max(first, last)};
  }
};

}  // namespace inferkit
