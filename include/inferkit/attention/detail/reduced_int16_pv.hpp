#pragma once
// The reduced arithmetic's p.v over per-token quantized values of 8 or 4 bits (AVX-512 VNNI):
// w = p * step of each (row, value group, key) is rounded to a 15-bit integer with one scale per
// (row, group, 64-key tile), sw = max_tile(p) * max_tile(step) / 32767, and sum w^ * code runs
// as vpdpwssd over key pairs (codes widened to 16 bits, two keys interleaved per lane); the
// zero-point term sum p * zero stays fp32. Both accumulate apart from the kernel's o (in the
// kernel's channel order) and are folded into o once, at the end of a unit.
//
//   if (vnni_pv_apply(view, d)) vnni_pv<4>(view, c0, nc, d, st, Rp, R, alpha, rs);
//   ...
//   fold_reduced_pv(rs, R, d, Dp, o);
//
// Contract: o_perm = o_perm * alpha + sw * sum_c w^_c code_c and zacc = zacc * alpha +
// sum_c p_c zero_c per tile; compiled only where INFERKIT_DETAIL_REDUCED_VNNI (fold_reduced_pv
// everywhere: without VNNI nothing accumulated, so it adds nothing).

#include <algorithm>
#include <cstdint>

#include "inferkit/attention/detail/reduced_common.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

#if INFERKIT_DETAIL_REDUCED_VNNI

/// Whether vnni_pv handles values of this view for head_dim d.
inline bool vnni_pv_apply(const QuantRowsView& v, Index d) {
  if (v.per_channel || (v.bits != 8 && v.bits != 4)) return false;
  return d % 64 == 0 && v.group_size % 32 == 0;
}

/// Channel of o_perm's index x (within a row) for codes of `bits` bits: x = 64 z + 32 h + 16 e
/// + 4 L + i holds word j = 8 L + 4 e + i of half h of 64-channel block z (vnni_pv).
inline Index vnni_pv_channel(int bits, Index x) {
  const Index z = x / 64, h = x / 32 % 2, e = x / 16 % 2, L = x / 4 % 4, i = x % 4, j = 8 * L + 4 * e + i;
  return bits == 8 ? 64 * z + 32 * h + j : 64 * z + 2 * (16 * h + j % 16) + j / 16;
}

// o_perm = o_perm * alpha + sw * sum_c w^_c code_c and zacc = zacc * alpha + sum_c p_c zero_c for
// the tile's nc <= 64 value rows (all quantized) and query rows r < R, p = st[c][r]: w = p * step
// rounded to 15 bits per (row, group, tile), products summed by vpdpwssd over key pairs.
template <int Bits>
void vnni_pv(const QuantRowsView& v, Index c0, Index nc, Index d, const float* st, Index Rp, Index R,
             const float* alpha, ReducedScratch& rs) {
  const Index gv = v.group_size, groups = d / gv, cb = d * Bits / 8, ncp = ceil_div<Index>(nc, 16) * 16;
  const std::uint8_t* codes = v.codes + c0 * cb;
  rs.step.resize(static_cast<std::size_t>(ncp * groups + 16));
  rs.zero.resize(rs.step.size());
  rs.stepT.resize(static_cast<std::size_t>(ncp * groups));
  rs.zeroT.resize(rs.stepT.size());
  rs.pT.resize(static_cast<std::size_t>(ncp * Rp));
  rs.wq.resize(static_cast<std::size_t>(R * groups * 128));
  rs.sw.resize(static_cast<std::size_t>(R * groups));
  decode_quant_params(v, c0 * groups, nc * groups, rs.step.data(), rs.zero.data());
  transpose_to_rows(rs.step.data(), ncp, groups, rs.stepT.data(), ncp);
  transpose_to_rows(rs.zero.data(), ncp, groups, rs.zeroT.data(), ncp);
  transpose_to_rows(st, ncp, Rp, rs.pT.data(), ncp);
  const __mmask16 tail = static_cast<__mmask16>((1u << (nc % 16)) - 1u);
  auto block_mask = [&](Index b) { return b + 16 <= nc ? __mmask16(0xFFFF) : tail; };
  float stepmax[16] = {};
  for (Index g = 0; g < groups; ++g) {  // keys past nc weigh nothing
    __m512 mx = _mm512_setzero_ps();
    for (Index b = 0; b < ncp; b += 16) {
      float* sp = rs.stepT.data() + g * ncp + b;
      const __m512 sv = _mm512_maskz_loadu_ps(block_mask(b), sp);
      _mm512_storeu_ps(sp, sv);
      mx = _mm512_max_ps(mx, sv);
    }
    stepmax[g] = _mm512_reduce_max_ps(mx);
  }
  for (Index r = 0; r < R; ++r) {
    __m512 pm = _mm512_setzero_ps();
    float* pr = rs.pT.data() + r * ncp;
    for (Index b = 0; b < ncp; b += 16) {
      const __m512 pv = _mm512_maskz_loadu_ps(block_mask(b), pr + b);
      _mm512_storeu_ps(pr + b, pv);
      pm = _mm512_max_ps(pm, pv);
    }
    const float pmax = _mm512_reduce_max_ps(pm);
    const __m512 av = _mm512_set1_ps(alpha[r]);
    for (Index g = 0; g < groups; ++g) {
      const float top = pmax * stepmax[g];
      const __m512 inv = _mm512_set1_ps(top > 0.0f ? 32767.0f / top : 0.0f);
      rs.sw[static_cast<std::size_t>(r * groups + g)] = top / 32767.0f;
      std::int16_t* w = reinterpret_cast<std::int16_t*>(rs.wq.data()) + (r * groups + g) * 64;
      float* za = rs.zacc.data() + (r * groups + g) * 16;
      __m512 zs = _mm512_mul_ps(_mm512_loadu_ps(za), av);
      for (Index b = 0; b < ncp; b += 16) {
        const __m512 pv = _mm512_loadu_ps(pr + b), sv = _mm512_loadu_ps(rs.stepT.data() + g * ncp + b);
        const __m512i wi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(pv, sv), inv));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + b), _mm512_cvtsepi32_epi16(wi));
        zs = _mm512_fmadd_ps(pv, _mm512_loadu_ps(rs.zeroT.data() + g * ncp + b), zs);
      }
      _mm512_storeu_ps(za, zs);
    }
  }
  const __m512i low = _mm512_set1_epi16(0x0F);
  const std::int32_t* wq = reinterpret_cast<const std::int32_t*>(rs.wq.data());  // (r, g, key pair) dwords
  for (Index z = 0; z < d / 64; ++z) {
    const Index g0 = 64 * z / gv, g1 = (64 * z + 32) / gv;
    for (Index r0 = 0; r0 < R; r0 += 4) {
      const Index nr = std::min<Index>(4, R - r0);
      __m512i acc[4][2][2];
      for (auto& a : acc)
        for (auto& b : a) b[0] = b[1] = _mm512_setzero_si512();
      for (Index c = 0; c < nc; c += 2) {
        __m512i a[2][2];  // [key of the pair][half]: 32 channels as words
        for (Index kk = 0; kk < 2; ++kk) {
          const std::uint8_t* row = codes + std::min(c + kk, nc - 1) * cb;
          if constexpr (Bits == 8) {
            a[kk][0] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * z)));
            a[kk][1] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 64 * z + 32)));
          } else {  // low nibbles = even channels, high = odd; halves regrouped to 32 channels each
            const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * z)));
            const __m512i lo = _mm512_and_si512(x, low), hi = _mm512_srli_epi16(x, 4);
            a[kk][0] = _mm512_shuffle_i64x2(lo, hi, 0x44);
            a[kk][1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
          }
        }
        __m512i e[2][2];
        for (int h = 0; h < 2; ++h) {
          e[h][0] = _mm512_unpacklo_epi16(a[0][h], a[1][h]);
          e[h][1] = _mm512_unpackhi_epi16(a[0][h], a[1][h]);
        }
        for (Index rr = 0; rr < nr; ++rr) {
          const Index r = r0 + rr;
          const __m512i w0 = _mm512_set1_epi32(wq[(r * groups + g0) * 32 + c / 2]);
          const __m512i w1 = _mm512_set1_epi32(wq[(r * groups + g1) * 32 + c / 2]);
          acc[rr][0][0] = _mm512_dpwssd_epi32(acc[rr][0][0], e[0][0], w0);
          acc[rr][0][1] = _mm512_dpwssd_epi32(acc[rr][0][1], e[0][1], w0);
          acc[rr][1][0] = _mm512_dpwssd_epi32(acc[rr][1][0], e[1][0], w1);
          acc[rr][1][1] = _mm512_dpwssd_epi32(acc[rr][1][1], e[1][1], w1);
        }
      }
      for (Index rr = 0; rr < nr; ++rr) {
        const Index r = r0 + rr;
        const __m512 av = _mm512_set1_ps(alpha[r]);
        float* op = rs.o_perm.data() + r * d + 64 * z;
        for (int h = 0; h < 2; ++h) {
          const __m512 swv = _mm512_set1_ps(rs.sw[static_cast<std::size_t>(r * groups + (h ? g1 : g0))]);
          for (int e2 = 0; e2 < 2; ++e2)
            _mm512_storeu_ps(op + 32 * h + 16 * e2,
                             _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[rr][h][e2]), swv,
                                             _mm512_mul_ps(_mm512_loadu_ps(op + 32 * h + 16 * e2), av)));
        }
      }
    }
  }
}

#endif

/// Adds the integer p.v accumulators of rows r < R into o [R][Dp] (natural channel order).
inline void fold_reduced_pv(ReducedScratch& rs, Index R, Index d, Index Dp, float* o) {
  if (!rs.perm_touched) return;
  const Index groups = rs.perm_groups, gv = d / groups;
  for (Index r = 0; r < R; ++r) {
    const float* op = rs.o_perm.data() + r * d;
    float* orow = o + r * Dp;
#if INFERKIT_DETAIL_REDUCED_VNNI
    for (Index x = 0; x < d; ++x) orow[vnni_pv_channel(rs.perm_bits, x)] += op[x];
#else
    (void)op;
#endif
    for (Index c = 0; c < d; ++c) {
      const float* za = rs.zacc.data() + (r * groups + c / gv) * 16;
      float zs = 0.0f;
      for (Index i = 0; i < 16; ++i) zs += za[i];
      orow[c] += zs;
    }
  }
}

}  // namespace inferkit::detail
