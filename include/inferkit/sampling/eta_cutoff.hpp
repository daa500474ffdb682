#pragma once
// Eta sampling (Hewitt, Manning and Liang 2022, "Truncation Sampling as Language Model
// Desmoothing"), as Hugging Face's EtaLogitsWarper defines it: keep tokens with
//   p_i >= min(epsilon, sqrt(epsilon) * exp(-H)),
// H the entropy (nats) of p over the current candidates, p_i = w_i / Z. min_keep and the range of
// epsilon as in epsilon sampling (epsilon_cutoff.hpp, whose sort-free machinery this rule uses
// with the entropy term: the floor times Z, min(epsilon Z, sqrt(epsilon) e^(wl / Z)), increases in
// Z and in wl = sum w (l - max) <= 0).
// The rule (a chain stage): EtaCutoff{2e-3f}; alone on a row: apply_eta_cutoff(logits, {2e-3f}).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/epsilon_cutoff.hpp"

namespace inferkit {

/// Eta sampling's stage (HF: eta_cutoff).
struct EtaCutoff {
  float epsilon = 2e-3f;  ///< in (0, 1): the floor is min(epsilon, sqrt(epsilon) * exp(-H))
  Index min_keep = 1;     ///< tokens at or above the min_keep-th largest logit always stay

  /// The registered name, "eta_cutoff": describe() starts with it.
  static constexpr std::string_view kName = "eta_cutoff";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_cutoff(epsilon, min_keep, "eta_cutoff"); }
  /// "eta_cutoff(epsilon)".
  std::string describe() const { return describe_rule(kName, {epsilon}); }
  /// apply_eta_cutoff() on the candidates.
  void apply(Candidates& c, const StepInputs&) const;
};

/// The eta rule's probability floor for entropy H (nats): min(epsilon, sqrt(epsilon) e^-H).
inline double eta_floor(float epsilon, double entropy) {
  return std::min(double(epsilon), std::sqrt(double(epsilon)) * std::exp(-entropy));
}

/// Eta sampling on the candidates.
inline void apply_eta_cutoff(Candidates& c, const EtaCutoff& q) {
  validate_cutoff(q.epsilon, q.min_keep, "eta_cutoff");
  // floor * Z = min(epsilon Z, sqrt(epsilon) e^(wl / Z)): increasing in Z and in wl (<= 0).
  detail::keep_probability_at_least(
      c, c.summary().max, true, [&](const detail::CandidateMass& m) { return eta_floor(q.epsilon, m.entropy()); },
      q.min_keep);
}

/// In place on one row; filtered tokens become -inf.
inline void apply_eta_cutoff(std::span<float> logits, const EtaCutoff& q) {
  Candidates c(logits);
  apply_eta_cutoff(c, q);
  c.materialize();
}

inline void EtaCutoff::apply(Candidates& c, const StepInputs&) const { apply_eta_cutoff(c, *this); }

}  // namespace inferkit
