#pragma once
// Sort-based reference definitions of the decoding rules: every one ranks the whole vocabulary
// with std::sort and walks it, literally as the rule is stated. Tests use them as the oracle
// and the benchmarks as the `naive` baseline. They share the weight function w = simd::exp(l -
// max) with the fast paths (candidates.hpp), so both decide on the same numbers.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/sampling/candidates.hpp"

namespace inferkit::reference {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Finite token ids in decoding order (logit descending, id ascending), by a full sort.
inline std::vector<TokenId> ranked(std::span<const float> x) {
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] > kNegInf) ids.push_back(static_cast<TokenId>(i));
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  return ids;
}

/// Sets every token not in keep to -inf.
inline void keep_only(std::span<float> x, const std::vector<TokenId>& keep) {
  std::vector<char> mark(x.size(), 0);
  for (TokenId id : keep) mark[static_cast<std::size_t>(id)] = 1;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!mark[i]) x[i] = kNegInf;
}

inline void temperature(std::span<float> x, float t) {
  if (t == 0.0f) {
    keep_only(x, {ranked(x).front()});
    return;
  }
  for (float& v : x) v /= t;
}

inline void top_k(std::span<float> x, Index k) {
  if (k <= 0 || k >= static_cast<Index>(x.size())) return;
  auto ids = ranked(x);
  if (static_cast<Index>(ids.size()) > k) ids.resize(static_cast<std::size_t>(k));
  keep_only(x, ids);
}

inline void top_p(std::span<float> x, float p, Index min_keep = 1) {
  if (p >= 1.0f) return;
  auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  double z = 0.0;
  for (TokenId id : ids) z += exp_weight(x[id], max);
  double cum = 0.0;
  std::size_t keep = 0;
  while (keep < ids.size() && cum < double(p) * z) cum += exp_weight(x[ids[keep++]], max);
  keep = std::max(keep, std::min(ids.size(), static_cast<std::size_t>(min_keep)));
  ids.resize(keep);
  keep_only(x, ids);
}

inline void min_p(std::span<float> x, float p, Index min_keep = 1) {
  if (p == 0.0f) return;
  auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  std::size_t keep = 0;
  while (keep < ids.size() && exp_weight(x[ids[keep]], max) >= p) ++keep;
  keep = std::max(keep, std::min(ids.size(), static_cast<std::size_t>(min_keep)));
  ids.resize(keep);
  keep_only(x, ids);
}

/// The categorical draw for a uniform u in [0, 1): first id (ascending) whose cumulative weight
/// exceeds u * Z.
inline TokenId draw(std::span<const float> x, double u) {
  float max = kNegInf;
  for (float v : x) max = std::max(max, v);
  std::vector<double> w(x.size(), 0.0);
  double z = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] > kNegInf) z += (w[i] = exp_weight(x[i], max));
  double cum = 0.0;
  TokenId last = -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (w[i] <= 0.0) continue;
    last = static_cast<TokenId>(i);
    cum += w[i];
    if (cum > u * z) return last;
  }
  return last;
}

}  // namespace inferkit::reference
