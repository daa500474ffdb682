#pragma once
// Row kernels over Int4Weights' layout (chunks of 64 features in 32 bytes: low nibbles are
// features 0..31, high nibbles 32..63). Two activation forms:
//
//  float activations (dequantized in registers), per row n:
//    y_n = sum_g step_g * (sum_{k in g} code_k x_k) + sum_g zero_g * X_g,   X_g = sum_{k in g} x_k
//  (the zero term uses per-group sums of x computed once per call, so the inner loop multiplies
//  raw codes);
//
//  int8 activations per block of 32 features (llama.cpp's Q8_0 road): x_k ~ d_b * q_k with
//  d_b = max_{k in b} |x_k| / 127, and
//    y_n = sum_b step_g(b) d_b P_b + sum_g zero_g (sum_{b in g} d_b Q_b),
//    P_b = sum_{k in b} code_k q_k (int32),  Q_b = sum_{k in b} q_k
//  (integer dot products: vpdpbusd / vpmaddubsw multiply the unsigned codes by signed q; the
//  per-group sums of d_b Q_b are computed once per call).
//
// Kernels take up to kInt4Rows rows per call: the rows share every activation load and their
// binary16 parameters convert in one pass, which matters when rows are short (a few chunks).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/quant/detail/int8_kernels.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/int4_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Activation blocks of the int8 road: 32 features each.
inline constexpr Index kQ8Block = 32;
/// Rows per kernel call.
inline constexpr int kInt4Rows = 4;

/// Float activations prepared once per call.
struct Int4FloatInput {
  const float* x;     // padded_cols floats (zero past cols)
  const float* gsum;  // groups_per_row sums of x
};

/// int8 activations prepared once per call.
struct Int4Q8Input {
  const std::int8_t* q;   // padded_cols codes (0 past cols); AVX-512: pair_q8_chunks' order
  const float* d;         // padded_cols / 32 block scales (0 past cols)
  const float* dq_group;  // per weight group: sum over its blocks of d_b * Q_b
};

/// Per-thread scratch: steps and zeros of kInt4Rows rows as floats, one row every `stride`
/// floats with zeros past the row's groups (kernels read two steps per chunk: a row never
/// writes past its groups, so the padding stays zero), and the per-block scales
/// step_g(b) * d_b of the int8 road.
struct Int4Scratch {
  Index stride, groups;
  std::vector<float> step, zero, sd;
  explicit Int4Scratch(const Int4Weights& w)
      : stride(w.padded_cols() / 32 + 2),
        groups(w.groups_per_row()),
        step(static_cast<std::size_t>(kInt4Rows * stride), 0.0f),
        zero(step.size(), 0.0f),
        sd(step.size(), 0.0f) {}

  /// Steps and zeros of rows [n0, n0 + rows), converted in one vector pass each.
  void load(const Int4Weights& w, Index n0, int rows) {
    const auto g = static_cast<std::size_t>(groups);
    for (int r = 0; r < rows; ++r) {
      float* st = step.data() + r * stride;
      float* z = zero.data() + r * stride;
      const Float16* mn = w.row_mins(n0 + r);
#if defined(INFERKIT_QUANT_AVX512VNNI)
      // Masked 16-wide conversions: rows of a few groups cost one instruction, not a scalar tail.
      const auto* sp = reinterpret_cast<const std::uint16_t*>(w.row_steps(n0 + r));
      const auto* mp = reinterpret_cast<const std::uint16_t*>(mn);
      for (Index i = 0; i < groups; i += 16) {
        const __mmask16 m = groups - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (groups - i)) - 1u);
        const __m512 sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, sp + i));
        _mm512_mask_storeu_ps(st + i, m, sv);
        _mm512_mask_storeu_ps(
            z + i, m,
            mp ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, mp + i)) : _mm512_mul_ps(sv, _mm512_set1_ps(-8.0f)));
      }
      continue;
#endif
      convert(w.row_steps(n0 + r), st, g);
      if (mn)
        convert(mn, z, g);
      else
        for (std::size_t i = 0; i < g; ++i) z[i] = -8.0f * st[i];
    }
  }
  const float* steps(int r) const { return step.data() + r * stride; }
  const float* zeros(int r) const { return zero.data() + r * stride; }
  float* scales(int r) { return sd.data() + r * stride; }
};

/// Zero term of a row: sum_g zero_g * v_g in a fixed order (SIMD for long rows; short rows add
/// serially, since a partial vector load would cost more than the sum).
inline float int4_zero_term(const float* zero, const float* v, Index groups) {
  if (groups < 4 * static_cast<Index>(simd::kWidth)) {
    float z = 0.0f;
    for (Index g = 0; g < groups; ++g) z += zero[g] * v[g];
    return z;
  }
  return simd::dot(zero, v, static_cast<std::size_t>(groups));
}

// ---- float activations --------------------------------------------------------------------

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// The zero term sum_g zero_g * v_g of a row as a vector of 16 partial sums (masked loads for
/// the tail), added to the row's accumulator before its single horizontal reduction.
inline __m512 int4_zero_term_avx512(const float* zero, const float* v, Index groups) {
  __m512 a = _mm512_setzero_ps();
  for (Index i = 0; i < groups; i += 16) {
    const __mmask16 m = groups - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (groups - i)) - 1u);
    a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, zero + i), _mm512_maskz_loadu_ps(m, v + i), a);
  }
  return a;
}

template <int R>
inline void int4_rows_float_avx512(const Int4Weights& w, Index n0, const Int4FloatInput& in, const Int4Scratch& s,
                                   float* main) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const bool g32 = w.spec().group_size == 32;
  const __m512i lo4 = _mm512_set1_epi32(0xF);
  const std::uint8_t* codes[R];
  const float* st[R];
  __m512 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    codes[r] = w.row_codes(n0 + r);
    st[r] = s.steps(r);
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  }
  // One chunk of every row; accumulators by static index only, so they stay in registers.
  const auto chunk = [&](Index c, int slot) {
    const float* xc = in.x + c * 64;
    const __m512 x0 = _mm512_loadu_ps(xc), x1 = _mm512_loadu_ps(xc + 16);
    const __m512 x2 = _mm512_loadu_ps(xc + 32), x3 = _mm512_loadu_ps(xc + 48);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* b = codes[r] + c * 32;
      const __m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
      const __m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
      const __m512 l0 = _mm512_cvtepi32_ps(_mm512_and_si512(b0, lo4)),
                   l1 = _mm512_cvtepi32_ps(_mm512_and_si512(b1, lo4));
      const __m512 h0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b0, 4)), h1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b1, 4));
      const __m512 plo = _mm512_fmadd_ps(l1, x1, _mm512_mul_ps(l0, x0));  // features 0..31 of the chunk
      const __m512 phi = _mm512_fmadd_ps(h1, x3, _mm512_mul_ps(h0, x2));  // features 32..63
      if (g32) {
        acc[r][0] = _mm512_fmadd_ps(plo, _mm512_set1_ps(st[r][2 * c]), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(phi, _mm512_set1_ps(st[r][2 * c + 1]), acc[r][1]);
      } else if (slot == 0) {
        acc[r][0] = _mm512_fmadd_ps(_mm512_add_ps(plo, phi), _mm512_set1_ps(st[r][c]), acc[r][0]);
      } else {
        acc[r][1] = _mm512_fmadd_ps(_mm512_add_ps(plo, phi), _mm512_set1_ps(st[r][c]), acc[r][1]);
      }
    }
  };
  Index c = 0;
  for (; c + 2 <= chunks; c += 2) {
    chunk(c, 0);
    chunk(c + 1, 1);
  }
  if (c < chunks) chunk(c, 0);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    main[r] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), int4_zero_term_avx512(s.zeros(r), in.gsum, s.groups)));
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
inline float int4_row_float_avx2(const Int4Weights& w, Index n, const Int4FloatInput& in, const float* st) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const bool g32 = w.spec().group_size == 32;
  const std::uint8_t* codes = w.row_codes(n);
  const __m256i lo4 = _mm256_set1_epi32(0xF);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (Index c = 0; c < chunks; ++c) {
    const std::uint8_t* b = codes + c * 32;
    const float* xc = in.x + c * 64;
    __m256 pl[4], ph[4];
#pragma GCC unroll 4
    for (int e = 0; e < 4; ++e) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * e)));
      pl[e] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, lo4)), _mm256_loadu_ps(xc + 8 * e));
      ph[e] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), _mm256_loadu_ps(xc + 32 + 8 * e));
    }
    const __m256 plo = _mm256_add_ps(_mm256_add_ps(pl[0], pl[1]), _mm256_add_ps(pl[2], pl[3]));
    const __m256 phi = _mm256_add_ps(_mm256_add_ps(ph[0], ph[1]), _mm256_add_ps(ph[2], ph[3]));
    __m256* a = acc + 2 * (c & 1);  // two chunks in flight: the accumulating adds never wait
    if (g32) {
      a[0] = _mm256_fmadd_ps(plo, _mm256_set1_ps(st[2 * c]), a[0]);
      a[1] = _mm256_fmadd_ps(phi, _mm256_set1_ps(st[2 * c + 1]), a[1]);
    } else {
      a[0] = _mm256_fmadd_ps(_mm256_add_ps(plo, phi), _mm256_set1_ps(st[c]), a[0]);
    }
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}
#endif

inline float int4_row_float_scalar(const Int4Weights& w, Index n, const Int4FloatInput& in, const float* st) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const bool g32 = w.spec().group_size == 32;
  const std::uint8_t* codes = w.row_codes(n);
  float main = 0.0f;
  for (Index c = 0; c < chunks; ++c) {
    float plo = 0.0f, phi = 0.0f;
    for (Index j = 0; j < 32; ++j) {
      const std::uint8_t b = codes[c * 32 + j];
      plo += static_cast<float>(b & 0xF) * in.x[c * 64 + j];
      phi += static_cast<float>(b >> 4) * in.x[c * 64 + 32 + j];
    }
    main += g32 ? plo * st[2 * c] + phi * st[2 * c + 1] : (plo + phi) * st[c];
  }
  return main;
}

#if defined(INFERKIT_QUANT_AVX512VNNI)
[[gnu::always_inline]] inline void int4_rows_float_path(Avx512VnniPath, const Int4Weights& w, Index n0, int rows,
                                                        const Int4FloatInput& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  with_static_count<kInt4Rows>(rows, [&](auto r) { int4_rows_float_avx512<r()>(w, n0, in, s, main); });
  for (int r = 0; r < rows; ++r) y[r] = main[r];  // the zero term is inside
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
[[gnu::always_inline]] inline void int4_rows_float_path(Avx2Path, const Int4Weights& w, Index n0, int rows,
                                                        const Int4FloatInput& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  for (int r = 0; r < rows; ++r) main[r] = int4_row_float_avx2(w, n0 + r, in, s.steps(r));
  for (int r = 0; r < rows; ++r) y[r] = main[r] + int4_zero_term(s.zeros(r), in.gsum, s.groups);
}
#endif

[[gnu::always_inline]] inline void int4_rows_float_path(ScalarPath, const Int4Weights& w, Index n0, int rows,
                                                        const Int4FloatInput& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  for (int r = 0; r < rows; ++r) main[r] = int4_row_float_scalar(w, n0 + r, in, s.steps(r));
  for (int r = 0; r < rows; ++r) y[r] = main[r] + int4_zero_term(s.zeros(r), in.gsum, s.groups);
}

/// Float-activation products of rows [n0, n0 + rows) (rows <= kInt4Rows) into y[0..rows).
/// Not inlined, like every float kernel of quant/: one compiled instance serves the serial loop
/// and the OpenMP region alike, so the compiler cannot contract multiply-adds differently in
/// the two (-ffp-contract=fast is GCC's default), and results never depend on the thread count.
[[gnu::noinline]] inline void int4_rows_float(QuantKernel k, const Int4Weights& w, Index n0, int rows,
                                              const Int4FloatInput& in, Int4Scratch& s, float* y) {
  s.load(w, n0, rows);
  on_quant_path(k, [&](auto path) { int4_rows_float_path(path, w, n0, rows, in, s, y); });
}

// ---- int8 activations per 32-block --------------------------------------------------------

#if defined(INFERKIT_QUANT_AVX512VNNI)
template <int R>
inline void int4_rows_q8_avx512(const Int4Weights& w, Index n0, const Int4Q8Input& in, Int4Scratch& s, float* main) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const __m256i lo4 = _mm256_set1_epi8(0xF);
  const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const std::uint8_t* codes[R];
  const float* sd[R];
  __m512 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    codes[r] = w.row_codes(n0 + r);
    sd[r] = s.scales(r);
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  }
  const auto chunk = [&](Index c, int slot) {
    const __m512i qv = _mm512_loadu_si512(in.q + c * 64);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[r] + c * 32));
      const __m256i lo = _mm256_and_si256(packed, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), lo4);
      const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // 64 codes, feature order
      const __m512i p = dpbusd(_mm512_setzero_si512(), u, qv);                  // lanes 0-7: block 2c, 8-15: 2c + 1
      double pair;                                                              // sd[2c], sd[2c + 1]
      std::memcpy(&pair, sd[r] + 2 * c, sizeof(pair));
      const __m512 scale = _mm512_permutexvar_ps(halves, _mm512_castpd_ps(_mm512_set1_pd(pair)));
      if (slot == 0)
        acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[r][0]);
      else
        acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[r][1]);
    }
  };
  // Two chunks (128 codes, one 512-bit load) at a time: low nibbles of both give blocks 2c and
  // 2c + 2, high nibbles blocks 2c + 1 and 2c + 3, against activations stored in that order
  // (pair_q8_chunks); one 128-bit load of sd[2c..2c+3] feeds both scale vectors. 13 instructions
  // per row and 128 codes instead of 20 for two single chunks.
  const __m512i lo4x2 = _mm512_set1_epi8(0xF);
  const __m512i lo_blocks = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i hi_blocks = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
  const auto pair = [&](Index c) {
    const __m512i qlo = _mm512_loadu_si512(in.q + c * 64), qhi = _mm512_loadu_si512(in.q + c * 64 + 64);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i packed = _mm512_loadu_si512(codes[r] + c * 32);
      const __m512i lo = _mm512_and_si512(packed, lo4x2), hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), lo4x2);
      const __m512i plo = dpbusd(_mm512_setzero_si512(), lo, qlo), phi = dpbusd(_mm512_setzero_si512(), hi, qhi);
      const __m512 s4 = _mm512_broadcast_f32x4(_mm_loadu_ps(sd[r] + 2 * c));
      acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(plo), _mm512_permutexvar_ps(lo_blocks, s4), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(phi), _mm512_permutexvar_ps(hi_blocks, s4), acc[r][1]);
    }
  };
  Index c = 0;
  for (; c + 2 <= chunks; c += 2) pair(c);
  if (c < chunks) chunk(c, 0);  // an odd last chunk keeps the plain order
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    main[r] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), int4_zero_term_avx512(s.zeros(r), in.dq_group, s.groups)));
}

/// Reorders Q8 activation codes for int4_rows_q8_avx512: in every pair of 64-feature chunks
/// (128 codes) the middle quarters swap, giving [chunk c low half, chunk c+1 low half, chunk c
/// high half, chunk c+1 high half] (an odd last chunk stays as it is).
inline void pair_q8_chunks(std::int8_t* q, Index padded_cols) {
  const Index chunks = padded_cols / Int4Weights::kChunk;
  for (Index c = 0; c + 2 <= chunks; c += 2) std::swap_ranges(q + c * 64 + 32, q + c * 64 + 64, q + c * 64 + 64);
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
inline float int4_row_q8_avx2(const Int4Weights& w, Index n, const Int4Q8Input& in, const float* sd) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const std::uint8_t* codes = w.row_codes(n);
  const __m256i lo4 = _mm256_set1_epi8(0xF);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (Index c = 0; c < chunks; ++c) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32));
    const __m256i lo = _mm256_and_si256(packed, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), lo4);
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.q + c * 64));
    const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.q + c * 64 + 32));
    // codes <= 15 and |q| <= 127: pairs stay within 2 * 15 * 127, no int16 saturation.
    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, q0), ones);
    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, q1), ones);
    __m256* a = acc + 2 * (c & 1);
    a[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(sd[2 * c]), a[0]);
    a[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(sd[2 * c + 1]), a[1]);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}
#endif

inline float int4_row_q8_scalar(const Int4Weights& w, Index n, const Int4Q8Input& in, const float* sd) {
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const std::uint8_t* codes = w.row_codes(n);
  float main = 0.0f;
  for (Index c = 0; c < chunks; ++c) {
    std::int32_t plo = 0, phi = 0;
    for (Index j = 0; j < 32; ++j) {
      const std::uint8_t b = codes[c * 32 + j];
      plo += static_cast<std::int32_t>(b & 0xF) * in.q[c * 64 + j];
      phi += static_cast<std::int32_t>(b >> 4) * in.q[c * 64 + 32 + j];
    }
    main += static_cast<float>(plo) * sd[2 * c] + static_cast<float>(phi) * sd[2 * c + 1];
  }
  return main;
}

#if defined(INFERKIT_QUANT_AVX512VNNI)
[[gnu::always_inline]] inline void int4_rows_q8_path(Avx512VnniPath, const Int4Weights& w, Index n0, int rows,
                                                     const Int4Q8Input& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  with_static_count<kInt4Rows>(rows, [&](auto r) { int4_rows_q8_avx512<r()>(w, n0, in, s, main); });
  for (int r = 0; r < rows; ++r) y[r] = main[r];  // the zero term is inside
}
#endif

#if defined(INFERKIT_QUANT_AVX2)
[[gnu::always_inline]] inline void int4_rows_q8_path(Avx2Path, const Int4Weights& w, Index n0, int rows,
                                                     const Int4Q8Input& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  for (int r = 0; r < rows; ++r) main[r] = int4_row_q8_avx2(w, n0 + r, in, s.scales(r));
  for (int r = 0; r < rows; ++r) y[r] = main[r] + int4_zero_term(s.zeros(r), in.dq_group, s.groups);
}
#endif

[[gnu::always_inline]] inline void int4_rows_q8_path(ScalarPath, const Int4Weights& w, Index n0, int rows,
                                                     const Int4Q8Input& in, Int4Scratch& s, float* y) {
  float main[kInt4Rows];
  for (int r = 0; r < rows; ++r) main[r] = int4_row_q8_scalar(w, n0 + r, in, s.scales(r));
  for (int r = 0; r < rows; ++r) y[r] = main[r] + int4_zero_term(s.zeros(r), in.dq_group, s.groups);
}

#if defined(INFERKIT_QUANT_AVX512VNNI)
inline void int4_q8_order_path(Avx512VnniPath, std::int8_t* q, Index padded_cols) { pair_q8_chunks(q, padded_cols); }
#endif
template <class Path>
void int4_q8_order_path(Path, std::int8_t*, Index) {}  // the other paths read feature order

/// Puts Q8 activation codes in the order the path's int8-road kernel reads them.
inline void int4_q8_order(QuantKernel k, std::int8_t* q, Index padded_cols) {
  on_quant_path(k, [&](auto path) { int4_q8_order_path(path, q, padded_cols); });
}

/// int8-activation products of rows [n0, n0 + rows) (rows <= kInt4Rows) into y[0..rows).
/// Not inlined (see int4_rows_float).
[[gnu::noinline]] inline void int4_rows_q8(QuantKernel k, const Int4Weights& w, Index n0, int rows,
                                           const Int4Q8Input& in, Int4Scratch& s, float* y) {
  s.load(w, n0, rows);
  const Index blocks = w.padded_cols() / kQ8Block;
  const bool g32 = w.spec().group_size == 32;
  for (int r = 0; r < rows; ++r) {  // step_g(b) * d_b per block
    const float* step = s.steps(r);
    float* sd = s.scales(r);
    if (g32) {
      for (Index b = 0; b < blocks; ++b) sd[b] = step[b] * in.d[b];
    } else {
      for (Index g = 0; g < blocks / 2; ++g) {
        sd[2 * g] = step[g] * in.d[2 * g];
        sd[2 * g + 1] = step[g] * in.d[2 * g + 1];
      }
    }
  }
  on_quant_path(k, [&](auto path) { int4_rows_q8_path(path, w, n0, rows, in, s, y); });
}

}  // namespace inferkit::detail
