#pragma once
// Additive logit bias (OpenAI's logit_bias): each (token, bias) pair adds bias to the token's
// logit; a bias of -inf bans the token. Ids outside the vocabulary are std::out_of_range; NaN or
// +inf biases are std::invalid_argument.
// The rule (a chain stage): LogitBias{{{13, -2.0f}}}; alone on a row:
// apply_logit_bias(logits, biases).

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// An additive bias on one token's logit.
struct TokenBias {
  TokenId token = 0;  ///< token id
  float bias = 0.0f;  ///< added to its logit
};

inline void apply_logit_bias(std::span<float> logits, std::span<const TokenBias> biases) {
  const Index vocab = static_cast<Index>(logits.size());
  for (std::size_t i = 0; i < biases.size(); ++i) {
    detail::check_token(biases[i].token, vocab, "logit_bias[" + std::to_string(i) + "].token");
    require(!std::isnan(biases[i].bias) && biases[i].bias != std::numeric_limits<float>::infinity(),
            "logit_bias[" + std::to_string(i) + "].bias", biases[i].bias, "must be finite or -inf");
  }
  for (const TokenBias& b : biases) logits[static_cast<std::size_t>(b.token)] += b.bias;
}

inline void apply_logit_bias(Candidates& c, std::span<const TokenBias> biases) {
  apply_logit_bias(c.logits(), biases);
  c.logits_changed();
}

/// Logit-bias stage.
struct LogitBias {
  std::vector<TokenBias> biases{};  ///< (token, bias) pairs

  /// The registered name, "logit_bias": describe() starts with it.
  static constexpr std::string_view kName = "logit_bias";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Nothing checked at add(): apply() checks the ids against the vocabulary (std::out_of_range) and the
  /// biases (NaN or +inf: std::invalid_argument).
  void validate() const {}
  /// "logit_bias(n)", n = the number of (token, bias) pairs.
  std::string describe() const { return describe_rule(kName, {double(biases.size())}); }
  /// apply_logit_bias() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_logit_bias(c, biases); }
};

}  // namespace inferkit
