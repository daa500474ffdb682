#pragma once
// Kernels over Int8Weights' panel layout (16 output channels x 4 input features per 64 bytes):
//   - integer tiles of the W8A8 product (int32 sums of code products, then
//     y = float(sum) * (x_scale * w_scale)), on the VNNI, AVX2 and scalar paths;
//   - the float-activation matrix-vector product of one panel, dequantizing codes in registers.
//
// VNNI (vpdpbusd multiplies unsigned by signed bytes): activations are stored as code + 128
// (unsigned), so a channel's sum is sum(code_x * code_w) + 128 * sum(code_w); the stored code
// sum of the channel removes the offset exactly. AVX2 (vpmaddubsw, unsigned x signed with
// int16 saturation): |w| times x * sign(w), whose pairs stay within 2 * 127 * 127 < 2^15, then
// vpmaddwd sums pairs into int32. All paths give the same int32 sums, hence the same floats.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/int8_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"

#if !defined(INFERKIT_FORCE_SCALAR) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Rows of the W8A8 tile per kernel call (registers: rows x panels int32 accumulators).
inline constexpr int kW8A8TileRows = 6;
/// Panels per kernel call (64 output channels on the VNNI path).
inline constexpr int kW8A8TilePanels = 4;

/// One W8A8 tile's inputs: `rows` activation rows (code rows of `quads` quads each, signed or
/// +128 offset by path), panels [p0, p0 + np) of `w`, outputs y rows with their scales.
struct W8A8Tile {
  const std::int8_t* const* x;  // x[r]: quantized row r
  const float* x_scale;         // x_scale[r]
  float* const* y;              // y[r]: output row r (n_out floats)
  int rows;
  Index p0, np;
};

inline std::int32_t load_i32(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// Whether a path takes the W8A8 activation codes as unsigned bytes (code + 128): vpdpbusd
/// multiplies unsigned by signed bytes.
inline bool w8a8_unsigned_activations(QuantKernel k) { return k == QuantKernel::kAvx512Vnni; }

/// Rows of the W8A8 tile per kernel call on a path.
inline int w8a8_tile_rows(QuantKernel k) { return k == QuantKernel::kAvx2 ? 4 : kW8A8TileRows; }

/// Scalar path: exact int32 sums over the panel layout, then the shared float epilogue.
[[gnu::always_inline]] inline void w8a8_tile_path(ScalarPath, const Int8Weights& w, const W8A8Tile& t) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  for (Index j = 0; j < t.np; ++j) {
    const Index p = t.p0 + j;
    const std::int8_t* panel = w.panel(p);
    for (int r = 0; r < t.rows; ++r) {
      std::int32_t acc[Int8Weights::kPanel] = {};
      const std::int8_t* x = t.x[r];
      for (Index q = 0; q < quads; ++q)
        for (Index c = 0; c < Int8Weights::kPanel; ++c)
          for (Index i = 0; i < Int8Weights::kQuad; ++i)
            acc[c] += static_cast<std::int32_t>(x[q * 4 + i]) * panel[q * 64 + c * 4 + i];
      for (Index c = 0; c < Int8Weights::kPanel && p * 16 + c < n_out; ++c)
        t.y[r][p * 16 + c] = static_cast<float>(acc[c]) * (t.x_scale[r] * w.scale(p * 16 + c));
    }
  }
}

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// acc += unsigned bytes of `u` times signed bytes of `s`, summed in fours (vpdpbusd). GCC 12
/// compiles the intrinsic in a register-blocked loop with a copy (and a stack spill) of the
/// accumulator around every instruction; the in-place asm form keeps accumulators in registers.
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
#if defined(__GNUC__) && !defined(__clang__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#else
  return _mm512_dpbusd_epi32(acc, u, s);
#endif
}

/// MR rows x NR panels: MR * NR int32 accumulators (24 of the 32 zmm registers at 6 x 4).
template <int MR, int NR>
inline void w8a8_tile_vnni_impl(const Int8Weights& w, const W8A8Tile& t) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  const std::int8_t* wp[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) wp[j] = w.panel(t.p0 + j);
  const std::int8_t* xr[MR];
  __m512i acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    xr[r] = t.x[r];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  for (Index q = 0; q < quads; ++q) {
    __m512i wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_si512(wp[j] + q * 64);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i xb = _mm512_set1_epi32(load_i32(xr[r] + q * 4));
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[r][j] = dpbusd(acc[r][j], xb, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const Index n0 = (t.p0 + j) * Int8Weights::kPanel;
    const __m512i off = _mm512_slli_epi32(_mm512_loadu_si512(w.code_sums() + n0), 7);  // 128 * sum(code_w)
    const __m512 ws = _mm512_loadu_ps(w.scales() + n0);
    const Index left = n_out - n0;
    const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][j], off));
      _mm512_mask_storeu_ps(t.y[r] + n0, m, _mm512_mul_ps(v, _mm512_mul_ps(_mm512_set1_ps(t.x_scale[r]), ws)));
    }
  }
}

[[gnu::always_inline]] inline void w8a8_tile_path(Avx512VnniPath, const Int8Weights& w, const W8A8Tile& t) {
  with_static_count<kW8A8TileRows>(t.rows, [&](auto mr) {
    with_static_count<kW8A8TilePanels>(static_cast<int>(t.np), [&](auto nr) { w8a8_tile_vnni_impl<mr(), nr()>(w, t); });
  });
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
template <int MR>
inline void w8a8_tile_avx2_rows(const Int8Weights& w, const W8A8Tile& t) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  const __m256i ones = _mm256_set1_epi16(1);
  for (Index j = 0; j < t.np; ++j) {
    const Index p = t.p0 + j, n0 = p * Int8Weights::kPanel;
    const std::int8_t* panel = w.panel(p);
    __m256i acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (Index q = 0; q < quads; ++q) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 64 + 32));
      const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256i xb = _mm256_set1_epi32(load_i32(t.x[r] + q * 4));
        acc[r][0] =
            _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(xb, w0)), ones));
        acc[r][1] =
            _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(xb, w1)), ones));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const Index c0 = n0 + 8 * h;
      if (c0 >= n_out) break;
      const __m256 ws = _mm256_loadu_ps(w.scales() + c0);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), _mm256_mul_ps(_mm256_set1_ps(t.x_scale[r]), ws));
        if (n_out - c0 >= 8) {
          _mm256_storeu_ps(t.y[r] + c0, v);
        } else {
          alignas(32) float tmp[8];
          _mm256_store_ps(tmp, v);
          std::memcpy(t.y[r] + c0, tmp, static_cast<std::size_t>(n_out - c0) * sizeof(float));
        }
      }
    }
  }
}

[[gnu::always_inline]] inline void w8a8_tile_path(Avx2Path, const Int8Weights& w, const W8A8Tile& t) {
  with_static_count<4>(t.rows, [&](auto mr) { w8a8_tile_avx2_rows<mr()>(w, t); });
}
#endif

/// Runs one tile on path `k` (t.rows <= w8a8_tile_rows(k)). Not inlined, like every float
/// kernel of quant/: one compiled instance serves the serial loop and the OpenMP region alike,
/// so multiply-adds cannot be contracted differently in the two (-ffp-contract=fast is GCC's
/// default) and results never depend on the thread count.
[[gnu::noinline]] inline void w8a8_tile(QuantKernel k, const Int8Weights& w, const W8A8Tile& t) {
  on_quant_path(k, [&](auto path) { w8a8_tile_path(path, w, t); });
}

// ---- float activations: y[n] = scale_n * sum_k code[n, k] * x[k] --------------------------

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// NP panels at once: 4 NP independent accumulator chains (one chain per 16 codes), so the
/// FMA latency never bounds the loop, and each activation quad is loaded once for all panels.
template <int NP>
inline void int8_matvec_panels_avx512(const Int8Weights& w, const float* x, Index p0, float* y) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  // acc[j][s] lane 4t + i: channel 16 (p0 + j) + 4 s + t, feature 4 q + i; a 4x4 transposing
  // add turns the four accumulators of a panel into its 16 channel sums.
  const std::int8_t* panel[NP];
  __m512 acc[NP][4];
#pragma GCC unroll 8
  for (int j = 0; j < NP; ++j) {
    panel[j] = w.panel(p0 + j);
#pragma GCC unroll 8
    for (int s = 0; s < 4; ++s) acc[j][s] = _mm512_setzero_ps();
  }
  for (Index q = 0; q < quads; ++q) {
    const __m512 xv = _mm512_broadcast_f32x4(_mm_loadu_ps(x + q * 4));
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j)
#pragma GCC unroll 8
      for (int s = 0; s < 4; ++s) {
        const __m512i c =
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(panel[j] + q * 64 + s * 16)));
        acc[j][s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), xv, acc[j][s]);
      }
  }
  const __m512i to_channels = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 8
  for (int j = 0; j < NP; ++j) {
    const __m512 u01 =
        _mm512_add_ps(_mm512_unpacklo_ps(acc[j][0], acc[j][1]), _mm512_unpackhi_ps(acc[j][0], acc[j][1]));
    const __m512 u23 =
        _mm512_add_ps(_mm512_unpacklo_ps(acc[j][2], acc[j][3]), _mm512_unpackhi_ps(acc[j][2], acc[j][3]));
    const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 sums = _mm512_permutexvar_ps(to_channels, v);
    const Index n0 = (p0 + j) * 16, left = n_out - n0;
    const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    _mm512_mask_storeu_ps(y + n0, m, _mm512_mul_ps(sums, _mm512_loadu_ps(w.scales() + n0)));
  }
}
#endif

#if defined(INFERKIT_QUANT_AVX512VNNI)
[[gnu::always_inline]] inline void int8_matvec_path(Avx512VnniPath, const Int8Weights& w, const float* x, Index p0,
                                                    Index np, float* y) {
  with_static_count<4>(static_cast<int>(np), [&](auto n) { int8_matvec_panels_avx512<n()>(w, x, p0, y); });
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
[[gnu::always_inline]] inline void int8_matvec_path(Avx2Path, const Int8Weights& w, const float* x, Index p0, Index np,
                                                    float* y) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  // acc[s] lane 4h + i: channel 2s + h, feature 4q + i.
  for (Index p = p0; p < p0 + np; ++p) {
    const std::int8_t* panel = w.panel(p);
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (Index q = 0; q < quads; ++q) {
      const __m256 xv = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x + q * 4));
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i c =
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(panel + q * 64 + s * 8)));
        acc[s] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), xv, acc[s]);
      }
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[s]);
      for (int h = 0; h < 2; ++h) {
        const Index n = p * 16 + 2 * s + h;
        if (n < n_out) y[n] = ((lanes[4 * h] + lanes[4 * h + 1]) + (lanes[4 * h + 2] + lanes[4 * h + 3])) * w.scale(n);
      }
    }
  }
}
#endif

[[gnu::always_inline]] inline void int8_matvec_path(ScalarPath, const Int8Weights& w, const float* x, Index p0,
                                                    Index np, float* y) {
  const Index quads = w.padded_cols() / Int8Weights::kQuad, n_out = w.rows();
  for (Index p = p0; p < p0 + np; ++p) {
    const std::int8_t* panel = w.panel(p);
    for (Index c = 0; c < Int8Weights::kPanel && p * 16 + c < n_out; ++c) {
      float acc = 0.0f;
      for (Index q = 0; q < quads; ++q)
        for (Index i = 0; i < Int8Weights::kQuad; ++i)
          acc += static_cast<float>(panel[q * 64 + c * 4 + i]) * x[q * 4 + i];
      y[p * 16 + c] = acc * w.scale(p * 16 + c);
    }
  }
}

/// Panels [p0, p0 + np) (np <= 4) of the float-activation product; `x` holds padded_cols
/// floats (zero padded). Writes y[16 p + c] for channels below rows(). Not inlined (see
/// w8a8_tile).
[[gnu::noinline]] inline void int8_matvec_panels(QuantKernel k, const Int8Weights& w, const float* x, Index p0,
                                                 Index np, float* y) {
  on_quant_path(k, [&](auto path) { int8_matvec_path(path, w, x, p0, np, y); });
}

/// y[m, n0..n1) += xo[m, j] * wo[j, n0..n1) for every row m and outlier column j in ascending
/// order (the LLM.int8() fp32 part of the channels [n0, n1)): one fused multiply-add per term
/// where the build has FMA (explicitly, not left to the optimizer's contraction), else a
/// multiply and an add. Not inlined (see w8a8_tile).
[[gnu::noinline]] inline void add_outlier_part(MatrixView<float> y, const float* xo, const float* wo, Index n_outliers,
                                               Index n_out, Index n0, Index n1) {
  for (Index m = 0; m < y.rows(); ++m)
    for (Index j = 0; j < n_outliers; ++j) {
      const float a = xo[m * n_outliers + j];
      const float* w = wo + j * n_out;
      float* yr = y.row_ptr(m);
      Index n = n0;
#if defined(__AVX512F__) && !defined(INFERKIT_FORCE_SCALAR)
      for (; n + 16 <= n1; n += 16)
        _mm512_storeu_ps(yr + n, _mm512_fmadd_ps(_mm512_set1_ps(a), _mm512_loadu_ps(w + n), _mm512_loadu_ps(yr + n)));
#elif defined(__AVX2__) && defined(__FMA__) && !defined(INFERKIT_FORCE_SCALAR)
      for (; n + 8 <= n1; n += 8)
        _mm256_storeu_ps(yr + n, _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(w + n), _mm256_loadu_ps(yr + n)));
#endif
#if defined(__FMA__)
      for (; n < n1; ++n) yr[n] = std::fma(a, w[n], yr[n]);
#else
      for (; n < n1; ++n) yr[n] = a * w[n] + yr[n];
#endif
    }
}

}  // namespace inferkit::detail
