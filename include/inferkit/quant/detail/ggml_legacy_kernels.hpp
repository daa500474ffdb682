#pragma once
// The 32-weight ("legacy") block types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 on the int8 road (file
// comment of ggml_int8_kernels.hpp): decode (one activation row, R weight rows per pass) and the
// prefill tile, which share one arithmetic per type so a matvec equals the matmul row bit for
// bit, on the AVX2 and the VNNI path alike. With w' the signed weight code (Q8_0: the byte;
// Q4_0 / Q5_0: u - 8 / u - 16, the offset folded into the integers; Q4_1 / Q5_1: u, their
// minimum m going to separate terms m_b xs_b, xs_b = dx_b S_b) and q the activation codes:
//
//   Q8_0 ("pairs"): 8 lanes per block, a_bl = sum_{e = 4l .. 4l+3} w'_e q_e; even blocks
//     accumulate E_l = fma(a_bl, fl(dx_b d_b), E_l), odd blocks O_l; y = hsum(E + O).
//   Q4_0 .. Q5_1 ("quads"): 4 lanes per block, a_bl = sum over e = 4l .. 4l+3 and
//     16 + 4l .. 16 + 4l + 3; block b goes to slot j = b mod 4, F_j = fma(a_bl, fl(dx_b d_b), F_j),
//     M_j = fma(m_b, xs_b, M_j); y = hsum([F0 F1] + [F2 F3]) [+ ((M0 + M2) + (M1 + M3))].
//
// The shapes follow the VNNI decode. Q8_0: two blocks' 64 codes per 512-bit vector (low half
// even, high half odd), one vcvtdq2ps and one fma per pair. Nibble types: one 64-byte vector
// holds the low nibbles of four blocks (16 codes each, one 128-bit lane per block; the high
// nibbles are the second vector), so unpacking is one and plus one shift, and a block's float
// work is 4 lanes instead of 8; the activation codes are laid out in that order once per call,
// and two masked loads of two blocks each plus vpermt2b / vpermt2w give the nibbles and every
// binary16 factor (d, m, Q5's high-bit words) of the four blocks. vpdpbusd multiplies biased
// unsigned codes (Q8_0: w ^ 0x80 = w + 128; Q4_0 / Q5_0: u) by the signed q, starting from the
// per-lane correction -bias * sum q (once per call, GgmlLegacyInput): the lanes are the signed
// products exactly. The AVX2 path (and the prefill tile, whose unpacked rows hold w') multiplies
// |w'| by sign(q, w') in vpmaddubsw (pair sums at most 2 * 128 * 127: no saturation), then
// vpmaddwd by 1, and adds 128-bit halves for the 4-lane blocks.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/ggml_int8_kernels.hpp"
#include "inferkit/quant/detail/parallel.hpp"
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

/// Whether L has the quad arithmetic (file comment): the 4- and 5-bit legacy types.
template <class L>
inline constexpr bool kGgmlQuad = kGgmlLegacy<L> && !L::kSigned;

/// Per-call decode inputs: the lane corrections of the biased types (Q4_0 / Q5_0: 16 per group
/// of 4 blocks, both paths; Q8_0 on VNNI: 8 per block in code order) and, for the quads on VNNI,
/// the activation codes in group order (file comment; the blocks after the last full group stay
/// in code order).
struct GgmlLegacyInput {
  AlignedBuffer<std::int8_t> q_buf;
  std::vector<std::int32_t> corr;
  const std::int8_t* q = nullptr;
};

/// Lane corrections per activation row (GgmlLegacyInput::corr): Q8_0 cols / 4, Q4_0 / Q5_0 16
/// per full group of 4 blocks, else none.
template <class L>
inline Index ggml_legacy_corr_size(Index cols) {
  if constexpr (L::kSigned) return cols / 4;
  if constexpr (kGgmlLegacyBias<L> != 0) return 16 * (cols / 128);
  return 0;
}

/// The lane corrections -bias * sum q of one activation row q (file comment).
template <class L>
inline void ggml_legacy_corr_row(const std::int8_t* q, Index cols, std::int32_t* corr) {
  constexpr int kBias = kGgmlLegacyBias<L>;
  const auto sum4 = [&](Index k) { return q[k] + q[k + 1] + q[k + 2] + q[k + 3]; };
  if constexpr (L::kSigned) {
    for (Index l = 0; l < cols / 4; ++l) corr[l] = -kBias * sum4(4 * l);
  } else if constexpr (kBias != 0) {
    for (Index g = 0; g < cols / 128; ++g)
      for (Index j = 0; j < 4; ++j)
        for (Index l = 0; l < 4; ++l) {
          const Index k = 32 * (4 * g + j) + 4 * l;
          corr[16 * g + 4 * j + l] = -kBias * (sum4(k) + sum4(k + 16));
        }
  }
}

/// One activation row's codes in group order (quads; file comment): per group of 4 blocks the
/// first 16 codes of each block, then the last 16; the blocks after the last group as they are.
inline void ggml_quad_codes_row(const std::int8_t* q, Index cols, std::int8_t* o) {
  const Index groups = cols / 128;
  for (Index g = 0; g < groups; ++g)
    for (Index j = 0; j < 4; ++j) {
      std::memcpy(o + 128 * g + 16 * j, q + 32 * (4 * g + j), 16);
      std::memcpy(o + 128 * g + 64 + 16 * j, q + 32 * (4 * g + j) + 16, 16);
    }
  std::memcpy(o + 128 * groups, q + 128 * groups, static_cast<std::size_t>(cols - 128 * groups));
}

/// Fills `in` for activation row 0 of x.
template <class L, class Path>
inline void ggml_legacy_prepare(Path, const GgmlQ8Rows& x, GgmlLegacyInput& in) {
  const std::int8_t* q = x.q_row(0);
  in.q = q;
  constexpr bool kVnni = std::is_same_v<Path, Avx512VnniPath>;
  if (kVnni || kGgmlQuad<L>) {  // AVX2 takes the quads' corrections only (Q8_0 multiplies signed codes)
    in.corr.resize(static_cast<std::size_t>(ggml_legacy_corr_size<L>(x.cols)));
    ggml_legacy_corr_row<L>(q, x.cols, in.corr.data());
  }
  if constexpr (kVnni && kGgmlQuad<L>) {
    in.q_buf.resize(static_cast<std::size_t>(x.cols));
    ggml_quad_codes_row(q, x.cols, in.q_buf.data());
    in.q = in.q_buf.data();
  }
}

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
/// Byte offsets of the packed low nibbles (Q4_0 2, Q4_1 4, Q5_0 6, Q5_1 8) and of Q5's high bits.
template <class L>
inline constexpr int kGgmlNibbles = L::kType == GgmlType::kQ4_0   ? 2
                                    : L::kType == GgmlType::kQ4_1 ? 4
                                    : L::kType == GgmlType::kQ5_0 ? 6
                                                                  : 8;
template <class L>
inline constexpr int kGgmlHighBits = L::kType == GgmlType::kQ5_0 ? 2 : 4;
template <class L>
inline constexpr bool kGgmlFiveBit = L::kType == GgmlType::kQ5_0 || L::kType == GgmlType::kQ5_1;

/// The codes w' of block a (32 bytes in code order; Q4_1 / Q5_1: the unsigned u).
template <class L>
[[gnu::always_inline]] inline __m256i ggml_legacy_codes(const std::uint8_t* a) {
  const __m256i u = ggml_chunk<L>(a, 0);
  if constexpr (L::kOffset != 0) return _mm256_sub_epi8(u, _mm256_set1_epi8(static_cast<char>(L::kOffset)));
  return u;
}

/// The 8 lanes sum_{e = 4l .. 4l+3} w'_e q_e of 32 codes w' against 32 activation codes q
/// (vpmaddubsw + vpmaddwd, or kVnni: vpdpbusd; file comment).
template <class L, bool kVnni>
[[gnu::always_inline]] inline __m256i ggml_legacy_lanes(__m256i w, __m256i q) {
  const __m256i u = kGgmlLegacySigned<L> ? _mm256_abs_epi8(w) : w;
  const __m256i v = kGgmlLegacySigned<L> ? _mm256_sign_epi8(q, w) : q;
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if constexpr (kVnni) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, v);
#endif
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1));
}
/// A quad block's 4 lanes from its 8: lane l + lane l + 4 (codes 4l.. and 16 + 4l..).
[[gnu::always_inline]] inline __m128i ggml_quad_lanes(__m256i a8) {
  return _mm_add_epi32(_mm256_castsi256_si128(a8), _mm256_extracti128_si256(a8, 1));
}

/// Blocks a and b's factors d by one vcvtph2ps: [d_a, d_b, 0, 0].
[[gnu::always_inline]] inline __m128 ggml_legacy_d2(const std::uint8_t* a, const std::uint8_t* b) {
  std::uint16_t ha, hb;
  std::memcpy(&ha, a, 2);
  std::memcpy(&hb, b, 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(ha | static_cast<std::uint32_t>(hb) << 16)));
}
/// The binary16 at a + off, a + kBytes + off, .. for 4 consecutive blocks, as 4 floats.
template <class L>
[[gnu::always_inline]] inline __m128 ggml_legacy_halves4(const std::uint8_t* a, int off) {
  std::uint64_t v = 0;
  for (int j = 0; j < 4; ++j) {
    std::uint16_t h;
    std::memcpy(&h, a + j * L::kBytes + off, 2);
    v |= static_cast<std::uint64_t>(h) << (16 * j);
  }
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

/// y from the pair accumulators (Q8_0).
[[gnu::always_inline]] inline float ggml_pair_sum(__m256 e, __m256 o) { return ggml_hsum(_mm256_add_ps(e, o)); }

/// y from the quad slots (file comment).
template <class L>
[[gnu::always_inline]] inline float ggml_quad_sum(const __m128* f, const float* m) {
  const float main = ggml_hsum(_mm256_add_ps(_mm256_set_m128(f[1], f[0]), _mm256_set_m128(f[3], f[2])));
  if constexpr (L::kMins) return main + ((m[0] + m[2]) + (m[1] + m[3]));
  (void)m;
  return main;
}

/// Adds the blocks after the last full group, 4 G .. nb - 1, to slots 0.. of a quad row (lanes
/// from the code-order q of activation row `x_row`; dx, xs of that row).
template <class L, bool kVnni>
inline void ggml_quad_tail(const std::uint8_t* row, Index nb, const std::int8_t* q, const float* dx, const float* xs,
                           __m128* f, float* m) {
  for (Index b = nb / 4 * 4; b < nb; ++b) {
    const int j = static_cast<int>(b % 4);
    const std::uint8_t* a = row + b * L::kBytes;
    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
    const __m128i acc = ggml_quad_lanes(ggml_legacy_lanes<L, kVnni>(ggml_legacy_codes<L>(a), qv));
    f[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(acc), _mm_set1_ps(dx[b] * ggml_half_f16c(a)), f[j]);
    if constexpr (L::kMins) m[j] = std::fma(ggml_half_f16c(a + 2), xs[b], m[j]);
  }
}

/// Q8_0 decode on AVX2 instructions: R rows against activation row 0 of x; y[r] for rows[r].
template <class L, int R>
inline void ggml_pair_decode_avx2(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x, float* y) {
  const std::int8_t* q = x.q_row(0);
  const float* dx = x.d_row(0);
  const Index nb = cols / 32;
  __m256 e[R], o[R];
  for (int r = 0; r < R; ++r) e[r] = o[r] = _mm256_setzero_ps();
  for (Index i = 0; i < nb / 2; ++i) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * i));
    const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * i + 32));
    const __m128 g = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx + 2 * i)));
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* a = rows[r] + 2 * i * L::kBytes;
      const __m256i acc_a = ggml_legacy_lanes<L, false>(ggml_legacy_codes<L>(a), qa);
      const __m256i acc_b = ggml_legacy_lanes<L, false>(ggml_legacy_codes<L>(a + L::kBytes), qb);
      const __m256 s = _mm256_castps128_ps256(_mm_mul_ps(ggml_legacy_d2(a, a + L::kBytes), g));
      e[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_a), _mm256_permutevar8x32_ps(s, _mm256_setzero_si256()), e[r]);
      o[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc_b), _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(1)), o[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (nb % 2) {
      const Index b = nb - 1;
      const std::uint8_t* a = rows[r] + b * L::kBytes;
      const __m256i qt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      e[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ggml_legacy_lanes<L, false>(ggml_legacy_codes<L>(a), qt)),
                             _mm256_set1_ps(dx[b] * ggml_half_f16c(a)), e[r]);
    }
    y[r] = ggml_pair_sum(e[r], o[r]);
  }
}

/// Quad decode (Q4_0 .. Q5_1) on AVX2 instructions: R rows against activation row 0 of x. The
/// unsigned codes u go straight into vpmaddubsw; Q4_0 / Q5_0 then add the lane corrections.
template <class L, int R>
inline void ggml_quad_decode_avx2(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                                  const GgmlLegacyInput& in, float* y) {
  constexpr bool kBias = kGgmlLegacyBias<L> != 0;
  const auto unsigned_lanes = [](__m256i u, __m256i q) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
  };
  const std::int8_t* q = x.q_row(0);
  const float *dx = x.d_row(0), *xs = x.xs_row(0);
  const Index nb = cols / 32;
  const __m256i lo_idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), hi_idx = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  __m256 f01[R], f23[R];
  __m128 mv[R];
  for (int r = 0; r < R; ++r) {
    f01[r] = f23[r] = _mm256_setzero_ps();
    mv[r] = _mm_setzero_ps();
  }
  for (Index g = 0; g < nb / 4; ++g) {
    __m256i qv[4];
    for (int j = 0; j < 4; ++j) qv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * (4 * g + j)));
    const __m128 dx4 = _mm_loadu_ps(dx + 4 * g);
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* a = rows[r] + 4 * g * L::kBytes;
      __m256i acc[4];
      for (int j = 0; j < 4; ++j) acc[j] = unsigned_lanes(ggml_chunk<L>(a + j * L::kBytes, 0), qv[j]);
      __m256i a01 = _mm256_add_epi32(_mm256_permute2x128_si256(acc[0], acc[1], 0x20),
                                     _mm256_permute2x128_si256(acc[0], acc[1], 0x31));
      __m256i a23 = _mm256_add_epi32(_mm256_permute2x128_si256(acc[2], acc[3], 0x20),
                                     _mm256_permute2x128_si256(acc[2], acc[3], 0x31));
      if constexpr (kBias) {
        a01 = _mm256_add_epi32(a01, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.corr.data() + 16 * g)));
        a23 = _mm256_add_epi32(a23, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.corr.data() + 16 * g + 8)));
      }
      const __m256 s = _mm256_castps128_ps256(_mm_mul_ps(ggml_legacy_halves4<L>(a, 0), dx4));
      f01[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a01), _mm256_permutevar8x32_ps(s, lo_idx), f01[r]);
      f23[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a23), _mm256_permutevar8x32_ps(s, hi_idx), f23[r]);
      if constexpr (L::kMins) mv[r] = _mm_fmadd_ps(ggml_legacy_halves4<L>(a, 2), _mm_loadu_ps(xs + 4 * g), mv[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 f[4] = {_mm256_castps256_ps128(f01[r]), _mm256_extractf128_ps(f01[r], 1), _mm256_castps256_ps128(f23[r]),
                   _mm256_extractf128_ps(f23[r], 1)};
    alignas(16) float m[4];
    _mm_store_ps(m, mv[r]);
    ggml_quad_tail<L, false>(rows[r], nb, q, dx, xs, f, m);
    y[r] = ggml_quad_sum<L>(f, m);
  }
}

/// Prefill: activation rows t0 .. t0 + C against an unpacked row (r.u: the codes w' in code
/// order), on AVX2 instructions or (kVnni) vpdpbusd; y[t * y_stride]. The pair or quad
/// arithmetic of L (file comment), operation for operation.
template <class L, int C, bool kVnni>
inline void ggml_legacy_tile(const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                             Index y_stride) {
  const Index nb = cols / 32;
  const auto codes = [&](Index b) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(r.u.data() + 32 * b)); };
  const auto lanes = [&](Index b, int t) {
    return ggml_legacy_lanes<L, kVnni>(codes(b),
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_row(t0 + t) + 32 * b)));
  };
  const auto d = [&](Index b) { return r.parts[static_cast<std::size_t>(b)].d; };
  if constexpr (L::kSigned) {  // Q8_0: pairs
    __m256 e[C], o[C];
    for (int t = 0; t < C; ++t) e[t] = o[t] = _mm256_setzero_ps();
    const auto add = [&](Index b, int t, __m256& acc) {
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes(b, t)), _mm256_set1_ps(x.d_row(t0 + t)[b] * d(b)), acc);
    };
    Index b = 0;
    for (; b + 2 <= nb; b += 2)  // even blocks into e, odd into o, in block order
      for (int t = 0; t < C; ++t) {
        add(b, t, e[t]);
        add(b + 1, t, o[t]);
      }
    if (b < nb)
      for (int t = 0; t < C; ++t) add(b, t, e[t]);
    for (int t = 0; t < C; ++t) y[t * y_stride] = ggml_pair_sum(e[t], o[t]);
  } else {  // quads
    __m256 f01[C], f23[C];
    float m[C][4] = {};
    for (int t = 0; t < C; ++t) f01[t] = f23[t] = _mm256_setzero_ps();
    const auto lanes2 = [&](Index b, int t) {  // blocks b, b + 1 as [4 lanes | 4 lanes]
      const __m256i p = lanes(b, t), q = lanes(b + 1, t);
      return _mm256_add_epi32(_mm256_permute2x128_si256(p, q, 0x20), _mm256_permute2x128_si256(p, q, 0x31));
    };
    const auto scale2 = [&](Index b, int t) {
      const float* dx = x.d_row(t0 + t);
      return _mm256_set_m128(_mm_set1_ps(dx[b + 1] * d(b + 1)), _mm_set1_ps(dx[b] * d(b)));
    };
    for (Index b = 0; b + 4 <= nb; b += 4)
      for (int t = 0; t < C; ++t) {
        f01[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes2(b, t)), scale2(b, t), f01[t]);
        f23[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes2(b + 2, t)), scale2(b + 2, t), f23[t]);
        if constexpr (L::kMins)
          for (int j = 0; j < 4; ++j)
            m[t][j] = std::fma(-r.parts[static_cast<std::size_t>(b + j)].dm, x.xs_row(t0 + t)[b + j], m[t][j]);
      }
    for (int t = 0; t < C; ++t) {
      __m128 f[4] = {_mm256_castps256_ps128(f01[t]), _mm256_extractf128_ps(f01[t], 1), _mm256_castps256_ps128(f23[t]),
                     _mm256_extractf128_ps(f23[t], 1)};
      for (Index b = nb / 4 * 4; b < nb; ++b) {
        const int j = static_cast<int>(b % 4);
        f[j] =
            _mm_fmadd_ps(_mm_cvtepi32_ps(ggml_quad_lanes(lanes(b, t))), _mm_set1_ps(x.d_row(t0 + t)[b] * d(b)), f[j]);
        if constexpr (L::kMins)
          m[t][j] = std::fma(-r.parts[static_cast<std::size_t>(b)].dm, x.xs_row(t0 + t)[b], m[t][j]);
      }
      y[t * y_stride] = ggml_quad_sum<L>(f, m[t]);
    }
  }
}
#endif

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// Q8_0 decode on VNNI, two blocks per 512-bit vector, 4 rows per pass (file comment).
template <class L, int R>
inline void ggml_pair_decode_vnni(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                                  const GgmlLegacyInput& in, float* y) {
  const std::int8_t* q = x.q_row(0);
  const float* dx = x.d_row(0);
  const std::int32_t* corr = in.corr.data();
  const Index nb = cols / 32;
  const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc_f[R];
  for (int r = 0; r < R; ++r) acc_f[r] = _mm512_setzero_ps();
  for (Index i = 0; i < nb / 2; ++i) {
    const __m512i qv = _mm512_loadu_si512(q + 64 * i);
    const __m512i c0 = _mm512_loadu_si512(corr + 16 * i);
    const __m128 g = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx + 2 * i)));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* a = rows[r] + 2 * i * L::kBytes;
      const __m512i u = _mm512_xor_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(ggml_load(a + 2)), ggml_load(a + L::kBytes + 2), 1), flip);
      const __m512i acc = _mm512_dpbusd_epi32(c0, u, qv);
      const __m512 s =
          _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(_mm_mul_ps(ggml_legacy_d2(a, a + L::kBytes), g)));
      acc_f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, acc_f[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 e = _mm512_castps512_ps256(acc_f[r]);
    const __m256 o = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc_f[r]), 1));
    if (nb % 2) {
      const Index b = nb - 1;
      const std::uint8_t* a = rows[r] + b * L::kBytes;
      const __m256i qt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ggml_legacy_lanes<L, true>(ggml_legacy_codes<L>(a), qt)),
                          _mm256_set1_ps(dx[b] * ggml_half_f16c(a)), e);
    }
    y[r] = ggml_pair_sum(e, o);
  }
}

/// vpermt2b / vpermt2w indices of the quad VNNI decode over two masked loads (v0: blocks 0, 1
/// of a group; v1: blocks 2, 3): nib[16j + i] = block j's nibble byte i; words[4j + i] = block
/// j's d, words[16 + j] its m, words[24 + j] / [28 + j] the low / high 16 bits of its qh (Q5).
template <class L>
struct GgmlQuadIndex {
  alignas(64) std::uint8_t nib[64] = {};
  alignas(64) std::uint16_t words[32] = {};
  constexpr GgmlQuadIndex() {
    for (int j = 0; j < 4; ++j) {
      const int src = (j < 2 ? 0 : 64) + (j % 2) * L::kBytes;  // block j's first byte in the two-vector table
      for (int i = 0; i < 16; ++i) nib[16 * j + i] = static_cast<std::uint8_t>(src + kGgmlNibbles<L> + i);
      for (int i = 0; i < 4; ++i) words[4 * j + i] = static_cast<std::uint16_t>(src / 2);
      words[16 + j] = static_cast<std::uint16_t>(src / 2 + 1);
      words[24 + j] = static_cast<std::uint16_t>((src + kGgmlHighBits<L>) / 2);
      words[28 + j] = static_cast<std::uint16_t>((src + kGgmlHighBits<L>) / 2 + 1);
    }
  }
};
template <class L>
inline constexpr GgmlQuadIndex<L> kGgmlQuadIndex{};

/// Four quad blocks at `a` unpacked for VNNI (file comment), as decode and the prefill pack both
/// read them: lo / hi the codes of the low / high nibbles (Q5's fifth bit added), fw the blocks'
/// binary16 factor words (Q5's high-bit words in its top 128 bits).
template <class L>
struct GgmlQuadUnpack {
  __mmask64 pair_mask = _cvtu64_mask64((std::uint64_t{1} << (2 * L::kBytes)) - 1);
  __m512i nib_idx = _mm512_load_si512(kGgmlQuadIndex<L>.nib), word_idx = _mm512_load_si512(kGgmlQuadIndex<L>.words);
  __m512i m4 = _mm512_set1_epi8(15), high = _mm512_set1_epi8(16);

  void operator()(const std::uint8_t* a, __m512i& lo, __m512i& hi, __m512i& fw) const {
    const __m512i v0 = _mm512_maskz_loadu_epi8(pair_mask, a);
    const __m512i v1 = _mm512_maskz_loadu_epi8(pair_mask, a + 2 * L::kBytes);
    const __m512i nib = _mm512_permutex2var_epi8(v0, nib_idx, v1);
    fw = _mm512_permutex2var_epi16(v0, word_idx, v1);
    lo = _mm512_and_si512(nib, m4);
    hi = _mm512_and_si512(_mm512_srli_epi16(nib, 4), m4);
    if constexpr (kGgmlFiveBit<L>) {
      const __m128i qh = _mm512_extracti32x4_epi32(fw, 3);
      lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(static_cast<std::uint64_t>(_mm_cvtsi128_si64(qh))), lo, high);
      hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(static_cast<std::uint64_t>(_mm_extract_epi64(qh, 1))), hi, high);
    }
  }
};

/// Quad decode (Q4_0 .. Q5_1) on VNNI: four blocks per pair of 512-bit code vectors, R rows per
/// pass (file comment); in.q holds the activation codes in group order.
template <class L, int R>
inline void ggml_quad_decode_vnni(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                                  const GgmlLegacyInput& in, float* y) {
  constexpr bool kBias = kGgmlLegacyBias<L> != 0;
  const std::int8_t* q = in.q;
  const float *dx = x.d_row(0), *xs = x.xs_row(0);
  const Index nb = cols / 32;
  const GgmlQuadUnpack<L> unpack;
  const __m512i dx_idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc_f[R];
  __m128 mv[R];
  for (int r = 0; r < R; ++r) {
    acc_f[r] = _mm512_setzero_ps();
    mv[r] = _mm_setzero_ps();
  }
  for (Index g = 0; g < nb / 4; ++g) {
    const __m512i qlo = _mm512_load_si512(q + 128 * g), qhi = _mm512_load_si512(q + 128 * g + 64);
    const __m512i c0 = kBias ? _mm512_loadu_si512(in.corr.data() + 16 * g) : _mm512_setzero_si512();
    const __m512 dxv = _mm512_permutexvar_ps(dx_idx, _mm512_castps128_ps512(_mm_loadu_ps(dx + 4 * g)));
    [[maybe_unused]] const __m128 xs4 = _mm_loadu_ps(xs + 4 * g);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512i lo, hi, fw;
      unpack(rows[r] + 4 * g * L::kBytes, lo, hi, fw);
      const __m512i acc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c0, lo, qlo), hi, qhi);
      const __m512 s = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(fw)), dxv);
      acc_f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), s, acc_f[r]);
      if constexpr (L::kMins) mv[r] = _mm_fmadd_ps(_mm_cvtph_ps(_mm512_extracti32x4_epi32(fw, 2)), xs4, mv[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 f[4] = {_mm512_extractf32x4_ps(acc_f[r], 0), _mm512_extractf32x4_ps(acc_f[r], 1),
                   _mm512_extractf32x4_ps(acc_f[r], 2), _mm512_extractf32x4_ps(acc_f[r], 3)};
    alignas(16) float m[4];
    _mm_store_ps(m, mv[r]);
    ggml_quad_tail<L, true>(rows[r], nb, x.q_row(0), dx, xs, f, m);
    y[r] = ggml_quad_sum<L>(f, m);
  }
}
#endif

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// The VNNI prefill's activation rows: codes in the decode order (quads: group order) and lane
/// corrections, per row of GgmlQ8Rows.
struct GgmlLegacyRows {
  AlignedBuffer<std::int8_t> q;
  std::vector<std::int32_t> corr;
  Index cols = 0, corr_stride = 0;
  const std::int8_t* q_row(Index t) const { return q.data() + t * cols; }
  const std::int32_t* corr_row(Index t) const { return corr.data() + t * corr_stride; }
};

template <class L>
inline void ggml_legacy_rows(const GgmlQ8Rows& x, GgmlLegacyRows& out, int threads) {
  out.cols = x.cols;
  out.corr_stride = ggml_legacy_corr_size<L>(x.cols);
  out.corr.resize(static_cast<std::size_t>(x.rows * out.corr_stride));
  if constexpr (kGgmlQuad<L>) out.q.resize(static_cast<std::size_t>(x.rows * x.cols));
  parallel_items(threads, x.rows, [&](Index t) {
    ggml_legacy_corr_row<L>(x.q_row(t), x.cols, out.corr.data() + t * out.corr_stride);
    if constexpr (kGgmlQuad<L>) ggml_quad_codes_row(x.q_row(t), x.cols, out.q.data() + t * x.cols);
  });
}

/// A weight row packed for the VNNI prefill: the decode's biased unsigned codes in its order
/// (pairs / groups), each pair's or group's 16 lane factors d, the quads' m (4 per group), and
/// the leftover blocks as signed codes w' with their d and m.
struct GgmlLegacyPacked {
  AlignedBuffer<std::uint8_t> u;
  AlignedBuffer<float> dv;
  std::vector<float> m4, dt, mt;
};

template <class L>
inline void ggml_legacy_pack(const std::uint8_t* row, Index cols, GgmlLegacyPacked& p) {
  const Index nb = cols / 32;
  constexpr Index kStep = kGgmlQuad<L> ? 4 : 2;  // blocks per step
  const Index steps = nb / kStep;
  p.u.resize(static_cast<std::size_t>(cols));
  p.dv.resize(static_cast<std::size_t>(16 * steps));
  p.dt.resize(static_cast<std::size_t>(nb - kStep * steps));
  p.mt.resize(p.dt.size());
  if constexpr (kGgmlQuad<L>) {
    const GgmlQuadUnpack<L> unpack;
    if constexpr (L::kMins) p.m4.resize(static_cast<std::size_t>(4 * steps));
    for (Index g = 0; g < steps; ++g) {  // as ggml_quad_decode_vnni
      __m512i lo, hi, fw;
      unpack(row + 4 * g * L::kBytes, lo, hi, fw);
      _mm512_store_si512(p.u.data() + 128 * g, lo);
      _mm512_store_si512(p.u.data() + 128 * g + 64, hi);
      _mm512_store_ps(p.dv.data() + 16 * g, _mm512_cvtph_ps(_mm512_castsi512_si256(fw)));
      if constexpr (L::kMins) _mm_storeu_ps(p.m4.data() + 4 * g, _mm_cvtph_ps(_mm512_extracti32x4_epi32(fw, 2)));
    }
  } else {
    const __m512i sidx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (Index i = 0; i < steps; ++i) {  // as ggml_pair_decode_vnni
      const std::uint8_t* a = row + 2 * i * L::kBytes;
      const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(ggml_load(a + 2)), ggml_load(a + L::kBytes + 2), 1);
      _mm512_store_si512(p.u.data() + 64 * i, _mm512_xor_si512(u, _mm512_set1_epi8(static_cast<char>(0x80))));
      _mm512_store_ps(p.dv.data() + 16 * i,
                      _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(ggml_legacy_d2(a, a + L::kBytes))));
    }
  }
  for (Index b = kStep * steps; b < nb; ++b) {
    const std::uint8_t* a = row + b * L::kBytes;
    _mm256_store_si256(reinterpret_cast<__m256i*>(p.u.data() + 32 * b), ggml_legacy_codes<L>(a));
    p.dt[static_cast<std::size_t>(b - kStep * steps)] = ggml_half_f16c(a);
    p.mt[static_cast<std::size_t>(b - kStep * steps)] = L::kMins ? ggml_half_f16c(a + 2) : 0.0f;
  }
}

/// Prefill on VNNI: R packed weight rows x C activation rows t0 .. t0 + C per pass, each
/// weight vector and factor load shared by the C rows and each activation load by the R rows;
/// the same operations per output as the decode (so the matmul row equals the matvec):
/// y[t * y_stride + r].
template <class L, int R, int C>
inline void ggml_legacy_prefill_vnni(const GgmlLegacyPacked* w, Index cols, const GgmlQ8Rows& x,
                                     const GgmlLegacyRows& xa, Index t0, float* y, Index y_stride) {
  constexpr bool kBias = kGgmlLegacyBias<L> != 0;
  constexpr Index kStep = kGgmlQuad<L> ? 4 : 2;
  const Index nb = cols / 32, steps = nb / kStep;
  const __m512i dx_idx = kGgmlQuad<L> ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                      : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc_f[R][C];
  __m128 mv[R][C];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < C; ++t) {
      acc_f[r][t] = _mm512_setzero_ps();
      mv[r][t] = _mm_setzero_ps();
    }
  for (Index i = 0; i < steps; ++i) {
    constexpr int kVecs = kGgmlQuad<L> ? 2 : 1;  // code vectors per step
    __m512i u[R][kVecs];
    __m512 dv[R];
    [[maybe_unused]] __m128 m4[R];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kVecs; ++v) u[r][v] = _mm512_load_si512(w[r].u.data() + 64 * (kVecs * i + v));
      dv[r] = _mm512_load_ps(w[r].dv.data() + 16 * i);
      if constexpr (L::kMins) m4[r] = _mm_loadu_ps(w[r].m4.data() + 4 * i);
    }
    for (int t = 0; t < C; ++t) {
      const std::int8_t* q = (kGgmlQuad<L> ? xa.q_row(t0 + t) : x.q_row(t0 + t)) + 64 * kVecs * i;
      const __m512i c0 = kBias ? _mm512_loadu_si512(xa.corr_row(t0 + t) + 16 * i) : _mm512_setzero_si512();
      const float* dx = x.d_row(t0 + t) + kStep * i;
      const __m512 dxv = _mm512_permutexvar_ps(
          dx_idx,
          _mm512_castps128_ps512(kGgmlQuad<L> ? _mm_loadu_ps(dx)
                                              : _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(dx)))));
      [[maybe_unused]] const __m128 xs4 = kGgmlQuad<L> ? _mm_loadu_ps(x.xs_row(t0 + t) + 4 * i) : _mm_setzero_ps();
      const __m512i q0 = _mm512_loadu_si512(q);  // rows are cols bytes apart: 32-byte multiples
      [[maybe_unused]] const __m512i q1 = kVecs == 2 ? _mm512_loadu_si512(q + 64) : q0;
      for (int r = 0; r < R; ++r) {
        __m512i acc = _mm512_dpbusd_epi32(c0, u[r][0], q0);
        if constexpr (kVecs == 2) acc = _mm512_dpbusd_epi32(acc, u[r][kVecs - 1], q1);
        acc_f[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dv[r], dxv), acc_f[r][t]);
        if constexpr (L::kMins) mv[r][t] = _mm_fmadd_ps(m4[r], xs4, mv[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < C; ++t) {
      const std::int8_t* q = x.q_row(t0 + t);
      const float* dx = x.d_row(t0 + t);
      const auto tail_lanes = [&](Index b) {
        return ggml_legacy_lanes<L, true>(_mm256_load_si256(reinterpret_cast<const __m256i*>(w[r].u.data() + 32 * b)),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b)));
      };
      float out;
      if constexpr (kGgmlQuad<L>) {
        __m128 f[4] = {_mm512_extractf32x4_ps(acc_f[r][t], 0), _mm512_extractf32x4_ps(acc_f[r][t], 1),
                       _mm512_extractf32x4_ps(acc_f[r][t], 2), _mm512_extractf32x4_ps(acc_f[r][t], 3)};
        alignas(16) float m[4];
        _mm_store_ps(m, mv[r][t]);
        for (Index b = 4 * steps; b < nb; ++b) {  // as ggml_quad_tail
          const int j = static_cast<int>(b % 4);
          const std::size_t k = static_cast<std::size_t>(b - 4 * steps);
          f[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(ggml_quad_lanes(tail_lanes(b))), _mm_set1_ps(dx[b] * w[r].dt[k]), f[j]);
          if constexpr (L::kMins) m[j] = std::fma(w[r].mt[k], x.xs_row(t0 + t)[b], m[j]);
        }
        out = ggml_quad_sum<L>(f, m);
      } else {
        __m256 e = _mm512_castps512_ps256(acc_f[r][t]);
        const __m256 o = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc_f[r][t]), 1));
        if (nb % 2)
          e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tail_lanes(nb - 1)), _mm256_set1_ps(dx[nb - 1] * w[r].dt[0]), e);
        out = ggml_pair_sum(e, o);
      }
      y[t * y_stride + r] = out;
    }
}
#endif

/// R rows against activation row 0 of x on `Path` (the decode of ggml_decode_kernels.hpp).
template <class L, int R, class Path>
inline void ggml_legacy_decode(Path, const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x,
                               const GgmlLegacyInput& in, float* y) {
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if constexpr (std::is_same_v<Path, Avx512VnniPath>) {
    if constexpr (kGgmlQuad<L>)
      ggml_quad_decode_vnni<L, R>(rows, cols, x, in, y);
    else
      ggml_pair_decode_vnni<L, R>(rows, cols, x, in, y);
    return;
  }
#endif
#if defined(INFERKIT_QUANT_AVX2)
  if constexpr (std::is_same_v<Path, Avx2Path>) {
    if constexpr (kGgmlQuad<L>)
      ggml_quad_decode_avx2<L, R>(rows, cols, x, in, y);
    else
      ggml_pair_decode_avx2<L, R>(rows, cols, x, y);
  }
#endif
}

}  // namespace inferkit::detail
