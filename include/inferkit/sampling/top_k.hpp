#pragma once
// Top-k: keep exactly the k highest logits, ties at the boundary going to the lowest id; k <= 0
// or k >= vocabulary size keeps everything. Over a dense row this is one SIMD pass with a
// rising threshold: elements above the current k-th best are collected, and the small buffer
// is cut back to k by nth_element whenever it grows; the vocabulary is never sorted.

#include <algorithm>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"

namespace inferkit {

namespace detail {

/// Ids of the k best of a dense row by (logit descending, id ascending), unordered.
inline std::vector<TokenId> select_top_k_dense(std::span<const float> x, Index k) {
  using Entry = std::pair<float, TokenId>;
  const auto better = [](const Entry& a, const Entry& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::vector<Entry> buf;
  const std::size_t cap = static_cast<std::size_t>(std::max<Index>(4 * k, 1024));
  buf.reserve(cap + simd::kWidth);
  float t = -std::numeric_limits<float>::infinity();
  const auto shrink = [&] {
    if (static_cast<Index>(buf.size()) > k) {
      std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), better);
      buf.resize(static_cast<std::size_t>(k));
      t = buf[static_cast<std::size_t>(k - 1)].first;  // the worst kept logit
    }
  };
  // Scanning in ascending id order, a later element equal to the threshold never beats the kept
  // ones (lower ids), so strictly greater is the entry test once k are held.
  std::size_t i = 0;
  const std::size_t n = x.size();
  for (; i + simd::kWidth <= n; i += simd::kWidth) {
    const simd::VecF v = simd::load(x.data() + i);
    if (!simd::any(v > simd::broadcast(t))) continue;
    for (std::size_t l = 0; l < simd::kWidth; ++l)
      if (x[i + l] > t) buf.emplace_back(x[i + l], static_cast<TokenId>(i + l));
    if (buf.size() >= cap) shrink();
  }
  for (; i < n; ++i)
    if (x[i] > t) buf.emplace_back(x[i], static_cast<TokenId>(i));
  shrink();
  std::vector<TokenId> ids(buf.size());
  for (std::size_t j = 0; j < buf.size(); ++j) ids[j] = buf[j].second;
  return ids;
}

}  // namespace detail

inline void apply_top_k(Candidates& c, Index k) {
  if (k <= 0 || k >= c.vocab_size()) return;
  if (c.dense()) {
    c.restrict_to(detail::select_top_k_dense(c.logits(), k));
    return;
  }
  if (static_cast<Index>(c.ids().size()) <= k) return;
  std::vector<TokenId> ids = c.ids();
  const auto x = c.logits();
  std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(),
                   [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  ids.resize(static_cast<std::size_t>(k));
  c.restrict_to(std::move(ids));
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_k(std::span<float> logits, Index k) {
  Candidates c(logits);
  apply_top_k(c, k);
  c.materialize();
}

}  // namespace inferkit
