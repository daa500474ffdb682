#pragma once
// Contrastive search (Su et al. 2022, "A Contrastive Framework for Neural Text Generation"):
// among the top-k candidates v by model probability,
//   score(v) = (1 - alpha) * p(v) - alpha * max_j cos(h_v, h_j)
// where h_v is the hidden state the model produces for the context extended by v and h_j are
// the hidden states of the context so far. The model code computes the candidates' hidden
// states; inferkit picks the candidates, keeps the context states and computes the cosine
// maxima with SIMD. alpha = 0 is greedy. Ties go to the candidate ranked first (higher
// probability, then lower id). Zero-norm hidden states are rejected (cosine undefined).

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

/// Hidden states of the context, appended one per token. Storage grows in fixed chunks, so an
/// append never moves the states already stored (no reallocation storms on long contexts).
class ContextStates {
 public:
  /// States of `dim` values, stored in chunks of `chunk_states`.
  /// @throws std::invalid_argument when dim or chunk_states <= 0.
  explicit ContextStates(Index dim, Index chunk_states = 256) : dim_(dim), chunk_(chunk_states) {
    require(dim > 0, "dim", dim, "must be > 0");
    require(chunk_states > 0, "chunk_states", chunk_states, "must be > 0");
  }
  Index dim() const { return dim_; }    ///< values per state
  Index size() const { return size_; }  ///< states stored

  /// Appends one state (dim values). @throws std::invalid_argument for a wrong size or a zero / non-finite norm.
  void append(std::span<const float> h) {
    require(static_cast<Index>(h.size()) == dim_, "h.size()", h.size(),
            "must equal dim (" + std::to_string(dim_) + ")");
    const double n = norm(h.data());
    require(n > 0.0 && std::isfinite(n), "context hidden state norm", n, "must be finite and > 0");
    if (size_ % chunk_ == 0) chunks_.push_back(std::make_unique<float[]>(static_cast<std::size_t>(chunk_ * dim_)));
    std::copy(h.begin(), h.end(), state_ptr(size_));
    inv_norm_.push_back(static_cast<float>(1.0 / n));
    ++size_;
  }

  const float* state(Index j) const {
    return chunks_[static_cast<std::size_t>(j / chunk_)].get() + (j % chunk_) * dim_;
  }  ///< state j (dim floats; not bounds-checked)
  float inv_norm(Index j) const { return inv_norm_[static_cast<std::size_t>(j)]; }  ///< 1 / norm of state j

  /// max_j cos(h, h_j) for each row h of `candidates` [k, dim]; -inf for an empty context.
  std::vector<float> max_cosine(MatrixView<const float> candidates) const {
    require(candidates.cols() == dim_, "candidates.cols()", candidates.cols(),
            "must equal dim (" + std::to_string(dim_) + ")");
    const Index k = candidates.rows();
    std::vector<float> inv(static_cast<std::size_t>(k)),
        best(static_cast<std::size_t>(k), -std::numeric_limits<float>::infinity());
    for (Index i = 0; i < k; ++i) {
      const double n = norm(candidates.row_ptr(i));
      require(n > 0.0 && std::isfinite(n), "candidate hidden state norm", n, "must be finite and > 0");
      inv[static_cast<std::size_t>(i)] = static_cast<float>(1.0 / n);
    }
    // Each context state is loaded once for all candidates: 4 dot products share its loads.
    for (Index j = 0; j < size_; ++j) {
      const float* hj = state(j);
      Index i = 0;
      for (; i + 4 <= k; i += 4) {
        float d[4];
        dot4(hj, candidates.row_ptr(i), candidates.row_ptr(i + 1), candidates.row_ptr(i + 2), candidates.row_ptr(i + 3),
             d);
        for (int u = 0; u < 4; ++u)
          best[static_cast<std::size_t>(i + u)] = std::max(best[static_cast<std::size_t>(i + u)],
                                                           d[u] * inv_norm(j) * inv[static_cast<std::size_t>(i + u)]);
      }
      for (; i < k; ++i)
        best[static_cast<std::size_t>(i)] = std::max(
            best[static_cast<std::size_t>(i)], simd::dot(hj, candidates.row_ptr(i), static_cast<std::size_t>(dim_)) *
                                                   inv_norm(j) * inv[static_cast<std::size_t>(i)]);
    }
    return best;
  }

 private:
  float* state_ptr(Index j) { return chunks_[static_cast<std::size_t>(j / chunk_)].get() + (j % chunk_) * dim_; }
  double norm(const float* h) const {
    return std::sqrt(static_cast<double>(simd::dot(h, h, static_cast<std::size_t>(dim_))));
  }
  void dot4(const float* h, const float* a, const float* b, const float* c, const float* e, float* out) const {
    simd::VecF s0 = simd::broadcast(0.0f), s1 = s0, s2 = s0, s3 = s0;
    std::size_t i = 0;
    const auto n = static_cast<std::size_t>(dim_);
    for (; i + simd::kWidth <= n; i += simd::kWidth) {
      const simd::VecF hv = simd::load(h + i);
      s0 = simd::fma(hv, simd::load(a + i), s0);
      s1 = simd::fma(hv, simd::load(b + i), s1);
      s2 = simd::fma(hv, simd::load(c + i), s2);
      s3 = simd::fma(hv, simd::load(e + i), s3);
    }
    out[0] = simd::hsum(s0);
    out[1] = simd::hsum(s1);
    out[2] = simd::hsum(s2);
    out[3] = simd::hsum(s3);
    for (; i < n; ++i) {
      out[0] += h[i] * a[i];
      out[1] += h[i] * b[i];
      out[2] += h[i] * c[i];
      out[3] += h[i] * e[i];
    }
  }

  Index dim_, chunk_;
  Index size_ = 0;
  std::vector<std::unique_ptr<float[]>> chunks_;
  std::vector<float> inv_norm_;
};

/// The top-k candidates of contrastive search.
struct ContrastiveCandidates {
  std::vector<TokenId> tokens;  ///< best first (probability descending, then id ascending)
  std::vector<float> probs;     ///< their model probabilities (softmax over the whole row)
};

/// The top-k candidates of a row of logits and their probabilities.
inline ContrastiveCandidates contrastive_candidates(std::span<const float> logits, Index k) {
  require(k >= 1, "top_k", k, "must be >= 1");
  const LogitsSummary s = scan_logits(logits);
  std::vector<TokenId> ids =
      static_cast<Index>(logits.size()) <= k ? std::vector<TokenId>{} : detail::select_top_k_dense(logits, k);
  if (ids.empty())
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] > -std::numeric_limits<float>::infinity()) ids.push_back(static_cast<TokenId>(i));
  std::sort(ids.begin(), ids.end(), DecodingOrder{logits});
  std::vector<float> w(logits.size());
  simd::exp_shifted(logits.data(), w.data(), logits.size(), s.max);
  const double z = simd::sum_as_double(w.data(), w.size());
  ContrastiveCandidates c{ids, {}};
  for (TokenId id : ids) c.probs.push_back(static_cast<float>(double(w[static_cast<std::size_t>(id)]) / z));
  return c;
}

/// Index (into the candidates) of the token contrastive search chooses; `scores` receives each
/// candidate's score if non-empty. candidate_states [k, dim] holds h_v in candidate order.
inline Index contrastive_select(const ContrastiveCandidates& cands, MatrixView<const float> candidate_states,
                                const ContextStates& context, float alpha, std::span<float> scores = {}) {
  require(std::isfinite(alpha) && alpha >= 0.0f && alpha <= 1.0f, "alpha", alpha, "must be in [0, 1]");
  const Index k = static_cast<Index>(cands.tokens.size());
  require(candidate_states.rows() == k, "candidate_states.rows()", candidate_states.rows(),
          "must equal the number of candidates (" + std::to_string(k) + ")");
  require(scores.empty() || static_cast<Index>(scores.size()) == k, "scores.size()", scores.size(), "must be 0 or k");
  const std::vector<float> penalty =
      context.size() > 0 ? context.max_cosine(candidate_states) : std::vector<float>(static_cast<std::size_t>(k), 0.0f);
  Index best = 0;
  float best_score = -std::numeric_limits<float>::infinity();
  for (Index i = 0; i < k; ++i) {
    const float sc =
        (1.0f - alpha) * cands.probs[static_cast<std::size_t>(i)] - alpha * penalty[static_cast<std::size_t>(i)];
    if (!scores.empty()) scores[static_cast<std::size_t>(i)] = sc;
    if (sc > best_score) {
      best_score = sc;
      best = i;
    }
  }
  return best;
}

}  // namespace inferkit
