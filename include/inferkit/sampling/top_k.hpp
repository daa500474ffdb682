#pragma once
// Top-k: keep exactly the k highest logits, ties at the boundary going to the lowest id; k <= 0
// or k >= vocabulary size keeps everything. Over a dense row a sampled threshold lets one
// collection pass gather a few more than k tokens, which nth_element cuts to k; the vocabulary
// is never sorted.
// The rule (a chain stage): TopK{40}; alone on a row: apply_top_k(logits, 40).

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/collect.hpp"

namespace inferkit {

namespace detail {

/// Cuts ids to their k first in decoding order (unordered among themselves).
inline void keep_first_k(std::vector<TokenId>& ids, std::span<const float> x, Index k) {
  if (static_cast<Index>(ids.size()) <= k) return;
  std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(), DecodingOrder{x});
  ids.resize(static_cast<std::size_t>(k));
}

/// Ids of the k best of a dense row by (logit descending, id ascending), unordered.
/// A strided sample suggests a threshold that about k plus a margin of tokens pass; one
/// collection pass gathers them and nth_element cuts them to k. If fewer than k pass, the
/// sample's k-th largest (which can never exceed the row's k-th largest) is used instead, and
/// failing that every finite token.
inline std::vector<TokenId> select_top_k_dense(std::span<const float> x, Index k) {
  const std::size_t n = x.size();
  std::vector<TokenId> ids;
  // A sample of 16 k (256 to 2048) tokens: small enough that selecting in it is cheap.
  std::vector<float> sample = strided_sample(x, static_cast<std::size_t>(std::clamp<Index>(16 * k, 256, 2048)));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const auto kth = [&](std::size_t r) {  // r-th largest sample logit (0-based), or -inf
    if (r >= sample.size()) return neg_inf;
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(r), sample.end(),
                     std::greater<float>());
    return sample[r];
  };
  const double expected = double(k) * double(sample.size()) / double(n);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const float t = attempt == 0   ? kth(static_cast<std::size_t>(expected + 3.0 * std::sqrt(expected) + 3.0))
                    : attempt == 1 ? kth(static_cast<std::size_t>(k - 1))
                                   : neg_inf;
    ids.clear();
    collect_ids(x, t == neg_inf ? kLowestFinite : t, kHighest, ids);
    if (static_cast<Index>(ids.size()) >= k || t == neg_inf) break;
  }
  keep_first_k(ids, x, k);
  return ids;
}

}  // namespace detail

inline void apply_top_k(Candidates& c, Index k) {
  if (k <= 0 || k >= c.vocab_size()) return;
  if (k == 1) {  // the summary's argmax is the first in decoding order: no pass at all
    c.restrict_to({c.summary().argmax});
    return;
  }
  if (c.dense()) {
    c.restrict_to(detail::select_top_k_dense(c.logits(), k));
    return;
  }
  if (static_cast<Index>(c.ids().size()) <= k) return;
  std::vector<TokenId> ids = c.ids();
  detail::keep_first_k(ids, c.logits(), k);
  c.restrict_to(std::move(ids));
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_k(std::span<float> logits, Index k) {
  Candidates c(logits);
  apply_top_k(c, k);
  c.materialize();
}

/// Top-k stage.
struct TopK {
  Index k = 0;  ///< tokens kept; <= 0 keeps all

  /// The registered name, "top_k": describe() starts with it.
  static constexpr std::string_view kName = "top_k";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Nothing to check: every k is meaningful (<= 0 or >= the vocabulary keeps all).
  void validate() const {}
  /// "top_k(k)".
  std::string describe() const { return describe_rule(kName, {double(k)}); }
  /// apply_top_k() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_top_k(c, k); }
};

}  // namespace inferkit
