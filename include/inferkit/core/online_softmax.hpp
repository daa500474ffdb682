#pragma once
// Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023). A state summarizes a
// weighted sum over some set of scores s_j and value rows v_j:
//   max = max_j s_j,  sum = sum_j exp(s_j - max),  acc = sum_j exp(s_j - max) * v_j.
// Two states over disjoint sets merge exactly; the normalized output is acc / sum and the
// natural-log log-sum-exp is max + log(sum). An empty state is (max = -inf, sum = 0, acc = 0);
// merging or finishing empty states yields zeros and LSE = -inf, never NaN.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Running max and running sum of one softmax row; the accumulator lives beside it.
struct SoftmaxStats {
  float max = kNegInf;  ///< largest score seen (-inf when empty)
  float sum = 0.0f;     ///< sum of exp(score - max) over the scores seen

  /// Whether no score has been seen.
  bool empty() const { return sum == 0.0f; }
  /// Natural-log log-sum-exp of the scores seen; -inf when empty.
  float lse() const { return sum > 0.0f ? max + std::log(sum) : kNegInf; }
};

/// Adds one (score, value row) pair to a state. -inf scores are skipped (masked).
inline void online_softmax_add(SoftmaxStats& stats, std::span<float> acc, float score, std::span<const float> value) {
  require(acc.size() == value.size(), "value.size()", value.size(),
          "must equal acc.size() (" + std::to_string(acc.size()) + ")");
  require(!std::isnan(score), "score", score, "must not be NaN");
  if (score == kNegInf) return;
  if (score > stats.max) {
    const float alpha = stats.max == kNegInf ? 0.0f : std::exp(stats.max - score);
    simd::scale(acc.data(), acc.size(), alpha);
    stats.sum *= alpha;
    stats.max = score;
  }
  const float w = std::exp(score - stats.max);
  stats.sum += w;
  simd::axpy(acc.data(), w, value.data(), value.size());
}

/// Merges state b into state a exactly (the result summarizes the union of both sets).
inline void online_softmax_merge(SoftmaxStats& a, std::span<float> acc_a, const SoftmaxStats& b,
                                 std::span<const float> acc_b) {
  require(acc_a.size() == acc_b.size(), "acc_b.size()", acc_b.size(),
          "must equal acc_a.size() (" + std::to_string(acc_a.size()) + ")");
  if (b.sum == 0.0f) return;
  if (a.sum == 0.0f) {
    a = b;
    std::copy(acc_b.begin(), acc_b.end(), acc_a.begin());
    return;
  }
  const float m = std::max(a.max, b.max);
  const float wa = std::exp(a.max - m);
  const float wb = std::exp(b.max - m);
  simd::scale(acc_a.data(), acc_a.size(), wa);
  simd::axpy(acc_a.data(), wb, acc_b.data(), acc_b.size());
  a.sum = a.sum * wa + b.sum * wb;
  a.max = m;
}

/// Adds a score that carries no value (a learned attention-sink logit, gpt-oss) to a state: it
/// joins the max and the sum, and the returned factor is what the accumulator must be multiplied
/// by (the caller scales acc, or folds it into the normalization). A -inf sink leaves the state
/// unchanged and returns 1; an empty state becomes (sink, 1) and the factor is 0.
/// @throws std::invalid_argument when sink is NaN or +inf.
inline float online_softmax_add_sink(SoftmaxStats& stats, float sink) {
  require(!std::isnan(sink) && sink != std::numeric_limits<float>::infinity(), "sink", sink,
          "must be finite or -inf (no sink)");
  if (sink == kNegInf) return 1.0f;
  if (stats.sum == 0.0f) {
    stats = {sink, 1.0f};
    return 0.0f;
  }
  const float m = std::max(stats.max, sink);
  const float alpha = std::exp(stats.max - m);
  stats.sum = stats.sum * alpha + std::exp(sink - m);
  stats.max = m;
  return alpha;
}

/// Writes acc / sum (zeros for an empty state) to out and returns the LSE (-inf if empty).
inline float online_softmax_finish(const SoftmaxStats& stats, std::span<const float> acc, std::span<float> out) {
  require(out.size() == acc.size(), "out.size()", out.size(),
          "must equal acc.size() (" + std::to_string(acc.size()) + ")");
  const float inv = stats.sum > 0.0f ? 1.0f / stats.sum : 0.0f;
  for (std::size_t i = 0; i < acc.size(); ++i) out[i] = acc[i] * inv;
  return stats.lse();
}

/// Merges two normalized partial attention outputs over disjoint key sets, each given with its
/// log-sum-exp (cascade / shared-prefix attention, split-KV decode):
///   out = (e^{lse_a} o_a + e^{lse_b} o_b) / (e^{lse_a} + e^{lse_b}), lse = log(e^{lse_a} + e^{lse_b}).
/// out may alias o_a or o_b. Two empty partials (lse = -inf) give zeros and -inf.
inline float merge_attention_states(std::span<const float> o_a, float lse_a, std::span<const float> o_b, float lse_b,
                                    std::span<float> out) {
  require(o_b.size() == o_a.size(), "o_b.size()", o_b.size(),
          "must equal o_a.size() (" + std::to_string(o_a.size()) + ")");
  require(out.size() == o_a.size(), "out.size()", out.size(),
          "must equal o_a.size() (" + std::to_string(o_a.size()) + ")");
  require(!std::isnan(lse_a), "lse_a", lse_a, "must not be NaN");
  require(!std::isnan(lse_b), "lse_b", lse_b, "must not be NaN");
  require(lse_a != std::numeric_limits<float>::infinity(), "lse_a", lse_a, "must not be +inf");
  require(lse_b != std::numeric_limits<float>::infinity(), "lse_b", lse_b, "must not be +inf");
  const float m = std::max(lse_a, lse_b);
  if (m == kNegInf) {
    for (float& x : out) x = 0.0f;
    return kNegInf;
  }
  const float wa = std::exp(lse_a - m);  // exp(-inf) = 0 for an empty side
  const float wb = std::exp(lse_b - m);
  const float inv = 1.0f / (wa + wb);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = (wa * o_a[i] + wb * o_b[i]) * inv;
  return m + std::log(wa + wb);
}

/// Merges two partial attentions of a whole batch (cascade attention: a shared prefix attended
/// once, each suffix on its own; context-parallel shards): o_a, o_b and out are [T, H, d], lse_a,
/// lse_b and lse_out are [T, H] (natural log). Row (t, h) is merged exactly as the one-row
/// overload does; lse_out may have no rows when the merged LSE is not needed. out may alias o_a
/// or o_b, and lse_out may alias lse_a or lse_b.
/// @throws std::invalid_argument when shapes disagree (the parameter is named) or an LSE is NaN
///         or +inf.
inline void merge_attention_states(Tensor3View<const float> o_a, MatrixView<const float> lse_a,
                                   Tensor3View<const float> o_b, MatrixView<const float> lse_b, Tensor3View<float> out,
                                   MatrixView<float> lse_out = {}) {
  const auto same = [&](const char* name, Index got, Index want, const char* what) {
    require(got == want, name, got, std::string("must equal ") + what + " (" + std::to_string(want) + ")");
  };
  same("o_b.dim0()", o_b.dim0(), o_a.dim0(), "o_a.dim0()");
  same("o_b.dim1()", o_b.dim1(), o_a.dim1(), "o_a.dim1()");
  same("o_b.dim2()", o_b.dim2(), o_a.dim2(), "o_a.dim2()");
  same("out.dim0()", out.dim0(), o_a.dim0(), "o_a.dim0()");
  same("out.dim1()", out.dim1(), o_a.dim1(), "o_a.dim1()");
  same("out.dim2()", out.dim2(), o_a.dim2(), "o_a.dim2()");
  same("lse_a.rows()", lse_a.rows(), o_a.dim0(), "o_a.dim0()");
  same("lse_a.cols()", lse_a.cols(), o_a.dim1(), "o_a.dim1()");
  same("lse_b.rows()", lse_b.rows(), o_a.dim0(), "o_a.dim0()");
  same("lse_b.cols()", lse_b.cols(), o_a.dim1(), "o_a.dim1()");
  const bool want_lse = lse_out.rows() > 0 || lse_out.cols() > 0;
  if (want_lse) {
    same("lse_out.rows()", lse_out.rows(), o_a.dim0(), "o_a.dim0()");
    same("lse_out.cols()", lse_out.cols(), o_a.dim1(), "o_a.dim1()");
  }
  const auto d = static_cast<std::size_t>(o_a.dim2());
  for (Index t = 0; t < o_a.dim0(); ++t) {
    for (Index h = 0; h < o_a.dim1(); ++h) {
      const float lse = merge_attention_states(std::span<const float>(o_a.ptr(t, h), d), lse_a(t, h),
                                               std::span<const float>(o_b.ptr(t, h), d), lse_b(t, h),
                                               std::span<float>(out.ptr(t, h), d));
      if (want_lse) lse_out(t, h) = lse;
    }
  }
}

/// The online-softmax state of a normalized partial attention (o, lse): max = lse, sum = 1, so
/// that with acc = o it stands for the partial's weighted sum (scaled by e^-lse); an empty partial
/// (lse = -inf) gives the empty state. Folding partials this way keeps the running sum in
/// relative precision and takes one log at the end (merge_attention_states over many partials).
/// @throws std::invalid_argument when lse is NaN or +inf.
inline SoftmaxStats attention_state(float lse) {
  require(!std::isnan(lse), "lse", lse, "must not be NaN");
  require(lse != std::numeric_limits<float>::infinity(), "lse", lse, "must not be +inf");
  return lse == kNegInf ? SoftmaxStats{} : SoftmaxStats{lse, 1.0f};
}

/// Merges n partial attentions of a batch over disjoint key sets, in the order given (context
/// parallelism: one partial per rank, in rank order): o[i] are [T, H, d], lse[i] are [T, H]
/// (natural log). Each row folds the partials' states (attention_state(lse), acc = o) with
/// online_softmax_merge and finishes once, which is how attention() folds its split-KV pieces,
/// so per-piece attention() results merged here reproduce attention()'s bits when the pieces
/// are its splits. Unlike chaining the two-partial overload, whose LSE is rounded at every step,
/// the error does not grow with n. No partials give zeros and -inf. lse_out may have no rows;
/// out must not alias any o[i].
/// @throws std::invalid_argument when shapes disagree (the parameter is named), o.size() !=
///         lse.size(), or an LSE is NaN or +inf.
inline void merge_attention_states(std::span<const Tensor3View<const float>> o,
                                   std::span<const MatrixView<const float>> lse, Tensor3View<float> out,
                                   MatrixView<float> lse_out = {}) {
  require(lse.size() == o.size(), "lse.size()", lse.size(), "must equal o.size() (" + std::to_string(o.size()) + ")");
  const Index T = out.dim0(), H = out.dim1(), d = out.dim2();
  for (std::size_t i = 0; i < o.size(); ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    require(o[i].dim0() == T && o[i].dim1() == H && o[i].dim2() == d, "o" + at + ".dim0()", o[i].dim0(),
            "must match out's shape [" + std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(d) +
                "] in every dimension");
    require(lse[i].rows() == T && lse[i].cols() == H, "lse" + at + ".rows()", lse[i].rows(),
            "must match [" + std::to_string(T) + ", " + std::to_string(H) + "] (out's rows and heads)");
  }
  const bool want_lse = lse_out.rows() > 0 || lse_out.cols() > 0;
  if (want_lse) {
    require(lse_out.rows() == T, "lse_out.rows()", lse_out.rows(), "must equal out.dim0() (" + std::to_string(T) + ")");
    require(lse_out.cols() == H, "lse_out.cols()", lse_out.cols(), "must equal out.dim1() (" + std::to_string(H) + ")");
  }
  const auto n = static_cast<std::size_t>(d);
  for (Index t = 0; t < T; ++t) {
    for (Index h = 0; h < H; ++h) {
      const std::span<float> row(out.ptr(t, h), n);
      std::fill(row.begin(), row.end(), 0.0f);
      SoftmaxStats total;
      for (std::size_t i = 0; i < o.size(); ++i)
        online_softmax_merge(total, row, attention_state(lse[i](t, h)), std::span<const float>(o[i].ptr(t, h), n));
      const float l = online_softmax_finish(total, row, row);
      if (want_lse) lse_out(t, h) = l;
    }
  }
}

}  // namespace inferkit
