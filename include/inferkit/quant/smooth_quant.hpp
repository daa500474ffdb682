#pragma once
// SmoothQuant (Xiao et al. 2023): migrate the quantization difficulty of activation outlier
// channels into the weights with per-input-channel factors
//
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)      (alpha = 0.5 in the paper)
//
// so that X' = X diag(s)^-1 and W' = W diag(s) give the same product X' W'^T = X W^T while
// X' has flatter channels. Nothing extra runs at inference: the division is folded into the
// weight of the RMSNorm (or LayerNorm) that produces X, the multiplication into every weight
// matrix that reads X (for a Llama block: the input norm into W_q, W_k, W_v; the
// post-attention norm into W_1 and W_3).
//
// The statistics: max|X_j| over a calibration stream (ActivationStats), max|W_j| over the
// columns of all matrices that read X (weight_column_abs_max). A channel whose activation or
// weight maximum is 0 gets s_j = 1 (there is nothing to migrate).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"

namespace inferkit {

/// Running per-channel max |x| over calibration activations (SmoothQuant's `act_scales`).
/// Single-writer.
class ActivationStats {
 public:
  /// Statistics for rows of `channels` values (0 allowed); all maxima start at 0.
  explicit ActivationStats(Index channels) : max_(static_cast<std::size_t>(std::max<Index>(channels, 0)), 0.0f) {
    require(channels >= 0, "channels", channels, "must be >= 0");
  }

  /// Folds the rows of `x` (rows x channels) into the maxima. Throws std::invalid_argument
  /// naming `x.cols()` for a width mismatch and `x(row, col)` for a NaN or infinite value
  /// (nothing is recorded then).
  void observe(MatrixView<const float> x) {
    require(x.cols() == channels(), "x.cols()", x.cols(), "must equal channels() (" + std::to_string(channels()) + ")");
    detail::require_finite_rows(x, "x");
    for (Index r = 0; r < x.rows(); ++r) detail::max_abs_into(x.row_ptr(r), x.cols(), max_.data());
    rows_ += x.rows();
  }

  /// Folds one row of `channels` values into the maxima (same checks, named `x[i]`).
  void observe(std::span<const float> row) {
    require(static_cast<Index>(row.size()) == channels(), "row.size()", row.size(),
            "must equal channels() (" + std::to_string(channels()) + ")");
    detail::require_finite_span(row, "x");
    detail::max_abs_into(row.data(), channels(), max_.data());
    ++rows_;
  }

  /// max |x_j| per channel over every observed row.
  std::span<const float> abs_max() const { return max_; }
  /// Channels per row.
  Index channels() const { return static_cast<Index>(max_.size()); }
  /// Rows observed so far.
  Index rows_seen() const { return rows_; }

 private:
  std::vector<float> max_;
  Index rows_ = 0;
};

/// inout[j] = max(inout[j], max_n |w(n, j)|): column maxima of one weight matrix (rows = output
/// channels, cols = input channels), accumulated over every matrix that reads the same input.
/// Throws std::invalid_argument naming `inout.size()` for a width mismatch and `w(row, col)`
/// for a NaN or infinite weight.
inline void weight_column_abs_max(MatrixView<const float> w, std::span<float> inout) {
  require(static_cast<Index>(inout.size()) == w.cols(), "inout.size()", inout.size(),
          "must equal w.cols() (" + std::to_string(w.cols()) + ")");
  detail::require_finite_rows(w, "w");
  for (Index n = 0; n < w.rows(); ++n) detail::max_abs_into(w.row_ptr(n), w.cols(), inout.data());
}

/// Smoothing factors s_j = act_abs_max[j]^alpha / weight_abs_max[j]^(1 - alpha), computed in
/// double and rounded to float; s_j = 1 where either maximum is 0. Throws
/// std::invalid_argument naming `alpha` unless it is in [0, 1], `weight_abs_max.size()` for a
/// length mismatch, `act_abs_max[j]` / `weight_abs_max[j]` for a negative or non-finite
/// maximum, and `s[j]` when a factor is not a finite positive float.
inline std::vector<float> smoothing_factors(std::span<const float> act_abs_max, std::span<const float> weight_abs_max,
                                            float alpha) {
  require(alpha >= 0.0f && alpha <= 1.0f, "alpha", alpha, "must be in [0, 1]");
  require(weight_abs_max.size() == act_abs_max.size(), "weight_abs_max.size()", weight_abs_max.size(),
          "must equal act_abs_max.size() (" + std::to_string(act_abs_max.size()) + ")");
  std::vector<float> s(act_abs_max.size(), 1.0f);
  for (std::size_t j = 0; j < s.size(); ++j) {
    const float a = act_abs_max[j], w = weight_abs_max[j];
    require(std::isfinite(a) && a >= 0.0f, "act_abs_max[" + std::to_string(j) + "]", a, "must be finite and >= 0");
    require(std::isfinite(w) && w >= 0.0f, "weight_abs_max[" + std::to_string(j) + "]", w, "must be finite and >= 0");
    if (a == 0.0f || w == 0.0f) continue;
    s[j] = static_cast<float>(std::pow(double(a), double(alpha)) / std::pow(double(w), 1.0 - double(alpha)));
    require(std::isfinite(s[j]) && s[j] > 0.0f, "s[" + std::to_string(j) + "]", s[j],
            "must be a finite positive float");
  }
  return s;
}

/// Folds factors `s` into a model in place: norm_weight[j] /= s_j (the norm now outputs
/// X diag(s)^-1) and w(n, j) *= s_j for every matrix in `weights` (each reads that output).
/// The float product is unchanged up to rounding. Throws std::invalid_argument naming
/// `norm_weight.size()` or `weights[i].cols()` for a length mismatch and `s[j]` for a factor
/// that is not finite and positive; nothing is modified then.
inline void fold_smoothing(std::span<const float> s, std::span<float> norm_weight,
                           std::span<const MatrixView<float>> weights) {
  require(norm_weight.size() == s.size(), "norm_weight.size()", norm_weight.size(),
          "must equal s.size() (" + std::to_string(s.size()) + ")");
  for (std::size_t i = 0; i < weights.size(); ++i)
    require(weights[i].cols() == static_cast<Index>(s.size()), "weights[" + std::to_string(i) + "].cols()",
            weights[i].cols(), "must equal s.size() (" + std::to_string(s.size()) + ")");
  for (std::size_t j = 0; j < s.size(); ++j)
    require(std::isfinite(s[j]) && s[j] > 0.0f, "s[" + std::to_string(j) + "]", s[j], "must be finite and > 0");
  for (std::size_t j = 0; j < s.size(); ++j) norm_weight[j] /= s[j];
  for (const MatrixView<float>& w : weights)
    for (Index n = 0; n < w.rows(); ++n) {
      float* row = w.row_ptr(n);
      for (std::size_t j = 0; j < s.size(); ++j) row[j] *= s[j];
    }
}

}  // namespace inferkit
