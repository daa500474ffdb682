#pragma once
// Top-p (nucleus, Holtzman et al. 2020), inclusive: in decoding order (logit descending, id
// ascending) keep the shortest prefix whose cumulative weight reaches p * Z, and at least
// min_keep tokens; p >= 1 keeps everything. Weights and Z as in candidates.hpp (double sums).
//
// A short candidate list is ranked directly. A dense row is never sorted: the nucleus ends at
// one boundary token, found by a quickselect on mass. Pivots come from a strided sample (the
// sample logit where the sample's own mass reaches the wanted fraction, widened by a margin);
// one pass splits the set into above / between / below with exact double masses; the boundary
// lies in the part where the running mass crosses p * Z, and only that part is searched
// further, until a few thousand tokens remain and are ranked. The first pass over the row
// computes every weight and Z in the same sweep. Then one pass writes -inf after the boundary.

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/detail/collect.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

inline void validate_top_p(float p, Index min_keep) {
  require(std::isfinite(p) && p > 0.0f && p <= 1.0f, "top_p", p, "must be in (0, 1]");
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

/// Sorts ids into decoding order and returns their weights in that order.
inline std::vector<float> rank_with_weights(std::span<const float> x, float max, std::vector<TokenId>& ids) {
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::vector<float> g(ids.size()), w(ids.size());
  for (std::size_t j = 0; j < ids.size(); ++j) g[j] = x[static_cast<std::size_t>(ids[j])];
  simd::exp_shifted(g.data(), w.data(), g.size(), max);
  return w;
}

/// Pivots for a set whose boundary sits at `fraction` of its mass: logits t_hi >= t_lo
/// bracketing the sample's estimate of where that fraction is reached.
inline void mass_pivots(std::vector<float>& sample, float max, double fraction, float& t_hi, float& t_lo) {
  std::sort(sample.begin(), sample.end(), std::greater<float>());
  if (sample.empty()) {
    t_hi = std::numeric_limits<float>::infinity();
    t_lo = std::numeric_limits<float>::lowest();
    return;
  }
  std::vector<float> w(sample.size());
  simd::exp_shifted(sample.data(), w.data(), sample.size(), max);
  const double total = simd::sum_as_double(w.data(), w.size());
  const std::size_t r = prefix_reaching(w.data(), w.size(), 0.0, fraction * total);
  const auto margin = static_cast<std::size_t>(3.0 * std::sqrt(double(r) + 1.0) + 4.0);
  t_hi = r > margin ? sample[r - margin] : std::numeric_limits<float>::infinity();
  // Never below the lowest finite logit: filtered (-inf) tokens must not join the middle part.
  t_lo = r + margin < sample.size() ? sample[r + margin] : std::numeric_limits<float>::lowest();
}

/// Masses and sizes of the parts of a set above t_hi and within [t_lo, t_hi], given logits l
/// and weights w (SIMD selects, double sums per block of 1024).
struct PartMasses {
  double hi = 0, mid = 0;
  Index n_hi = 0, n_mid = 0;
};
inline PartMasses part_masses(const float* l, const float* w, std::size_t n, float t_hi, float t_lo) {
  PartMasses pm;
  constexpr std::size_t kBlock = 1024;
  alignas(64) float hi_w[kBlock], mid_w[kBlock];
  const simd::VecF vhi = simd::broadcast(t_hi), vlo = simd::broadcast(t_lo), zero = simd::broadcast(0.0f),
                   one = simd::broadcast(1.0f);
  for (std::size_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::size_t len = std::min(kBlock, n - b0);
    simd::VecF c_hi = zero, c_mid = zero;
    std::size_t i = 0;
    for (; i + simd::kWidth <= len; i += simd::kWidth) {
      const simd::VecF lv = simd::load(l + b0 + i), wv = simd::load(w + b0 + i);
      const simd::MaskF is_hi = lv > vhi, is_mid = simd::both(lv >= vlo, lv <= vhi);
      simd::store(hi_w + i, simd::select(is_hi, wv, zero));
      simd::store(mid_w + i, simd::select(is_mid, wv, zero));
      c_hi = c_hi + simd::select(is_hi, one, zero);
      c_mid = c_mid + simd::select(is_mid, one, zero);
    }
    for (; i < len; ++i) {
      const float li = l[b0 + i];
      hi_w[i] = li > t_hi ? w[b0 + i] : 0.0f;
      mid_w[i] = (li >= t_lo && li <= t_hi) ? w[b0 + i] : 0.0f;
      pm.n_hi += li > t_hi;
      pm.n_mid += li >= t_lo && li <= t_hi;
    }
    pm.n_hi += static_cast<Index>(simd::hsum(c_hi));
    pm.n_mid += static_cast<Index>(simd::hsum(c_mid));
    pm.hi += simd::sum_as_double(hi_w, len);
    pm.mid += simd::sum_as_double(mid_w, len);
  }
  return pm;
}

/// A set of candidates held contiguously: logits, weights, ids.
struct TokenSet {
  std::vector<float> l, w;
  std::vector<TokenId> id;
  std::size_t size() const { return id.size(); }
  /// Keeps the members with lo <= l <= hi, in place.
  void keep_range(float lo, float hi) {
    std::size_t k = 0, j = 0;
#if defined(__AVX512F__)
    if constexpr (simd::kWidth == 16) {  // compress-store the survivors of each vector
      const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
      for (; j + 16 <= id.size(); j += 16) {
        const __m512 lv = _mm512_loadu_ps(l.data() + j);
        const __mmask16 m = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(lv, vlo, _CMP_GE_OQ), lv, vhi, _CMP_LE_OQ);
        const __m512 wv = _mm512_loadu_ps(w.data() + j);
        const __m512i iv = _mm512_loadu_si512(id.data() + j);
        _mm512_mask_compressstoreu_ps(l.data() + k, m, lv);
        _mm512_mask_compressstoreu_ps(w.data() + k, m, wv);
        _mm512_mask_compressstoreu_epi32(id.data() + k, m, iv);
        k += static_cast<std::size_t>(__builtin_popcount(m));
      }
    }
#endif
    for (; j < id.size(); ++j) {
      l[k] = l[j];
      w[k] = w[j];
      id[k] = id[j];
      k += static_cast<std::size_t>(l[j] >= lo && l[j] <= hi);
    }
    l.resize(k);
    w.resize(k);
    id.resize(k);
  }
};

/// One pass over a dense row: Z and the part masses and sizes (all in double). With AVX-512
/// the weights never leave registers: each vector widens to two double vectors that feed Z and
/// the masked sums of the parts.
inline void sweep_masses(std::span<const float> x, float max, float t_hi, float t_lo, double& z, PartMasses& pm) {
  const std::size_t n = x.size();
#if defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    __m512d z0 = _mm512_setzero_pd(), z1 = z0, h0 = z0, h1 = z0, m0 = z0, m1 = z0;
    const __m512 vmax = _mm512_set1_ps(max), vhi = _mm512_set1_ps(t_hi), vlo = _mm512_set1_ps(t_lo);
    std::uint64_t n_hi = 0, n_mid = 0;
    for (std::size_t i = 0; i < n; i += 16) {
      const auto left = static_cast<unsigned>(std::min<std::size_t>(16, n - i));
      const __mmask16 live = static_cast<__mmask16>(left == 16 ? 0xFFFFu : (1u << left) - 1u);
      const __m512 l = _mm512_mask_loadu_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), live, x.data() + i);
      const __m512 e = simd::exp(simd::VecF(_mm512_sub_ps(l, vmax)));
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
      const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
      const __mmask16 is_hi = _mm512_mask_cmp_ps_mask(live, l, vhi, _CMP_GT_OQ);
      const __mmask16 is_mid = _mm512_mask_cmp_ps_mask(_mm512_mask_cmp_ps_mask(live, l, vlo, _CMP_GE_OQ), l, vhi, _CMP_LE_OQ);
      z0 = _mm512_add_pd(z0, lo);
      z1 = _mm512_add_pd(z1, hi);
      h0 = _mm512_mask_add_pd(h0, static_cast<__mmask8>(is_hi), h0, lo);
      h1 = _mm512_mask_add_pd(h1, static_cast<__mmask8>(is_hi >> 8), h1, hi);
      m0 = _mm512_mask_add_pd(m0, static_cast<__mmask8>(is_mid), m0, lo);
      m1 = _mm512_mask_add_pd(m1, static_cast<__mmask8>(is_mid >> 8), m1, hi);
      n_hi += static_cast<std::uint64_t>(__builtin_popcount(is_hi));
      n_mid += static_cast<std::uint64_t>(__builtin_popcount(is_mid));
    }
    z = _mm512_reduce_add_pd(_mm512_add_pd(z0, z1));
    pm.hi = _mm512_reduce_add_pd(_mm512_add_pd(h0, h1));
    pm.mid = _mm512_reduce_add_pd(_mm512_add_pd(m0, m1));
    pm.n_hi = static_cast<Index>(n_hi);
    pm.n_mid = static_cast<Index>(n_mid);
    return;
  }
#endif
  constexpr std::size_t kBlock = 1024;
  alignas(64) float w[kBlock];
  for (std::size_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::size_t len = std::min(kBlock, n - b0);
    simd::exp_shifted(x.data() + b0, w, len, max);
    z += simd::sum_as_double(w, len);
    const PartMasses b = part_masses(x.data() + b0, w, len, t_hi, t_lo);
    pm.hi += b.hi;
    pm.mid += b.mid;
    pm.n_hi += b.n_hi;
    pm.n_mid += b.n_mid;
  }
}

/// Pivots from a strided sample of n logits for the boundary at `fraction` of the set's mass.
inline void sampled_pivots(const float* l, std::size_t n, std::size_t samples, float max, double fraction,
                           float& t_hi, float& t_lo) {
  std::vector<float> sample;
  const std::size_t stride = std::max<std::size_t>(1, n / samples);
  for (std::size_t j = stride / 2; j < n; j += stride)
    if (l[j] > -std::numeric_limits<float>::infinity()) sample.push_back(l[j]);
  mass_pivots(sample, max, fraction, t_hi, t_lo);
}

/// Finds the boundary in a set contiguous in decoding order (of mass `mass`), given the mass
/// `cum` and the count `before` of the tokens ranked before it.
inline NucleusEnd nucleus_in(float max, TokenSet set, double mass, double cum, double target,
                             Index before) {
  while (set.size() > 512) {
    float t_hi = 0, t_lo = 0;
    sampled_pivots(set.l.data(), set.size(), 512, max, std::clamp((target - cum) / mass, 0.0, 1.0), t_hi, t_lo);
    const PartMasses pm = part_masses(set.l.data(), set.w.data(), set.size(), t_hi, t_lo);
    if (pm.n_mid == static_cast<Index>(set.size())) break;  // ties: nothing to split, rank it all
    if (cum + pm.hi >= target) {
      set.keep_range(detail::above(t_hi), kHighest);
      mass = pm.hi;
    } else if (cum + pm.hi + pm.mid >= target) {
      cum += pm.hi;
      before += pm.n_hi;
      set.keep_range(t_lo, t_hi);
      mass = pm.mid;
    } else {
      cum += pm.hi + pm.mid;
      before += pm.n_hi + pm.n_mid;
      set.keep_range(kLowestFinite, detail::below(t_lo));
      mass -= pm.hi + pm.mid;
    }
  }
  // Rank what is left by (logit descending, id ascending), comparing the set's own copies.
  std::vector<std::pair<float, TokenId>> ranked(set.size());
  for (std::size_t j = 0; j < set.size(); ++j) ranked[j] = {set.l[j], set.id[j]};
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<float> rl(ranked.size()), rw(ranked.size());
  for (std::size_t j = 0; j < ranked.size(); ++j) rl[j] = ranked[j].first;
  simd::exp_shifted(rl.data(), rw.data(), rl.size(), max);
  const std::size_t keep = std::max<std::size_t>(1, prefix_reaching(rw.data(), rw.size(), cum, target));
  return {ranked[keep - 1].second, before + static_cast<Index>(keep)};
}

/// The first round over a dense row: every weight, Z and the part masses in one sweep; then
/// only the part holding the boundary is gathered into a TokenSet.
inline NucleusEnd nucleus_dense(std::span<const float> x, float max, float p) {
  const std::size_t n = x.size();
  float t_hi = 0, t_lo = 0;
  sampled_pivots(x.data(), n, 1024, max, p, t_hi, t_lo);
  double z = 0;
  PartMasses pm;
  sweep_masses(x, max, t_hi, t_lo, z, pm);
  const double target = double(p) * z;
  const auto gather = [&](float lo, float hi) {
    TokenSet s;
    collect_ids(x, lo, hi, s.id);
    s.l.resize(s.id.size());
    s.w.resize(s.id.size());
    for (std::size_t j = 0; j < s.id.size(); ++j) s.l[j] = x[static_cast<std::size_t>(s.id[j])];
    simd::exp_shifted(s.l.data(), s.w.data(), s.l.size(), max);
    return s;
  };
  if (pm.hi >= target) return nucleus_in(max, gather(above(t_hi), kHighest), pm.hi, 0.0, target, 0);
  if (pm.hi + pm.mid >= target) return nucleus_in(max, gather(t_lo, t_hi), pm.mid, pm.hi, target, pm.n_hi);
  return nucleus_in(max, gather(kLowestFinite, below(t_lo)), z - pm.hi - pm.mid, pm.hi + pm.mid, target,
                    pm.n_hi + pm.n_mid);
}

}  // namespace detail

inline void apply_top_p(Candidates& c, float p, Index min_keep = 1) {
  validate_top_p(p, min_keep);
  if (p >= 1.0f) return;
  const float max = c.summary().max;
  const auto x = c.logits();
  if (!c.dense()) {
    std::vector<TokenId> ids = c.ids();
    const std::vector<float> w = detail::rank_with_weights(x, max, ids);
    const double z = simd::sum_as_double(w.data(), w.size());
    std::size_t keep = detail::prefix_reaching(w.data(), w.size(), 0.0, double(p) * z);
    keep = std::max(keep, std::min(ids.size(), static_cast<std::size_t>(min_keep)));
    ids.resize(keep);
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
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] < lk || (x[i] == lk && static_cast<TokenId>(i) > id_k)) x[i] = neg_inf;
  c.logits_changed();
}

/// In place on one row; filtered tokens become -inf.
inline void apply_top_p(std::span<float> logits, float p, Index min_keep = 1) {
  Candidates c(logits);
  apply_top_p(c, p, min_keep);
  c.materialize();
}

}  // namespace inferkit
