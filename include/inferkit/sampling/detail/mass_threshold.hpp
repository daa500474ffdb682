#pragma once
// Probability floors decided on the float-block mass. Epsilon, eta, Mirostat v2 and XTC keep the
// candidates with w_i >= t, t = float(f(Z, sum w (l - max))) rounded from a double: they need
// the exact (double) mass only to place t. The float-block pass (mass.hpp) is about a third
// cheaper and within kFloatBlockMassRelativeError of it, so every threshold the exact mass can
// give lies in a bracket [lo, hi]. When no candidate's weight lies in [lo, hi), every threshold
// in the bracket keeps the same tokens and the exact pass is skipped; when one does (a weight
// within a few parts per million of the threshold) the exact mass is computed. Either way the
// kept set is the exact pass's, bit for bit.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/min_p.hpp"

namespace inferkit::detail {

/// The mass of the float-block pass (exact count) and the floats lo <= hi between which
/// float(threshold(exact mass)) lies; lo == hi (the exact threshold) off the fast path.
struct BracketedThreshold {
  CandidateMass mass;
  float lo = 0.0f, hi = 0.0f;
};

/// Brackets float(threshold(m)) over the exact masses the float-block pass allows. `threshold`
/// maps a CandidateMass to a double and must be monotone in m.z and in m.wl (the corners of the
/// error box are evaluated); the wl corners count only when `with_entropy`.
template <class Threshold>
BracketedThreshold bracket_threshold(const Candidates& c, float max, bool with_entropy, const Threshold& threshold) {
  BracketedThreshold b;
  if (!has_float_block_mass(c)) {
    b.mass = candidate_mass(c, max, with_entropy, true);
    b.lo = b.hi = static_cast<float>(threshold(b.mass));
    return b;
  }
  b.mass = with_entropy ? float_block_mass<true>(c, max) : float_block_mass<false>(c, max);
  // |approx - exact| <= e exact, so exact lies in [approx / (1 + e), approx / (1 - e)].
  constexpr double e = kFloatBlockMassRelativeError;
  const double scales[2] = {1.0 / (1.0 + e), 1.0 / (1.0 - e)};
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double sz : scales)
    for (int k = 0; k < (with_entropy ? 2 : 1); ++k) {
      CandidateMass m = b.mass;
      m.z *= sz;
      m.wl *= scales[k];
      const double t = threshold(m);
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
  // The slack covers the double rounding of threshold() itself; rounding to float is monotone.
  // A NaN threshold leaves lo = +inf > hi, which callers treat as "undecided".
  b.lo = static_cast<float>(lo - std::abs(lo) * 1e-12);
  b.hi = static_cast<float>(hi + std::abs(hi) * 1e-12);
  return b;
}

/// Keeps, in place and in order, the ids (and their weights w) reaching the exact threshold,
/// given ids holding every candidate with weight >= b.lo: b.hi when no weight lies in
/// [b.lo, b.hi), else exact_threshold() (a float in the bracket).
template <class ExactThreshold>
void keep_ids_reaching_threshold(std::vector<TokenId>& ids, std::vector<float>& w, const BracketedThreshold& b,
                                 const ExactThreshold& exact_threshold) {
  const bool undecided = std::any_of(w.begin(), w.end(), [&](float v) { return v >= b.lo && v < b.hi; });
  keep_weights_at_least(ids, w, undecided ? exact_threshold() : b.hi);
}

/// keep_weight_at_least(c, max, float(threshold(m)), at_least) for m the exact mass of the
/// candidates (with sum w (l - max) when `with_entropy`), with the mass from the float-block
/// pass whenever that decides the same tokens (see the top of this header).
template <class Threshold>
bool keep_weight_at_least_of_mass(Candidates& c, float max, bool with_entropy, const Threshold& threshold,
                                  Index at_least) {
  const auto exact_threshold = [&] {
    return static_cast<float>(threshold(candidate_mass(c, max, with_entropy, false)));
  };
  if (!has_float_block_mass(c)) return keep_weight_at_least(c, max, exact_threshold(), at_least);
  const BracketedThreshold b = bracket_threshold(c, max, with_entropy, threshold);
  if (b.lo > 1.0f && b.lo <= b.hi) return false;  // every threshold in the bracket exceeds the max's weight
  if (!(b.lo > 0.0f && b.hi <= 1.0f && b.lo <= b.hi)) return keep_weight_at_least(c, max, exact_threshold(), at_least);
  // The tokens that may pass, as keep_weight_at_least collects them (for the bracket's low end).
  const auto x = c.logits();
  std::vector<TokenId> ids;
  const auto limit = static_cast<std::size_t>(std::max<Index>(4096, c.vocab_size() / 16));
  const float cut = weight_cut(max, b.lo).cut;
  if (!collect_ids_up_to(x, cut, kHighest, ids, at_least == 1 ? limit : x.size())) {
    // Past the limit keep_weight_at_least filters in place, which needs one threshold: only the
    // tokens whose logit lies between the bracket's cuts can tell the bracket's ends apart.
    ids.clear();
    collect_ids(x, cut, weight_cut(max, b.hi).sure, ids);
    const std::vector<float> w = weights_of(ids, x, max);
    const bool undecided = std::any_of(w.begin(), w.end(), [&](float v) { return v >= b.lo && v < b.hi; });
    return keep_weight_at_least(c, max, undecided ? exact_threshold() : b.hi, at_least);
  }
  std::vector<float> w = weights_of(ids, x, max);
  keep_ids_reaching_threshold(ids, w, b, exact_threshold);
  if (static_cast<Index>(ids.size()) < at_least) return false;
  c.restrict_to(std::move(ids));
  return true;
}

}  // namespace inferkit::detail
