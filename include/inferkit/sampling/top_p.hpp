#pragma once
// Top-p (nucleus, Holtzman et al. 2020), inclusive: in decoding order (logit descending, id
// ascending) keep the shortest prefix whose cumulative weight reaches p * Z, and at least
// min_keep tokens; p >= 1 keeps everything. p == 0 keeps the min_keep most probable tokens, as
// llama.cpp and Hugging Face do (an empty prefix already "reaches" 0, and min_keep tops it up).
// Weights and Z as in candidates.hpp (double sums).
//
// A short candidate list is ranked directly. A dense row is never sorted: the nucleus ends at
// one boundary token. A strided sample of 1,024 logits gives pivots t_hi >= t_lo around the
// sample's estimate of the boundary; one sweep computes every weight, Z and the mass above t_hi
// (double sums) and gathers the tokens in [t_lo, t_hi]. Inside that narrow range the search
// needs no more sampling: each round splits the set's logit range into 8 equal intervals, one
// pass gives the exact (double) mass above each pivot, and only the interval where the running
// mass crosses p * Z is kept, until a few dozen tokens remain and are ranked. Then one pass
// writes -inf after the boundary.
// The rule (a chain stage): TopP{0.95f}; alone on a row: apply_top_p(logits, 0.95f).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/detail/radix_sort.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

/// Checks top-p's parameters: p in [0, 1] (0 keeps the min_keep most probable tokens) and
/// min_keep >= 1; throws std::invalid_argument naming the parameter otherwise.
inline void validate_top_p(float p, Index min_keep) {
  require(std::isfinite(p) && p >= 0.0f && p <= 1.0f, "top_p", p,
          "must be in [0, 1] (0 keeps the min_keep most probable)");
  require(min_keep >= 1, "min_keep", min_keep, "must be >= 1");
}

namespace detail {

/// Length of the shortest prefix of w whose running sum, started at cum, reaches target.
inline std::size_t prefix_reaching(const float* w, std::size_t n, double cum, double target) {
  std::size_t j = 0;
  while (j < n && cum < target) cum += static_cast<double>(w[j++]);
  return j;
}

/// The last token the nucleus keeps, and how many tokens it keeps in all.
struct NucleusEnd {
  TokenId last = -1;
  Index kept = 0;
};

/// Sorts (logit, id) pairs into decoding order (logit descending, id ascending) and returns
/// their weights in that order. The pairs carry their logits, so the sort reads no row.
inline std::vector<float> rank_with_weights(std::vector<std::pair<float, TokenId>>& ranked, float max) {
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<float> w(ranked.size());
  for (std::size_t j = 0; j < ranked.size(); ++j) w[j] = ranked[j].first;
  simd::exp_shifted(w.data(), w.data(), w.size(), max);
  return w;
}

/// Pivots t_hi >= t_lo from a sample of a set whose boundary sits at `fraction` of its mass.
/// With the sample sorted descending, F_j (the sample's mass fraction above its j-th logit)
/// estimates the set's; its standard error follows from the weights (delta method:
/// se_j^2 = sum_s w_s^2 (1[s < j] - F_j)^2 / W^2), which stays honest when a few heavy tokens
/// carry the mass. t_hi is the last sample logit still 4 standard errors short of the
/// fraction, t_lo the first one 4 beyond it, each two sample positions further out.
inline void mass_pivots(std::vector<float>& sample, float max, double fraction, float& t_hi, float& t_lo) {
  t_hi = std::numeric_limits<float>::infinity();
  // Never below the lowest finite logit: filtered (-inf) tokens must not join the middle part.
  t_lo = std::numeric_limits<float>::lowest();
  if (sample.empty()) return;
  sort_descending(sample);
  const std::size_t n = sample.size();
  std::vector<float> w(n);
  simd::exp_shifted(sample.data(), w.data(), n, max);
  double total = 0, total_sq = 0;
  for (float v : w) {
    total += v;
    total_sq += double(v) * v;
  }
  constexpr double kSigmas = 4.0;
  constexpr std::size_t kSlack = 2;
  std::size_t j_hi = 0, j_lo = n;  // t_hi = sample[j_hi - 1 - slack], t_lo = sample[j_lo + slack]
  double cum = 0, cum_sq = 0;
  const double inv_total = 1.0 / total;
  for (std::size_t j = 0; j < n; ++j) {  // F_j covers samples [0, j); squared tests, no sqrt
    const double f = cum * inv_total;
    const double var = ((1 - f) * (1 - f) * cum_sq + f * f * (total_sq - cum_sq)) * inv_total * inv_total;
    const double gap = fraction - f, reach = kSigmas * kSigmas * var;
    if (gap > 0 && gap * gap > reach) j_hi = j;
    if (gap <= 0 && gap * gap >= reach) {
      j_lo = j;
      break;
    }
    cum += w[j];
    cum_sq += double(w[j]) * w[j];
  }
  if (j_hi > kSlack) t_hi = sample[j_hi - 1 - kSlack];
  if (j_lo + kSlack < n) t_lo = sample[j_lo + kSlack];
}

/// Candidates held contiguously (logits, weights, ids) in per-thread buffers that are reused
/// from call to call, so a warm call allocates nothing.
struct TokenSet {
  std::vector<float> l, w;
  std::vector<TokenId> id;
  std::size_t n = 0;

  /// Room for n members plus one vector of slack for full-width compress stores.
  void reserve(std::size_t count) {
    if (l.size() < count + 16) {
      l.resize(count + 16);
      w.resize(count + 16);
      id.resize(count + 16);
    }
  }
  /// Keeps the members with lo <= l <= hi, in place and in order.
  void keep_range(float lo, float hi) {
    std::size_t k = 0, j = 0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
    if constexpr (simd::kWidth == 16) {
      // Compress in registers, store a full vector at k: k <= j, so only lanes already loaded
      // are overwritten.
      const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
      for (; j + 16 <= n; j += 16) {
        const __m512 lv = _mm512_loadu_ps(l.data() + j);
        const __mmask16 m = in_range_mask(lv, vlo, vhi);
        const __m512 wv = _mm512_loadu_ps(w.data() + j);
        const __m512i iv = _mm512_loadu_si512(id.data() + j);
        _mm512_storeu_ps(l.data() + k, _mm512_maskz_compress_ps(m, lv));
        _mm512_storeu_ps(w.data() + k, _mm512_maskz_compress_ps(m, wv));
        _mm512_storeu_si512(id.data() + k, _mm512_maskz_compress_epi32(m, iv));
        k += static_cast<std::size_t>(__builtin_popcount(m));
      }
    }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
    if constexpr (simd::kWidth == 8) {  // left-packed by vpermd: k <= j as above
      const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
      for (; j + 8 <= n; j += 8) {
        const __m256 lv = _mm256_loadu_ps(l.data() + j);
        const auto m = static_cast<unsigned>(_mm256_movemask_ps(in_range_mask(lv, vlo, vhi)));
        const __m256i perm = left_pack_indices(m);
        const __m256 wv = _mm256_loadu_ps(w.data() + j);
        const __m256i iv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(id.data() + j));
        _mm256_storeu_ps(l.data() + k, _mm256_permutevar8x32_ps(lv, perm));
        _mm256_storeu_ps(w.data() + k, _mm256_permutevar8x32_ps(wv, perm));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(id.data() + k), _mm256_permutevar8x32_epi32(iv, perm));
        k += static_cast<std::size_t>(__builtin_popcount(m));
      }
    }
#endif
    for (; j < n; ++j) {
      l[k] = l[j];
      w[k] = w[j];
      id[k] = id[j];
      k += static_cast<std::size_t>(l[j] >= lo && l[j] <= hi);
    }
    n = k;
  }
};

inline TokenSet& top_p_workspace() {
  thread_local TokenSet set;
  return set;
}

/// Appends every token of x with lo <= x[i] <= hi to the set (logit and id; weights later).
inline void gather_range(std::span<const float> x, float lo, float hi, TokenSet& s) {
  const std::size_t n = x.size();
  s.reserve(s.n + n);
  std::size_t i = 0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x.data() + i);
      const __mmask16 m = in_range_mask(v, vlo, vhi);
      _mm512_storeu_ps(s.l.data() + s.n, _mm512_maskz_compress_ps(m, v));
      _mm512_storeu_si512(s.id.data() + s.n, _mm512_maskz_compress_epi32(m, idx));
      s.n += static_cast<std::size_t>(__builtin_popcount(m));
      idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
    }
  }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
  if constexpr (simd::kWidth == 8) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x.data() + i);
      const auto m = static_cast<unsigned>(_mm256_movemask_ps(in_range_mask(v, vlo, vhi)));
      const __m256i perm = left_pack_indices(m);
      _mm256_storeu_ps(s.l.data() + s.n, _mm256_permutevar8x32_ps(v, perm));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.id.data() + s.n), _mm256_permutevar8x32_epi32(idx, perm));
      s.n += static_cast<std::size_t>(__builtin_popcount(m));
      idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
    }
  }
#endif
  for (; i < n; ++i) {
    s.l[s.n] = x[i];
    s.id[s.n] = static_cast<TokenId>(i);
    s.n += static_cast<std::size_t>(x[i] >= lo && x[i] <= hi);
  }
}

/// The first pass over a dense row: Z and the mass and size of the part above t_hi (double
/// sums), while the members of [t_lo, t_hi] are gathered into `mid` (logits and ids). With
/// AVX-512 the weights never leave registers: each vector widens to two double vectors.
struct DenseSweep {
  double z = 0, hi = 0;
  Index n_hi = 0;
};
inline DenseSweep sweep_dense(std::span<const float> x, float max, float t_hi, float t_lo, TokenSet& mid) {
  const std::size_t n = x.size();
  DenseSweep r;
  mid.reserve(n);
  mid.n = 0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    __m512d z0 = _mm512_setzero_pd(), z1 = z0, h0 = z0, h1 = z0;
    const __m512 vmax = _mm512_set1_ps(max), vhi = _mm512_set1_ps(t_hi), vlo = _mm512_set1_ps(t_lo);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    std::uint64_t n_hi = 0;
    std::size_t k = 0;
    float* mid_l = mid.l.data();  // locals: stores through them must not reload the vectors
    TokenId* mid_id = mid.id.data();
    const float* src = x.data();
    for (std::size_t i = 0; i < n; i += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, n - i));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_mask_loadu_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), live, src + i);
      const __m512 e = simd::exp_nonpositive(simd::VecF(_mm512_sub_ps(l, vmax)));
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
      const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
      const __mmask16 is_hi = _mm512_cmp_ps_mask(l, vhi, _CMP_GT_OQ);  // padding lanes are -inf
      const __mmask16 is_mid = _kandn_mask16(is_hi, _mm512_mask_cmp_ps_mask(live, l, vlo, _CMP_GE_OQ));
      z0 = _mm512_add_pd(z0, lo);
      z1 = _mm512_add_pd(z1, hi);
      h0 = _mm512_mask_add_pd(h0, static_cast<__mmask8>(is_hi), h0, lo);
      h1 = _mm512_mask_add_pd(h1, static_cast<__mmask8>(is_hi >> 8), h1, hi);
      _mm512_storeu_ps(mid_l + k, _mm512_maskz_compress_ps(is_mid, l));
      _mm512_storeu_si512(mid_id + k, _mm512_maskz_compress_epi32(is_mid, idx));
      k += static_cast<std::size_t>(__builtin_popcount(is_mid));
      n_hi += static_cast<std::uint64_t>(__builtin_popcount(is_hi));
      idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
    }
    r.z = _mm512_reduce_add_pd(_mm512_add_pd(z0, z1));
    r.hi = _mm512_reduce_add_pd(_mm512_add_pd(h0, h1));
    r.n_hi = static_cast<Index>(n_hi);
    mid.n = k;
    return r;
  }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
  if constexpr (simd::kWidth == 8) {
    // The AVX2 form: no mask registers and no compress store. The mass above t_hi adds the
    // weights ANDed with the compare mask (both halves widened to double), and the members of
    // [t_lo, t_hi] are left-packed by a table-driven vpermd (left_pack_indices).
    __m256d z0 = _mm256_setzero_pd(), z1 = z0, h0 = z0, h1 = z0;
    const __m256 vmax = _mm256_set1_ps(max), vhi = _mm256_set1_ps(t_hi), vlo = _mm256_set1_ps(t_lo);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    std::uint64_t n_hi = 0;
    std::size_t k = 0;
    float* mid_l = mid.l.data();  // locals: stores through them must not reload the vectors
    TokenId* mid_id = mid.id.data();
    // The tail runs the same body on a copy padded with -inf (weight 0, in neither part).
    alignas(32) float pad[8];
    std::fill(pad, pad + 8, -std::numeric_limits<float>::infinity());
    std::copy(x.data() + (n & ~std::size_t{7}), x.data() + n, pad);
    for (std::size_t i = 0; i < n; i += 8) {  // accumulators stay in registers (no lambda captures)
      const __m256 l = _mm256_loadu_ps(i + 8 <= n ? x.data() + i : pad);
      const __m256 e = simd::exp_nonpositive(simd::VecF(_mm256_sub_ps(l, vmax)));
      const __m256 is_hi = _mm256_cmp_ps(l, vhi, _CMP_GT_OQ);
      const __m256 is_mid = _mm256_andnot_ps(is_hi, _mm256_cmp_ps(l, vlo, _CMP_GE_OQ));
      const __m256d e0 = _mm256_cvtps_pd(_mm256_castps256_ps128(e)), e1 = _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1));
      const __m256i hi_mask = _mm256_castps_si256(is_hi);  // sign-extended to 64-bit lanes
      z0 = _mm256_add_pd(z0, e0);
      z1 = _mm256_add_pd(z1, e1);
      h0 = _mm256_add_pd(
          h0, _mm256_and_pd(e0, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(hi_mask)))));
      h1 = _mm256_add_pd(
          h1, _mm256_and_pd(e1, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(hi_mask, 1)))));
      const auto m = static_cast<unsigned>(_mm256_movemask_ps(is_mid));
      const __m256i perm = left_pack_indices(m);
      _mm256_storeu_ps(mid_l + k, _mm256_permutevar8x32_ps(l, perm));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mid_id + k), _mm256_permutevar8x32_epi32(idx, perm));
      k += static_cast<std::size_t>(__builtin_popcount(m));
      n_hi += static_cast<std::uint64_t>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(is_hi))));
      idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
    }
    const auto reduce = [](__m256d a) {
      const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
      return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
    };
    r.z = reduce(_mm256_add_pd(z0, z1));
    r.hi = reduce(_mm256_add_pd(h0, h1));
    r.n_hi = static_cast<Index>(n_hi);
    mid.n = k;
    return r;
  }
#endif
  constexpr std::size_t kBlock = 1024;
  alignas(64) float w[kBlock];
  for (std::size_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::size_t len = std::min(kBlock, n - b0);
    simd::exp_shifted(x.data() + b0, w, len, max);
    r.z += simd::sum_as_double(w, len);
    for (std::size_t i = 0; i < len; ++i) {
      const float li = x[b0 + i];
      if (li > t_hi) {
        r.hi += static_cast<double>(w[i]);
        ++r.n_hi;
      }
    }
  }
  gather_range(x, t_lo, t_hi, mid);
  return r;
}

/// Computes the set's weights; returns their sum (double). Every member is <= max, so the
/// weights come from exp_nonpositive (exp's bits without its overflow and NaN fix-ups).
inline double set_weights(TokenSet& s, float max) {
  const simd::VecF vmax = simd::broadcast(max);
  std::size_t j = 0;
  for (; j + simd::kWidth <= s.n; j += simd::kWidth)
    simd::store(s.w.data() + j, simd::exp_nonpositive(simd::load(s.l.data() + j) - vmax));
  if (j < s.n)
    simd::store_partial(s.w.data() + j, simd::exp_nonpositive(simd::load_partial(s.l.data() + j, s.n - j, max) - vmax),
                        s.n - j);
  return simd::sum_as_double(s.w.data(), s.n);
}

/// Masses (double) and sizes of the members above each of kPivots descending pivots.
inline constexpr int kPivots = 7;
struct PivotMasses {
  double above[kPivots] = {};
  Index n_above[kPivots] = {};
};
inline PivotMasses pivot_masses(const TokenSet& s, const float (&pivot)[kPivots]) {
  PivotMasses pm;
  std::size_t j = 0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    __m512d a0[kPivots], a1[kPivots];
    __m512 pv[kPivots];
    std::uint64_t cnt[kPivots] = {};
    for (int k = 0; k < kPivots; ++k) {
      a0[k] = a1[k] = _mm512_setzero_pd();
      pv[k] = _mm512_set1_ps(pivot[k]);
    }
    for (; j < s.n; j += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, s.n - j));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_maskz_loadu_ps(live, s.l.data() + j);
      const __m512 w = _mm512_maskz_loadu_ps(live, s.w.data() + j);
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(w));
      const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1)));
      for (int k = 0; k < kPivots; ++k) {
        const __mmask16 m = _mm512_mask_cmp_ps_mask(live, l, pv[k], _CMP_GT_OQ);
        a0[k] = _mm512_mask_add_pd(a0[k], static_cast<__mmask8>(m), a0[k], lo);
        a1[k] = _mm512_mask_add_pd(a1[k], static_cast<__mmask8>(m >> 8), a1[k], hi);
        cnt[k] += static_cast<std::uint64_t>(__builtin_popcount(m));
      }
    }
    for (int k = 0; k < kPivots; ++k) {
      pm.above[k] = _mm512_reduce_add_pd(_mm512_add_pd(a0[k], a1[k]));
      pm.n_above[k] = static_cast<Index>(cnt[k]);
    }
    return pm;
  }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
  if constexpr (simd::kWidth == 8) {
    // The AVX2 form compares in double: logits and weights widen once per 4 members (exact), so
    // each pivot costs a compare, an AND and an add, and its count subtracts the all-ones
    // (-1) compare lanes as 64-bit integers.
    __m256d acc[kPivots];
    __m256i cnt[kPivots];
    for (int k = 0; k < kPivots; ++k) {
      acc[k] = _mm256_setzero_pd();
      cnt[k] = _mm256_setzero_si256();
    }
    for (; j + 4 <= s.n; j += 4) {
      const __m256d l = _mm256_cvtps_pd(_mm_loadu_ps(s.l.data() + j));
      const __m256d w = _mm256_cvtps_pd(_mm_loadu_ps(s.w.data() + j));
      for (int k = 0; k < kPivots; ++k) {
        const __m256d m = _mm256_cmp_pd(l, _mm256_set1_pd(static_cast<double>(pivot[k])), _CMP_GT_OQ);
        acc[k] = _mm256_add_pd(acc[k], _mm256_and_pd(w, m));
        cnt[k] = _mm256_sub_epi64(cnt[k], _mm256_castpd_si256(m));
      }
    }
    for (int k = 0; k < kPivots; ++k) {
      alignas(32) double a[4];
      alignas(32) std::int64_t c[4];
      _mm256_store_pd(a, acc[k]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(c), cnt[k]);
      pm.above[k] = (a[0] + a[1]) + (a[2] + a[3]);
      pm.n_above[k] = static_cast<Index>((c[0] + c[1]) + (c[2] + c[3]));
    }
  }
#endif
  for (; j < s.n; ++j)  // pivots descend: a member above pivot k is above every later one
    for (int k = kPivots - 1; k >= 0 && s.l[j] > pivot[k]; --k) {
      pm.above[k] += static_cast<double>(s.w[j]);
      ++pm.n_above[k];
    }
  return pm;
}

/// Writes -inf over every logit below t (and equal to t when `ties_too`).
inline void filter_below(std::span<float> x, float t, bool ties_too) {
  const simd::VecF vt = simd::broadcast(t), neg_inf = simd::broadcast(-std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + simd::kWidth <= x.size(); i += simd::kWidth) {
    const simd::VecF v = simd::load(x.data() + i);
    simd::store(x.data() + i, simd::select(ties_too ? v <= vt : v < vt, neg_inf, v));
  }
  for (; i < x.size(); ++i)
    if (x[i] < t || (ties_too && x[i] == t)) x[i] = -std::numeric_limits<float>::infinity();
}

/// Smallest and largest of n > 0 logits.
inline void logit_range(const float* l, std::size_t n, float& lo, float& hi) {
  simd::VecF vlo = simd::broadcast(l[0]), vhi = vlo;
  std::size_t j = 0;
  for (; j + simd::kWidth <= n; j += simd::kWidth) {
    const simd::VecF v = simd::load(l + j);
    vlo = simd::min(vlo, v);
    vhi = simd::max(vhi, v);
  }
  alignas(64) float a[simd::kWidth], b[simd::kWidth];
  simd::store(a, vlo);
  simd::store(b, vhi);
  lo = *std::min_element(a, a + simd::kWidth);
  hi = *std::max_element(b, b + simd::kWidth);
  for (; j < n; ++j) {
    lo = std::min(lo, l[j]);
    hi = std::max(hi, l[j]);
  }
}

/// Finds the boundary in a set that is contiguous in decoding order and holds it, given the
/// mass `cum` and the count `before` of the tokens ranked before the set. Each round splits
/// the set's logit range into kPivots + 1 equal intervals (no sort, no sample: inside the
/// set's narrow range, equal widths hold similar counts), keeps the interval where the
/// running mass crosses the target, and stops when the set is small, tied or stops shrinking;
/// the rest is ranked.
inline NucleusEnd nucleus_in(float max, TokenSet& set, double cum, double target, Index before) {
  constexpr std::size_t kRankDirectly = 64;
  while (set.n > kRankDirectly) {
    float lo = 0, hi = 0;
    logit_range(set.l.data(), set.n, lo, hi);
    if (!(lo < hi)) break;  // all tied: only ids order them
    float pivot[kPivots];
    for (int k = 0; k < kPivots; ++k)
      pivot[k] = hi - (hi - lo) * (static_cast<float>(k + 1) / static_cast<float>(kPivots + 1));
    const PivotMasses pm = pivot_masses(set, pivot);
    int k = 0;  // the boundary lies in (pivot[k], pivot[k - 1]] (pivot[-1] = hi, pivot[kPivots] = -inf)
    while (k < kPivots && cum + pm.above[k] < target) ++k;
    const float upper = k == 0 ? hi : pivot[k - 1];
    const float lower = k == kPivots ? lo : above(pivot[k]);
    const std::size_t before_size = set.n;
    if (k > 0) {
      cum += pm.above[k - 1];
      before += pm.n_above[k - 1];
    }
    set.keep_range(lower, upper);
    if (set.n == before_size) break;  // rounding left the pivots inert
  }
  // Rank what is left.
  std::vector<std::pair<float, TokenId>> ranked(set.n);
  for (std::size_t j = 0; j < set.n; ++j) ranked[j] = {set.l[j], set.id[j]};
  const std::vector<float> rw = rank_with_weights(ranked, max);
  const std::size_t keep = std::max<std::size_t>(1, prefix_reaching(rw.data(), rw.size(), cum, target));
  return {ranked[keep - 1].second, before + static_cast<Index>(keep)};
}

/// A dense row: pivots t_hi >= t_lo from a strided sample of 1,024 logits bracket the boundary;
/// one sweep computes Z and the mass above t_hi and gathers [t_lo, t_hi]. The boundary is
/// searched in that middle part, or (when the sample misled) in the part above or below it.
inline NucleusEnd nucleus_dense(std::span<const float> x, float max, float p) {
  std::vector<float> sample = strided_sample(x, 1024);
  float t_hi = 0, t_lo = 0;
  mass_pivots(sample, max, p, t_hi, t_lo);
  TokenSet& set = top_p_workspace();
  const DenseSweep sw = sweep_dense(x, max, t_hi, t_lo, set);
  const double target = double(p) * sw.z;
  if (sw.hi >= target) {
    set.n = 0;
    gather_range(x, above(t_hi), kHighest, set);
    set_weights(set, max);
    return nucleus_in(max, set, 0.0, target, 0);
  }
  const double mid = set_weights(set, max);
  if (sw.hi + mid >= target) return nucleus_in(max, set, sw.hi, target, sw.n_hi);
  const Index n_mid = static_cast<Index>(set.n);
  set.n = 0;
  gather_range(x, kLowestFinite, below(t_lo), set);
  set_weights(set, max);
  return nucleus_in(max, set, sw.hi + mid, target, sw.n_hi + n_mid);
}

}  // namespace detail

inline void apply_top_p(Candidates& c, float p, Index min_keep = 1) {
  validate_top_p(p, min_keep);
  if (p >= 1.0f) return;
  if (p == 0.0f) {  // llama.cpp and HF: the nucleus of mass 0 is empty, min_keep tops it up
    apply_top_k(c, min_keep);
    return;
  }
  const float max = c.summary().max;
  const auto x = c.logits();
  if (!c.dense()) {
    std::vector<std::pair<float, TokenId>> ranked;
    ranked.reserve(c.ids().size());
    for (TokenId id : c.ids()) ranked.emplace_back(x[static_cast<std::size_t>(id)], id);
    const std::vector<float> w = detail::rank_with_weights(ranked, max);
    const double z = simd::sum_as_double(w.data(), w.size());
    std::size_t keep = detail::prefix_reaching(w.data(), w.size(), 0.0, double(p) * z);
    keep = std::max(keep, std::min(ranked.size(), static_cast<std::size_t>(min_keep)));
    std::vector<TokenId> ids(keep);
    for (std::size_t j = 0; j < keep; ++j) ids[j] = ranked[j].second;
    c.restrict_to(std::move(ids));
    return;
  }
  const detail::NucleusEnd end = detail::nucleus_dense(x, max, p);
  if (end.kept < min_keep) {  // the nucleus is a prefix of the ranking: top-min_keep contains it
    apply_top_k(c, min_keep);
    return;
  }
  // Everything ranked after the boundary token goes: lower logit, or equal logit and higher id.
  const float lk = x[static_cast<std::size_t>(end.last)];
  const TokenId id_k = end.last;
  if (end.kept <= std::max<Index>(4096, c.vocab_size() / 16)) {
    std::vector<TokenId> ids;
    detail::collect_ids(x, lk, detail::kHighest, ids);
    std::erase_if(ids, [&](TokenId id) { return x[static_cast<std::size_t>(id)] == lk && id > id_k; });
    c.restrict_to(std::move(ids));
    return;
  }
  // Up to the boundary token lower logits go; after it ties go too (explicit SIMD: compilers
  // at -O2 leave such loops scalar).
  const auto split = static_cast<std::size_t>(id_k) + 1;
  detail::filter_below(x.subspan(0, split), lk, false);
  detail::filter_below(x.subspan(split), lk, true);
  c.logits_changed();
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_p(std::span<float> logits, float p, Index min_keep = 1) {
  Candidates c(logits);
  apply_top_p(c, p, min_keep);
  c.materialize();
}

/// Top-p stage.
struct TopP {
  float p = 1.0f;      ///< nucleus mass in [0, 1]; 0 keeps the min_keep most probable
  Index min_keep = 1;  ///< at least this many stay

  /// The registered name, "top_p": describe() starts with it.
  static constexpr std::string_view kName = "top_p";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_top_p(p, min_keep); }
  /// "top_p(p)".
  std::string describe() const { return describe_rule(kName, {p}); }
  /// apply_top_p() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_top_p(c, p, min_keep); }
};

}  // namespace inferkit
