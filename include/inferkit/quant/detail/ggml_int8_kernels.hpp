#pragma once
// The int8 road of the ggml block types (quant/ggml_blocks.hpp): activations quantized per
// block (32 weights for the legacy types, as llama.cpp's Q8_0; 256 for the K-quants, as its
// Q8_K, with the code sums of each 16 the minimums need), then integer dot products:
//
//   x_k ~ dx_b q_k,  dx_b = max_{k in b} |x_k| / 127,  q_k = symmetric_code(x_k, dx_b, 127)
//   y = sum_b dx_b [ d_b sum_j sc_j P_j  -  (d_b o) sum_j sc_j S_j  -  dm_b sum_j mn_j S_j ]
//   P_j = sum_{k in j} u_k q_k,  S_j = sum_{k in j} q_k     (j: the 16-weight groups of block b)
//
// which is sum_k w_k dx q_k with exact integer sums and float rounding of the outer sums only.
// K-quants: AVX2 multiplies u (unsigned) by q with vpmaddubsw, then by the group scales with
// vpmaddwd; the VNNI path fuses the second step (vpdpwssd). Codes are unpacked with AVX2
// instructions on both SIMD paths, 32 per vector (the unit every layout is organized in). The
// 32-weight (legacy) blocks fold their offsets into the integers and have their own kernels and
// float order (detail/ggml_legacy_kernels.hpp); this file gives them activation quantization,
// the code unpacking and the scalar path.
//
// Decode (one activation row, detail/ggml_decode_kernels.hpp) unpacks each block in registers
// and uses it once; prefill unpacks a weight row once per tile of activation rows into a
// scratch row (codes, scale vectors, factors) that the tile's rows then share, 4 rows per pass
// over it. Both run the same block arithmetic (ggml_block_terms for the K-quants), so a matvec
// equals the matmul row bit for bit.

#include <algorithm>
#include <cmath>
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
  AlignedBuffer<std::int8_t> q;   ///< rows * cols codes
  std::vector<float> d;           ///< rows * cols / block scales dx_b
  AlignedBuffer<std::int16_t> s;  ///< rows * cols / 16 code sums S_j
  std::vector<float> xs;          ///< 32-weight blocks: rows * cols / 32 products dx_b (S_2b + S_2b+1)
  const std::int8_t* q_row(Index t) const { return q.data() + t * cols; }          ///< codes of row t
  const float* d_row(Index t) const { return d.data() + t * (cols / block); }      ///< scales of row t
  const std::int16_t* s_row(Index t) const { return s.data() + t * (cols / 16); }  ///< sums of row t
  const float* xs_row(Index t) const { return xs.data() + t * (cols / block); }    ///< dx S products of row t
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
  out.s.resize(static_cast<std::size_t>(T * (K / 16)));
  out.xs.resize(block == 32 ? static_cast<std::size_t>(T * nb) : 0);
  parallel_items(threads, T, [&](Index t) {
    const float* xr = x.row_ptr(t);
    std::int8_t* q = out.q.data() + t * K;
    std::int16_t* s = out.s.data() + t * (K / 16);
    for (Index b = 0; b < nb; ++b) {
      const float step = abs_max(xr + b * block, block) / 127.0f;
      quantize_row_int8(xr + b * block, block, block, step, false, kernel, q + b * block);
      out.d[static_cast<std::size_t>(t * nb + b)] = step;
    }
    for (Index j = 0; j < K / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[j * 16 + i];
      s[j] = static_cast<std::int16_t>(sum);
    }
    if (block == 32)
      for (Index b = 0; b < nb; ++b)
        out.xs[static_cast<std::size_t>(t * nb + b)] =
            out.d[static_cast<std::size_t>(t * nb + b)] * static_cast<float>(s[2 * b] + s[2 * b + 1]);
  });
}

/// One weight row unpacked for a tile of activation rows: codes, per-32 scale vectors (the
/// scales of its two 16-groups, 8 copies each) and every block's factors.
struct GgmlUnpackedRow {
  AlignedBuffer<std::uint8_t> u;  ///< cols codes (Q8_0: the signed bytes)
  AlignedBuffer<std::int16_t> s;  ///< cols / 2 scales: 16 per 32 codes
  std::vector<GgmlParts> parts;   ///< cols / block
  void resize(Index cols, Index block) {
    u.resize(static_cast<std::size_t>(cols));
    s.resize(static_cast<std::size_t>(cols / 2));
    parts.resize(static_cast<std::size_t>(cols / block));
  }
};

// ---- scalar path ----------------------------------------------------------------------------

/// Row `p` unpacked by the layout equations, weight by weight.
template <class L>
inline void ggml_unpack_row(L, ScalarPath, const std::uint8_t* p, Index cols, GgmlUnpackedRow& r) {
  for (Index b = 0; b < cols / L::kBlock; ++b) {
    const std::uint8_t* blk = p + b * L::kBytes;
    L::parts(blk, r.parts[static_cast<std::size_t>(b)]);
    for (int e = 0; e < L::kBlock; ++e)
      r.u[static_cast<std::size_t>(b * L::kBlock + e)] = static_cast<std::uint8_t>(L::code(blk, e));
  }
}

/// y[t * y_stride] for activation rows t0 .. t0 + C against an unpacked row (file comment).
template <class L, int C>
inline void ggml_int8_tile(ScalarPath, const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                           Index y_stride) {
  constexpr int kGroups = L::kBlock / 16;
  for (int t = 0; t < C; ++t) {
    const std::int8_t* q = x.q_row(t0 + t);
    const float* dx = x.d_row(t0 + t);
    const std::int16_t* s = x.s_row(t0 + t);
    float main = 0.0f, mins = 0.0f;
    for (Index b = 0; b < cols / L::kBlock; ++b) {
      const GgmlParts& p = r.parts[static_cast<std::size_t>(b)];
      std::int32_t isum = 0, osum = 0, msum = 0;
      for (int j = 0; j < kGroups; ++j) {
        std::int32_t pj = 0;
        for (Index k = b * L::kBlock + 16 * j; k < b * L::kBlock + 16 * (j + 1); ++k) {
          const int u = L::kSigned ? static_cast<std::int8_t>(r.u[static_cast<std::size_t>(k)])
                                   : r.u[static_cast<std::size_t>(k)];
          pj += u * q[k];
        }
        isum += p.sc[j] * pj;
        osum += p.sc[j] * s[b * kGroups + j];
        msum += p.mn[j] * s[b * kGroups + j];
      }
      main += static_cast<float>(isum) * (dx[b] * p.d);
      mins += static_cast<float>(osum) * (dx[b] * (p.d * static_cast<float>(L::kOffset))) +
              static_cast<float>(msum) * (dx[b] * p.dm);
    }
    y[t * y_stride] = main - mins;
  }
}

// ---- SIMD paths (AVX2 instructions for unpacking; VNNI or AVX2 multiply-accumulate) ---------

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
/// 32 bytes shifted right by `bits` per 16-bit lane (callers mask the bits that cross bytes).
inline __m256i ggml_srl(__m256i v, int bits) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(bits)); }
inline __m256i ggml_load(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
/// 16 nibble bytes at p as 32 codes: low nibbles then high nibbles (Q4_0's order).
inline __m256i ggml_nibbles16(const std::uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}
/// The 32 bits at p (little-endian) as 32 bytes: `value` where the bit is set, else 0.
inline __m256i ggml_bits32(const std::uint8_t* p, char value) {
  std::uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf), sel);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, sel), _mm256_set1_epi8(value));
}
/// binary16 at p (any alignment) as float, by the F16C instruction.
inline float ggml_half_f16c(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

/// Codes of 32-weight chunk c of block b (the layout equations of ggml_blocks.hpp, 32 at once).
template <class L>
inline __m256i ggml_chunk(const std::uint8_t* b, int c) {
  constexpr GgmlType T = L::kType;
  const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
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

/// Whether the SIMD paths multiply signed codes (|u| and sign(q, u)): Q8_0 only. (A +128 bias
/// would make its codes unsigned, but vpmaddubsw's pair sums of 255 * 127 saturate on AVX2.)
template <class L>
inline constexpr bool kGgmlSignedSimd = L::kSigned;

/// Q4_K / Q5_K's eight 6-bit scales (bytes 0..7) and eight minimums (bytes 8..15) from their
/// 12 bytes at s: ggml_k4_scale_min for all sixteen at once, by two byte shuffles (the low bits
/// of each value, then the top two bits of groups 4..7 from bytes 0..7's bits 6, 7). Reads 16
/// bytes at s: the 12 and the first 4 code bytes after them (in the block), which it ignores.
inline __m128i ggml_k4_scale_bytes(const std::uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i m1 = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
  const __m128i m2 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15);
  const __m128i lo = _mm_or_si128(_mm_and_si128(low, m1), _mm_and_si128(_mm_srli_epi16(low, 4), m2));
  return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(top, 2), _mm_set1_epi8(0x30)));
}

/// A block's factors (GgmlParts) by vector instructions: the SIMD paths' L::parts.
template <class L>
inline void ggml_parts_simd(const std::uint8_t* b, GgmlParts& p) {
  constexpr GgmlType T = L::kType;
  auto* sc = reinterpret_cast<__m256i*>(p.sc);
  auto* mn = reinterpret_cast<__m256i*>(p.mn);
  if constexpr (L::kBlock == 32) {
    p.d = ggml_half_f16c(b);
    p.dm = L::kMins ? -ggml_half_f16c(b + 2) : p.d * static_cast<float>(L::kOffset);  // exact: o is 8 or 16
    p.sc[0] = p.sc[1] = 1;
    p.mn[0] = p.mn[1] = L::kMins ? 1 : 0;
  } else if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ5_K) {
    p.d = ggml_half_f16c(b);
    p.dm = ggml_half_f16c(b + 2);
    const __m128i v = ggml_k4_scale_bytes(b + 4);
    _mm256_store_si256(sc, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v)));  // each 32-group's scale twice
    _mm256_store_si256(mn, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v, v)));
  } else if constexpr (T == GgmlType::kQ6_K) {
    p.d = ggml_half_f16c(b + 208);
    _mm256_store_si256(sc, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192))));
  } else if constexpr (T == GgmlType::kQ2_K) {
    p.d = ggml_half_f16c(b + 80);
    p.dm = ggml_half_f16c(b + 82);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), m4 = _mm_set1_epi8(15);
    _mm256_store_si256(sc, _mm256_cvtepu8_epi16(_mm_and_si128(v, m4)));
    _mm256_store_si256(mn, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4)));
  } else {  // Q3_K: low nibbles from bytes 0..7, high pairs from bytes 8..11, minus 32
    p.d = ggml_half_f16c(b + 108);
    std::uint32_t w[3];
    std::memcpy(w, b + 96, 12);
    const std::uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const auto word = [](std::uint32_t v) { return static_cast<int>(v); };
    const __m128i raw = _mm_set_epi32(
        word(((w[1] >> 4) & m4) | (((w[2] >> 6) & m2) << 4)), word(((w[0] >> 4) & m4) | (((w[2] >> 4) & m2) << 4)),
        word((w[1] & m4) | (((w[2] >> 2) & m2) << 4)), word((w[0] & m4) | (((w[2] >> 0) & m2) << 4)));
    const __m128i v = _mm_sub_epi8(raw, _mm_set1_epi8(32));
    _mm256_store_si256(sc, _mm256_cvtepi8_epi16(v));
  }
}

/// Byte shuffles putting 16-bit word 2c % 8 of a 128-bit half in the low lane (8 copies) and
/// word 2c % 8 + 1 in the high lane, for chunks c = 0..3 (chunks 4..7 take the upper half).
alignas(32) inline constexpr std::uint8_t kGgmlScaleShuffle[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
     14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15},
};

/// The scale vector of chunk c: group 2c's scale in the low 8 words, group 2c + 1's in the high.
template <class L>
[[gnu::always_inline]] inline __m256i ggml_chunk_scales(const GgmlParts& p, int c) {
  if constexpr (L::kType == GgmlType::kQ4_K || L::kType == GgmlType::kQ5_K)
    return _mm256_set1_epi16(p.sc[2 * c]);  // one scale per 32 weights
  const __m256i half = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p.sc) + c / 4));
  return _mm256_shuffle_epi8(half, _mm256_load_si256(reinterpret_cast<const __m256i*>(kGgmlScaleShuffle[c % 4])));
}

/// Integer multiply-accumulate of 32 codes against 32 activation codes, scaled per 16-group by
/// `sv` (K-quants; the 32-weight blocks have ggml_legacy_kernels.hpp).
template <class L, bool kVnni>
[[gnu::always_inline]] inline __m256i ggml_mac(__m256i acc, __m256i u, __m256i codes, __m256i q, __m256i sv) {
  static_assert(L::kBlock != 32);
  if constexpr (kGgmlSignedSimd<L>) q = _mm256_sign_epi8(q, codes);  // u holds |codes|
#if defined(INFERKIT_QUANT_AVX512VNNI)
  if constexpr (kVnni) return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, q), sv);
#endif
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), sv));
}

/// Adds block b's terms for one activation row (file comment): main += dx d acc (8 lanes),
/// mins += the offset and minimum sums (8 lanes). K-quants only.
template <class L>
[[gnu::always_inline]] inline void ggml_block_terms(const GgmlParts& p, __m256i acc, float dx, const std::int16_t* s,
                                                    __m256& main, __m256& mins) {
  static_assert(L::kBlock != 32);
  main = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(dx * p.d), main);
  const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  if constexpr (L::kOffset != 0)
    mins = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.sc)), sv)),
        _mm256_set1_ps(dx * (p.d * static_cast<float>(L::kOffset))), mins);
  if constexpr (L::kMins)
    mins = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.mn)), sv)),
        _mm256_set1_ps(dx * p.dm), mins);
}

/// Sum of the 8 lanes of v (a fixed order).
inline float ggml_hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/// Row `p` unpacked into `r` with vector instructions.
template <class L, class Path>
requires(!std::is_same_v<Path, ScalarPath>) inline void ggml_unpack_row(L, Path, const std::uint8_t* p, Index cols,
                                                                        GgmlUnpackedRow& r) {
  constexpr int kChunks = L::kBlock / 32;
  for (Index b = 0; b < cols / L::kBlock; ++b) {
    const std::uint8_t* blk = p + b * L::kBytes;
    GgmlParts& parts = r.parts[static_cast<std::size_t>(b)];
    ggml_parts_simd<L>(blk, parts);
    for (int c = 0; c < kChunks; ++c) {
      const Index k = b * L::kBlock + 32 * c;
      __m256i codes = ggml_chunk<L>(blk, c);
      if constexpr (L::kBlock == 32 && L::kOffset != 0)  // the legacy tile multiplies w' = u - o
        codes = _mm256_sub_epi8(codes, _mm256_set1_epi8(static_cast<char>(L::kOffset)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(r.u.data() + k), codes);
      if constexpr (L::kBlock != 32)
        _mm256_store_si256(reinterpret_cast<__m256i*>(r.s.data() + k / 2), ggml_chunk_scales<L>(parts, c));
    }
  }
}

/// The SIMD tiles over an unpacked row (K-quants): C activation rows share each chunk and scale load.
template <class L, int C, bool kVnni>
inline void ggml_int8_tile_simd(const GgmlUnpackedRow& r, Index cols, const GgmlQ8Rows& x, Index t0, float* y,
                                Index y_stride) {
  constexpr int kChunks = L::kBlock / 32;
  const Index nb = cols / L::kBlock;
  __m256 main[C], mins[C];
  for (int t = 0; t < C; ++t) main[t] = mins[t] = _mm256_setzero_ps();
  for (Index b = 0; b < nb; ++b) {
    __m256i acc[C];
    for (int t = 0; t < C; ++t) acc[t] = _mm256_setzero_si256();
    for (int c = 0; c < kChunks; ++c) {
      const Index k = b * L::kBlock + 32 * c;
      const __m256i codes = _mm256_load_si256(reinterpret_cast<const __m256i*>(r.u.data() + k));
      const __m256i u = kGgmlSignedSimd<L> ? _mm256_abs_epi8(codes) : codes;
      const __m256i sv = _mm256_load_si256(reinterpret_cast<const __m256i*>(r.s.data() + k / 2));
      for (int t = 0; t < C; ++t)
        acc[t] = ggml_mac<L, kVnni>(acc[t], u, codes,
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q_row(t0 + t) + k)), sv);
    }
    const GgmlParts& p = r.parts[static_cast<std::size_t>(b)];
    for (int t = 0; t < C; ++t)
      ggml_block_terms<L>(p, acc[t], x.d_row(t0 + t)[b], x.s_row(t0 + t) + b * (L::kBlock / 16), main[t], mins[t]);
  }
  for (int t = 0; t < C; ++t) y[t * y_stride] = ggml_hsum(main[t]) - ggml_hsum(mins[t]);
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

/// Scalar decode row: unpack into the scratch row, then the one-row tile.
template <class L>
inline float ggml_int8_row_scalar(const std::uint8_t* p, Index cols, const GgmlQ8Rows& x, GgmlUnpackedRow& r) {
  ggml_unpack_row(L{}, ScalarPath{}, p, cols, r);
  float y;
  ggml_int8_tile<L, 1>(ScalarPath{}, r, cols, x, 0, &y, 1);
  return y;
}

}  // namespace inferkit::detail
