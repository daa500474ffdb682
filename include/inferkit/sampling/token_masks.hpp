#pragma once
// Per-token edits: additive logit bias (OpenAI's logit_bias; a bias of -inf bans), banned
// tokens (-inf), and an allow-list (every other token -inf). Ids outside the vocabulary are
// std::out_of_range; NaN or +inf biases are std::invalid_argument.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// An additive bias on one token's logit.
struct TokenBias {
  TokenId token = 0;  ///< token id
  float bias = 0.0f;  ///< added to its logit
};

namespace detail {
inline void check_token(TokenId id, Index vocab, const std::string& name) {
  if (id < 0 || id >= vocab) throw_out_of_range(name, id, "must be in [0, " + std::to_string(vocab) + ")");
}
}  // namespace detail

inline void apply_logit_bias(std::span<float> logits, std::span<const TokenBias> biases) {
  const Index vocab = static_cast<Index>(logits.size());
  for (std::size_t i = 0; i < biases.size(); ++i) {
    detail::check_token(biases[i].token, vocab, "logit_bias[" + std::to_string(i) + "].token");
    require(!std::isnan(biases[i].bias) && biases[i].bias != std::numeric_limits<float>::infinity(),
            "logit_bias[" + std::to_string(i) + "].bias", biases[i].bias, "must be finite or -inf");
  }
  for (const TokenBias& b : biases) logits[static_cast<std::size_t>(b.token)] += b.bias;
}

inline void apply_banned_tokens(std::span<float> logits, std::span<const TokenId> banned) {
  const Index vocab = static_cast<Index>(logits.size());
  for (std::size_t i = 0; i < banned.size(); ++i)
    detail::check_token(banned[i], vocab, "banned[" + std::to_string(i) + "]");
  for (TokenId id : banned) logits[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

inline void apply_logit_bias(Candidates& c, std::span<const TokenBias> biases) {
  apply_logit_bias(c.logits(), biases);
  c.logits_changed();
}

inline void apply_banned_tokens(Candidates& c, std::span<const TokenId> banned) {
  apply_banned_tokens(c.logits(), banned);
  c.logits_changed();
}

/// Keeps only the allowed tokens that are still candidates.
inline void apply_allowed_tokens(Candidates& c, std::span<const TokenId> allowed) {
  const Index vocab = c.vocab_size();
  for (std::size_t i = 0; i < allowed.size(); ++i)
    detail::check_token(allowed[i], vocab, "allowed[" + std::to_string(i) + "]");
  std::vector<TokenId> ids(allowed.begin(), allowed.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const auto x = c.logits();
  std::erase_if(ids,
                [&](TokenId id) { return x[static_cast<std::size_t>(id)] == -std::numeric_limits<float>::infinity(); });
  if (!c.dense()) {
    std::vector<TokenId> both;
    std::set_intersection(ids.begin(), ids.end(), c.ids().begin(), c.ids().end(), std::back_inserter(both));
    ids = std::move(both);
  }
  c.restrict_to(std::move(ids));
}

inline void apply_allowed_tokens(std::span<float> logits, std::span<const TokenId> allowed) {
  Candidates c(logits);
  apply_allowed_tokens(c, allowed);
  c.materialize();
}

}  // namespace inferkit
