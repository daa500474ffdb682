#pragma once
// Checks the token-list rules share: ids against the vocabulary (std::out_of_range naming the
// list entry) and the generated-token count (std::invalid_argument).

#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit::detail {

/// Throws std::out_of_range naming `name` unless 0 <= id < vocab.
inline void check_token(TokenId id, Index vocab, const std::string& name) {
  if (id < 0 || id >= vocab) throw_out_of_range(name, id, "must be in [0, " + std::to_string(vocab) + ")");
}

/// Checks every id of a list; the entry's name ("name[i]") is built on failure only.
inline void check_tokens(std::span<const TokenId> ids, Index vocab, const char* name) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab) check_token(ids[i], vocab, std::string(name) + "[" + std::to_string(i) + "]");
}

/// Throws std::invalid_argument for a negative generated-token count.
inline void require_generated(Index generated) { require(generated >= 0, "generated", generated, "must be >= 0"); }

}  // namespace inferkit::detail
