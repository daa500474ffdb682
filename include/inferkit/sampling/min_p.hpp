#pragma once
// Min-p (Nguyen et al. 2024): keep tokens whose probability is at least min_p times the largest
// probability, inclusive, i.e. w_i = simd::exp(l_i - max) >= min_p; at least min_keep tokens.
// min_p == 0 keeps everything. Over a dense row one SIMD pass collects the tokens whose logit
// could pass (max + log(min_p) minus a rounding margin) and only those get the exact test,
// computed with the same vector exp as the reference.

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

inline void apply_min_p(Candidates& c, float min_p, Index min_keep = 1) {
  validate_min_p(min_p, min_keep);
  if (min_p == 0.0f) return;
  const float max = c.summary().max;
  const auto x = c.logits();
  std::vector<TokenId> ids;
  if (c.dense()) {
    // Below `cut` a logit cannot pass: the margin covers float rounding of l - max and exp.
    const float cut = max + std::log(min_p) - (1e-4f + 1e-6f * std::abs(max));
    detail::collect_ids(x, cut, detail::kHighest, ids);
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
