#pragma once
// Banned tokens: every listed id becomes -inf. Ids outside the vocabulary are std::out_of_range.
// The rule (a chain stage): BannedTokens{{13, 29871}}; alone on a row:
// apply_banned_tokens(logits, banned).

#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

inline void apply_banned_tokens(std::span<float> logits, std::span<const TokenId> banned) {
  const Index vocab = static_cast<Index>(logits.size());
  for (std::size_t i = 0; i < banned.size(); ++i)
    detail::check_token(banned[i], vocab, "banned[" + std::to_string(i) + "]");
  for (TokenId id : banned) logits[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

inline void apply_banned_tokens(Candidates& c, std::span<const TokenId> banned) {
  apply_banned_tokens(c.logits(), banned);
  c.logits_changed();
}

/// Banned-tokens stage: the listed ids are set to -inf.
struct BannedTokens {
  std::vector<TokenId> tokens{};  ///< banned ids

  /// The registered name, "banned_tokens": describe() starts with it.
  static constexpr std::string_view kName = "banned_tokens";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Nothing to check before the vocabulary is known: the ids are checked when applied (std::out_of_range).
  void validate() const {}
  /// "banned_tokens(n)", n = the number of banned ids.
  std::string describe() const { return describe_rule(kName, {double(tokens.size())}); }
  /// apply_banned_tokens() on the candidates: the listed ids become -inf.
  void apply(Candidates& c, const StepInputs&) const { apply_banned_tokens(c, tokens); }
};

}  // namespace inferkit
