#pragma once
// What the reduced-precision decode arithmetics share (AttentionArithmetic::kReduced; the rules
// in options.hpp, the error bounds in docs/design.md, "Reduced-precision decode arithmetic"):
// which kernels this build compiles in, the per-thread scratch, bf16 rounding, the rounded query
// (int8 per key group for quantized keys, bf16 for bf16 keys) and a transpose of per-key
// parameters into key-in-lanes rows. The arithmetics themselves: reduced_int8_scores.hpp (q.k by
// vpdpbusd), reduced_int16_pv.hpp (p.v by vpdpwssd over 15-bit weights), reduced_bf16.hpp (q.k
// and p.v by vdpbf16ps); reduced_decode.hpp chooses among them for a tile.
//
//   ReducedScratch rs;
//   round_query(q, Rp, Dp, d, {QueryRounding::kInt8, /*group=*/32, /*bits=*/8}, rs);  // rs.qd, rs.sq, ...
//
// Contract: round_query's int8 codes are code = clamp(nearbyint(q / sq), -127, 127) with
// sq = max |q_group| / 127 in fp32 (0 codes for an all-zero group); round_bf16 is RNE.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

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

}  // namespace inferkit::detail
