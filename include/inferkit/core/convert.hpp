#pragma once
// Bulk conversions between float and the 16-bit storage types, vectorized where the compiler
// may use AVX-512F or F16C/AVX2 and bit-identical to the scalar conversions of half.hpp
// (round to nearest even, quiet NaN) on every path.

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace inferkit {

inline void convert(const float* src, float* dst, std::size_t n) {
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

inline void convert(const Float16* src, float* dst, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void convert(const float* src, Float16* dst, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = to_float16(src[i]);
}

inline void convert(const BFloat16* src, float* dst, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
#endif
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void convert(const float* src, BFloat16* dst, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  {
    const __m512i bias = _mm512_set1_epi32(0x7FFF);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i quiet = _mm512_set1_epi32(0x0040);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(src + i);
      const __m512i x = _mm512_castps_si512(v);
      const __m512i hi = _mm512_srli_epi32(x, 16);
      const __m512i rounded =
          _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(hi, one)), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, quiet));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
    }
  }
#endif
#if defined(__AVX2__)
  {
    const __m256i bias = _mm256_set1_epi32(0x7FFF);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(src + i);
      const __m256i x = _mm256_castps_si256(v);
      const __m256i hi = _mm256_srli_epi32(x, 16);
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(hi, one)), 16);
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
      // packus works per 128-bit lane; the permute gathers the 8 results into the low half.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
    }
  }
#endif
  for (; i < n; ++i) dst[i] = to_bfloat16(src[i]);
}

/// Whether a simd::VecF loads straight from T storage with the widening done in registers
/// (load_vec below). Where it does not, kernels decode T rows into a float scratch first.
template <class T>
inline constexpr bool kLoadsInRegisters = std::is_same_v<T, float>
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
                                          || (simd::kWidth == 16 &&
                                              (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>))
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__) && defined(__F16C__)
                                          || (simd::kWidth == 8 &&
                                              (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>))
#endif
    ;

/// kWidth elements of T at p, widened to float. Only where kLoadsInRegisters<T>.
template <class T>
inline simd::VecF load_vec(const T* p) {
  static_assert(kLoadsInRegisters<T>, "no in-register widening for this type and instruction set");
  if constexpr (std::is_same_v<T, float>) {
    return simd::load(p);
  }
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  else if constexpr (std::is_same_v<T, Float16>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__) && defined(__F16C__)
  else if constexpr (std::is_same_v<T, Float16>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
#endif
}

}  // namespace inferkit
