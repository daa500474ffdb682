#pragma once
// XTC, "exclude top choices" (p-e-w, text-generation-webui; llama.cpp's xtc sampler): with
// probability `probability`, every candidate whose probability is at least `threshold` is
// removed except the least probable of them, so the text leaves its most predictable path while
// a plausible token stays. Nothing happens when fewer than two candidates reach the threshold, or
// when removing them would leave fewer than `min_keep` candidates (llama.cpp's rule).
//
// Probabilities are p_i = w_i / Z over the current candidates (weights of candidates.hpp, Z in
// double), so "p_i >= threshold" is "w_i >= threshold * Z" (threshold * Z rounded to float).
// Among tokens tied with the least probable one, the last in decoding order (the highest id) is
// the one kept.
//
// The coin: XTC fires when u < probability, with u the 53-bit uniform of words 2-3 of Philox
// block `draw_index` of the request's CounterRng. The categorical draw of the same index reads
// words 0-1, so the coin and the draw are independent and (seed, stream, draw_index) fixes both
// on any thread. Sort-free: one collection of the tokens with w >= threshold (a superset, since
// Z >= 1); unless two of them carry enough mass to pass, the rule stops there; otherwise one pass
// computes Z (float blocks, exact where it matters: detail/mass_threshold.hpp) and the exact set
// is taken from the collected ones.
// The rule (a chain stage, at most one per chain): Xtc{0.1f, 0.5f}; alone on a row:
// apply_xtc(logits, Xtc{0.1f, 0.5f}, rng, draw_index).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/detail/mass_threshold.hpp"
#include "inferkit/sampling/min_p.hpp"

namespace inferkit {

/// XTC's parameters (llama.cpp's defaults: threshold 0.1, probability 0 = off).
struct Xtc {
  float threshold = 0.1f;    ///< probability a token needs to count as a "top choice", in [0, 1]
  float probability = 0.0f;  ///< chance that the rule fires at a step, in [0, 1] (0 = never)
  Index min_keep = 1;        ///< the rule does not fire if fewer candidates would remain

  /// The registered name, "xtc": describe() starts with it.
  static constexpr std::string_view kName = "xtc";
  /// Reads no SamplerState (its coin reads the request's random stream: needs_rng()).
  static constexpr bool kStateful = false;
  /// Two XTC stages would flip the same coin.
  static constexpr std::string_view kOnePerChain = "its coin is words 2-3 of the draw's Philox block";
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "xtc(threshold, probability)".
  std::string describe() const { return describe_rule(kName, {threshold, probability}); }
  /// The coin needs the request's random stream (probability 0 never flips it).
  bool needs_rng() const { return probability > 0.0f; }
  /// apply_xtc() with the coin of the step's draw (step.rng, step.draw_index).
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks XTC's parameters; throws std::invalid_argument naming the bad one.
inline void validate_xtc(const Xtc& q) {
  require(std::isfinite(q.threshold) && q.threshold >= 0.0f && q.threshold <= 1.0f, "xtc_threshold", q.threshold,
          "must be in [0, 1]");
  require(std::isfinite(q.probability) && q.probability >= 0.0f && q.probability <= 1.0f, "xtc_probability",
          q.probability, "must be in [0, 1]");
  require(q.min_keep >= 1, "min_keep", q.min_keep, "must be >= 1");
}

/// XTC's coin for draw `draw_index` of `rng`: a uniform double in [0, 1) from words 2-3 of the
/// Philox block (the categorical draw of the same index uses words 0-1).
inline double xtc_uniform(const CounterRng& rng, std::uint64_t draw_index) {
  const auto b = rng.block(draw_index);
  return CounterRng::to_unit_double(b[2], b[3]);
}

/// Applies XTC to the candidates given the coin u in [0, 1): the rule fires when u < probability.
inline void apply_xtc(Candidates& c, const Xtc& q, double u) {
  validate_xtc(q);
  if (!(u < double(q.probability))) return;
  const float max = c.summary().max;
  // Only weights >= threshold can reach threshold * Z (Z >= 1: the max's weight is 1), and the
  // mass of those tokens is a lower bound of Z: when fewer than two pass that bound, the rule
  // cannot fire and the pass over every weight is skipped (the usual case when no token is
  // dominant). The bound carries a 1e-9 margin for summation order.
  std::vector<TokenId> top;
  Index count = 0;  // candidates, needed only for min_keep > 1
  if (q.threshold > 0.0f) {
    detail::WeightedIds passing = detail::ids_with_weight_at_least(c, max, q.threshold);
    top = std::move(passing.ids);
    std::vector<float>& w = passing.weights;
    if (top.size() < 2) return;
    const double bound = double(q.threshold) * simd::sum_as_double(w.data(), w.size()) * (1.0 - 1e-9);
    if (std::count_if(w.begin(), w.end(), [&](float v) { return double(v) >= bound; }) < 2) return;
    // t = threshold * Z >= threshold (Z >= 1), so `top` holds every token reaching it; the mass
    // comes from the float-block pass unless a weight of `top` lies within its error bound of
    // t (detail/mass_threshold.hpp).
    const auto threshold = [&](const detail::CandidateMass& m) { return double(q.threshold) * m.z; };
    detail::BracketedThreshold b = detail::bracket_threshold(c, max, false, threshold);
    b.lo = std::max(b.lo, q.threshold);
    b.hi = std::max(b.hi, b.lo);
    detail::keep_ids_reaching_threshold(
        top, w, b, [&] { return static_cast<float>(threshold(detail::candidate_mass(c, max, false, false))); });
    count = b.mass.count;
  } else {
    c.for_each([&](TokenId id) { top.push_back(id); });  // threshold 0: every candidate
    count = static_cast<Index>(top.size());
  }
  if (top.size() < 2) return;
  if (q.min_keep > 1 && count - static_cast<Index>(top.size()) + 1 < q.min_keep) return;
  // The one kept: last in decoding order (lowest logit, then highest id).
  const auto x = c.logits();
  TokenId keep = top.front();
  for (TokenId id : top)
    if (!DecodingOrder{x}(id, keep)) keep = id;
  if (c.dense()) {
    for (TokenId id : top)
      if (id != keep) x[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
    c.logits_changed();
  } else {
    std::vector<TokenId> ids;
    ids.reserve(c.ids().size());
    std::size_t j = 0;  // both ascending: a merge
    for (TokenId id : c.ids()) {
      while (j < top.size() && top[j] < id) ++j;
      if (id == keep || j == top.size() || top[j] != id) ids.push_back(id);
    }
    c.restrict_to(std::move(ids));
  }
}

/// Applies XTC with the coin of draw `draw_index` of `rng` (see xtc_uniform).
inline void apply_xtc(Candidates& c, const Xtc& q, const CounterRng& rng, std::uint64_t draw_index) {
  apply_xtc(c, q, xtc_uniform(rng, draw_index));
}

/// In place on one row; removed tokens become -inf.
inline void apply_xtc(std::span<float> logits, const Xtc& q, const CounterRng& rng, std::uint64_t draw_index) {
  Candidates c(logits);
  apply_xtc(c, q, rng, draw_index);
  c.materialize();
}

inline void Xtc::validate() const { validate_xtc(*this); }
inline void Xtc::apply(Candidates& c, const StepInputs& in) const {
  if (probability > 0.0f) apply_xtc(c, *this, *in.rng, in.draw_index);
}

}  // namespace inferkit
