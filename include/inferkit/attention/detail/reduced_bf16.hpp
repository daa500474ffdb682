#pragma once
// The reduced arithmetic over bf16 rows (AVX512-BF16): q.k with the query rounded to bf16 (RNE;
// reduced_common.hpp, round_query) and p.v with p rounded to bf16, both by vdpbf16ps, whose
// bf16 x bf16 products are exact in fp32 (sums in fp32).
//
//   bf16_scores(keys, stride, nc, rs, Rp, d, st, lanes);           // S^T = K q^T
//   bf16_pv(values, stride, nc, st, Rp, R, alpha, o, d, rs);       // o = o * alpha + P^ V
//
// Contract: bf16_scores needs Dp == d, d % 32 == 0; bf16_pv d % 64 == 0; compiled only where
// INFERKIT_DETAIL_REDUCED_BF16 (elsewhere the exact kernel runs the rounded operands).

#include <algorithm>
#include <bit>
#include <cstdint>

#include "inferkit/attention/detail/reduced_common.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

#if INFERKIT_DETAIL_REDUCED_BF16

// S^T[c][r] = q^_r . k_c for nc bf16 key rows (row stride `stride` elements) and every row
// r < Rp, q^ in bf16 (rs.qbf): 4 keys x 4 rows per transposing reduction, vdpbf16ps over 32
// elements per instruction (bf16 products are exact; sums in fp32). Dp == d, d % 32 == 0.
inline void bf16_scores(const BFloat16* rows, Index stride, Index nc, const ReducedScratch& rs, Index Rp, Index Dp,
                        float* st, float* lanes) {
  for (Index kb = 0; kb < nc; kb += 4) {
    const BFloat16* kr[4];
    for (Index i = 0; i < 4; ++i) kr[i] = rows + std::min(kb + i, nc - 1) * stride;
    for (Index rb = 0; rb < Rp; rb += 4) {
      simd::VecF acc[16];
      __m512 a[16];
      for (auto& x : a) x = _mm512_setzero_ps();
      for (Index dv = 0; dv < Dp; dv += 32) {
        __m512bh kv[4];
        for (Index i = 0; i < 4; ++i) kv[i] = (__m512bh)_mm512_loadu_si512(kr[i] + dv);
        for (Index j = 0; j < 4; ++j) {
          const __m512bh qv = (__m512bh)_mm512_loadu_si512(rs.qbf.data() + (rb + j) * Dp + dv);
          for (Index i = 0; i < 4; ++i) a[i * 4 + j] = _mm512_dpbf16_ps(a[i * 4 + j], qv, kv[i]);
        }
      }
      for (int i = 0; i < 16; ++i) acc[i] = a[i];
      const simd::VecF sums = simd::haddp(acc);  // lane i * 4 + j: key kb + i, row rb + j
      if (Rp == 4 && kb + 4 <= nc) {
        simd::store(st + kb * 4, sums);
      } else {
        simd::store(lanes, sums);
        for (Index i = 0; i < 4 && kb + i < nc; ++i)
          for (Index j = 0; j < 4; ++j) st[(kb + i) * Rp + rb + j] = lanes[i * 4 + j];
      }
    }
  }
}

// o[r] = o[r] * alpha[r] + sum_c p^_{c,r} v_c for nc bf16 value rows and rows r < R, p^ = p
// rounded to bf16: two keys interleaved per lane (vdpbf16ps), 64 channels x 4 rows per pass;
// the lane order (channels 8L + i and 8L + 4 + i of each 32) is undone once per tile.
inline void bf16_pv(const BFloat16* rows, Index stride, Index nc, const float* st, Index Rp, Index R,
                    const float* alpha, float* o, Index Dp, ReducedScratch& rs) {
  const Index pairs = ceil_div<Index>(nc, 2);
  rs.pbf.resize(static_cast<std::size_t>(pairs * Rp + 16));
  if (Rp == 4) {  // p rounded 16 at a time (vcvtneps2bf16: RNE), then each pair's rows interleaved
    alignas(64) std::uint16_t sbf[64 * 4 + 32];
    for (Index i = 0; i < 2 * pairs * 4; i += 16) {
      const __m512 x = i + 16 <= nc * 4
                           ? _mm512_loadu_ps(st + i)
                           : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (nc * 4 - i)) - 1u), st + i);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sbf + i), (__m256i)_mm512_cvtneps_pbh(x));
    }
    for (Index c2 = 0; c2 < pairs; ++c2) {
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sbf + 8 * c2));
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sbf + 8 * c2 + 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(rs.pbf.data() + c2 * 4), _mm_unpacklo_epi16(a, b));
    }
  } else {
    for (Index c2 = 0; c2 < pairs; ++c2)
      for (Index r = 0; r < R; ++r) {
        const float p0 = st[(2 * c2) * Rp + r], p1 = 2 * c2 + 1 < nc ? st[(2 * c2 + 1) * Rp + r] : 0.0f;
        rs.pbf[static_cast<std::size_t>(c2 * Rp + r)] = (std::bit_cast<std::uint32_t>(round_bf16(p0)) >> 16) |
                                                        (std::bit_cast<std::uint32_t>(round_bf16(p1)) & 0xFFFF0000u);
      }
  }
  // Natural order from the two accumulators of 32 channels: lo holds 8L + i, hi 8L + 4 + i.
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (Index r0 = 0; r0 < R; r0 += 4) {
    const Index nr = std::min<Index>(4, R - r0);
    for (Index j0 = 0; j0 < Dp; j0 += 64) {
      __m512 acc[4][4];
      for (auto& a : acc)
        for (auto& x : a) x = _mm512_setzero_ps();
      for (Index c2 = 0; c2 < pairs; ++c2) {
        const BFloat16* a = rows + (2 * c2) * stride + j0;
        const BFloat16* b = rows + std::min(2 * c2 + 1, nc - 1) * stride + j0;
        __m512bh e[4];
        for (int m = 0; m < 2; ++m) {
          const __m512i x = _mm512_loadu_si512(a + 32 * m), y = _mm512_loadu_si512(b + 32 * m);
          e[2 * m] = (__m512bh)_mm512_unpacklo_epi16(x, y);
          e[2 * m + 1] = (__m512bh)_mm512_unpackhi_epi16(x, y);
        }
        for (Index rr = 0; rr < nr; ++rr) {
          const __m512bh pv =
              (__m512bh)_mm512_set1_epi32(static_cast<int>(rs.pbf[static_cast<std::size_t>(c2 * Rp + r0 + rr)]));
          for (int k = 0; k < 4; ++k) acc[rr][k] = _mm512_dpbf16_ps(acc[rr][k], pv, e[k]);
        }
      }
      for (Index rr = 0; rr < nr; ++rr) {
        float* orow = o + (r0 + rr) * Dp + j0;
        const __m512 av = _mm512_set1_ps(alpha[r0 + rr]);
        for (int m = 0; m < 2; ++m) {
          const __m512 n0 = _mm512_permutex2var_ps(acc[rr][2 * m], first, acc[rr][2 * m + 1]);
          const __m512 n1 = _mm512_permutex2var_ps(acc[rr][2 * m], second, acc[rr][2 * m + 1]);
          _mm512_storeu_ps(orow + 32 * m, _mm512_fmadd_ps(_mm512_loadu_ps(orow + 32 * m), av, n0));
          _mm512_storeu_ps(orow + 32 * m + 16, _mm512_fmadd_ps(_mm512_loadu_ps(orow + 32 * m + 16), av, n1));
        }
      }
    }
  }
}

#endif

}  // namespace inferkit::detail
