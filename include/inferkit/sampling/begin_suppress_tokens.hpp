#pragma once
// Hugging Face's begin_suppress_tokens (SuppressTokensAtBeginLogitsProcessor): at the first
// generated token (`generated` == 0: tokens accepted since the prompt, SamplerState::generated()
// in a chain) the listed tokens are -inf. Ids outside the vocabulary are std::out_of_range;
// negative ids in the stage std::invalid_argument.
// The rule (a chain stage, stateful: it reads the generated count): BeginSuppressTokens{{2, 13}};
// alone on a row: apply_begin_suppress_tokens(logits, BeginSuppressTokens{{2, 13}}, generated).

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

/// HF's begin_suppress_tokens: banned at the first generated position only.
struct BeginSuppressTokens {
  std::vector<TokenId> tokens{};  ///< ids banned when generated == 0

  /// The registered name, "begin_suppress_tokens": describe() starts with it.
  static constexpr std::string_view kName = "begin_suppress_tokens";
  /// Reads the generated count (StepInputs::generated): the chain needs a SamplerState.
  static constexpr bool kStateful = true;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "begin_suppress_tokens(n)", n = the number of ids.
  std::string describe() const { return describe_rule(kName, {double(tokens.size())}); }
  /// apply_begin_suppress_tokens() with the step's generated count (acts at generated == 0 only).
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks the listed ids (>= 0; the vocabulary is checked when applied); throws
/// std::invalid_argument naming the entry.
inline void validate_begin_suppress_tokens(std::span<const TokenId> tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    require(tokens[i] >= 0, "begin_suppress_tokens[" + std::to_string(i) + "]", tokens[i], "must be >= 0");
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
inline void apply_begin_suppress_tokens(std::span<float> logits, const BeginSuppressTokens& q, Index generated) {
  Candidates c(logits);
  apply_begin_suppress_tokens(c, q, generated);
  c.materialize();
}

inline void BeginSuppressTokens::validate() const { validate_begin_suppress_tokens(tokens); }
inline void BeginSuppressTokens::apply(Candidates& c, const StepInputs& in) const {
  apply_begin_suppress_tokens(c, *this, in.generated);
}

}  // namespace inferkit
