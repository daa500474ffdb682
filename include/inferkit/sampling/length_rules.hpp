#pragma once
// Hugging Face's rules that depend on how many tokens the request has generated (`generated`:
// tokens accepted since the prompt, SamplerState::generated() in a chain):
//   MinNewTokens (MinNewTokensLengthLogitsProcessor): while generated < min_new_tokens, every EOS
//     id is -inf.
//   ExponentialDecayLengthPenalty: once generated > start_index, every EOS logit l becomes
//     l + |l| * (decay_factor^(generated - start_index) - 1), which raises it for any sign when
//     decay_factor > 1 (HF's formula; its regulation start is start_index + prompt length and
//     cur_len = prompt length + generated). A -inf EOS stays -inf; the result is clamped to the
//     largest float so the row stays finite.
//   BeginSuppressTokens (SuppressTokensAtBeginLogitsProcessor): at the first generated token
//     (generated == 0) the listed tokens are -inf.
// Ids outside the vocabulary are std::out_of_range; bad parameters std::invalid_argument.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/token_masks.hpp"

namespace inferkit {

/// HF's min_new_tokens: EOS ids are banned while fewer tokens than this have been generated.
struct MinNewTokens {
  Index min_new_tokens = 0;           ///< >= 0 (0 = off)
  std::vector<TokenId> eos_tokens{};  ///< the EOS ids (at least one when min_new_tokens > 0)
};

/// HF's exponential_decay_length_penalty = (start_index, decay_factor).
struct ExponentialDecayLengthPenalty {
  Index start_index = 0;              ///< generated tokens before the boost starts, >= 0
  float decay_factor = 1.0f;          ///< > 0; 1 = off, > 1 makes EOS more likely every step
  std::vector<TokenId> eos_tokens{};  ///< the EOS ids
};

/// HF's begin_suppress_tokens: banned at the first generated position only.
struct BeginSuppressTokens {
  std::vector<TokenId> tokens{};  ///< ids banned when generated == 0
};

/// Checks min_new_tokens' parameters; throws std::invalid_argument.
inline void validate_min_new_tokens(const MinNewTokens& q) {
  require(q.min_new_tokens >= 0, "min_new_tokens", q.min_new_tokens, "must be >= 0");
  require(q.min_new_tokens == 0 || !q.eos_tokens.empty(), "eos_tokens.size()", 0,
          "must be > 0 when min_new_tokens > 0");
}

/// Checks the decay penalty's parameters; throws std::invalid_argument.
inline void validate_exponential_decay(const ExponentialDecayLengthPenalty& q) {
  require(q.start_index >= 0, "exponential_decay_start_index", q.start_index, "must be >= 0");
  require(std::isfinite(q.decay_factor) && q.decay_factor > 0.0f, "exponential_decay_factor", q.decay_factor,
          "must be finite and > 0");
}

namespace detail {
inline void require_generated(Index generated) { require(generated >= 0, "generated", generated, "must be >= 0"); }
inline void check_tokens(std::span<const TokenId> ids, Index vocab, const char* name) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab) check_token(ids[i], vocab, std::string(name) + "[" + std::to_string(i) + "]");
}
}  // namespace detail

/// Bans the EOS ids while generated < min_new_tokens.
inline void apply_min_new_tokens(Candidates& c, const MinNewTokens& q, Index generated) {
  validate_min_new_tokens(q);
  detail::require_generated(generated);
  detail::check_tokens(q.eos_tokens, c.vocab_size(), "eos_tokens");
  if (generated >= q.min_new_tokens) return;
  for (TokenId id : q.eos_tokens) c.logits()[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
  c.logits_changed();
}

/// Raises the EOS logits once generated > start_index (see the header comment).
inline void apply_exponential_decay_length_penalty(Candidates& c, const ExponentialDecayLengthPenalty& q,
                                                   Index generated) {
  validate_exponential_decay(q);
  detail::require_generated(generated);
  detail::check_tokens(q.eos_tokens, c.vocab_size(), "eos_tokens");
  if (generated <= q.start_index || q.decay_factor == 1.0f) return;
  const double growth = std::pow(double(q.decay_factor), double(generated - q.start_index)) - 1.0;
  std::vector<TokenId> eos(q.eos_tokens);
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());  // HF assigns once per id
  const auto x = c.logits();
  constexpr double kMax = std::numeric_limits<float>::max();
  for (TokenId id : eos) {
    float& l = x[static_cast<std::size_t>(id)];
    if (!std::isfinite(l)) continue;
    const double v = double(l) + std::abs(double(l)) * growth;
    l = static_cast<float>(std::clamp(v, -kMax, kMax));
  }
  c.logits_changed();
}

/// Bans the listed tokens when generated == 0.
inline void apply_begin_suppress_tokens(Candidates& c, const BeginSuppressTokens& q, Index generated) {
  detail::require_generated(generated);
  detail::check_tokens(q.tokens, c.vocab_size(), "begin_suppress_tokens");
  if (generated != 0) return;
  for (TokenId id : q.tokens) c.logits()[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
  c.logits_changed();
}

/// In place on one row.
inline void apply_min_new_tokens(std::span<float> logits, const MinNewTokens& q, Index generated) {
  Candidates c(logits);
  apply_min_new_tokens(c, q, generated);
  c.materialize();
}

/// In place on one row.
inline void apply_exponential_decay_length_penalty(std::span<float> logits, const ExponentialDecayLengthPenalty& q,
                                                   Index generated) {
  Candidates c(logits);
  apply_exponential_decay_length_penalty(c, q, generated);
  c.materialize();
}

/// In place on one row.
inline void apply_begin_suppress_tokens(std::span<float> logits, const BeginSuppressTokens& q, Index generated) {
  Candidates c(logits);
  apply_begin_suppress_tokens(c, q, generated);
  c.materialize();
}

}  // namespace inferkit
