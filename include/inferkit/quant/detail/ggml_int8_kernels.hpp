#pragma once
// The int8 road of the ggml block types (quant/ggml_blocks.hpp): activations quantized per
// block (32 weights for the legacy types, as llama.cpp's Q8_0; 256 for the K-quants, as its
// Q8_K), weight rows unpacked once into codes and 16-bit scale vectors, then integer dot
// products:
//
//   x_k ~ dx_b q_k,  dx_b = max_{k in b} |x_k| / 127,  q_k = symmetric_code(x_k, dx_b, 127)
//   y = sum_b d_b dx_b sum_j sc_j sum_{k in j} u_k q_k  -  sum_j c_j a_j
//   c_j = (d_b sc_j) o + dm_b mn_j,   a_j = dx_b sum_{k in j} q_k    (j: groups of 16 weights)
//
// which is sum_k w_k dx q_k exactly up to float rounding of the two outer sums (the integer
// sums are exact). The minimum / offset term is one float dot product over cols / 16 values.
// AVX2 multiplies u (unsigned) by q with vpmaddubsw, then by the scales with vpmaddwd; the VNNI
// path fuses the second step (vpdpwssd), or for the one-scale legacy blocks does it all in
// vpdpbusd. Q8_0's signed codes take |u| and sign(q, u) first. Codes are unpacked with AVX2
// instructions on both SIMD paths (32 per vector: the unit every layout is organized in).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/ggml_blocks.hpp"
#include "inferkit/quant/kernel_path.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Activation rows quantized for the int8 road (file comment).
struct GgmlQ8Rows {
  Index rows = 0, cols = 0, block = 0;
  AlignedBuffer<std::int8_t> q;  ///< rows * cols codes
  std::vector<float> d;          ///< rows * cols / block scales dx_b
  std::vector<float> a;          ///< rows * cols / 16 values dx_b * (sum of 16 codes)
  const std::int8_t* q_row(Index t) const { return q.data() + t * cols; }
  const float* d_row(Index t) const { return d.data() + t * (cols / block); }
  const float* a_row(Index t) const { return a.data() + t * (cols / 16); }
};

/// Quantizes the rows of x (finite, cols a multiple of `block`) into `out` (file comment).
inline void ggml_quantize_activations(MatrixView<const float> x, Index block, QuantKernel kernel, GgmlQ8Rows& out,
                                      int threads) {
  const Index T = x.rows(), K = x.cols(), nb = K / block;
  out.rows = T;
  out.cols = K;
  out.block = block;
  out.q.resize(static_cast<std::size_t>(T * K));
  out.d.resize(static_cast<std::size_t>(T * nb));
  out.a.resize(static_cast<std::size_t>(T * (K / 16)));
  parallel_items(threads, T, [&](Index t) {
    const float* xr = x.row_ptr(t);
    std::int8_t* q = out.q.data() + t * K;
    for (Index b = 0; b < nb; ++b) {
      const float step = abs_max(xr + b * block, block) / 127.0f;
      quantize_row_int8(xr + b * block, block, block, step, false, kernel, q + b * block);
      out.d[static_cast<std::size_t>(t * nb + b)] = step;
      for (Index j = b * block / 16; j < (b + 1) * block / 16; ++j) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += q[j * 16 + i];
        out.a[static_cast<std::size_t>(t * (K / 16) + j)] = step * static_cast<float>(s);
      }
    }
  });
}

/// One weight row unpacked: codes, per-32 scale vectors (sc of the two 16-groups, 8 copies
/// each), block factors d and the min / offset coefficients c_j (file comment).
struct GgmlUnpackedRow {
  AlignedBuffer<std::uint8_t> u;  ///< cols codes (Q8_0: the signed bytes)
  AlignedBuffer<std::int16_t> s;  ///< cols / 2 scales: 16 per 32 codes
  std::vector<float> d;           ///< cols / block
  std::vector<float> c;           ///< cols / 16
  void resize(Index cols, Index block) {
    u.resize(static_cast<std::size_t>(cols));
    s.resize(static_cast<std::size_t>(cols / 2));
    d.resize(static_cast<std::size_t>(cols / block));
    c.resize(static_cast<std::size_t>(cols / 16));
  }
};

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
/// 32 bytes of v shifted right by `bits` (per byte, the bits that leave are dropped by the
/// caller's mask: 16-bit shifts move bits across bytes).
inline __m256i ggml_srl(__m256i v, int bits) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(bits)); }
inline __m256i ggml_load(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
/// 16 nibble bytes at p as 32 codes: low nibbles then high nibbles (Q4_0's order).
inline __m256i ggml_nibbles16(const std::uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
/// The 32 bits at p as 32 bytes of `value` (bit set) or 0.
inline __m256i ggml_bits32(const std::uint8_t* p, char value) {
  std::uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf), sel);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, sel), _mm256_set1_epi8(value));
}

/// Codes of 32-weight chunk c of block b (the layout equations of ggml_blocks.hpp, 32 at once).
template <class L>
inline __m256i ggml_chunk(L, const std::uint8_t* b, int c) {
  const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  constexpr GgmlType T = L::kType;
  (void)m2, (void)m4, (void)one, (void)c;
  if constexpr (T == GgmlType::kQ8_0) {
    return ggml_load(b + 2);
  } else if constexpr (T == GgmlType::kQ4_0) {
    return ggml_nibbles16(b + 2);
  } else if constexpr (T == GgmlType::kQ4_1) {
    return ggml_nibbles16(b + 4);
  } else if constexpr (T == GgmlType::kQ5_0) {
    return _mm256_or_si256(ggml_nibbles16(b + 6), ggml_bits32(b + 2, 16));
  } else if constexpr (T == GgmlType::kQ5_1) {
    return _mm256_or_si256(ggml_nibbles16(b + 8), ggml_bits32(b + 4, 16));
  } else if constexpr (T == GgmlType::kQ2_K) {
    return _mm256_and_si256(ggml_srl(ggml_load(b + 16 + 32 * (c / 4)), 2 * (c % 4)), m2);
  } else if constexpr (T == GgmlType::kQ3_K) {
    const __m256i low = _mm256_and_si256(ggml_srl(ggml_load(b + 32 + 32 * (c / 4)), 2 * (c % 4)), m2);
    const __m256i high = _mm256_and_si256(ggml_srl(ggml_load(b), c), one);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
  } else if constexpr (T == GgmlType::kQ4_K) {
    return _mm256_and_si256(ggml_srl(ggml_load(b + 16 + 32 * (c / 2)), 4 * (c % 2)), m4);
  } else if constexpr (T == GgmlType::kQ5_K) {
    const __m256i low = _mm256_and_si256(ggml_srl(ggml_load(b + 48 + 32 * (c / 2)), 4 * (c % 2)), m4);
    const __m256i high = _mm256_and_si256(ggml_srl(ggml_load(b + 16), c), one);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  } else {  // Q6_K
    const int n = c / 4, g = c % 4;
    const __m256i low = _mm256_and_si256(ggml_srl(ggml_load(b + 64 * n + 32 * (g % 2)), 4 * (g / 2)), m4);
    const __m256i high = _mm256_and_si256(ggml_srl(ggml_load(b + 128 + 32 * n), 2 * g), m2);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
}
#endif

/// Row `p` (cols weights of layout L) unpacked into `r` on `path` (SIMD paths unpack codes 32
/// at a time; the scalar path applies the layout equations weight by weight).
template <class L, class Path>
inline void ggml_unpack_row(L layout, Path, const std::uint8_t* p, Index cols, GgmlUnpackedRow& r) {
  (void)layout;
  const Index nb = cols / L::kBlock;
  constexpr int kChunks = L::kBlock / 32, kGroups = L::kBlock / 16;
  for (Index b = 0; b < nb; ++b) {
    const std::uint8_t* blk = p + b * L::kBytes;
    GgmlParts parts;
    L::parts(blk, parts);
    r.d[static_cast<std::size_t>(b)] = parts.d;
    for (int j = 0; j < kGroups; ++j)
      r.c[static_cast<std::size_t>(b * kGroups + j)] =
          (parts.d * static_cast<float>(parts.sc[j])) * static_cast<float>(L::kOffset) +
          parts.dm * static_cast<float>(parts.mn[j]);
    std::int16_t* s = r.s.data() + b * L::kBlock / 2;
    for (int j = 0; j < kGroups; ++j)
      for (int i = 0; i < 8; ++i) s[8 * j + i] = parts.sc[j];
    std::uint8_t* u = r.u.data() + b * L::kBlock;
    if constexpr (std::is_same_v<Path, ScalarPath>) {
      for (int e = 0; e < L::kBlock; ++e) u[e] = static_cast<std::uint8_t>(L::code(blk, e));
    } else {
#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
      for (int c = 0; c < kChunks; ++c)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * c), ggml_chunk(layout, blk, c));
#endif
    }
    (void)kChunks;
  }
}

/// y[t * y_stride] = the row's product with activation rows t0 .. t0 + C of `x` (file comment).
template <class L, int C>
inline void ggml_int8_tile(ScalarPath, const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                           Index y_stride) {
  const Index nb = cols / L::kBlock;
  for (int t = 0; t < C; ++t) {
    const std::int8_t* q = x.q_row(t0 + t);
    const float* dx = x.d_row(t0 + t);
    float acc = 0.0f;
    for (Index b = 0; b < nb; ++b) {
      std::int32_t isum = 0;
      for (Index k = b * L::kBlock; k < (b + 1) * L::kBlock; ++k) {
        const int u = L::kSigned ? static_cast<std::int8_t>(r.u[static_cast<std::size_t>(k)])
                                 : r.u[static_cast<std::size_t>(k)];
        isum += r.s[static_cast<std::size_t>(k / 2)] * u * q[k];
      }
      acc += static_cast<float>(isum) * (r.d[static_cast<std::size_t>(b)] * dx[b]);
    }
    float m = 0.0f;
    const float* a = x.a_row(t0 + t);
    for (Index j = 0; j < cols / 16; ++j) m += r.c[static_cast<std::size_t>(j)] * a[j];
    y[t * y_stride] = acc - m;
  }
}

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
inline float ggml_hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/// The SIMD tiles: `vnni` selects vpdpwssd / vpdpbusd for the multiply-accumulate steps.
template <class L, int C, bool kVnni>
inline void ggml_int8_tile_simd(const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                                Index y_stride) {
  const Index nb = cols / L::kBlock;
  constexpr int kChunks = L::kBlock / 32;
  const std::int8_t* q[C];
  const float* dx[C];
  __m256 accf[C];
  for (int t = 0; t < C; ++t) {
    q[t] = x.q_row(t0 + t);
    dx[t] = x.d_row(t0 + t);
    accf[t] = _mm256_setzero_ps();
  }
  const std::uint8_t* u = r.u.data();
  const std::int16_t* s = r.s.data();
  for (Index b = 0; b < nb; ++b) {
    __m256i acc[C];
    for (int t = 0; t < C; ++t) acc[t] = _mm256_setzero_si256();
    for (int c = 0; c < kChunks; ++c) {
      const Index k = b * L::kBlock + 32 * c;
      __m256i uv = _mm256_load_si256(reinterpret_cast<const __m256i*>(u + k));
      const __m256i codes = uv;
      if constexpr (L::kSigned) uv = _mm256_abs_epi8(uv);
      const __m256i sv = _mm256_load_si256(reinterpret_cast<const __m256i*>(s + k / 2));
      for (int t = 0; t < C; ++t) {
        __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[t] + k));
        if constexpr (L::kSigned) qv = _mm256_sign_epi8(qv, codes);
#if defined(INFERKIT_QUANT_AVX512VNNI)
        if constexpr (kVnni) {
          if constexpr (L::kBlock == 32)
            acc[t] = _mm256_dpbusd_epi32(acc[t], uv, qv);  // one scale per block: no scale step
          else
            acc[t] = _mm256_dpwssd_epi32(acc[t], _mm256_maddubs_epi16(uv, qv), sv);
          continue;
        }
#endif
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(uv, qv), sv));
      }
    }
    const float db = r.d[static_cast<std::size_t>(b)];
    for (int t = 0; t < C; ++t)
      accf[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(db * dx[t][b]), accf[t]);
  }
  for (int t = 0; t < C; ++t) {
    // The min / offset term: sum_j c_j a_j, 8 lanes then the same reduction.
    const float* a = x.a_row(t0 + t);
    __m256 m = _mm256_setzero_ps();
    for (Index j = 0; j < cols / 16; j += 8) {
      if (cols / 16 - j >= 8) {
        m = _mm256_fmadd_ps(_mm256_loadu_ps(r.c.data() + j), _mm256_loadu_ps(a + j), m);
      } else {
        for (Index i = j; i < cols / 16; ++i) m = _mm256_add_ps(m, _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, r.c[i] * a[i]));
      }
    }
    y[t * y_stride] = ggml_hsum(accf[t]) - ggml_hsum(m);
  }
}
#endif
#if defined(INFERKIT_QUANT_AVX2)
template <class L, int C>
inline void ggml_int8_tile(Avx2Path, const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                           Index y_stride) {
  ggml_int8_tile_simd<L, C, false>(r, cols, x, t0, y, y_stride);
}
#endif
#if defined(INFERKIT_QUANT_AVX512VNNI)
template <class L, int C>
inline void ggml_int8_tile(Avx512VnniPath, const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0,
                           float* y, Index y_stride) {
  ggml_int8_tile_simd<L, C, true>(r, cols, x, t0, y, y_stride);
}
#endif

}  // namespace inferkit::detail
