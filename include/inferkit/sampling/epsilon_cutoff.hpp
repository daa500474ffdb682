#pragma once
// Epsilon sampling (Hewitt, Manning and Liang 2022, "Truncation Sampling as Language Model
// Desmoothing"), as Hugging Face's EpsilonLogitsWarper defines it: keep tokens with
// p_i >= epsilon, p_i = w_i / Z over the current candidates. min_keep follows Hugging Face: a
// token also stays when its logit is at least the min_keep-th largest logit, so ties at that
// logit all stay (inferkit's top-p and min-p keep exactly min_keep instead). epsilon must be in
// (0, 1) as in Hugging Face; the presets treat 0 as "off". Eta sampling (eta_cutoff.hpp) shares
// this header's machinery.
// The rule (a chain stage): EpsilonCutoff{3e-4f}; alone on a row:
// apply_epsilon_cutoff(logits, {3e-4f}).
//
// Sort-free: one pass gives Z (and, for eta, the entropy term), then the tokens with
// w_i >= threshold * Z are kept by min-p's machinery (one compare per logit outside a rounding
// band, the exact weight inside it). The pass sums in float blocks; the exact double pass runs
// only when a weight lies within its error bound of the threshold (detail/mass_threshold.hpp), so
// the kept set is exact.

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
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/detail/mass_threshold.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_p.hpp"

namespace inferkit {

/// Checks an epsilon or eta cutoff (`name` is the parameter reported); throws
/// std::invalid_argument.
inline void validate_cutoff(float epsilon, Index min_keep, const char* name) {
  require(std::isfinite(epsilon) && epsilon > 0.0f && epsilon < 1.0f, name, epsilon, "must be in (0, 1)");
  require(min_keep >= 1, "min_keep", min_keep, "must be >= 1");
}

/// Epsilon sampling's stage (HF: epsilon_cutoff).
struct EpsilonCutoff {
  float epsilon = 3e-4f;  ///< probability floor, in (0, 1)
  Index min_keep = 1;     ///< tokens at or above the min_keep-th largest logit always stay

  /// The registered name, "epsilon_cutoff": describe() starts with it.
  static constexpr std::string_view kName = "epsilon_cutoff";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_cutoff(epsilon, min_keep, "epsilon_cutoff"); }
  /// "epsilon_cutoff(epsilon)".
  std::string describe() const { return describe_rule(kName, {epsilon}); }
  /// apply_epsilon_cutoff() on the candidates.
  void apply(Candidates& c, const StepInputs&) const;
};

namespace detail {

/// Keeps every candidate whose logit is at least the k-th largest (ties at it included).
inline void keep_top_k_with_ties(Candidates& c, Index k) {
  const auto x = c.logits();
  std::vector<TokenId> top;
  if (c.dense()) {
    if (k >= c.vocab_size()) return;
    top = select_top_k_dense(x, k);
  } else {
    if (static_cast<Index>(c.ids().size()) <= k) return;
    top = c.ids();
    keep_first_k(top, x, k);
  }
  float kth = std::numeric_limits<float>::infinity();
  for (TokenId id : top) kth = std::min(kth, x[static_cast<std::size_t>(id)]);
  std::vector<TokenId> ids;
  if (c.dense()) {
    const auto limit = static_cast<std::size_t>(std::max<Index>(4096, c.vocab_size() / 16));
    if (!collect_ids_up_to(x, kth, kHighest, ids, limit)) {  // huge ties: stay dense
      filter_below(x, kth, false);
      c.logits_changed();
      return;
    }
  } else {
    for (TokenId id : c.ids())
      if (x[static_cast<std::size_t>(id)] >= kth) ids.push_back(id);
  }
  c.restrict_to(std::move(ids));
}

/// Keeps the tokens with p >= floor_p(m) (w >= floor_p(m) * Z, m the candidates' mass, with
/// the entropy term when `with_entropy`), or HF's min_keep set when that is larger (both are
/// upper sets in logit order, so their union is the larger of the two).
template <class FloorOfMass>
void keep_probability_at_least(Candidates& c, float max, bool with_entropy, const FloorOfMass& floor_p,
                               Index min_keep) {
  const auto threshold = [&](const CandidateMass& m) { return floor_p(m) * m.z; };
  if (!keep_weight_at_least_of_mass(c, max, with_entropy, threshold, min_keep)) keep_top_k_with_ties(c, min_keep);
}

}  // namespace detail

/// Epsilon sampling on the candidates.
inline void apply_epsilon_cutoff(Candidates& c, const EpsilonCutoff& q) {
  validate_cutoff(q.epsilon, q.min_keep, "epsilon_cutoff");
  detail::keep_probability_at_least(
      c, c.summary().max, false, [&](const detail::CandidateMass&) { return double(q.epsilon); }, q.min_keep);
}

/// In place on one row; filtered tokens become -inf.
inline void apply_epsilon_cutoff(std::span<float> logits, const EpsilonCutoff& q) {
  Candidates c(logits);
  apply_epsilon_cutoff(c, q);
  c.materialize();
}

inline void EpsilonCutoff::apply(Candidates& c, const StepInputs&) const { apply_epsilon_cutoff(c, *this); }

}  // namespace inferkit
