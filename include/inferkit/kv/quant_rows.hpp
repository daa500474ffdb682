#pragma once
// Per-token quantized rows: each token's head_dim values split into groups along head_dim,
// one QuantParams per group, codes bit-packed (quant_codec.hpp). Shared by the quantized cache
// (its per-token streams) and the quantized sink + window cache (one row per slot).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/kv/quant_codec.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace inferkit {

namespace detail {

// Byte -> its codes as floats, low bits first: two 4-bit codes or four 2-bit codes per byte.
inline const std::array<float, 512> kNibbleTable = [] {
  std::array<float, 512> t{};
  for (int b = 0; b < 256; ++b) {
    t[static_cast<std::size_t>(2 * b)] = static_cast<float>(b & 15);
    t[static_cast<std::size_t>(2 * b + 1)] = static_cast<float>(b >> 4);
  }
  return t;
}();
inline const std::array<float, 1024> kCrumbTable = [] {
  std::array<float, 1024> t{};
  for (int b = 0; b < 256; ++b)
    for (int j = 0; j < 4; ++j) t[static_cast<std::size_t>(4 * b + j)] = static_cast<float>((b >> (2 * j)) & 3);
  return t;
}();

// Unpacks n codes (n a multiple of the codes per byte) to floats. 8- and 4-bit codes widen in
// SIMD registers where the ISA allows; otherwise one table lookup per byte.
inline void codes_to_float(const std::uint8_t* codes, Index n, int bits, float* out) {
  Index i = 0;
#if defined(__AVX512F__)
  if (bits == 8) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(
          out + i,
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)))));
  } else if (bits == 4) {
    const __m128i low = _mm_set1_epi8(0x0F);
    for (; i + 16 <= n; i += 16) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
      const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
      _mm512_storeu_ps(out + i, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi))));
    }
  }
#elif defined(__AVX2__)
  if (bits == 8) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(
          out + i,
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)))));
  }
#endif
  if (bits == 8) {
    for (; i < n; ++i) out[i] = static_cast<float>(codes[i]);
  } else if (bits == 4) {
    const float* lut = kNibbleTable.data();
    for (; i < n; i += 2) std::memcpy(out + i, lut + 2 * codes[i / 2], 2 * sizeof(float));
  } else {
    const float* lut = kCrumbTable.data();
    for (; i < n; i += 4) std::memcpy(out + i, lut + 4 * codes[i / 4], 4 * sizeof(float));
  }
}

// x[i] = x[i] * step + zero for i < n.
inline void scale_shift(float* x, Index n, float step, float zero) {
  const simd::VecF sv = simd::broadcast(step), zv = simd::broadcast(zero);
  Index i = 0;
  for (; i + static_cast<Index>(simd::kWidth) <= n; i += simd::kWidth)
    simd::store(x + i, simd::fma(simd::load(x + i), sv, zv));
  for (; i < n; ++i) x[i] = x[i] * step + zero;
}

}  // namespace detail

/// Bytes of one token's codes, and its number of parameter groups.
inline Index token_code_bytes(const QuantSpec& s, Index d) { return d / s.codes_per_byte(); }
inline Index token_groups(const QuantSpec& s, Index d) { return d / s.group_size; }

/// Quantizes one token's row of d values: codes (zeroed first) and d / group_size parameters.
inline void quantize_token_row(const float* x, const QuantSpec& s, Index d, std::uint8_t* codes, QuantParams* params) {
  std::memset(codes, 0, static_cast<std::size_t>(token_code_bytes(s, d)));
  for (Index g = 0; g < token_groups(s, d); ++g) {
    const float* grp = x + g * s.group_size;
    const QuantParams p = choose_params(grp, s.group_size, 1, s);
    params[g] = p;
    for (Index i = 0; i < s.group_size; ++i) put_code(codes, g * s.group_size + i, encode(grp[i], p, s), s.bits);
  }
}

/// Quantizes each of d channels over n consecutive token rows x[t * d + c] (KIVI keys): one
/// QuantParams per channel (params[c]), codes written into n rows of token_code_bytes (zeroed first).
inline void quantize_channel_group(const float* x, Index n, const QuantSpec& s, Index d, std::uint8_t* codes,
                                   QuantParams* params) {
  const Index rb = token_code_bytes(s, d);
  std::memset(codes, 0, static_cast<std::size_t>(n * rb));
  for (Index c = 0; c < d; ++c) {
    const QuantParams p = choose_params(x + c, n, d, s);
    params[c] = p;
    for (Index t = 0; t < n; ++t) put_code(codes + t * rb, c, encode(x[t * d + c], p, s), s.bits);
  }
}

/// Dequantizes one token's row into out[0, d).
inline void dequantize_token_row(const std::uint8_t* codes, const QuantParams* params, const QuantSpec& s, Index d,
                                 float* out) {
  detail::codes_to_float(codes, d, s.bits, out);
  for (Index g = 0; g < token_groups(s, d); ++g)
    detail::scale_shift(out + g * s.group_size, s.group_size, to_float(params[g].step), params[g].zero(s));
}

static_assert(sizeof(QuantParams) == 4 && offsetof(QuantParams, min) == 2,
              "QuantRowsView reads QuantParams as (binary16 step, binary16 min) pairs");

/// The in-register dequantization view of quantized rows (QuantRowsView, kv_block.hpp).
inline QuantRowsView quant_view(const std::uint8_t* codes, const QuantParams* params, const QuantSpec& s,
                                Index tokens) {
  return {codes,       reinterpret_cast<const std::byte*>(params), s.bits,
          s.symmetric, s.axis == QuantAxis::kPerChannel,           s.group_size,
          tokens};
}

/// A row store (KV block view) over consecutive per-token quantized rows.
struct QuantTokenRows {
  const std::uint8_t* codes = nullptr;  ///< row t at codes + t * token_code_bytes
  const QuantParams* params = nullptr;  ///< row t at params + t * token_groups
  const QuantSpec* spec = nullptr;      ///< how the rows are quantized
  Index dim = 0;                        ///< elements per row

  /// The rows for in-register dequantization.
  QuantRowsView quantized_view() const { return quant_view(codes, params, *spec, std::numeric_limits<Index>::max()); }

  /// Rows [first, first + count) decoded into scratch (count rows of `stride`).
  RowsF32 load_f32(Index first, Index count, Index d, float* scratch, Index stride, bool /*allow_in_place*/) const {
    const Index rb = token_code_bytes(*spec, d), groups = token_groups(*spec, d);
    for (Index r = 0; r < count; ++r)
      dequantize_token_row(codes + (first + r) * rb, params + (first + r) * groups, *spec, d, scratch + r * stride);
    return {scratch, stride};
  }
};

/// A row store (KV block view) of rows [0, quantized) quantized (per token, or per channel over
/// groups of spec->group_size tokens) and rows from `quantized` on in float at
/// tail + (t - quantized) * dim: the quantized cache's streams (quantized part + full-precision
/// tail) and the pages of a quantized block pool (a KIVI page's keys before its groups fill).
struct QuantTailRows {
  const std::uint8_t* codes = nullptr;  ///< row t's packed codes at codes + t * token_code_bytes
  const QuantParams* params =
      nullptr;  ///< per token: row t's groups at t * token_groups; per channel: group j's at j * dim
  const QuantSpec* spec = nullptr;  ///< how the rows are quantized
  Index quantized = 0;              ///< rows stored quantized
  const float* tail = nullptr;      ///< the float rows from `quantized` on

  /// The quantized rows, for in-register dequantization.
  QuantRowsView quantized_view() const { return quant_view(codes, params, *spec, quantized); }

  /// Float rows [first, first + count) of `d` values: the tail in place when the whole range is
  /// in it and allow_in_place, else decoded into scratch (count rows of `stride`).
  RowsF32 load_f32(Index first, Index count, Index d, float* scratch, Index stride, bool allow_in_place) const {
    const Index q = quantized;
    if (first >= q && allow_in_place)  // the whole range is in the tail: read it where it is
      return {tail + (first - q) * d, d};
    const QuantSpec& s = *spec;
    const Index rb = token_code_bytes(s, d), groups = d / s.group_size;  // divisions hoisted out of the row loop
    std::vector<float> step, zero;  // per-channel parameters of the current token group
    Index group_end = 0;
    for (Index r = 0; r < count; ++r) {
      const Index t = first + r;
      float* out = scratch + r * stride;
      if (t >= q) {
        std::memcpy(out, tail + (t - q) * d, static_cast<std::size_t>(d) * sizeof(float));
        continue;
      }
      if (s.axis == QuantAxis::kPerToken) {
        dequantize_token_row(codes + t * rb, params + t * groups, s, d, out);
      } else {
        detail::codes_to_float(codes + t * rb, d, s.bits, out);
        if (t >= group_end) {  // decode the group's binary16 parameters once
          const Index group = t / s.group_size;
          group_end = (group + 1) * s.group_size;
          const QuantParams* p = params + group * d;
          step.resize(static_cast<std::size_t>(d));
          zero.resize(static_cast<std::size_t>(d));
          for (Index c = 0; c < d; ++c) {
            step[c] = to_float(p[c].step);
            zero[c] = p[c].zero(s);
          }
        }
        std::size_t c = 0;
        for (; c + simd::kWidth <= static_cast<std::size_t>(d); c += simd::kWidth)
          simd::store(out + c,
                      simd::fma(simd::load(out + c), simd::load(step.data() + c), simd::load(zero.data() + c)));
        for (; c < static_cast<std::size_t>(d); ++c) out[c] = out[c] * step[c] + zero[c];
      }
    }
    return {scratch, stride};
  }
};

}  // namespace inferkit
