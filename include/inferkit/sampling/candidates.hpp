#pragma once
// The working state of a decoding step: one row of logits and the set of tokens still in the
// running. The set starts dense (every token whose logit is not -inf); processors that cut it to
// a few tokens (top-k, min-p, a selective top-p, greedy) switch it to a sorted id list, so every
// later step works on that list instead of the whole vocabulary. materialize() writes -inf to
// every token outside the set, which is what the in-place processor API promises.
//
// Weights: whenever a rule needs probabilities it uses w_i = simd::exp(l_i - max) over the
// current set (float, the same function everywhere) and their sum Z accumulated in double, so
// boundary decisions (top-p, min-p, the categorical draw) do not depend on float rounding order.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// w = simd::exp(l - max) for one value, computed in a vector lane so it equals the bulk pass.
inline float exp_weight(float logit, float max) {
  const simd::VecF v = simd::exp(simd::load_partial(&logit, 1, 0.0f) - simd::broadcast(max));
  alignas(64) float lanes[simd::kWidth];
  simd::store(lanes, v);
  return lanes[0];
}

/// The candidate set of one row of logits: dense (every finite token) or a sorted id list once a rule cut it short.
class Candidates {
 public:
  /// Validates the row (see logits.hpp) and starts with every finite token.
  explicit Candidates(std::span<float> logits) : logits_(logits), summary_(scan_logits(logits)) {
    require(logits.size() < (std::size_t{1} << 24), "logits.size()", logits.size(), "must be < 2^24 tokens");
  }

  std::span<float> logits() const { return logits_; }                      ///< the row (filtered tokens are -inf)
  Index vocab_size() const { return static_cast<Index>(logits_.size()); }  ///< tokens in the row
  bool dense() const { return dense_; }  ///< true while every finite token is a candidate
  /// Candidate ids in ascending order; meaningful only when !dense().
  const std::vector<TokenId>& ids() const { return ids_; }

  /// Largest logit among the candidates and the lowest id holding it (recomputed lazily).
  LogitsSummary summary() {
    if (summary_stale_) {
      if (dense_) {
        summary_ = scan_logits(logits_, "filtered logits");
      } else {
        summary_ = LogitsSummary{};
        for (TokenId id : ids_)
          if (logits_[id] > summary_.max) summary_ = {logits_[id], id};
        if (summary_.argmax < 0) throw_invalid_argument("candidates", ids_.size(), "every token was filtered out");
      }
      summary_stale_ = false;
    }
    return summary_;
  }

  /// Marks logits as changed by the caller (penalties, temperature, bias).
  void logits_changed() {
    summary_stale_ = true;
    if (!dense_) {  // a penalty or bias may have sent a candidate to -inf
      std::erase_if(ids_, [&](TokenId id) { return logits_[id] == -std::numeric_limits<float>::infinity(); });
    }
  }

  /// Keeps only `ids` (a subset of the current candidates, any order).
  void restrict_to(std::vector<TokenId> ids) {
    if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());  // most arrive sorted
    ids_ = std::move(ids);
    dense_ = false;
    summary_stale_ = true;
  }

  /// Calls f(id) for every candidate in ascending id order.
  template <class F>
  void for_each(F&& f) const {
    if (dense_) {
      for (std::size_t i = 0; i < logits_.size(); ++i)
        if (logits_[i] > -std::numeric_limits<float>::infinity()) f(static_cast<TokenId>(i));
    } else {
      for (TokenId id : ids_) f(id);
    }
  }

  /// Writes -inf to every token outside the set.
  void materialize() {
    if (dense_) return;
    // One bulk fill and a scatter of the kept values: filling the gaps between ids one by one
    // measured slower (2,800 kept of 128k: 15% of eta's call against 12%).
    const float neg_inf = -std::numeric_limits<float>::infinity();
    std::vector<float> kept(ids_.size());
    for (std::size_t j = 0; j < ids_.size(); ++j) kept[j] = logits_[ids_[j]];
    std::fill(logits_.begin(), logits_.end(), neg_inf);
    for (std::size_t j = 0; j < ids_.size(); ++j) logits_[ids_[j]] = kept[j];
  }

 private:
  std::span<float> logits_;
  LogitsSummary summary_;
  bool summary_stale_ = false;
  bool dense_ = true;
  std::vector<TokenId> ids_;
};

}  // namespace inferkit
