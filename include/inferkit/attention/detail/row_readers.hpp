#pragma once
// Row readers for the decode kernel: row(i).load(dv) returns kWidth float elements of row i
// starting at column dv, however the rows are stored. PlainReader widens float / Float16 /
// BFloat16 in registers; QuantReader dequantizes group-quantized codes (8, 4 or 2 bits, per
// token or per channel) in registers: code * step + zero with one FMA, the steps and zeros
// decoded once per tile, so quantized caches are read without a float copy.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace inferkit::detail {

template <class T>
struct PlainReader {
  const T* data = nullptr;
  Index stride = 0;
  struct Row {
    const T* p;
    simd::VecF load(Index dv) const { return load_vec(p + dv); }
  };
  Row row(Index i) const { return {data + i * stride}; }
};

/// Whether codes of this width dequantize in registers here (else rows go through load_f32).
template <int Bits>
inline constexpr bool kQuantInRegisters =
#if defined(INFERKIT_SIMD_XSIMD) && (defined(__AVX512F__) || defined(__AVX2__))
    (Bits == 8 || Bits == 4 || Bits == 2) && (simd::kWidth == 16 || simd::kWidth == 8);
#else
    false;
#endif

/// Steps and zeros of `count` consecutive parameter pairs of a view, from pair `first`.
inline void decode_quant_params(const QuantRowsView& v, Index first, Index count, float* step, float* zero) {
  const std::byte* p = v.params + 4 * first;
  const float neg_offset = -static_cast<float>(1 << (v.bits - 1));
  Index i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= count; i += 16) {
    const __m512i pairs = _mm512_loadu_si512(p + 4 * i);
    const __m512 s = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pairs));
    const __m512 z = v.symmetric ? _mm512_mul_ps(s, _mm512_set1_ps(neg_offset))
                                 : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16)));
    _mm512_storeu_ps(step + i, s);
    _mm512_storeu_ps(zero + i, z);
  }
#elif defined(__AVX2__) && defined(__F16C__)
  // No vpmovdw: packus puts 4 steps then 4 mins in each 128-bit lane, vpermq gathers the 8
  // steps in the low half and the 8 mins in the high half, and vcvtph2ps widens each.
  for (; i + 8 <= count; i += 8) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * i));
    const __m256i packed = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(_mm256_and_si256(pairs, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(pairs, 16)),
        _MM_SHUFFLE(3, 1, 2, 0));
    const __m256 s = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
    const __m256 z = v.symmetric ? _mm256_mul_ps(s, _mm256_set1_ps(neg_offset))
                                 : _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1));
    _mm256_storeu_ps(step + i, s);
    _mm256_storeu_ps(zero + i, z);
  }
#endif
  for (; i < count; ++i) {
    std::uint16_t s = 0, m = 0;
    std::memcpy(&s, p + 4 * i, 2);
    std::memcpy(&m, p + 4 * i + 2, 2);
    step[i] = to_float(Float16{s});
    zero[i] = v.symmetric ? neg_offset * step[i] : to_float(Float16{m});
  }
}

/// kWidth codes of `Bits` bits starting at element dv of a packed row, as floats.
template <int Bits>
inline simd::VecF codes_as_float(const std::uint8_t* c, Index dv) {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if constexpr (simd::kWidth == 16) {
    if constexpr (Bits == 8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + dv))));
    } else if constexpr (Bits == 4) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + dv / 2));
      const __m128i low = _mm_set1_epi8(0x0F);
      const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
      return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
    } else {  // each byte to four lanes, shifted by 0, 2, 4, 6
      std::int32_t four = 0;
      std::memcpy(&four, c + dv / 4, 4);
      const __m128i bytes =
          _mm_shuffle_epi8(_mm_cvtsi32_si128(four), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
      const __m512i lanes = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(bytes),
                                              _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6));
      return _mm512_cvtepi32_ps(_mm512_and_si512(lanes, _mm512_set1_epi32(3)));
    }
  }
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
  if constexpr (simd::kWidth == 8) {
    if constexpr (Bits == 8) {
      return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + dv))));
    } else if constexpr (Bits == 4) {
      // The 8 codes are the 8 nibbles of one little-endian 32-bit word, in order: broadcast it
      // (a load-port vpbroadcastd) and shift lane i right by 4 i, then mask. Three vector uops
      // where the 16-byte unpack of the AVX-512 form takes six (two of them on the shuffle port).
      std::int32_t four = 0;
      std::memcpy(&four, c + dv / 2, 4);
      const __m256i lanes = _mm256_srlv_epi32(_mm256_set1_epi32(four), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
      return _mm256_cvtepi32_ps(_mm256_and_si256(lanes, _mm256_set1_epi32(15)));
    } else {
      std::int16_t two = 0;
      std::memcpy(&two, c + dv / 4, 2);
      const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<std::uint16_t>(two)),
                                             _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1));
      const __m256i lanes = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
      return _mm256_cvtepi32_ps(_mm256_and_si256(lanes, _mm256_set1_epi32(3)));
    }
  }
#endif
  static_assert(kQuantInRegisters<Bits>, "no in-register dequantization for this width and instruction set");
  return simd::broadcast(0.0f);
}

/// Rows of a quantized tile: codes from the view; steps and zeros from decode_quant_params.
/// Per token (PerChannel false): [row][group] with `stride` = groups, and group_of[j] the group
/// of column j * kWidth; per channel: one vector of dim values per token group, row i's at
/// offset row_param[i].
template <int Bits, bool PerChannel>
struct QuantReader {
  const std::uint8_t* codes = nullptr;  // the tile's first row
  Index code_bytes = 0;
  const float* step = nullptr;
  const float* zero = nullptr;
  Index stride = 0;
  const std::int32_t* group_of = nullptr;
  const std::int32_t* row_param = nullptr;

  struct Row {
    const std::uint8_t* c;
    const float* s;
    const float* z;
    const std::int32_t* group_of;
    simd::VecF load(Index dv) const {
      if constexpr (PerChannel) {
        return simd::fma(codes_as_float<Bits>(c, dv), simd::load(s + dv), simd::load(z + dv));
      } else {
        const Index g = group_of[dv / static_cast<Index>(simd::kWidth)];
        return simd::fma(codes_as_float<Bits>(c, dv), simd::broadcast(s[g]), simd::broadcast(z[g]));
      }
    }
  };
  Row row(Index i) const {
    const Index off = PerChannel ? row_param[i] : i * stride;
    return {codes + i * code_bytes, step + off, zero + off, group_of};
  }
};

}  // namespace inferkit::detail
