#pragma once
// The reduced arithmetic's q.k over per-token quantized keys of 8 or 4 bits (AVX-512 VNNI):
// with the query rounded to int8 per key group (reduced_common.hpp, round_query), q^ . k of the
// dequantized key is exactly sq * step * sum(q codes x key codes) + zero * sq * sum(q codes) per
// group, the integer sum by vpdpbusd with 16 keys in lanes (a 16 x 16 dword transpose of their
// codes), the group scale and zero applied once per group in fp32.
//
//   if (vnni_scores_apply(view, d)) vnni_scores<8>(view, c0, nc, d, rs, Rp, st, rs);
//
// Contract: S^T[c][r] for the tile's nc <= 64 keys, every row r < Rp (Rp a multiple of 4);
// compiled only where INFERKIT_DETAIL_REDUCED_VNNI (elsewhere the exact kernel runs q^ . k).

#include <algorithm>
#include <cstdint>

#include "inferkit/attention/detail/reduced_common.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

#if INFERKIT_DETAIL_REDUCED_VNNI

// r[m] lane i <- r[i] dword m (a 16 x 16 transpose of dwords).
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // r[4b + j] lane L: rows 4b .. 4b + 3 at dword 4L + j
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  __m512i out[16];
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88),
                  e = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
    out[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    out[8 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);
    out[4 + j] = _mm512_shuffle_i32x4(b, e, 0x88);
    out[12 + j] = _mm512_shuffle_i32x4(b, e, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = out[i];
}

// st[(kb + i) * 4 + r] = s[r] lane i for 16 keys (a 4 x 16 -> 16 x 4 transpose).
inline void store_scores_4rows(const __m512 s[4], float* st) {
  const __m512 u0 = _mm512_unpacklo_ps(s[0], s[1]), u1 = _mm512_unpackhi_ps(s[0], s[1]);
  const __m512 u2 = _mm512_unpacklo_ps(s[2], s[3]), u3 = _mm512_unpackhi_ps(s[2], s[3]);
  const __m512 v0 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u2)));
  const __m512 v1 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u2)));
  const __m512 v2 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u1), _mm512_castps_pd(u3)));
  const __m512 v3 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u1), _mm512_castps_pd(u3)));
  const __m512 a = _mm512_shuffle_f32x4(v0, v1, 0x44), b = _mm512_shuffle_f32x4(v2, v3, 0x44);
  const __m512 c = _mm512_shuffle_f32x4(v0, v1, 0xEE), e = _mm512_shuffle_f32x4(v2, v3, 0xEE);
  _mm512_storeu_ps(st, _mm512_shuffle_f32x4(a, b, 0x88));
  _mm512_storeu_ps(st + 16, _mm512_shuffle_f32x4(a, b, 0xDD));
  _mm512_storeu_ps(st + 32, _mm512_shuffle_f32x4(c, e, 0x88));
  _mm512_storeu_ps(st + 48, _mm512_shuffle_f32x4(c, e, 0xDD));
}

/// Whether vnni_scores handles keys of this view for head_dim d.
inline bool vnni_scores_apply(const QuantRowsView& v, Index d) {
  if (v.per_channel || (v.bits != 8 && v.bits != 4)) return false;
  return (d * v.bits / 8) % 64 == 0 && v.group_size % 8 == 0;
}

// S^T[c][r] = q^_r . k_c for the tile's nc <= 64 keys (rows [c0, c0 + nc) of the view, all
// quantized), every row r < Rp: per group, int32 sum of q codes x key codes (vpdpbusd over 16
// keys in lanes), then sq * step * sum + zero * qsum in fp32 (the symmetric zero folded in int32).
template <int Bits>
void vnni_scores(const QuantRowsView& v, Index c0, Index nc, Index d, const ReducedScratch& rq, Index Rp, float* st,
                 ReducedScratch& rs) {
  const Index gk = v.group_size, groups = d / gk, cb = d * Bits / 8, nq = d / 4, ncp = ceil_div<Index>(nc, 16) * 16;
  const std::uint8_t* codes = v.codes + c0 * cb;
  rs.step.resize(static_cast<std::size_t>(ncp * groups + 16));
  rs.zero.resize(rs.step.size());
  rs.stepT.resize(static_cast<std::size_t>(ncp * groups));
  rs.zeroT.resize(rs.stepT.size());
  rs.tbuf.resize(static_cast<std::size_t>(nq * 16));
  decode_quant_params(v, c0 * groups, nc * groups, rs.step.data(), rs.zero.data());
  transpose_to_rows(rs.step.data(), ncp, groups, rs.stepT.data(), ncp);
  if (!v.symmetric) transpose_to_rows(rs.zero.data(), ncp, groups, rs.zeroT.data(), ncp);
  const std::int32_t* qd = rq.qd.data();
  std::int32_t* tb = rs.tbuf.data();
  const __m512i low = _mm512_set1_epi8(0x0F);
  alignas(64) float lanes[4][16];
  for (Index kb = 0; kb < nc; kb += 16) {
    for (Index z = 0; z < cb / 64; ++z) {
      __m512i r[16];
      for (Index i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(codes + std::min(kb + i, nc - 1) * cb + 64 * z);
      transpose16x16(r);
      for (Index j = 0; j < 16; ++j) {
        if constexpr (Bits == 8) {
          _mm512_store_si512(tb + (16 * z + j) * 16, r[j]);
        } else {  // dword m = 16 z + j holds channels 8m .. 8m + 7: low nibbles even, high odd
          const Index m = 16 * z + j;
          _mm512_store_si512(tb + (2 * m) * 16, _mm512_and_si512(r[j], low));
          _mm512_store_si512(tb + (2 * m + 1) * 16, _mm512_and_si512(_mm512_srli_epi32(r[j], 4), low));
        }
      }
    }
    for (Index r0 = 0; r0 < Rp; r0 += 4) {
      __m512 s[4];
      for (int rr = 0; rr < 4; ++rr) s[rr] = _mm512_setzero_ps();
      for (Index g = 0; g < groups; ++g) {
        __m512i acc[4];
        for (int rr = 0; rr < 4; ++rr)
          acc[rr] =
              v.symmetric
                  ? _mm512_set1_epi32(-(1 << (Bits - 1)) * rq.qisum[static_cast<std::size_t>((r0 + rr) * groups + g)])
                  : _mm512_setzero_si512();
        for (Index q = g * gk / 4; q < (g + 1) * gk / 4; ++q) {
          const __m512i t = _mm512_load_si512(tb + q * 16);
          for (int rr = 0; rr < 4; ++rr)
            acc[rr] = _mm512_dpbusd_epi32(acc[rr], t, _mm512_set1_epi32(qd[(r0 + rr) * nq + q]));
        }
        const __m512 stepv = _mm512_loadu_ps(rs.stepT.data() + g * ncp + kb);
        for (int rr = 0; rr < 4; ++rr) {
          const std::size_t rg = static_cast<std::size_t>((r0 + rr) * groups + g);
          s[rr] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[rr]), _mm512_set1_ps(rq.sq[rg])), stepv, s[rr]);
          if (!v.symmetric)
            s[rr] =
                _mm512_fmadd_ps(_mm512_loadu_ps(rs.zeroT.data() + g * ncp + kb), _mm512_set1_ps(rq.qsum[rg]), s[rr]);
        }
      }
      if (Rp == 4 && kb + 16 <= nc) {
        store_scores_4rows(s, st + kb * 4);
      } else {
        for (int rr = 0; rr < 4; ++rr) _mm512_store_ps(lanes[rr], s[rr]);
        for (Index i = 0; i < 16 && kb + i < nc; ++i)
          for (Index rr = 0; rr < 4; ++rr) st[(kb + i) * Rp + r0 + rr] = lanes[rr][i];
      }
    }
  }
}

#endif

}  // namespace inferkit::detail
