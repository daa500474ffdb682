#pragma once
// Branch-free collection of token ids whose logit lies in a range, for the selection passes of
// top-k, top-p and min-p. With AVX-512 the passing lanes' ids are compressed (vpcompressd into
// a register, then a full store), so the cost is one compare and one store per vector however
// many pass; with AVX2 the same is done by a table-driven vpermd (left_pack_indices); elsewhere a
// SIMD any() skips vectors where nothing passes.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit::detail {

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
/// Lanes of v with lo <= v <= hi (NaN-free input); `bounded` false means hi is +inf (one compare).
inline __mmask16 in_range_mask(__m512 v, __m512 lo, __m512 hi, bool bounded = true) {
  const __mmask16 ge = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ);
  return bounded ? _mm512_mask_cmp_ps_mask(ge, v, hi, _CMP_LE_OQ) : ge;
}
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
/// AVX2 has no compress store (vpcompressd): the lanes set in an 8-bit movemask are moved to the
/// front by one vpermd whose indices come from a 256-entry table (entry m holds, byte by byte,
/// the positions of m's set bits, then zeros), 2 KiB that stay in L1 during a sweep.
struct LeftPackTable {
  alignas(64) std::uint64_t idx[256] = {};
  constexpr LeftPackTable() {
    for (unsigned m = 0; m < 256; ++m) {
      unsigned k = 0;
      for (unsigned lane = 0; lane < 8; ++lane)
        if (m & (1u << lane)) idx[m] |= std::uint64_t{lane} << (8 * k++);
    }
  }
};
/// The table itself (constexpr: built by the compiler, no start-up cost).
inline constexpr LeftPackTable kLeftPack{};
/// The vpermd indices that move the lanes set in `mask` (a movemask, 0-255) to the front, in order.
inline __m256i left_pack_indices(unsigned mask) {
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(kLeftPack.idx[mask])));
}
/// Lanes of v with lo <= v <= hi, as an all-ones float mask (NaN-free input).
inline __m256 in_range_mask(__m256 v, __m256 lo, __m256 hi) {
  return _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ), _mm256_cmp_ps(v, hi, _CMP_LE_OQ));
}
#endif

/// Appends to out, in ascending order, every id i with lo <= x[i] <= hi, and returns true; or
/// stops and returns false as soon as more than `limit` ids are in `out` (its content is then a
/// prefix of the answer). The limit lets a caller that switches to an in-place pass for large
/// sets skip building (and allocating) a list of most of the vocabulary. Kept out of line: GCC 12
/// inlining it into its callers made the loop about three times slower (measured at 128k tokens).
#if defined(__GNUC__)
__attribute__((noinline))
#endif
inline bool
collect_ids_up_to(std::span<const float> x, float lo, float hi, std::vector<TokenId>& out, std::size_t limit) {
  const std::size_t n = x.size();
  std::size_t i = 0;
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    // Passing ids are compressed in a register and stored as a whole vector into a small stack
    // buffer (appended per chunk; the lanes past the count are overwritten by the next store).
    // The memory form of vpcompressd is microcoded on AMD Zen 4 (measured: top-k 40 at 128k
    // tokens spent 50 of its 60 us in it), the register form is two uops.
    constexpr std::size_t kChunk = 64 * 16;
    alignas(64) TokenId room[kChunk];
    std::size_t count = 0;
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const bool bounded = hi < std::numeric_limits<float>::infinity();  // else one compare per vector
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    const auto store = [&](__mmask16 m) {
      _mm512_storeu_si512(room + count, _mm512_maskz_compress_epi32(m, idx));
      count += static_cast<std::size_t>(__builtin_popcount(m));
      idx = _mm512_add_epi32(idx, step);
    };
    for (; i + 64 <= n; i += 64) {
      // Four vectors at a time: when none has a passing lane (the common case for the narrow
      // selections of top-k, min-p and the probability floors) one branch skips all stores.
      const __mmask16 m0 = in_range_mask(_mm512_loadu_ps(x.data() + i), vlo, vhi, bounded);
      const __mmask16 m1 = in_range_mask(_mm512_loadu_ps(x.data() + i + 16), vlo, vhi, bounded);
      const __mmask16 m2 = in_range_mask(_mm512_loadu_ps(x.data() + i + 32), vlo, vhi, bounded);
      const __mmask16 m3 = in_range_mask(_mm512_loadu_ps(x.data() + i + 48), vlo, vhi, bounded);
      if ((m0 | m1 | m2 | m3) == 0) {
        idx = _mm512_add_epi32(idx, _mm512_set1_epi32(64));
        continue;
      }
      store(m0);
      store(m1);
      store(m2);
      store(m3);
      if (count > kChunk - 64) {
        out.insert(out.end(), room, room + count);
        count = 0;
        if (out.size() > limit) return false;
      }
    }
    for (; i + 16 <= n; i += 16) store(in_range_mask(_mm512_loadu_ps(x.data() + i), vlo, vhi, bounded));
    out.insert(out.end(), room, room + count);
    if (out.size() > limit) return false;
  }
#endif
  const simd::VecF vlo = simd::broadcast(lo), vhi = simd::broadcast(hi);
  for (; i + simd::kWidth <= n; i += simd::kWidth) {
    const simd::VecF v = simd::load(x.data() + i);
    if (!simd::any(v >= vlo) || !simd::any(v <= vhi)) continue;
    for (std::size_t l = 0; l < simd::kWidth; ++l)
      if (x[i + l] >= lo && x[i + l] <= hi) out.push_back(static_cast<TokenId>(i + l));
    if (out.size() > limit) return false;
  }
  for (; i < n; ++i)
    if (x[i] >= lo && x[i] <= hi) out.push_back(static_cast<TokenId>(i));
  return out.size() <= limit;
}

/// Appends to out, in ascending order, every id i with lo <= x[i] <= hi.
inline void collect_ids(std::span<const float> x, float lo, float hi, std::vector<TokenId>& out) {
  collect_ids_up_to(x, lo, hi, out, std::numeric_limits<std::size_t>::max());
}

/// Smallest float above t, and largest below (the bounds of strict comparisons).
inline float above(float t) { return std::nextafter(t, std::numeric_limits<float>::infinity()); }
inline float below(float t) { return std::nextafter(t, -std::numeric_limits<float>::infinity()); }
inline constexpr float kLowestFinite = std::numeric_limits<float>::lowest();
inline constexpr float kHighest = std::numeric_limits<float>::infinity();

/// Logits of an evenly strided sample of about `size` finite tokens, descending.
inline std::vector<float> strided_sample(std::span<const float> x, std::size_t size) {
  const std::size_t stride = std::max<std::size_t>(1, x.size() / size);
  std::vector<float> s;
  s.reserve(x.size() / stride + 1);
  for (std::size_t i = stride / 2; i < x.size(); i += stride)
    if (x[i] > -std::numeric_limits<float>::infinity()) s.push_back(x[i]);
  return s;
}

}  // namespace inferkit::detail
