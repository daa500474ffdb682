#pragma once
// Top-n-sigma (Tang et al. 2024, "Top-nσ: Not All Logits Are You Need"; llama.cpp's
// top_n_sigma): keep the candidates whose logit is at least max - n * sigma, where sigma is the
// population standard deviation (divide by the count) of the candidates' finite logits. The kept
// set does not change under temperature (scaling the logits scales max and sigma alike). As
// llama.cpp (since its PR 13345), n <= 0 leaves the candidates unchanged (its "-1 = disabled"),
// and so does a set of one candidate.
//
// Sort-free: one pass for the mean, one for the sum of squared deviations (both in double), then
// the threshold is rounded up to the first float at or above it and one pass keeps the logits at
// or above it: in place when many survive, as a list when few do.
// The rule (a chain stage): TopNSigma{1.0f}; alone on a row: apply_top_n_sigma(logits, 1.0f).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/top_p.hpp"

namespace inferkit {

/// Checks top-n-sigma's parameter: n finite (n <= 0 = off); throws std::invalid_argument.
inline void validate_top_n_sigma(float n) {
  require(std::isfinite(n), "top_n_sigma", n, "must be finite (<= 0 = off)");
}

namespace detail {

/// Mean and population variance of the finite logits of a dense row (two passes, double).
struct LogitMoments {
  double mean = 0.0, variance = 0.0;
  Index count = 0;
};
inline LogitMoments dense_moments(std::span<const float> x) {
  LogitMoments m;
  const std::size_t n = x.size();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  double sum = 0.0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    const __m512 vneg = _mm512_set1_ps(kNegInf);
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    std::uint64_t count = 0;
    for (std::size_t i = 0; i < n; i += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, n - i));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_mask_loadu_ps(vneg, live, x.data() + i);
      const __mmask16 fin = _mm512_cmp_ps_mask(l, vneg, _CMP_NEQ_OQ);
      count += static_cast<std::uint64_t>(__builtin_popcount(fin));
      s0 = _mm512_mask_add_pd(s0, static_cast<__mmask8>(fin), s0, _mm512_cvtps_pd(_mm512_castps512_ps256(l)));
      s1 = _mm512_mask_add_pd(s1, static_cast<__mmask8>(fin >> 8), s1,
                              _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(l), 1))));
    }
    m.count = static_cast<Index>(count);
    if (m.count == 0) return m;
    m.mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / double(m.count);
    const __m512d mu = _mm512_set1_pd(m.mean);
    __m512d q0 = _mm512_setzero_pd(), q1 = q0;
    for (std::size_t i = 0; i < n; i += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, n - i));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_mask_loadu_ps(vneg, live, x.data() + i);
      const __mmask16 fin = _mm512_cmp_ps_mask(l, vneg, _CMP_NEQ_OQ);
      const __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(l)), mu);
      const __m512d d1 =
          _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(l), 1))), mu);
      q0 = _mm512_mask3_fmadd_pd(d0, d0, q0, static_cast<__mmask8>(fin));
      q1 = _mm512_mask3_fmadd_pd(d1, d1, q1, static_cast<__mmask8>(fin >> 8));
    }
    m.variance = _mm512_reduce_add_pd(_mm512_add_pd(q0, q1)) / double(m.count);
    return m;
  }
#endif
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < n; ++i)
    if (x[i] > kNegInf) {
      acc[i % 4] += double(x[i]);
      ++m.count;
    }
  sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  if (m.count == 0) return m;
  m.mean = sum / double(m.count);
  double sq[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < n; ++i)
    if (x[i] > kNegInf) {
      const double d = double(x[i]) - m.mean;
      sq[i % 4] += d * d;
    }
  m.variance = ((sq[0] + sq[1]) + (sq[2] + sq[3])) / double(m.count);
  return m;
}

/// The smallest float >= t (t finite or -inf).
inline float float_at_or_above(double t) {
  float f = static_cast<float>(t);
  if (double(f) < t) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

}  // namespace detail

/// Applies top-n-sigma to the candidates: keeps logits >= max - n * sigma (inclusive).
inline void apply_top_n_sigma(Candidates& c, float n) {
  validate_top_n_sigma(n);
  if (n <= 0.0f) return;
  const float max = c.summary().max;
  const auto x = c.logits();
  detail::LogitMoments m;
  if (c.dense()) {
    m = detail::dense_moments(x);
  } else {
    const auto& ids = c.ids();
    m.count = static_cast<Index>(ids.size());
    double sum = 0.0;
    for (TokenId id : ids) sum += double(x[static_cast<std::size_t>(id)]);
    m.mean = sum / double(m.count);
    double sq = 0.0;
    for (TokenId id : ids) {
      const double d = double(x[static_cast<std::size_t>(id)]) - m.mean;
      sq += d * d;
    }
    m.variance = sq / double(m.count);
  }
  if (m.count <= 1) return;
  const float cut = detail::float_at_or_above(double(max) - double(n) * std::sqrt(m.variance));
  if (!c.dense()) {
    std::vector<TokenId> ids;
    for (TokenId id : c.ids())
      if (x[static_cast<std::size_t>(id)] >= cut) ids.push_back(id);
    c.restrict_to(std::move(ids));
    return;
  }
  std::vector<TokenId> ids;
  const auto limit = static_cast<std::size_t>(std::max<Index>(4096, c.vocab_size() / 16));
  if (!detail::collect_ids_up_to(x, cut, detail::kHighest, ids, limit)) {
    detail::filter_below(x, cut, false);  // many survive: stay dense
    c.logits_changed();
    return;
  }
  c.restrict_to(std::move(ids));
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_n_sigma(std::span<float> logits, float n) {
  Candidates c(logits);
  apply_top_n_sigma(c, n);
  c.materialize();
}

/// Top-n-sigma stage.
struct TopNSigma {
  float n = -1.0f;  ///< standard deviations below the max; <= 0 = off

  /// The registered name, "top_n_sigma": describe() starts with it.
  static constexpr std::string_view kName = "top_n_sigma";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_top_n_sigma(n); }
  /// "top_n_sigma(n)".
  std::string describe() const { return describe_rule(kName, {n}); }
  /// apply_top_n_sigma() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_top_n_sigma(c, n); }
};

}  // namespace inferkit
