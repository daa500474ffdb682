#pragma once
// Activation helpers of the quantized kernels: finiteness checks that name the first bad
// element, max |x| of a row, and int8 quantization of a row on each kernel path. Every path
// computes code = clamp(nearbyint(x / step), -127, 127) with an IEEE division, so the codes are
// bitwise identical across paths (core/quant_rounding.hpp's symmetric_code).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/kernel_path.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Whether x[0..n) is all finite: one vector pass (x - x is 0 for finite x, NaN otherwise).
inline bool all_finite(const float* x, Index n) {
  simd::VecF acc = simd::broadcast(0.0f);
  const auto w = static_cast<Index>(simd::kWidth);
  Index i = 0;
  for (; i + w <= n; i += w) {
    const simd::VecF v = simd::load(x + i);
    acc = acc + (v - v);
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i] - x[i];
  return simd::hsum(acc) + tail == 0.0f;
}

/// Throws std::invalid_argument naming `name(row, col)` for the first NaN or infinite element.
inline void require_finite_rows(MatrixView<const float> x, const std::string& name) {
  for (Index r = 0; r < x.rows(); ++r) {
    const float* row = x.row_ptr(r);
    if (all_finite(row, x.cols())) continue;
    for (Index c = 0; c < x.cols(); ++c)
      if (!std::isfinite(row[c]))
        throw_invalid_argument(name + "(" + std::to_string(r) + ", " + std::to_string(c) + ")", row[c],
                               "must be finite");
  }
}

/// Throws std::invalid_argument naming `name[i]` for the first NaN or infinite element.
inline void require_finite_span(std::span<const float> x, const std::string& name) {
  if (all_finite(x.data(), static_cast<Index>(x.size()))) return;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) throw_invalid_argument(name + "[" + std::to_string(i) + "]", x[i], "must be finite");
}

/// max |x[0..n)| for finite x (0 for n == 0).
inline float abs_max(const float* x, Index n) {
  const simd::VecF zero = simd::broadcast(0.0f);
  simd::VecF m0 = zero, m1 = zero;
  const auto w = static_cast<Index>(simd::kWidth);
  Index i = 0;
  for (; i + 2 * w <= n; i += 2 * w) {
    const simd::VecF a = simd::load(x + i), b = simd::load(x + i + w);
    m0 = simd::max(m0, simd::max(a, zero - a));
    m1 = simd::max(m1, simd::max(b, zero - b));
  }
  float m = simd::hmax(simd::max(m0, m1));
  for (; i < n; ++i) m = std::max(m, std::abs(x[i]));
  return m;
}

/// m[i] = max(m[i], |x[i]|) for i < n (finite x): column maxima over rows.
inline void max_abs_into(const float* x, Index n, float* m) {
  const simd::VecF zero = simd::broadcast(0.0f);
  const auto w = static_cast<Index>(simd::kWidth);
  Index i = 0;
  for (; i + w <= n; i += w) {
    const simd::VecF v = simd::load(x + i);
    simd::store(m + i, simd::max(simd::load(m + i), simd::max(v, zero - v)));
  }
  for (; i < n; ++i) m[i] = std::max(m[i], std::abs(x[i]));
}

// The vector part of quantize_row_int8 on each path: writes the codes of a prefix of x[0..n)
// and returns its length (the rest takes the scalar rule).
#if defined(INFERKIT_QUANT_AVX512VNNI)
inline Index quantize_int8_prefix(Avx512VnniPath, const float* x, Index n, float step, bool offset, std::int8_t* out) {
  const __m512 s = _mm512_set1_ps(step), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m128i flip = _mm_set1_epi8(offset ? -128 : 0);
  for (Index i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    const __m128i b = _mm_xor_si128(_mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)), flip);
    _mm_mask_storeu_epi8(out + i, m, b);
  }
  return n;
}
#endif
#if defined(INFERKIT_QUANT_AVX2)
inline Index quantize_int8_prefix(Avx2Path, const float* x, Index n, float step, bool offset, std::int8_t* out) {
  const __m256 s = _mm256_set1_ps(step), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m128i flip = _mm_set1_epi8(offset ? -128 : 0);
  Index i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 q = _mm256_div_ps(_mm256_loadu_ps(x + i), s);
    q = _mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    const __m256i v = _mm256_cvtps_epi32(q);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i b = _mm_xor_si128(_mm_packs_epi16(w16, w16), flip);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), b);
  }
  return i;
}
#endif
inline Index quantize_int8_prefix(ScalarPath, const float*, Index, float, bool, std::int8_t*) { return 0; }

/// Quantizes x[0..n) with `step` into out[0..padded): code = symmetric_code(x, step, 127),
/// stored as a signed byte, or as the unsigned byte code + 128 when `offset` (the VNNI
/// operand); out[n..padded) get code 0. A zero step gives all-zero codes.
inline void quantize_row_int8(const float* x, Index n, Index padded, float step, bool offset, QuantKernel kernel,
                              std::int8_t* out) {
  const auto zero_code = static_cast<std::int8_t>(offset ? -128 : 0);  // 0 + 128 as a byte
  Index i = 0;
  if (step != 0.0f) {
    on_quant_path(kernel, [&](auto path) { i = quantize_int8_prefix(path, x, n, step, offset, out); });
    for (; i < n; ++i) {
      const int c = symmetric_code(x[i], step, 127);
      out[i] = static_cast<std::int8_t>(offset ? c ^ -128 : c);  // c + 128 as an unsigned byte
    }
  }
  for (; i < padded; ++i) out[i] = zero_code;
}

#if defined(INFERKIT_QUANT_AVX512VNNI)
inline void quantize_blocks_q8_path(Avx512VnniPath, const float* x, Index n, Index padded, std::int8_t* q, float* d,
                                    std::int32_t* qsum) {
  const Index blocks = padded / 32;
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (Index b = 0; b < blocks; ++b) {
    const Index k0 = b * 32, left = std::clamp<Index>(n - k0, 0, 32);
    const __mmask16 m0 = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    const __mmask16 m1 = left >= 32   ? __mmask16(0xFFFF)
                         : left <= 16 ? __mmask16(0)
                                      : static_cast<__mmask16>((1u << (left - 16)) - 1u);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + std::min(k0, n)),
                 v1 = _mm512_maskz_loadu_ps(m1, x + std::min(k0 + 16, n));
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
    const float step = amax / 127.0f;
    d[b] = step;
    if (step == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k0), _mm256_setzero_si256());
      qsum[b] = 0;
      continue;
    }
    const __m512 s = _mm512_set1_ps(step);
    const auto codes = [&](__m512 v) {
      const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
    };
    const __m512i c0 = codes(v0), c1 = codes(v1);
    qsum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0 + 16), _mm512_cvtepi32_epi8(c1));
  }
}
#endif
template <class Path>
void quantize_blocks_q8_path(Path, const float* x, Index n, Index padded, std::int8_t* q, float* d,
                             std::int32_t* qsum) {
  const Index blocks = padded / 32;
  for (Index b = 0; b < blocks; ++b) {
    const Index k0 = b * 32, len = std::clamp<Index>(n - k0, 0, 32);
    const float* xb = x + std::min(k0, n);
    const float step = abs_max(xb, len) / 127.0f;
    quantize_row_int8(xb, len, 32, step, false, Path::value, q + k0);
    std::int32_t sum = 0;
    for (Index i = 0; i < 32; ++i) sum += q[k0 + i];
    d[b] = step;
    qsum[b] = sum;
  }
}

/// llama.cpp's Q8_0 activations: x[0..n) in blocks of 32 (zero padded to `padded`, a multiple
/// of 32), block b with step d[b] = max |x| / 127 over the block and codes q = symmetric_code
/// (the same arithmetic as quantize_row_int8, so every path gives the same bytes); qsum[b] =
/// sum of the block's codes.
inline void quantize_blocks_q8(const float* x, Index n, Index padded, QuantKernel kernel, std::int8_t* q, float* d,
                               std::int32_t* qsum) {
  on_quant_path(kernel, [&](auto path) { quantize_blocks_q8_path(path, x, n, padded, q, d, qsum); });
}

}  // namespace inferkit::detail
