#pragma once
// The mass of a candidate set in one pass: Z = sum w_i with w_i = simd::exp(l_i - max) (the weight
// function of candidates.hpp), the number of candidates, and optionally sum w_i (l_i - max), from
// which the entropy follows without a log per token:
//   H = -sum p_i log p_i = log Z - sum w_i (l_i - max) / Z   (p_i = w_i / Z, log w_i = l_i - max).
// Sums are taken in double; each term is a float weight (or the double product of a float weight
// and a float difference), so results differ from any other summation order only in the last
// bits of a double. Used by the rules that need probabilities but no ranking: XTC, epsilon, eta,
// dynamic temperature, Mirostat v2.

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
#if defined(__AVX512F__)
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
  if (with_entropy) return with_count ? candidate_mass_impl<true, true>(c, max) : candidate_mass_impl<true, false>(c, max);
  return with_count ? candidate_mass_impl<false, true>(c, max) : candidate_mass_impl<false, false>(c, max);
}

/// Count, Z and sum w (l - max) for rules whose result moves continuously with them (dynamic
/// temperature: no keep / drop boundary rides on Z). The dense AVX-512 pass sums in float within
/// blocks of 1,024 tokens (32 terms per lane and accumulator, relative error below 2e-6) and
/// adds the block sums in double: the widening to double is about a third of the exact pass.
/// Other paths are the exact pass.
inline CandidateMass candidate_entropy_mass(const Candidates& c, float max) {
#if defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    if (c.dense()) {
      CandidateMass m;
      const auto x = c.logits();
      const std::size_t n = x.size();
      constexpr float kNegInf = -std::numeric_limits<float>::infinity();
      const __m512 vmax = _mm512_set1_ps(max), vneg = _mm512_set1_ps(kNegInf);
      std::uint64_t count = 0;
      for (std::size_t b0 = 0; b0 < n; b0 += 1024) {
        const std::size_t end = std::min(n, b0 + 1024);
        __m512 z0 = _mm512_setzero_ps(), z1 = z0, h0 = z0, h1 = z0;
        for (std::size_t i = b0; i < end; i += 16) {
          const auto left = static_cast<unsigned>(std::min<std::size_t>(16, end - i));
          const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
          const __m512 l = _mm512_mask_loadu_ps(vneg, live, x.data() + i);
          const __m512 d = _mm512_sub_ps(l, vmax);
          const __m512 e = simd::exp_nonpositive(simd::VecF(d));
          const __mmask16 fin = _mm512_cmp_ps_mask(l, vneg, _CMP_NEQ_OQ);
          count += static_cast<std::uint64_t>(__builtin_popcount(fin));
          const __m512 ed = _mm512_maskz_mul_ps(fin, e, d);  // filtered lanes: 0, not 0 * -inf
          if ((i - b0) & 16) {
            z1 = _mm512_add_ps(z1, e);
            h1 = _mm512_add_ps(h1, ed);
          } else {
            z0 = _mm512_add_ps(z0, e);
            h0 = _mm512_add_ps(h0, ed);
          }
        }
        const auto widen_sum = [](__m512 a, __m512 b) {
          const __m512d lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
                                           _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
          const __m512d hi = _mm512_add_pd(
              _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))),
              _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1))));
          return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
        };
        m.z += widen_sum(z0, z1);
        m.wl += widen_sum(h0, h1);
      }
      m.count = static_cast<Index>(count);
      return m;
    }
  }
#endif
  return candidate_mass(c, max, true, true);
}

}  // namespace inferkit::detail
