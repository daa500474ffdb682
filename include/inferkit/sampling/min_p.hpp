#pragma once
// Min-p (Nguyen et al. 2024): keep tokens whose probability is at least min_p times the largest
// probability, inclusive, i.e. w_i = simd::exp(l_i - max) >= min_p; at least min_keep tokens.
// min_p == 0 keeps everything. Over a dense row one SIMD pass counts the survivors: logits
// clearly above or below max + log(min_p) (beyond a rounding margin) are decided by one compare,
// only those in the thin band between get the exact test with the same vector exp as the
// reference. Many survivors: a second pass writes -inf in place; few: they become a list.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

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

}  // namespace detail

inline void apply_min_p(Candidates& c, float min_p, Index min_keep = 1) {
  validate_min_p(min_p, min_keep);
  if (min_p == 0.0f) return;
  const float max = c.summary().max;
  const auto x = c.logits();
  // Below `cut` a logit cannot pass, above `sure` it must: the margin covers float rounding of
  // l - max, of log(min_p) and of exp.
  const float margin = 1e-4f + 1e-6f * std::abs(max);
  const float cut = max + std::log(min_p) - margin, sure = max + std::log(min_p) + margin;
  std::vector<TokenId> ids;
  if (c.dense()) {
    detail::collect_ids(x, cut, detail::kHighest, ids);
    if (min_keep == 1 && static_cast<Index>(ids.size()) > std::max<Index>(4096, c.vocab_size() / 16)) {
      // Many may pass: filter in place, the row stays dense (no list to sort and materialize);
      // the max always passes, so min_keep 1 holds without a count.
      using simd::VecF;
      constexpr std::size_t W = simd::kWidth;
      const VecF vcut = simd::broadcast(cut), vsure = simd::broadcast(sure), vmax = simd::broadcast(max),
                 vp = simd::broadcast(min_p), neg_inf = simd::broadcast(-std::numeric_limits<float>::infinity());
      const std::size_t n = x.size(), full = n - n % W;
      for (std::size_t i = 0; i < full; i += W) {
        const VecF v = simd::load(x.data() + i);
        simd::store(x.data() + i, simd::select(detail::min_p_passes(v, vcut, vsure, vmax, vp), v, neg_inf));
      }
      for (std::size_t i = full; i < n; ++i)
        if (!(x[i] >= cut && exp_weight(x[i], max) >= min_p)) x[i] = -std::numeric_limits<float>::infinity();
      c.logits_changed();
      return;
    }
  } else {
    ids = c.ids();
  }
  // The exact test on the few that may pass: weights in one SIMD pass over the gathered logits.
  std::vector<float> w(ids.size());
  for (std::size_t j = 0; j < ids.size(); ++j) w[j] = x[static_cast<std::size_t>(ids[j])];
  simd::exp_shifted(w.data(), w.data(), w.size(), max);
  std::vector<TokenId> kept;
  for (std::size_t j = 0; j < ids.size(); ++j)
    if (w[j] >= min_p) kept.push_back(ids[j]);
  if (static_cast<Index>(kept.size()) < min_keep) {  // the kept set is a prefix of the ranking
    apply_top_k(c, min_keep);
    return;
  }
  c.restrict_to(std::move(kept));
}

/// In place on one row; filtered tokens become -inf.
inline void apply_min_p(std::span<float> logits, float min_p, Index min_keep = 1) {
  Candidates c(logits);
  apply_min_p(c, min_p, min_keep);
  c.materialize();
}

}  // namespace inferkit
