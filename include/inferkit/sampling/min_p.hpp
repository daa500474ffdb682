#pragma once
// Min-p (Nguyen et al. 2024): keep tokens whose probability is at least min_p times the largest
// probability, inclusive, i.e. w_i = simd::exp(l_i - max) >= min_p; at least min_keep tokens.
// min_p == 0 keeps everything. Over a dense row one SIMD pass counts the survivors: logits
// clearly above or below max + log(min_p) (beyond a rounding margin) are decided by one compare,
// only those in the thin band between get the exact test with the same vector exp as the
// reference. Many survivors: a second pass writes -inf in place; few: they become a list.
// The rule (a chain stage): MinP{0.05f}; alone on a row: apply_min_p(logits, 0.05f).

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

/// Checks min-p's parameters (min_p in [0, 1], min_keep >= 1); throws std::invalid_argument.
inline void validate_min_p(float min_p, Index min_keep) {
  require(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f, "min_p", min_p, "must be in [0, 1]");
  require(min_keep >= 1, "min_keep", min_keep, "must be >= 1");
}

namespace detail {

// Which lanes of v pass min-p exactly: above `sure` they pass, below `cut` they fail, and only
// vectors with a lane in between pay for the exact weight (the same vector exp as the
// reference).
inline simd::MaskF min_p_passes(simd::VecF v, simd::VecF cut, simd::VecF sure, simd::VecF max, simd::VecF min_p) {
  const auto maybe = v >= cut, surely = v >= sure;
  if (!simd::any(simd::but_not(maybe, surely))) return surely;
  return simd::both(maybe, simd::exp(v - max) >= min_p);
}

// Below `cut` a logit's weight cannot reach t, at or above `sure` it must: the margin covers
// float rounding of l - max, of log(t) and of exp.
struct WeightCut {
  float cut, sure;
};
inline WeightCut weight_cut(float max, float t) {
  const float margin = 1e-4f + 1e-6f * std::abs(max);
  const float lt = std::log(t);
  return {max + lt - margin, max + lt + margin};
}

/// Weights simd::exp(l - max) of the given ids, in their order (one SIMD pass over a gather).
inline std::vector<float> weights_of(const std::vector<TokenId>& ids, std::span<const float> x, float max) {
  std::vector<float> w(ids.size());
  for (std::size_t j = 0; j < ids.size(); ++j) w[j] = x[static_cast<std::size_t>(ids[j])];
  simd::exp_shifted(w.data(), w.data(), w.size(), max);
  return w;
}

/// Keeps, in place and in order, the ids (and their weights w, parallel to them) with w >= t.
inline void keep_weights_at_least(std::vector<TokenId>& ids, std::vector<float>& w, float t) {
  std::size_t k = 0;
  for (std::size_t j = 0; j < ids.size(); ++j)
    if (w[j] >= t) {
      ids[k] = ids[j];
      w[k++] = w[j];
    }
  ids.resize(k);
  w.resize(k);
}

/// Keeps, in place and in order, the ids whose weight simd::exp(l - max) is at least t: the exact
/// test, with the weights of the gathered logits computed in one SIMD pass.
inline void keep_ids_with_weight_at_least(std::vector<TokenId>& ids, std::span<const float> x, float max, float t) {
  std::vector<float> w = weights_of(ids, x, max);
  keep_weights_at_least(ids, w, t);
}

/// Candidate ids (ascending) and their weights, parallel.
struct WeightedIds {
  std::vector<TokenId> ids;
  std::vector<float> weights;
};

/// The candidates whose weight w_i = simd::exp(l_i - max) is at least t > 0, ascending, with
/// their weights.
inline WeightedIds ids_with_weight_at_least(const Candidates& c, float max, float t) {
  WeightedIds r;
  if (!(t <= 1.0f)) return r;  // no weight exceeds 1 (the max's)
  const auto x = c.logits();
  const WeightCut wc = weight_cut(max, t);
  if (c.dense()) {
    collect_ids(x, wc.cut, kHighest, r.ids);
  } else {
    for (TokenId id : c.ids())
      if (x[static_cast<std::size_t>(id)] >= wc.cut) r.ids.push_back(id);
  }
  r.weights = weights_of(r.ids, x, max);
  keep_weights_at_least(r.ids, r.weights, t);
  return r;
}

/// Keeps the candidates whose weight w_i = simd::exp(l_i - max) is at least t (inclusive, the
/// weight function of candidates.hpp) when at least `at_least` (>= 1) of them pass, and returns
/// true; otherwise leaves the candidates unchanged and returns false. t <= 0 keeps everything.
/// Over a dense row one SIMD pass collects the tokens that may pass: logits clearly above or
/// below max + log(t) (beyond a rounding margin) are decided by one compare, only those in the
/// thin band between get the exact weight. Many survivors (more than V/16): a second pass writes
/// -inf in place; few: they become a list.
inline bool keep_weight_at_least(Candidates& c, float max, float t, Index at_least) {
  if (!(t > 0.0f)) return true;
  if (!(t <= 1.0f)) return false;  // nothing passes: the max's weight is 1
  const auto x = c.logits();
  const WeightCut wc = weight_cut(max, t);
  std::vector<TokenId> ids;
  if (c.dense()) {
    // Past the limit a list would hold most of the row: with at_least 1 filter in place instead
    // (and stop collecting there); otherwise the list is needed whatever its size.
    const auto limit = static_cast<std::size_t>(std::max<Index>(4096, c.vocab_size() / 16));
    const bool few = collect_ids_up_to(x, wc.cut, kHighest, ids, at_least == 1 ? limit : x.size());
    if (!few) {
      // Many may pass: filter in place, the row stays dense (no list to sort and materialize);
      // the max always passes (t <= 1), so one survivor is certain without a count.
      using simd::VecF;
      constexpr std::size_t W = simd::kWidth;
      const VecF vcut = simd::broadcast(wc.cut), vsure = simd::broadcast(wc.sure), vmax = simd::broadcast(max),
                 vt = simd::broadcast(t), neg_inf = simd::broadcast(-std::numeric_limits<float>::infinity());
      const std::size_t n = x.size(), full = n - n % W;
      for (std::size_t i = 0; i < full; i += W) {
        const VecF v = simd::load(x.data() + i);
        simd::store(x.data() + i, simd::select(min_p_passes(v, vcut, vsure, vmax, vt), v, neg_inf));
      }
      for (std::size_t i = full; i < n; ++i)
        if (!(x[i] >= wc.cut && exp_weight(x[i], max) >= t)) x[i] = -std::numeric_limits<float>::infinity();
      c.logits_changed();
      return true;
    }
  } else {
    ids = c.ids();
  }
  keep_ids_with_weight_at_least(ids, x, max, t);
  if (static_cast<Index>(ids.size()) < at_least) return false;
  c.restrict_to(std::move(ids));
  return true;
}

}  // namespace detail

/// Min-p on the candidates: keeps tokens with w_i >= min_p (probability at least min_p times
/// the largest), at least min_keep (the top of the ranking when fewer pass). Throws
/// std::invalid_argument for min_p outside [0, 1] or min_keep < 1.
inline void apply_min_p(Candidates& c, float min_p, Index min_keep = 1) {
  validate_min_p(min_p, min_keep);
  if (min_p == 0.0f) return;
  // Too few pass: the kept set is a prefix of the ranking, so top-min_keep contains it.
  if (!detail::keep_weight_at_least(c, c.summary().max, min_p, min_keep)) apply_top_k(c, min_keep);
}

/// In place on one row; filtered tokens become -inf.
inline void apply_min_p(std::span<float> logits, float min_p, Index min_keep = 1) {
  Candidates c(logits);
  apply_min_p(c, min_p, min_keep);
  c.materialize();
}

/// Min-p stage.
struct MinP {
  float p = 0.0f;      ///< fraction of the largest probability a token needs, in [0, 1]
  Index min_keep = 1;  ///< at least this many stay

  /// The registered name, "min_p": describe() starts with it.
  static constexpr std::string_view kName = "min_p";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_min_p(p, min_keep); }
  /// "min_p(p)".
  std::string describe() const { return describe_rule(kName, {p}); }
  /// apply_min_p() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_min_p(c, p, min_keep); }
};

}  // namespace inferkit
