#pragma once
// An allow-list: every token not listed becomes -inf (the listed ones that are still candidates
// stay). Ids outside the vocabulary are std::out_of_range.
// The rule (a chain stage): AllowedTokens{{5, 6, 7}}; alone on a row:
// apply_allowed_tokens(logits, allowed).

#include <algorithm>
#include <iterator>
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

/// Allowed-tokens stage: the listed ids are kept, all others set to -inf.
struct AllowedTokens {
  std::vector<TokenId> tokens{};  ///< allowed ids

  /// The registered name, "allowed_tokens": describe() starts with it.
  static constexpr std::string_view kName = "allowed_tokens";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Nothing to check before the vocabulary is known: the ids are checked when applied (std::out_of_range).
  void validate() const {}
  /// "allowed_tokens(n)", n = the number of allowed ids.
  std::string describe() const { return describe_rule(kName, {double(tokens.size())}); }
  /// apply_allowed_tokens() on the candidates: every id not listed becomes -inf.
  void apply(Candidates& c, const StepInputs&) const { apply_allowed_tokens(c, tokens); }
};

}  // namespace inferkit
