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
//   q.k, bf16 keys: the query is rounded to bf16 (RNE); q^ . k by vdpbf16ps (AVX512-BF16) or
//     by the exact kernel (bf16 x bf16 products are exact in fp32 either way).
//   p.v, per-token values of 8 or 4 bits, AVX-512 VNNI only: w = p * step of each (row, value
//     group, key) is rounded to a 15-bit integer with one scale per (row, group, 64-key tile),
//     sw = max_tile(p) * max_tile(step) / 32767, and sum w^ * code runs as vpdpwssd over key
//     pairs (codes widened to 16 bits, two keys interleaved per lane); the zero-point term
//     sum p * zero stays fp32.
//   p.v, bf16 values: p is rounded to bf16; p^ . v by vdpbf16ps over key pairs, else the exact
//     kernel.
// Per-channel (KIVI) keys, f32 / f16 caches, 2-bit values and non-VNNI p.v stay exact.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace inferkit::detail {

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define INFERKIT_DETAIL_REDUCED_BF16 1
#else
#define INFERKIT_DETAIL_REDUCED_BF16 0
#endif
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define INFERKIT_DETAIL_REDUCED_VNNI 1
#else
#define INFERKIT_DETAIL_REDUCED_VNNI 0
#endif

/// Whether the bf16 dot-product (vdpbf16ps) decode kernels are compiled in.
inline constexpr bool kReducedBf16 = INFERKIT_DETAIL_REDUCED_BF16 && simd::kWidth == 16;
/// Whether the integer (VNNI) decode kernels are compiled in.
inline constexpr bool kReducedVnni = INFERKIT_DETAIL_REDUCED_VNNI && simd::kWidth == 16;

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
  AlignedBuffer<std::uint16_t> qbf;   // kBf16: [Rp][Dp] the rounded query's bf16 bits
  AlignedBuffer<std::uint32_t> pbf;   // bf16 p.v: [key pair][Rp] two bf16 probabilities
  // Tiles: parameters [c][g] and transposed [g][c], probabilities [r][c], u8 weights, codes.
  AlignedBuffer<float> step, zero, stepT, zeroT, pT, sw, zsum;
  AlignedBuffer<std::uint8_t> wq;
  AlignedBuffer<std::int32_t> tbuf;
  // Integer p.v accumulates into o_perm [R][d] (in the kernel's channel order, vnni_pv_channel)
  // and zacc [R][groups][16 lanes] (the zero-point term); both are folded into o at the end.
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
    rs.qbf.resize(static_cast<std::size_t>(Rp * Dp));
    for (Index i = 0; i < Rp * Dp; ++i) {
      qh[i] = round_bf16(q[i]);
      rs.qbf[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(qh[i]) >> 16);
    }
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
