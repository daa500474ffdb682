#pragma once
// Hugging Face's exponential_decay_length_penalty = (start_index, decay_factor): once the request
// has generated more than start_index tokens (`generated`: tokens accepted since the prompt,
// SamplerState::generated() in a chain), every EOS logit l becomes
//   l + |l| * (decay_factor^(generated - start_index) - 1),
// which raises it for any sign when decay_factor > 1 (HF's formula; its regulation start is
// start_index + prompt length and cur_len = prompt length + generated). A -inf EOS stays -inf;
// the result is clamped to the largest float so the row stays finite. Ids outside the vocabulary
// are std::out_of_range; bad parameters std::invalid_argument.
// The rule (a chain stage, stateful: it reads the generated count):
// ExponentialDecayLengthPenalty{16, 1.05f, {2}}; alone on a row:
// apply_exponential_decay_length_penalty(logits, ExponentialDecayLengthPenalty{16, 1.05f, {2}}, generated).

#include <algorithm>
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

namespace inferkit {

/// HF's exponential_decay_length_penalty = (start_index, decay_factor).
struct ExponentialDecayLengthPenalty {
  Index start_index = 0;                 ///< generated tokens before the boost starts, >= 0
  float decay_factor = 1.0f;             ///< > 0; 1 = off, > 1 makes EOS more likely every step
  std::vector<TokenId> eos_token_ids{};  ///< the EOS ids

  /// The registered name, "exponential_decay_length_penalty": describe() starts with it.
  static constexpr std::string_view kName = "exponential_decay_length_penalty";
  /// Reads the generated count (StepInputs::generated): the chain needs a SamplerState.
  static constexpr bool kStateful = true;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "exponential_decay_length_penalty(start_index, decay_factor)".
  std::string describe() const { return describe_rule(kName, {double(start_index), decay_factor}); }
  /// apply_exponential_decay_length_penalty() with the step's generated count.
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks the decay penalty's parameters; throws std::invalid_argument.
inline void validate_exponential_decay(const ExponentialDecayLengthPenalty& q) {
  require(q.start_index >= 0, "exponential_decay_start_index", q.start_index, "must be >= 0");
  require(std::isfinite(q.decay_factor) && q.decay_factor > 0.0f, "exponential_decay_factor", q.decay_factor,
          "must be finite and > 0");
}

/// Raises the EOS logits once generated > start_index (see the header comment).
inline void apply_exponential_decay_length_penalty(Candidates& c, const ExponentialDecayLengthPenalty& q,
                                                   Index generated) {
  validate_exponential_decay(q);
  detail::require_generated(generated);
  detail::check_tokens(q.eos_token_ids, c.vocab_size(), "eos_token_ids");
  if (generated <= q.start_index || q.decay_factor == 1.0f) return;
  const double growth = std::pow(double(q.decay_factor), double(generated - q.start_index)) - 1.0;
  std::vector<TokenId> eos(q.eos_token_ids);
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

/// In place on one row.
inline void apply_exponential_decay_length_penalty(std::span<float> logits, const ExponentialDecayLengthPenalty& q,
                                                   Index generated) {
  Candidates c(logits);
  apply_exponential_decay_length_penalty(c, q, generated);
  c.materialize();
}

inline void ExponentialDecayLengthPenalty::validate() const { validate_exponential_decay(*this); }
inline void ExponentialDecayLengthPenalty::apply(Candidates& c, const StepInputs& in) const {
  apply_exponential_decay_length_penalty(c, *this, in.generated);
}

}  // namespace inferkit
