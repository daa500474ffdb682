#pragma once
// Steering vectors from contrastive prompt pairs (contrastive activation addition, Rimsky et
// al. 2024; the mean-difference direction of Arditi et al. 2024):
//   v = (1/N) sum_{i=1..N} ( r(H+_i) - r(H-_i) )
// where H+_i, H-_i are the hidden states [tokens, dim] of the i-th positive and negative
// prompt at one layer (the residual stream after it), and r reduces a prompt's states to one
// vector: its last token (kLastToken: the state that predicts what follows the prompt, as CAA
// uses at the answer letter) or the mean over its tokens (kMeanOverPositions). Prompts of a
// pair may differ in length. With normalize, v is divided by its norm (a unit direction, as
// ablation and scales "in units of |v|" want).
//
// Everything is accumulated in double in a fixed order (states summed row by row in row order
// per component, divided by the row count; pair differences summed in pair order; divided by N;
// normalized by the double norm) and rounded to float once at the end, so v is the fp64 mean
// rounded to float.
//
// Which rows to give is the caller's choice: pass a view of the rows that carry the contrast
// (e.g. rows_slice(1, T - 1) to leave out a BOS state every prompt shares).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// How a prompt's hidden states reduce to one vector.
enum class TokenReduction {
  kLastToken,          ///< the state of the prompt's last row
  kMeanOverPositions,  ///< the mean of all its rows
};

/// Options of a contrastive steering vector.
struct ContrastiveOptions {
  /// Last token or mean over the prompt's positions.
  TokenReduction reduction = TokenReduction::kMeanOverPositions;
  /// Divide the mean difference by its norm (a unit vector).
  bool normalize = false;
};

/// Accumulates prompt pairs one at a time (hidden states can be dropped after each add_pair)
/// and produces the mean-difference steering vector. Not thread-safe for concurrent add_pair.
class ContrastiveVectorBuilder {
 public:
  /// @param dim  width of the hidden states (> 0)
  /// @param opt  reduction and normalization
  /// @throws std::invalid_argument if dim <= 0.
  explicit ContrastiveVectorBuilder(Index dim, ContrastiveOptions opt = {})
      : dim_(require_positive(dim, "dim")),
        opt_(opt),
        sum_(static_cast<std::size_t>(dim), 0.0),
        pos_(static_cast<std::size_t>(dim)),
        neg_(static_cast<std::size_t>(dim)) {}

  /// Adds one pair: the hidden states of the positive and the negative prompt at the layer,
  /// [tokens, dim] each (the token counts may differ).
  /// @throws std::invalid_argument if a view has no rows, its column count is not dim, or a
  ///         state the reduction reads is not finite (the message names the row and column).
  ///         On a throw the builder is unchanged.
  void add_pair(MatrixView<const float> positive, MatrixView<const float> negative) {
    reduce(positive, "positive", pos_);
    reduce(negative, "negative", neg_);
    for (std::size_t j = 0; j < sum_.size(); ++j) sum_[j] += pos_[j] - neg_[j];
    norm_sum_ += norm(pos_) + norm(neg_);
    ++pairs_;
  }

  /// Width of the hidden states.
  Index dim() const { return dim_; }
  /// Pairs added so far.
  Index num_pairs() const { return pairs_; }

  /// Mean norm of the reduced prompt states (positive and negative alike): the scale of the
  /// residual stream at this layer, against which a steering scale can be judged. 0 before
  /// any pair.
  double mean_state_norm() const { return pairs_ ? norm_sum_ / (2.0 * static_cast<double>(pairs_)) : 0.0; }

  /// The fp64 mean difference (1/N) sum (r(H+) - r(H-)), not normalized.
  /// @throws std::invalid_argument if no pair was added.
  std::vector<double> mean_difference() const {
    require(pairs_ > 0, "num_pairs", pairs_, "must be > 0: add at least one prompt pair");
    std::vector<double> m(sum_.size());
    for (std::size_t j = 0; j < m.size(); ++j) m[j] = sum_[j] / static_cast<double>(pairs_);
    return m;
  }

  /// The steering vector: the mean difference, divided by its norm if normalize, rounded to
  /// float.
  /// @throws std::invalid_argument if no pair was added, or normalize is set and the mean
  ///         difference is zero (the positive and negative states are the same on average).
  std::vector<float> vector() const {
    std::vector<double> m = mean_difference();
    if (opt_.normalize) {
      const double n = norm(m);
      require(n > 0.0, "mean difference norm", n,
              "must be > 0 to normalize: positive and negative states agree on average");
      for (double& x : m) x /= n;
    }
    return std::vector<float>(m.begin(), m.end());
  }

 private:
  static double norm(const std::vector<double>& x) {
    double s = 0.0;
    for (double v : x) s += v * v;
    return std::sqrt(s);
  }

  // out = r(states) in double; validates shape and finiteness.
  void reduce(MatrixView<const float> states, const char* name, std::vector<double>& out) {
    const std::string who = std::string(name) + " of pair " + std::to_string(pairs_);
    require(states.rows() > 0, who + ": rows", states.rows(), "must be > 0 (a prompt has at least one token)");
    require(states.cols() == dim_, who + ": cols", states.cols(), "must equal dim (" + std::to_string(dim_) + ")");
    const Index first = opt_.reduction == TokenReduction::kLastToken ? states.rows() - 1 : 0;
    std::fill(out.begin(), out.end(), 0.0);
    for (Index r = first; r < states.rows(); ++r) {
      const float* row = states.row_ptr(r);
      for (std::size_t j = 0; j < out.size(); ++j) out[j] += static_cast<double>(row[j]);
    }
    const auto count = static_cast<double>(states.rows() - first);
    for (std::size_t j = 0; j < out.size(); ++j) {
      if (!std::isfinite(out[j])) {  // find the culprit (the error path only)
        for (Index r = first; r < states.rows(); ++r)
          if (!std::isfinite(states(r, static_cast<Index>(j))))
            throw_invalid_argument(who + ": state(" + std::to_string(r) + ", " + std::to_string(j) + ")",
                                   states(r, static_cast<Index>(j)), "must be finite");
      }
      out[j] /= count;
    }
  }

  Index dim_;
  ContrastiveOptions opt_;
  std::vector<double> sum_;
  std::vector<double> pos_, neg_;  // scratch: the reduced states of the pair being added
  double norm_sum_ = 0.0;
  Index pairs_ = 0;
};

/// The steering vector of N prompt pairs at once: positives[i] and negatives[i] are the hidden
/// states [tokens_i, dim] of pair i (see ContrastiveVectorBuilder).
/// @throws std::invalid_argument if the lists are empty or differ in length, or as
///         ContrastiveVectorBuilder::add_pair and ContrastiveVectorBuilder::vector().
inline std::vector<float> contrastive_steering_vector(std::span<const MatrixView<const float>> positives,
                                                      std::span<const MatrixView<const float>> negatives,
                                                      ContrastiveOptions opt = {}) {
  require(!positives.empty(), "positives.size()", positives.size(), "must be > 0");
  require(negatives.size() == positives.size(), "negatives.size()", negatives.size(),
          "must equal positives.size() (" + std::to_string(positives.size()) + ")");
  ContrastiveVectorBuilder b(positives[0].cols(), opt);
  for (std::size_t i = 0; i < positives.size(); ++i) b.add_pair(positives[i], negatives[i]);
  return b.vector();
}

}  // namespace inferkit
