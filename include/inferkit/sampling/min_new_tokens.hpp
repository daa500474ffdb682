#pragma once
// Hugging Face's min_new_tokens (MinNewTokensLengthLogitsProcessor): while the request has
// generated fewer than min_new_tokens tokens (`generated`: tokens accepted since the prompt,
// SamplerState::generated() in a chain), every EOS id is -inf. Ids outside the vocabulary are
// std::out_of_range; bad parameters std::invalid_argument.
// The rule (a chain stage, stateful: it reads the generated count): MinNewTokens{8, {2}}; alone
// on a row: apply_min_new_tokens(logits, MinNewTokens{8, {2}}, generated).

#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"

namespace inferkit {

/// HF's min_new_tokens: EOS ids are banned while fewer tokens than this have been generated.
struct MinNewTokens {
  Index min_new_tokens = 0;              ///< >= 0 (0 = off)
  std::vector<TokenId> eos_token_ids{};  ///< the EOS ids (at least one when min_new_tokens > 0)

  /// The registered name, "min_new_tokens": describe() starts with it.
  static constexpr std::string_view kName = "min_new_tokens";
  /// Reads the generated count (StepInputs::generated): the chain needs a SamplerState.
  static constexpr bool kStateful = true;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "min_new_tokens(min_new_tokens)".
  std::string describe() const { return describe_rule(kName, {double(min_new_tokens)}); }
  /// apply_min_new_tokens() with the step's generated count.
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks min_new_tokens' parameters; throws std::invalid_argument.
inline void validate_min_new_tokens(const MinNewTokens& q) {
  require(q.min_new_tokens >= 0, "min_new_tokens", q.min_new_tokens, "must be >= 0");
  require(q.min_new_tokens == 0 || !q.eos_token_ids.empty(), "eos_token_ids.size()", 0,
          "must be > 0 when min_new_tokens > 0");
}

/// Bans the EOS ids while generated < min_new_tokens.
inline void apply_min_new_tokens(Candidates& c, const MinNewTokens& q, Index generated) {
  validate_min_new_tokens(q);
  detail::require_generated(generated);
  detail::check_tokens(q.eos_token_ids, c.vocab_size(), "eos_token_ids");
  if (generated >= q.min_new_tokens) return;
  for (TokenId id : q.eos_token_ids) c.logits()[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
  c.logits_changed();
}

/// In place on one row.
inline void apply_min_new_tokens(std::span<float> logits, const MinNewTokens& q, Index generated) {
  Candidates c(logits);
  apply_min_new_tokens(c, q, generated);
  c.materialize();
}

inline void MinNewTokens::validate() const { validate_min_new_tokens(*this); }
inline void MinNewTokens::apply(Candidates& c, const StepInputs& in) const {
  apply_min_new_tokens(c, *this, in.generated);
}

}  // namespace inferkit
