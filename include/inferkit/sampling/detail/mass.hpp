#pragma once
// The mass of a candidate set in one pass: Z = sum w_i with w_i = simd::exp(l_i - max) (the weight
// function of candidates.hpp), the number of candidates, and optionally sum w_i (l_i - max), from
// which the entropy follows without a log per token:
//   H = -sum p_i log p_i = log Z - sum w_i (l_i - max) / Z   (p_i = w_i / Z, log w_i = l_i - max).
// Sums are taken in double; each term is a float weight (or the double product of a float weight
// and a float difference), so results differ from any other summation order only in the last
// bits of a double. Used by the rules that need probabilities but no ranking: XTC, epsilon, eta,
// dynamic temperature, Mirostat v2. float_block_mass is the cheaper pass with float partial
// sums and a stated error bound: dynamic temperature uses it as is, the probability floors
// through detail/mass_threshold.hpp (exact wherever a weight is near the threshold).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"

namespace inferkit::detail {

/// Z, sum w (l - max) and the candidate count of a set (each when asked for).
struct CandidateMass {
  double z = 0.0;
  double wl = 0.0;
  Index count = 0;
  /// Entropy of p = w / Z in nats (needs wl).
  double entropy() const { return std::log(z) - wl / z; }
};

/// One pass over the candidates' logits: weights, their double sum, the count of finite logits
/// and (when `with_entropy`) sum w (l - max) in double. The dense AVX-512 pass is bound by the
/// 512-bit ports (the exp is 15 of its ~25 vector operations per 16 tokens), so the entropy
/// term is compiled in only when asked for.
template <bool kWithEntropy, bool kWithCount>
CandidateMass candidate_mass_impl(const Candidates& c, float max) {
  constexpr bool with_entropy = kWithEntropy;
  CandidateMass m;
  const auto x = c.logits();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!c.dense()) {
    const auto& ids = c.ids();
    std::vector<float> l(ids.size()), w(ids.size());
    for (std::size_t j = 0; j < ids.size(); ++j) l[j] = x[static_cast<std::size_t>(ids[j])];
    simd::exp_shifted(l.data(), w.data(), l.size(), max);
    m.z = simd::sum_as_double(w.data(), w.size());
    m.count = static_cast<Index>(ids.size());
    if (with_entropy)
      for (std::size_t j = 0; j < ids.size(); ++j)
        if (w[j] > 0.0f) m.wl += double(w[j]) * double(l[j] - max);
    return m;
  }
  const std::size_t n = x.size();
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    // Weights stay in registers: each vector widens to two double vectors for the sums; the
    // entropy term is a masked double FMA (filtered lanes would give 0 * -inf).
    __m512d z0 = _mm512_setzero_pd(), z1 = z0, h0 = z0, h1 = z0;
    const __m512 vmax = _mm512_set1_ps(max), vneg = _mm512_set1_ps(kNegInf);
    std::uint64_t count = 0;
    for (std::size_t i = 0; i < n; i += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, n - i));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_mask_loadu_ps(vneg, live, x.data() + i);
      const __m512 d = _mm512_sub_ps(l, vmax);
      const __m512 e = simd::exp_nonpositive(simd::VecF(d));
      const __mmask16 fin = _mm512_cmp_ps_mask(l, vneg, _CMP_NEQ_OQ);
      if constexpr (kWithCount) count += static_cast<std::uint64_t>(__builtin_popcount(fin));
      const __m512d elo = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
      const __m512d ehi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
      z0 = _mm512_add_pd(z0, elo);
      z1 = _mm512_add_pd(z1, ehi);
      if constexpr (with_entropy) {
        const __m512d dlo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
        const __m512d dhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
        h0 = _mm512_mask3_fmadd_pd(elo, dlo, h0, static_cast<__mmask8>(fin));
        h1 = _mm512_mask3_fmadd_pd(ehi, dhi, h1, static_cast<__mmask8>(fin >> 8));
      }
    }
    m.z = _mm512_reduce_add_pd(_mm512_add_pd(z0, z1));
    m.wl = _mm512_reduce_add_pd(_mm512_add_pd(h0, h1));
    m.count = static_cast<Index>(count);
    return m;
  }
#endif
  constexpr std::size_t kBlock = 1024;
  alignas(64) float w[kBlock];
  for (std::size_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::size_t len = std::min(kBlock, n - b0);
    const float* l = x.data() + b0;
    simd::exp_shifted(l, w, len, max);
    m.z += simd::sum_as_double(w, len);
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (std::size_t i = 0; i < len; ++i) {
      const bool finite = l[i] > kNegInf;
      m.count += finite;
      if (kWithEntropy && finite) acc[i % 4] += double(w[i]) * double(l[i] - max);
    }
    m.wl += (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  return m;
}

/// candidate_mass_impl with the entropy term and the count chosen at run time (`count` is
/// meaningful only when asked for: the dense AVX-512 pass leaves it out otherwise).
inline CandidateMass candidate_mass(const Candidates& c, float max, bool with_entropy, bool with_count = true) {
  if (with_entropy)
    return with_count ? candidate_mass_impl<true, true>(c, max) : candidate_mass_impl<true, false>(c, max);
  return with_count ? candidate_mass_impl<false, true>(c, max) : candidate_mass_impl<false, false>(c, max);
}

/// Bound on the relative error of float_block_mass's z and wl against the exact pass's (both
/// are sums of same-sign terms). Every float partial sum holds 8 terms, each through at most 4
/// roundings for z (three adds in its accumulator, one to combine the two accumulators) and 5
/// for wl (fused multiply-adds, no separate product rounding): gamma_5 = 5u / (1 - 5u) = 2.98e-7
/// of the sum (u = 2^-24; Higham, Accuracy and Stability of Numerical Algorithms, section 4.2).
/// The double sums of either pass add at most 2^24 * 2^-53 = 1.9e-9 each at 2^24 tokens.
inline constexpr double kFloatBlockMassRelativeError = 3.1e-7;

/// True when float_block_mass runs its fast pass for these candidates (a dense row with
/// AVX-512); otherwise it is the exact pass.
inline bool has_float_block_mass(const Candidates& c) {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) return c.dense();
#endif
  (void)c;
  return false;
}

/// Count, Z and (when kWithEntropy) sum w (l - max) with the float weights summed in float over
/// blocks of 128 tokens and the block sums added in double: the widening to double of every
/// weight is about a third of the exact pass. z and wl are within kFloatBlockMassRelativeError
/// of the exact pass's when has_float_block_mass(c), equal to them otherwise; the count is exact.
template <bool kWithEntropy>
CandidateMass float_block_mass(const Candidates& c, float max) {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    if (c.dense()) {
      CandidateMass m;
      const auto x = c.logits();
      const std::size_t n = x.size();
      constexpr float kNegInf = -std::numeric_limits<float>::infinity();
      const __m512 vmax = _mm512_set1_ps(max), vneg = _mm512_set1_ps(kNegInf);
      __m512d zd0 = _mm512_setzero_pd(), zd1 = zd0, hd0 = zd0, hd1 = zd0;
      const auto widen_add = [](__m512 a, __m512d& lo, __m512d& hi) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(a)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
      };
      std::uint64_t count = 0;
      for (std::size_t b0 = 0; b0 < n; b0 += 128) {
        const std::size_t end = std::min(n, b0 + 128);
        __m512 z0 = _mm512_setzero_ps(), z1 = z0, h0 = z0, h1 = z0;
        for (std::size_t i = b0; i < end; i += 16) {
          const auto left = static_cast<unsigned>(std::min<std::size_t>(16, end - i));
          const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
          const __m512 l = _mm512_mask_loadu_ps(vneg, live, x.data() + i);
          const __m512 d = _mm512_sub_ps(l, vmax);
          const __m512 e = simd::exp_nonpositive(simd::VecF(d));
          const __mmask16 fin = _mm512_cmp_ps_mask(l, vneg, _CMP_NEQ_OQ);
          count += static_cast<std::uint64_t>(__builtin_popcount(fin));
          if ((i - b0) & 16) {  // filtered lanes add nothing (0 * -inf would be NaN)
            z1 = _mm512_add_ps(z1, e);
            if constexpr (kWithEntropy) h1 = _mm512_mask3_fmadd_ps(e, d, h1, fin);
          } else {
            z0 = _mm512_add_ps(z0, e);
            if constexpr (kWithEntropy) h0 = _mm512_mask3_fmadd_ps(e, d, h0, fin);
          }
        }
        widen_add(_mm512_add_ps(z0, z1), zd0, zd1);
        if constexpr (kWithEntropy) widen_add(_mm512_add_ps(h0, h1), hd0, hd1);
      }
      m.z = _mm512_reduce_add_pd(_mm512_add_pd(zd0, zd1));
      if constexpr (kWithEntropy) m.wl = _mm512_reduce_add_pd(_mm512_add_pd(hd0, hd1));
      m.count = static_cast<Index>(count);
      return m;
    }
  }
#endif
  return candidate_mass(c, max, kWithEntropy, true);
}

}  // namespace inferkit::detail
