#pragma once
// Top-p (nucleus, Holtzman et al. 2020), inclusive: in decoding order (logit descending, id
// ascending) keep the shortest prefix whose cumulative weight reaches p * Z, and at least
// min_keep tokens; p >= 1 keeps everything. Weights and Z as in candidates.hpp (double sums).
//
// Over a small candidate list the list is ranked directly. Over a dense row nothing is sorted:
// one SIMD pass computes every weight and its bin (1/64 nat wide, measured down from the max), a
// scalar pass accumulates each bin's mass, the bin holding the boundary is found from the
// masses, and only that bin's tokens (a few hundred even for flat distributions) are ranked.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

inline void validate_top_p(float p, Index min_keep) {
  require(std::isfinite(p) && p > 0.0f && p <= 1.0f, "top_p", p, "must be in (0, 1]");
  require(min_keep >= 1, "min_keep", min_keep, "must be >= 1");
}

namespace detail {

/// Ranks candidate ids, computes their weights, and returns how many of them the nucleus keeps.
struct RankedWeights {
  std::vector<TokenId> ids;  // decoding order
  std::vector<float> w;      // weights in that order
  double z = 0.0;
};

inline RankedWeights ranked_weights(const Candidates& c, float max) {
  RankedWeights r;
  r.ids = c.ranked_ids();
  std::vector<float> g(r.ids.size());
  for (std::size_t j = 0; j < g.size(); ++j) g[j] = c.logits()[r.ids[j]];
  r.w.resize(g.size());
  simd::exp_shifted(g.data(), r.w.data(), g.size(), max);
  r.z = simd::sum_as_double(r.w.data(), r.w.size());
  return r;
}

/// Length of the shortest prefix of w whose running sum, started at cum, reaches target.
inline std::size_t prefix_reaching(const float* w, std::size_t n, double cum, double target) {
  std::size_t j = 0;
  while (j < n && cum < target) cum += static_cast<double>(w[j++]);
  return j;
}

inline constexpr int kTopPBinsPerNat = 64;
inline constexpr int kTopPBins = 4096;  // 64 nats below the max; the last bin takes the rest

}  // namespace detail

inline void apply_top_p(Candidates& c, float p, Index min_keep = 1) {
  validate_top_p(p, min_keep);
  if (p >= 1.0f) return;
  const float max = c.summary().max;
  if (!c.dense()) {
    detail::RankedWeights r = detail::ranked_weights(c, max);
    std::size_t keep = detail::prefix_reaching(r.w.data(), r.w.size(), 0.0, double(p) * r.z);
    keep = std::max(keep, std::min(r.ids.size(), static_cast<std::size_t>(min_keep)));
    r.ids.resize(keep);
    c.restrict_to(std::move(r.ids));
    return;
  }

  // Dense: weights and bins in one SIMD pass.
  std::span<float> x = c.logits();
  const std::size_t n = x.size();
  AlignedBuffer<float> w(n), binf(n);
  {
    using simd::VecF;
    const VecF vmax = simd::broadcast(max), scale = simd::broadcast(float(detail::kTopPBinsPerNat));
    const VecF last = simd::broadcast(float(detail::kTopPBins - 1));
    std::size_t i = 0;
    const auto step = [&](VecF l, std::size_t at, std::size_t cnt) {
      const VecF e = simd::exp(l - vmax);
      const VecF b = simd::min((vmax - l) * scale, last);
      if (cnt == simd::kWidth) {
        simd::store(w.data() + at, e);
        simd::store(binf.data() + at, b);
      } else {
        simd::store_partial(w.data() + at, e, cnt);
        simd::store_partial(binf.data() + at, b, cnt);
      }
    };
    for (; i + simd::kWidth <= n; i += simd::kWidth) step(simd::load(x.data() + i), i, simd::kWidth);
    if (i < n) step(simd::load_partial(x.data() + i, n - i, -std::numeric_limits<float>::infinity()), i, n - i);
  }
  // Bin masses (two interleaved histograms keep same-bin updates from serializing).
  std::vector<double> mass(2 * detail::kTopPBins, 0.0);
  std::vector<Index> count(detail::kTopPBins, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const int b = static_cast<int>(binf[i]);
    mass[static_cast<std::size_t>(2 * b + (i & 1))] += static_cast<double>(w[i]);
    count[static_cast<std::size_t>(b)] += x[i] > -std::numeric_limits<float>::infinity();
  }
  double z = 0.0;
  for (int b = 0; b < detail::kTopPBins; ++b) z += mass[2 * b] + mass[2 * b + 1];
  const double target = double(p) * z;
  int boundary = 0;
  double cum = 0.0;
  Index kept = 0;
  for (; boundary < detail::kTopPBins - 1; ++boundary) {
    const double mb = mass[2 * boundary] + mass[2 * boundary + 1];
    if (cum + mb >= target) break;
    cum += mb;
    kept += count[static_cast<std::size_t>(boundary)];
  }
  // Rank the boundary bin's tokens and walk them.
  std::vector<TokenId> edge;
  for (std::size_t i = 0; i < n; ++i)
    if (static_cast<int>(binf[i]) == boundary && x[i] > -std::numeric_limits<float>::infinity())
      edge.push_back(static_cast<TokenId>(i));
  std::sort(edge.begin(), edge.end(), [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::vector<float> edge_w(edge.size());
  for (std::size_t j = 0; j < edge.size(); ++j) edge_w[j] = w[static_cast<std::size_t>(edge[j])];
  const std::size_t edge_keep = detail::prefix_reaching(edge_w.data(), edge_w.size(), cum, target);
  kept += static_cast<Index>(edge_keep);

  if (kept < min_keep) {  // the nucleus is a prefix of the ranking, so top-min_keep contains it
    apply_top_k(c, min_keep);
    return;
  }
  if (kept <= std::max<Index>(4096, c.vocab_size() / 16)) {
    std::vector<TokenId> ids(edge.begin(), edge.begin() + static_cast<std::ptrdiff_t>(edge_keep));
    for (std::size_t i = 0; i < n; ++i)
      if (static_cast<int>(binf[i]) < boundary && x[i] > -std::numeric_limits<float>::infinity())
        ids.push_back(static_cast<TokenId>(i));
    c.restrict_to(std::move(ids));
    return;
  }
  // A large nucleus stays dense: filtered tokens become -inf right away.
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i)
    if (static_cast<int>(binf[i]) > boundary) x[i] = neg_inf;
  for (std::size_t j = edge_keep; j < edge.size(); ++j) x[static_cast<std::size_t>(edge[j])] = neg_inf;
  c.logits_changed();
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_p(std::span<float> logits, float p, Index min_keep = 1) {
  Candidates c(logits);
  apply_top_p(c, p, min_keep);
  c.materialize();
}

}  // namespace inferkit
