#pragma once
// The 32-weight ("legacy") block types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 on the int8 road (file
// comment of ggml_int8_kernels.hpp): decode (one activation row, R weight rows per pass) and the
// prefill tile, which share one arithmetic so a matvec equals the matmul row bit for bit, on
// the AVX2 and the VNNI path alike:
//
//   a_bl   = sum_{k = 4l .. 4l + 3} w'_k q_k            (lane l = 0..7 of block b; exact integers)
//   E_l    = sum_{b even} fl(dx_b d_b) a_bl,  O_l = the same over odd b   (one fma per lane and block)
//   y      = hsum(E + O)  [+ (mE + mO),  mE = sum_{b even} m_b xs_b by fma, mO over odd b]
//
// with w' the signed weight code (Q8_0: the byte; Q4_0 / Q5_0: u - 8 / u - 16; Q4_1 / Q5_1: u,
// their minimum going to the m terms, xs_b = dx_b S_b). Folding the offset into the integers
// removes Q4_0 / Q5_0's float offset term; splitting even and odd blocks is what lets the VNNI
// decode hold two blocks per 512-bit vector (low half even, high half odd) with one vcvtdq2ps and
// one fma per pair, while the AVX2 path keeps E and O in two registers.
//
// VNNI decode multiplies biased unsigned codes (Q8_0: w ^ 0x80 = w + 128; Q4_0 / Q5_0: u) by the
// signed activations in vpdpbusd, starting from the per-lane correction -bias * sum_k q_k,
// computed once per call (GgmlLegacyInput); the lanes are then the signed products exactly. The
// AVX2 path (and the VNNI prefill tile, whose unpacked rows hold w') multiplies |w'| by
// sign(q, w') in vpmaddubsw (pair sums at most 2 * 128 * 127, no saturation) and vpmaddwd by 1.
// The block factors are converted two blocks at a time with one vcvtph2ps, then one vmulps by
// the [dx, (xs,) dx, (xs)] of the pair gives both blocks' dx d products (and the m xs fma).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/ggml_int8_kernels.hpp"
#include "inferkit/quant/ggml_blocks.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Whether layout L is a 32-weight block type (the kernels of this file).
template <class L>
inline constexpr bool kGgmlLegacy = L::kBlock == 32;

/// The bias making L's codes unsigned for vpdpbusd: Q8_0 128, Q4_0 / Q5_0 their offset, else 0.
template <class L>
inline constexpr int kGgmlLegacyBias = L::kSigned ? 128 : L::kOffset;

/// Whether the AVX2 multiply takes |w'| and sign(q, w') (every legacy type but Q4_1 / Q5_1).
template <class L>
inline constexpr bool kGgmlLegacySigned = kGgmlLegacyBias<L> != 0;

/// Per-call decode inputs: the factor vector of each block (dx_b, or dx_b, xs_b interleaved for
/// Q4_1 / Q5_1) and, for the VNNI path of the biased types, the lane corrections.
struct GgmlLegacyInput {
  std::vector<float> fx_buf;
  std::vector<std::int32_t> corr;  ///< cols / 4 lanes: -bias * (q_4l + .. + q_4l+3)
  const float* fx = nullptr;
};

/// Fills `in` for activation row 0 of x.
template <class L, class Path>
inline void ggml_legacy_prepare(Path, const GgmlQ8Rows& x, GgmlLegacyInput& in) {
  const Index nb = x.cols / 32;
  if constexpr (L::kMins) {
    in.fx_buf.resize(static_cast<std::size_t>(2 * nb));
    for (Index b = 0; b < nb; ++b) {
      in.fx_buf[static_cast<std::size_t>(2 * b)] = x.d_row(0)[b];
      in.fx_buf[static_cast<std::size_t>(2 * b + 1)] = x.xs_row(0)[b];
    }
    in.fx = in.fx_buf.data();
  } else {
    in.fx = x.d_row(0);
  }
  if constexpr (std::is_same_v<Path, Avx512VnniPath> && kGgmlLegacyBias<L> != 0) {
    const std::int8_t* q = x.q_row(0);
    in.corr.resize(static_cast<std::size_t>(x.cols / 4));
    for (Index l = 0; l < x.cols / 4; ++l)
      in.corr[static_cast<std::size_t>(l)] = -kGgmlLegacyBias<L> * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
  }
}

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
/// Byte offset of the packed low nibbles in a block (Q4_0 2, Q4_1 4, Q5_0 6, Q5_1 8).
template <class L>
inline constexpr int kGgmlNibbles = L::kType == GgmlType::kQ4_0 ? 2 : L::kType == GgmlType::kQ4_1 ? 4
                                                                  : L::kType == GgmlType::kQ5_0 ? 6
                                                                                                : 8;

/// Blocks a and b's factors by one vcvtph2ps: [d_a, d_b, 0, 0], or [d_a, m_a, d_b, m_b] with minimums.
template <class L>
[[gnu::always_inline]] inline __m128 ggml_legacy_factors(const std::uint8_t* a, const std::uint8_t* b) {
  if constexpr (L::kMins) {
    std::uint32_t fa, fb;
    std::memcpy(&fa, a, 4);
    std::memcpy(&fb, b, 4);
    return _mm_cvtph_ps(_mm_set_epi32(0, 0, static_cast<int>(fb), static_cast<int>(fa)));
  } else {
    std::uint16_t ha, hb;
    std::memcpy(&ha, a, 2);
    std::memcpy(&hb, b, 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(ha | static_cast<std::uint32_t>(hb) << 16)));
  }
}
/// One block's factors: [d, 0, 0, 0] or [d, m, 0, 0].
template <class L>
[[gnu::always_inline]] inline __m128 ggml_legacy_factor1(const std::uint8_t* a) {
  std::uint32_t f = 0;
  std::memcpy(&f, a, L::kMins ? 4 : 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(f)));
}
/// The pair's activation factors [dx_a, dx_b, ..] or [dx_a, xs_a, dx_b, xs_b] (GgmlLegacyInput::fx).
template <class L>
[[gnu::always_inline]] inline __m128 ggml_legacy_fx2(const float* fx, Index pair) {
  if constexpr (L::kMins) return _mm_loadu_ps(fx + 4 * pair);
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(fx + 2 * pair)));
}
template <class L>
[[gnu::always_inline]] inline __m128 ggml_legacy_fx1(const float* fx, Index b) {
  if constexpr (L::kMins) return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(fx + 2 * b)));
  return _mm_load_ss(fx + b);
}

/// The signed codes w' of block a (32 bytes; Q4_1 / Q5_1: the unsigned u).
template <class L>
[[gnu::always_inline]] inline __m256i ggml_legacy_codes(const std::uint8_t* a) {
  const __m256i u = ggml_chunk<L>(a, 0);
  if constexpr (L::kOffset != 0) return _mm256_sub_epi8(u, _mm256_set1_epi8(static_cast<char>(L::kOffset)));
  return u;
}

/// Lanes a_bl of 32 codes w' against 32 activation codes q (AVX2 instructions; file comment).
template <class L>
[[gnu::always_inline]] inline __m256i ggml_legacy_lanes_avx2(__m256i w, __m256i q) {
  const __m256i p = kGgmlLegacySigned<L> ? _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w))
                                         : _mm256_maddubs_epi16(w, q);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/// y from the even / odd accumulators and (minimum types) the two m sums.
template <class L>
[[gnu::always_inline]] inline float ggml_legacy_sum(__m256 e, __m256 o, float me, float mo) {
  if constexpr (L::kMins) return ggml_hsum(_mm256_add_ps(e, o)) + (me + mo);
  (void)me, (void)mo;
  return ggml_hsum(_mm256_add_ps(e, o));
}

/// Adds block `a`'s terms (lanes `acc`, activation factors of block b) to e and me: the last,
/// unpaired block of an odd block count, which is even.
template <class L>
[[gnu::always_inline]] inline void ggml_legacy_tail(const std::uint8_t* a, __m256i acc, const float* fx, Index b,
                                                    __m256& e, float& me) {
  const __m128 f = ggml_legacy_factor1<L>(a), g = ggml_legacy_fx1<L>(fx, b);
  e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_broadcastss_ps(_mm_mul_ps(f, g)), e);
  if constexpr (L::kMins) me = std::fma(_mm_cvtss_f32(_mm_movehdup_ps(f)), _mm_cvtss_f32(_mm_movehdup_ps(g)), me);
}

/// R rows against activation row 0 of x on AVX2 instructions (file comment); y[r] for rows[r].
template <class L, int R>
inline void ggml_legacy_decode_avx2(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                                    const GgmlLegacyInput& in, float* y) {
  constexpr int kHi = L::kMins ? 2 : 1;  // lane of the odd block's product
  const std::int8_t* q = x.q_row(0);
  const Index nb = cols / 32;
  __m256 e[R], o[R];
  __m128 mv[R];  // lanes 1 and 3: mE, mO
  for (int r = 0; r < R; ++r) {
    e[r] = o[r] = _mm256_setzero_ps();
    mv[r] = _mm_setzero_ps();
  }
  for (Index i = 0; i < nb / 2; ++i) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * i));
    const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * i + 32));
    const __m128 g = ggml_legacy_fx2<L>(in.fx, i);
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* a = rows[r] + 2 * i * L::kBytes;
      const __m256i acc_a = ggml_legacy_lanes_avx2<L>(ggml_legacy_codes<L>(a), qa);
      const __m256i acc_b = ggml_legacy_lanes_avx2<L>(ggml_legacy_codes<L>(a + L::kBytes), qb);
      const __m128 f = ggml_legacy_factors<L>(a, a + L::kBytes);
      const __m256 s = _mm256_castps128_ps256(_mm_mul_ps(f, g));
      e[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_a), _mm256_permutevar8x32_ps(s, _mm256_setzero_si256()), e[r]);
      o[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_b), _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(kHi)), o[r]);
      if constexpr (L::kMins) mv[r] = _mm_fmadd_ps(f, g, mv[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float me = _mm_cvtss_f32(_mm_movehdup_ps(mv[r])), mo = _mm_cvtss_f32(_mm_shuffle_ps(mv[r], mv[r], 3));
    if (nb % 2) {
      const std::uint8_t* a = rows[r] + (nb - 1) * L::kBytes;
      const __m256i qt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * (nb - 1)));
      ggml_legacy_tail<L>(a, ggml_legacy_lanes_avx2<L>(ggml_legacy_codes<L>(a), qt), in.fx, nb - 1, e[r], me);
    }
    y[r] = ggml_legacy_sum<L>(e[r], o[r], me, mo);
  }
}

/// Prefill: activation rows t0 .. t0 + C against an unpacked row (r.u: the codes w'), on AVX2
/// instructions or (kVnni) vpdpbusd; y[t * y_stride].
template <class L, int C, bool kVnni>
inline void ggml_legacy_tile(const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                             Index y_stride) {
  const Index nb = cols / 32;
  __m256 acc_f[2][C];
  float m[2][C];
  for (int t = 0; t < C; ++t) {
    acc_f[0][t] = acc_f[1][t] = _mm256_setzero_ps();
    m[0][t] = m[1][t] = 0.0f;
  }
  const auto block = [&](Index b, __m256* f, float* mt) {
    const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(r.u.data() + 32 * b));
    const GgmlParts& p = r.parts[static_cast<std::size_t>(b)];
    [[maybe_unused]] const __m256i u = kGgmlLegacySigned<L> ? _mm256_abs_epi8(w) : w;
    for (int t = 0; t < C; ++t) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_row(t0 + t) + 32 * b));
      __m256i acc;
#if defined(INFERKIT_QUANT_AVX512VNNI)
      if constexpr (kVnni)
        acc = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, kGgmlLegacySigned<L> ? _mm256_sign_epi8(q, w) : q);
      else
#endif
        acc = ggml_legacy_lanes_avx2<L>(w, q);
      f[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(x.d_row(t0 + t)[b] * p.d), f[t]);
      if constexpr (L::kMins) mt[t] = std::fma(-p.dm, x.xs_row(t0 + t)[b], mt[t]);
    }
  };
  Index b = 0;
  for (; b + 2 <= nb; b += 2) {
    block(b, acc_f[0], m[0]);
    block(b + 1, acc_f[1], m[1]);
  }
  if (b < nb) block(b, acc_f[0], m[0]);
  for (int t = 0; t < C; ++t) y[t * y_stride] = ggml_legacy_sum<L>(acc_f[0][t], acc_f[1][t], m[0][t], m[1][t]);
}
#endif

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// Blocks a and a + kBytes as 64 biased unsigned codes (file comment), block a in the low half.
template <class L>
[[gnu::always_inline]] inline __m512i ggml_legacy_pair_codes(const std::uint8_t* a) {
  const std::uint8_t* b = a + L::kBytes;
  if constexpr (L::kType == GgmlType::kQ8_0) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(ggml_load(a + 2)), ggml_load(b + 2), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    constexpr int kN = kGgmlNibbles<L>;
    const __m256i n = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + kN))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + kN)), 1);
    // [a, a, b, b] in the 128-bit lanes, shifted by 0, 4, 0, 4: low then high nibbles per block
    const __m512i v = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(n));
    __m512i u = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                                 _mm512_set1_epi8(15));
    if constexpr (L::kType == GgmlType::kQ5_0 || L::kType == GgmlType::kQ5_1) {
      constexpr int kH = L::kType == GgmlType::kQ5_0 ? 2 : 4;  // bit e of qh: code e's fifth bit
      std::uint32_t ha, hb;
      std::memcpy(&ha, a + kH, 4);
      std::memcpy(&hb, b + kH, 4);
      const __mmask64 k = _cvtu64_mask64(ha | static_cast<std::uint64_t>(hb) << 32);
      u = _mm512_mask_add_epi8(u, k, u, _mm512_set1_epi8(16));
    }
    return u;
  }
}

/// One block's biased unsigned codes (the odd count's last block).
template <class L>
[[gnu::always_inline]] inline __m256i ggml_legacy_block_codes(const std::uint8_t* a) {
  if constexpr (L::kType == GgmlType::kQ8_0)
    return _mm256_xor_si256(ggml_load(a + 2), _mm256_set1_epi8(static_cast<char>(0x80)));
  return ggml_chunk<L>(a, 0);
}

/// R rows against activation row 0 of x on VNNI, two blocks per 512-bit vector (file comment).
template <class L, int R>
inline void ggml_legacy_decode_vnni(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                                    const GgmlLegacyInput& in, float* y) {
  constexpr bool kBias = kGgmlLegacyBias<L> != 0;
  constexpr int kHi = L::kMins ? 2 : 1;
  const std::int8_t* q = x.q_row(0);
  const std::int32_t* corr = in.corr.data();
  const Index nb = cols / 32;
  const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, kHi, kHi, kHi, kHi, kHi, kHi, kHi, kHi);
  __m512 acc_f[R];
  __m128 mv[R];
  for (int r = 0; r < R; ++r) {
    acc_f[r] = _mm512_setzero_ps();
    mv[r] = _mm_setzero_ps();
  }
  for (Index i = 0; i < nb / 2; ++i) {
    const __m512i qv = _mm512_loadu_si512(q + 64 * i);
    const __m512i c0 = kBias ? _mm512_loadu_si512(corr + 16 * i) : _mm512_setzero_si512();
    const __m128 g = ggml_legacy_fx2<L>(in.fx, i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* a = rows[r] + 2 * i * L::kBytes;
      const __m512i acc = _mm512_dpbusd_epi32(c0, ggml_legacy_pair_codes<L>(a), qv);
      const __m128 f = ggml_legacy_factors<L>(a, a + L::kBytes);
      const __m512 s = _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(_mm_mul_ps(f, g)));
      acc_f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, acc_f[r]);
      if constexpr (L::kMins) mv[r] = _mm_fmadd_ps(f, g, mv[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 e = _mm512_castps512_ps256(acc_f[r]);
    const __m256 o = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc_f[r]), 1));
    float me = _mm_cvtss_f32(_mm_movehdup_ps(mv[r])), mo = _mm_cvtss_f32(_mm_shuffle_ps(mv[r], mv[r], 3));
    if (nb % 2) {
      const Index b = nb - 1;
      const std::uint8_t* a = rows[r] + b * L::kBytes;
      const __m256i c = kBias ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + 8 * b))
                              : _mm256_setzero_si256();
      const __m256i qt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      ggml_legacy_tail<L>(a, _mm256_dpbusd_epi32(c, ggml_legacy_block_codes<L>(a), qt), in.fx, b, e, me);
    }
    y[r] = ggml_legacy_sum<L>(e, o, me, mo);
  }
}
#endif

}  // namespace inferkit::detail
