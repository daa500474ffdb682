#pragma once
// Reduced-precision arithmetic of the decode kernel (AttentionArithmetic::kReduced; the rules are
// in options.hpp, the error bounds in docs/design.md, "Reduced-precision decode arithmetic").
// What is rounded, and where the rounded products are computed:
//   q.k, per-token quantized keys: each query row is rounded to int8, symmetric, one scale per
//     (row, key group): q^ = sq * round(q / sq), sq = max |q_group| / 127. q^ . k of the
//     dequantized key is then exact as an int32 dot product of the codes (code * step + zero
//     summed per group): with AVX-512 VNNI, vpdpbusd with keys in lanes (16 keys per vector, a
//     16x16 dword transpose of their codes) and the group scale / zero applied once per group;
//     elsewhere q^ goes through the exact kernel, which computes the same sum in fp32.
//   q.k, bf16 keys: the query is rounded to bf16 (RNE); the exact kernel multiplies q^ by the
//     keys (bf16 x bf16 products are exact in fp32, as in vdpbf16ps).
//   p.v, per-token values of 8 or 4 bits, AVX-512 VNNI only: w = p * step of each (row, value
//     group, key) is rounded to u8 with one scale per (row, group, 64-key tile),
//     sw = max_tile(p) * max_tile(step) / 255, and sum w^ * code runs as vpdpbusd over 4 keys
//     per lane (a byte transpose of 4 key rows); the zero-point term sum p * zero stays fp32.
//   p.v, bf16 values: p is rounded to bf16 before the exact kernel.
// Per-channel (KIVI) keys, f32 / f16 caches, 2-bit values and non-VNNI p.v stay exact.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Whether the integer (VNNI) decode kernels are compiled in.
inline constexpr bool kReducedVnni =
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    simd::kWidth == 16;
#else
    false;
#endif

/// How the query is rounded for a source's keys.
enum class QueryRounding { kNone, kInt8, kBf16 };

struct QueryRoundingKey {
  QueryRounding kind = QueryRounding::kNone;
  Index group = 0;  // kInt8: the key group along head_dim
  int bits = 0;     // kInt8: the key code width (orders the packed codes like the key vectors)
  bool operator==(const QueryRoundingKey&) const = default;
};

/// Scratch of the reduced arithmetic, per thread.
struct ReducedScratch {
  bool have_query = false;
  QueryRoundingKey key;
  AlignedBuffer<float> qhat;          // [Rp][Dp] the rounded query, read by the exact kernels
  AlignedBuffer<std::int32_t> qd;     // kInt8: [Rp][d / 4] codes, four per dword, in key-vector order
  AlignedBuffer<std::int32_t> qisum;  // kInt8: [Rp][groups] sum of the codes of each group
  AlignedBuffer<float> sq, qsum;      // kInt8: [Rp][groups] scale; scale * code sum
  // Tiles: parameters [c][g] and transposed [g][c], probabilities [r][c], u8 weights, codes.
  AlignedBuffer<float> step, zero, stepT, zeroT, pT, sw, zsum;
  AlignedBuffer<std::uint8_t> wq;
  AlignedBuffer<std::int32_t> tbuf;
  // Integer p.v accumulates into o_perm [R][2 d] (lanes in the kernel's channel order) and
  // zacc [R][groups] (the zero-point term); both are folded into o at the end of the unit.
  AlignedBuffer<float> o_perm, zacc;
  Index perm_groups = 0;
  int perm_bits = 0;
  bool perm_touched = false, nat_touched = false;
};

/// x rounded to bf16 (RNE), as a float; x finite.
inline float round_bf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  return std::bit_cast<float>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}
inline void round_bf16_inplace(float* x, Index n) {
  for (Index i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

/// Rounds q [Rp][Dp] (first d columns) for keys of rounding `key` into rs.
inline void round_query(const float* q, Index Rp, Index Dp, Index d, QueryRoundingKey key, ReducedScratch& rs) {
  rs.key = key;
  rs.have_query = true;
  rs.qhat.resize(static_cast<std::size_t>(Rp * Dp));
  float* qh = rs.qhat.data();
  if (key.kind == QueryRounding::kBf16) {
    for (Index i = 0; i < Rp * Dp; ++i) qh[i] = round_bf16(q[i]);
    return;
  }
  const Index g = key.group, groups = d / g, nq = d / 4;
  rs.qd.resize(static_cast<std::size_t>(Rp * nq));
  rs.qisum.resize(static_cast<std::size_t>(Rp * groups));
  rs.sq.resize(static_cast<std::size_t>(Rp * groups));
  rs.qsum.resize(static_cast<std::size_t>(Rp * groups));
  std::fill(qh, qh + Rp * Dp, 0.0f);
  std::vector<std::int8_t> codes(static_cast<std::size_t>(d));
  for (Index r = 0; r < Rp; ++r) {
    const float* qr = q + r * Dp;
    for (Index j = 0; j < groups; ++j) {
      float mx = 0.0f;
      for (Index i = j * g; i < (j + 1) * g; ++i) mx = std::max(mx, std::abs(qr[i]));
      const float s = mx / 127.0f;
      std::int32_t sum = 0;
      for (Index i = j * g; i < (j + 1) * g; ++i) {
        const float c = s > 0.0f ? std::clamp(std::nearbyint(qr[i] / s), -127.0f, 127.0f) : 0.0f;
        codes[static_cast<std::size_t>(i)] = static_cast<std::int8_t>(c);
        qh[r * Dp + i] = s * c;
        sum += static_cast<std::int32_t>(c);
      }
      rs.sq[static_cast<std::size_t>(r * groups + j)] = s;
      rs.qisum[static_cast<std::size_t>(r * groups + j)] = sum;
      rs.qsum[static_cast<std::size_t>(r * groups + j)] = s * static_cast<float>(sum);
    }
    // Dword v holds the codes of the channels key vector v holds (vnni_scores): 4v .. 4v + 3 for
    // 8-bit keys; 8m + s, 8m + 2 + s, 8m + 4 + s, 8m + 6 + s with v = 2m + s for 4-bit keys.
    if (d % 8 != 0 && key.bits == 4) continue;
    for (Index v = 0; v < nq; ++v) {
      std::uint8_t b[4];
      for (Index i = 0; i < 4; ++i) {
        const Index ch = key.bits == 4 ? 8 * (v / 2) + 2 * i + v % 2 : 4 * v + i;
        b[i] = static_cast<std::uint8_t>(codes[static_cast<std::size_t>(ch)]);
      }
      std::memcpy(rs.qd.data() + r * nq + v, b, 4);
    }
  }
}

#if defined(__AVX512F__)
// dst[g * ldd + i] = src[i * n_g + g] for i < n (a multiple of 16), g < n_g (16 x n_g -> n_g x 16
// blocks; n_g == 4 by permutes, else element by element).
inline void transpose_to_rows(const float* src, Index n, Index n_g, float* dst, Index ldd) {
  if (n_g == 4) {
    for (Index b = 0; b < n; b += 16) {
      const float* s = src + b * 4;
      const __m512 a0 = _mm512_loadu_ps(s), a1 = _mm512_loadu_ps(s + 16), a2 = _mm512_loadu_ps(s + 32),
                   a3 = _mm512_loadu_ps(s + 48);
      for (int g = 0; g < 4; ++g) {
        const __m512i idx = _mm512_setr_epi32(g, 4 + g, 8 + g, 12 + g, 16 + g, 20 + g, 24 + g, 28 + g, g, 4 + g, 8 + g,
                                              12 + g, 16 + g, 20 + g, 24 + g, 28 + g);
        const __m512 lo = _mm512_permutex2var_ps(a0, idx, a1), hi = _mm512_permutex2var_ps(a2, idx, a3);
        _mm512_storeu_ps(dst + g * ldd + b, _mm512_mask_blend_ps(0xFF00, lo, hi));
      }
    }
    return;
  }
  for (Index g = 0; g < n_g; ++g)
    for (Index i = 0; i < n; ++i) dst[g * ldd + i] = src[i * n_g + g];
}
#endif

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

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
    const __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88), e = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
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
          acc[rr] = v.symmetric ? _mm512_set1_epi32(-(1 << (Bits - 1)) * rq.qisum[static_cast<std::size_t>((r0 + rr) * groups + g)])
                                : _mm512_setzero_si512();
        for (Index q = g * gk / 4; q < (g + 1) * gk / 4; ++q) {
          const __m512i t = _mm512_load_si512(tb + q * 16);
          for (int rr = 0; rr < 4; ++rr) acc[rr] = _mm512_dpbusd_epi32(acc[rr], t, _mm512_set1_epi32(qd[(r0 + rr) * nq + q]));
        }
        const __m512 stepv = _mm512_loadu_ps(rs.stepT.data() + g * ncp + kb);
        for (int rr = 0; rr < 4; ++rr) {
          const std::size_t rg = static_cast<std::size_t>((r0 + rr) * groups + g);
          s[rr] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[rr]), _mm512_set1_ps(rq.sq[rg])), stepv, s[rr]);
          if (!v.symmetric)
            s[rr] = _mm512_fmadd_ps(_mm512_loadu_ps(rs.zeroT.data() + g * ncp + kb), _mm512_set1_ps(rq.qsum[rg]), s[rr]);
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

/// Whether vnni_pv handles values of this view for head_dim d.
inline bool vnni_pv_apply(const QuantRowsView& v, Index d) {
  if (v.per_channel || (v.bits != 8 && v.bits != 4)) return false;
  return d % 32 == 0 && v.group_size % 32 == 0;
}

/// Channel of lane (L, i) of accumulator k of 32-channel segment s (the byte transpose below).
inline Index vnni_pv_channel(int bits, Index s, Index k, Index L, Index i) {
  return bits == 8 ? 32 * s + 16 * (L % 2) + 4 * k + i : 32 * s + 2 * (4 * k + i) + L % 2;
}

// o_perm = o_perm * alpha + sum_c w^ code, zacc = zacc * alpha + sum_c p zero' for the tile's
// nc <= 64 value rows (all quantized) and query rows r < R, with p = st[c][r].
template <int Bits>
void vnni_pv(const QuantRowsView& v, Index c0, Index nc, Index d, const float* st, Index Rp, Index R,
             const float* alpha, ReducedScratch& rs) {
  const Index gv = v.group_size, groups = d / gv, cb = d * Bits / 8, ncp = ceil_div<Index>(nc, 16) * 16, segs = d / 32;
  const std::uint8_t* codes = v.codes + c0 * cb;
  rs.step.resize(static_cast<std::size_t>(ncp * groups + 16));
  rs.zero.resize(rs.step.size());
  rs.stepT.resize(static_cast<std::size_t>(ncp * groups));
  rs.zeroT.resize(rs.stepT.size());
  rs.pT.resize(static_cast<std::size_t>(ncp * Rp));
  rs.wq.resize(static_cast<std::size_t>(R * groups * 64 + 64));
  rs.sw.resize(static_cast<std::size_t>(R * groups));
  decode_quant_params(v, c0 * groups, nc * groups, rs.step.data(), rs.zero.data());
  transpose_to_rows(rs.step.data(), ncp, groups, rs.stepT.data(), ncp);
  transpose_to_rows(rs.zero.data(), ncp, groups, rs.zeroT.data(), ncp);
  transpose_to_rows(st, ncp, Rp, rs.pT.data(), ncp);
  const __mmask16 tail = static_cast<__mmask16>((1u << (nc % 16)) - 1u);
  // Keys past nc weigh nothing; 8-bit codes are read as signed (code - 128), which moves
  // 128 * step into the zero point.
  float stepmax[16] = {};
  for (Index g = 0; g < groups; ++g) {
    __m512 mx = _mm512_setzero_ps();
    for (Index b = 0; b < ncp; b += 16) {
      float* sp = rs.stepT.data() + g * ncp + b;
      float* zp = rs.zeroT.data() + g * ncp + b;
      const __mmask16 m = b + 16 <= nc ? __mmask16(0xFFFF) : tail;
      const __m512 sv = _mm512_maskz_loadu_ps(m, sp);
      _mm512_storeu_ps(sp, sv);
      mx = _mm512_max_ps(mx, sv);
      __m512 zv = _mm512_maskz_loadu_ps(m, zp);
      if constexpr (Bits == 8) zv = _mm512_fmadd_ps(sv, _mm512_set1_ps(128.0f), zv);
      _mm512_storeu_ps(zp, zv);
    }
    stepmax[g] = _mm512_reduce_max_ps(mx);
  }
  const bool zero_term = !(Bits == 8 && v.symmetric);
  for (Index r = 0; r < R; ++r) {
    __m512 pm = _mm512_setzero_ps();
    float* pr = rs.pT.data() + r * ncp;
    for (Index b = 0; b < ncp; b += 16) {
      const __m512 pv = _mm512_maskz_loadu_ps(b + 16 <= nc ? __mmask16(0xFFFF) : tail, pr + b);
      _mm512_storeu_ps(pr + b, pv);
      pm = _mm512_max_ps(pm, pv);
    }
    const float pmax = _mm512_reduce_max_ps(pm);
    const float a = alpha[r];
    for (Index g = 0; g < groups; ++g) {
      const float top = pmax * stepmax[g];
      const float inv = top > 0.0f ? 255.0f / top : 0.0f;
      rs.sw[static_cast<std::size_t>(r * groups + g)] = top / 255.0f;
      std::uint8_t* w = rs.wq.data() + (r * groups + g) * 64;
      __m512 zs = _mm512_setzero_ps();
      for (Index b = 0; b < ncp; b += 16) {
        const __m512 pv = _mm512_loadu_ps(pr + b), sv = _mm512_loadu_ps(rs.stepT.data() + g * ncp + b);
        const __m512i wi = _mm512_cvtps_epu32(_mm512_mul_ps(_mm512_mul_ps(pv, sv), _mm512_set1_ps(inv)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(w + b), _mm512_cvtusepi32_epi8(wi));
        if (zero_term) zs = _mm512_fmadd_ps(pv, _mm512_loadu_ps(rs.zeroT.data() + g * ncp + b), zs);
      }
      float& za = rs.zacc[static_cast<std::size_t>(r * groups + g)];
      za = za * a + (zero_term ? _mm512_reduce_add_ps(zs) : 0.0f);
    }
  }
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80)), low = _mm512_set1_epi8(0x0F);
  const __m512i shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  const Index octets = ceil_div<Index>(nc, 8);
  for (Index s = 0; s < segs; ++s) {
    const Index g = 32 * s / gv;
    for (Index r0 = 0; r0 < R; r0 += 4) {
      const Index nr = std::min<Index>(4, R - r0);
      __m512i acc[4][4];
      for (int rr = 0; rr < 4; ++rr)
        for (int k = 0; k < 4; ++k) acc[rr][k] = _mm512_setzero_si512();
      for (Index o = 0; o < octets; ++o) {
        __m512i in[4];
        for (Index k = 0; k < 4; ++k) {
          const std::uint8_t* a = codes + std::min(8 * o + k, nc - 1) * cb;
          const std::uint8_t* b = codes + std::min(8 * o + 4 + k, nc - 1) * cb;
          if constexpr (Bits == 8) {
            const __m512i x = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * s))),
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * s)), 1);
            in[k] = _mm512_xor_si512(x, sign);
          } else {  // lanes: a's low nibbles, a's high nibbles, b's low, b's high
            const __m512i x = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16 * s)))),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * s))), 1);
            in[k] = _mm512_and_si512(_mm512_srlv_epi64(x, shifts), low);
          }
        }
        // Byte transpose: e[k] lane (L, i) = the 4 keys' codes at lane L's byte 4k + i.
        const __m512i A = _mm512_unpacklo_epi8(in[0], in[1]), B = _mm512_unpackhi_epi8(in[0], in[1]);
        const __m512i C = _mm512_unpacklo_epi8(in[2], in[3]), D = _mm512_unpackhi_epi8(in[2], in[3]);
        const __m512i e[4] = {_mm512_unpacklo_epi16(A, C), _mm512_unpackhi_epi16(A, C), _mm512_unpacklo_epi16(B, D),
                              _mm512_unpackhi_epi16(B, D)};
        for (Index rr = 0; rr < nr; ++rr) {
          const std::uint8_t* w = rs.wq.data() + ((r0 + rr) * groups + g) * 64 + 8 * o;
          std::int32_t lo = 0, hi = 0;
          std::memcpy(&lo, w, 4);
          std::memcpy(&hi, w + 4, 4);
          const __m512i wv = _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi);
          for (int k = 0; k < 4; ++k) acc[rr][k] = _mm512_dpbusd_epi32(acc[rr][k], wv, e[k]);
        }
      }
      for (Index rr = 0; rr < nr; ++rr) {
        const Index r = r0 + rr;
        const __m512 swv = _mm512_set1_ps(rs.sw[static_cast<std::size_t>(r * groups + g)]), av = _mm512_set1_ps(alpha[r]);
        float* op = rs.o_perm.data() + r * 2 * d + s * 64;
        for (int k = 0; k < 4; ++k)
          _mm512_storeu_ps(op + 16 * k, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[rr][k]), swv,
                                                        _mm512_mul_ps(_mm512_loadu_ps(op + 16 * k), av)));
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
    const float* op = rs.o_perm.data() + r * 2 * d;
    float* orow = o + r * Dp;
    for (Index s = 0; s < d / 32; ++s)
      for (Index k = 0; k < 4; ++k)
        for (Index L = 0; L < 4; ++L)
          for (Index i = 0; i < 4; ++i) {
            const Index ch = rs.perm_bits == 8 ? 32 * s + 16 * (L % 2) + 4 * k + i : 32 * s + 2 * (4 * k + i) + L % 2;
            orow[ch] += op[s * 64 + k * 16 + L * 4 + i];
          }
    for (Index c = 0; c < d; ++c) orow[c] += rs.zacc[static_cast<std::size_t>(r * groups + c / gv)];
  }
}

}  // namespace inferkit::detail
