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
//    y_n = sum_b step_g(b) d_b P_b + sum_b zero_g(b) d_b Q_b,   P_b = sum code_k q_k (int32),
//                                                              Q_b = sum q_k
//  (integer dot products: vpdpbusd / vpmaddubsw multiply the unsigned codes by signed q).

#include <cstdint>
#include <cstring>
#include <vector>

#include "inferkit/core/half.hpp"
#include "inferkit/quant/int4_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Activation blocks of the int8 road: 32 features each.
inline constexpr Index kQ8Block = 32;

/// Float activations prepared once per call: x zero-padded to padded_cols, per-group sums.
struct Int4FloatInput {
  const float* x;       // padded_cols floats
  const float* gsum;    // groups_per_row sums
};

/// int8 activations prepared once per call.
struct Int4Q8Input {
  const std::int8_t* q;  // padded_cols codes (0 past the end)
  const float* d;        // padded_cols / 32 block scales (0 past the end)
  const float* dq;       // d_b * Q_b per block
};

/// Row scratch: steps (and zeros) of one row as floats, room for 2 per chunk.
struct Int4RowScratch {
  std::vector<float> step, zero, sd;
  explicit Int4RowScratch(const Int4Weights& w)
      : step(static_cast<std::size_t>(w.padded_cols() / 32 + 1), 0.0f),
        zero(step.size(), 0.0f),
        sd(static_cast<std::size_t>(w.padded_cols() / kQ8Block + 1), 0.0f) {}
};

inline void int4_row_params(const Int4Weights& w, Index n, Int4RowScratch& s) {
  const Index groups = w.groups_per_row();
  const Float16* st = w.row_steps(n);
  const Float16* mn = w.row_mins(n);
  for (Index g = 0; g < groups; ++g) {
    const float step = to_float(st[g]);
    s.step[static_cast<std::size_t>(g)] = step;
    s.zero[static_cast<std::size_t>(g)] = mn ? to_float(mn[g]) : -8.0f * step;
  }
}

/// Zero term of row n: sum_g zero_g * X_g (float, group order).
inline float int4_zero_term(const Int4Weights& w, const Int4RowScratch& s, const float* gsum) {
  float z = 0.0f;
  for (Index g = 0; g < w.groups_per_row(); ++g) z += s.zero[static_cast<std::size_t>(g)] * gsum[g];
  return z;
}

/// Float-activation product of row n.
inline float int4_row_float(QuantKernel k, const Int4Weights& w, Index n, const Int4FloatInput& in, Int4RowScratch& s) {
  int4_row_params(w, n, s);
  const std::uint8_t* codes = w.row_codes(n);
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const bool g32 = w.spec().group_size == 32;
  const float* x = in.x;
  const float* st = s.step.data();
  float main = 0.0f;
  bool done = false;
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if (k == QuantKernel::kAvx512Vnni) {
    const __m512i lo4 = _mm512_set1_epi32(0xF);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (Index c = 0; c < chunks; ++c) {
      const std::uint8_t* b = codes + c * 32;
      const float* xc = x + c * 64;
      const __m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
      const __m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
      const __m512 l0 = _mm512_cvtepi32_ps(_mm512_and_si512(b0, lo4)), l1 = _mm512_cvtepi32_ps(_mm512_and_si512(b1, lo4));
      const __m512 h0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b0, 4)), h1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b1, 4));
      const __m512 plo = _mm512_fmadd_ps(l1, _mm512_loadu_ps(xc + 16), _mm512_mul_ps(l0, _mm512_loadu_ps(xc)));
      const __m512 phi = _mm512_fmadd_ps(h1, _mm512_loadu_ps(xc + 48), _mm512_mul_ps(h0, _mm512_loadu_ps(xc + 32)));
      if (g32) {
        acc0 = _mm512_fmadd_ps(plo, _mm512_set1_ps(st[2 * c]), acc0);
        acc1 = _mm512_fmadd_ps(phi, _mm512_set1_ps(st[2 * c + 1]), acc1);
      } else {
        acc0 = _mm512_fmadd_ps(_mm512_add_ps(plo, phi), _mm512_set1_ps(st[c]), acc0);
      }
    }
    main = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    done = true;
  }
#endif
#if defined(INFERKIT_QUANT_AVX2)
  if (k == QuantKernel::kAvx2) {
    const __m256i lo4 = _mm256_set1_epi32(0xF);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (Index c = 0; c < chunks; ++c) {
      const std::uint8_t* b = codes + c * 32;
      const float* xc = x + c * 64;
      __m256 plo = _mm256_setzero_ps(), phi = _mm256_setzero_ps();
      for (int e = 0; e < 4; ++e) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * e)));
        plo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, lo4)), _mm256_loadu_ps(xc + 8 * e), plo);
        phi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)), _mm256_loadu_ps(xc + 32 + 8 * e), phi);
      }
      if (g32) {
        acc0 = _mm256_fmadd_ps(plo, _mm256_set1_ps(st[2 * c]), acc0);
        acc1 = _mm256_fmadd_ps(phi, _mm256_set1_ps(st[2 * c + 1]), acc1);
      } else {
        acc0 = _mm256_fmadd_ps(_mm256_add_ps(plo, phi), _mm256_set1_ps(st[c]), acc0);
      }
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(acc0, acc1));
    main = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    done = true;
  }
#endif
  if (!done) {
    for (Index c = 0; c < chunks; ++c) {
      float plo = 0.0f, phi = 0.0f;
      for (Index j = 0; j < 32; ++j) {
        const std::uint8_t b = codes[c * 32 + j];
        plo += static_cast<float>(b & 0xF) * x[c * 64 + j];
        phi += static_cast<float>(b >> 4) * x[c * 64 + 32 + j];
      }
      main += g32 ? plo * st[2 * c] + phi * st[2 * c + 1] : (plo + phi) * st[c];
    }
  }
  (void)k;
  return main + int4_zero_term(w, s, in.gsum);
}

/// int8-activation product of row n.
inline float int4_row_q8(QuantKernel k, const Int4Weights& w, Index n, const Int4Q8Input& in, Int4RowScratch& s) {
  int4_row_params(w, n, s);
  const Index blocks = w.padded_cols() / kQ8Block, per = w.spec().group_size / kQ8Block;
  float* sd = s.sd.data();
  float z = 0.0f;
  for (Index b = 0; b < blocks; ++b) {  // step_g(b) * d_b, and the zero term in block order
    const auto g = static_cast<std::size_t>(b / per);
    sd[b] = s.step[g] * in.d[b];
    z += s.zero[g] * in.dq[b];
  }
  const std::uint8_t* codes = w.row_codes(n);
  const Index chunks = w.padded_cols() / Int4Weights::kChunk;
  const std::int8_t* q = in.q;
  float main = 0.0f;
  bool done = false;
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if (k == QuantKernel::kAvx512Vnni) {
    const __m256i lo4 = _mm256_set1_epi8(0xF);
    const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc = _mm512_setzero_ps();
    for (Index c = 0; c < chunks; ++c) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32));
      const __m256i lo = _mm256_and_si256(packed, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), lo4);
      const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // 64 codes, feature order
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(q + c * 64));
      double pair;  // sd[2c], sd[2c + 1]: lanes 0-7 hold block 2c, lanes 8-15 block 2c + 1
      std::memcpy(&pair, sd + 2 * c, sizeof(pair));
      const __m512 scale = _mm512_permutexvar_ps(halves, _mm512_castpd_ps(_mm512_set1_pd(pair)));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc);
    }
    main = _mm512_reduce_add_ps(acc);
    done = true;
  }
#endif
#if defined(INFERKIT_QUANT_AVX2)
  if (k == QuantKernel::kAvx2) {
    const __m256i lo4 = _mm256_set1_epi8(0xF);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (Index c = 0; c < chunks; ++c) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32));
      const __m256i lo = _mm256_and_si256(packed, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), lo4);
      const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c * 64));
      const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c * 64 + 32));
      // codes <= 15 and |q| <= 127: pairs stay within 2 * 15 * 127, no int16 saturation.
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, q0), ones);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, q1), ones);
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(sd[2 * c]), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(sd[2 * c + 1]), acc1);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(acc0, acc1));
    main = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    done = true;
  }
#endif
  if (!done) {
    for (Index c = 0; c < chunks; ++c) {
      std::int32_t plo = 0, phi = 0;
      for (Index j = 0; j < 32; ++j) {
        const std::uint8_t b = codes[c * 32 + j];
        plo += static_cast<std::int32_t>(b & 0xF) * q[c * 64 + j];
        phi += static_cast<std::int32_t>(b >> 4) * q[c * 64 + 32 + j];
      }
      main += static_cast<float>(plo) * sd[2 * c] + static_cast<float>(phi) * sd[2 * c + 1];
    }
  }
  (void)k;
  return main + z;
}

}  // namespace inferkit::detail
