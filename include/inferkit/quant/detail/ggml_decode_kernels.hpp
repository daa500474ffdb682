#pragma once
// Decode (one activation row) on the int8 road of the ggml block types: R weight rows per pass
// (kGgmlDecodeRows), so each activation-code load serves R rows (the operand the rows share).
//
//   const std::int8_t* codes = ggml_decode_codes<L>(path, q8, scratch);   // once per call
//   ggml_decode_rows<L>(path, w_bytes, row_bytes, n0, n1, cols, q8, codes, y + n0);
//
// The block arithmetic is ggml_int8_kernels.hpp's: per block an 8-lane integer accumulator,
// lane l = sum over the block's 32-weight chunks of sc_j u_k q_k for the chunk bytes 4l .. 4l + 3,
// then ggml_block_terms. Integer sums are exact, so however the chunks are grouped the lanes,
// and hence the float sums, are the prefill tile's bit for bit (ggml_matvec equals the matmul
// row).
//
// VNNI path, Q4_K / Q5_K / Q6_K: 512-bit vectors hold two 32-weight chunks (a "pair"), so one
// vpmaddubsw + vpdpwssd does 64 weights; the pair is the two chunks one 64-byte load of the
// packed codes yields (Q4_K / Q5_K: the low or high nibbles of qs[64h .. 64h + 63], chunks
// (c, c + 2); Q6_K: ql[64n ..] with chunks (c, c + 1)), and the activation codes are laid out in
// the same pair order once per call (ggml_decode_codes). The pair's 16-bit scale vector is one
// vpermw of the block's scales. The 256-bit kernels (AVX2 path, Q2_K / Q3_K on VNNI) run
// ggml_int8_kernels.hpp's chunk loop with the activation load shared by the R rows. The
// 32-weight blocks run ggml_legacy_kernels.hpp's decode.

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/ggml_int8_kernels.hpp"
#include "inferkit/quant/detail/ggml_legacy_kernels.hpp"
#include "inferkit/quant/detail/kernel_dispatch.hpp"
#include "inferkit/quant/ggml_blocks.hpp"

#if defined(INFERKIT_QUANT_AVX512VNNI) || defined(INFERKIT_QUANT_AVX2)
#include <immintrin.h>
#endif

namespace inferkit::detail {

/// Whether the VNNI decode of layout L runs on 512-bit chunk pairs (file comment).
template <class L>
inline constexpr bool kGgmlPairs512 =
    L::kType == GgmlType::kQ4_K || L::kType == GgmlType::kQ5_K || L::kType == GgmlType::kQ6_K;

/// Weight rows per decode pass: 4 on the 512-bit pairs (4 accumulators and 8 float sums stay
/// in 32 registers beside a block's 4 shared activation vectors; 5% faster than 1 row, measured
/// in L1), 1 on the 256-bit K-quant kernels (with 16 registers the extra rows spill: 30%
/// slower). The legacy kernels (ggml_legacy_kernels.hpp): 4 on VNNI (4096x14336 from DRAM, 1
/// thread of a loaded Zen 4: Q8_0 5.1 ms against 7.5 for 1 row, Q4_0 2.6 against 3.7; from L3,
/// 4096x4096, 1 row is faster: Q8_0 0.51 against 0.85 ms), 1 on AVX2 (2 rows: 0-7% slower).
template <class L, class Path>
inline constexpr int kGgmlDecodeRows = kGgmlLegacy<L> ? (std::is_same_v<Path, Avx512VnniPath> ? 4 : 1)
                                       : std::is_same_v<Path, Avx512VnniPath>&& kGgmlPairs512<L> ? 4
                                                                                                 : 1;

/// The two chunks of pair p (0 .. 3) of a 256-weight block, in the order the packed codes give
/// them (file comment).
template <class L>
constexpr std::array<int, 2> ggml_pair_chunks(int p) {
  if constexpr (L::kType == GgmlType::kQ6_K)
    return {2 * p, 2 * p + 1};
  else
    return {4 * (p / 2) + p % 2, 4 * (p / 2) + p % 2 + 2};
}

/// Activation codes in the order the decode kernel reads them: x.q_row(0) itself, or for the
/// pair layouts whose chunks are not adjacent (Q4_K / Q5_K) a copy with each block's chunks in
/// pair order, written into `scratch`.
template <class L, class Path>
inline const std::int8_t* ggml_decode_codes(Path, const GgmlQ8Rows& x, AlignedBuffer<std::int8_t>& scratch) {
  const std::int8_t* q = x.q_row(0);
  if constexpr (std::is_same_v<Path, Avx512VnniPath> && kGgmlPairs512<L> && L::kType != GgmlType::kQ6_K) {
    scratch.resize(static_cast<std::size_t>(x.cols));
    for (Index b = 0; b < x.cols / 256; ++b)
      for (int p = 0; p < 4; ++p)
        for (int h = 0; h < 2; ++h)
          std::memcpy(scratch.data() + b * 256 + 64 * p + 32 * h, q + b * 256 + 32 * ggml_pair_chunks<L>(p)[h], 32);
    return scratch.data();
  }
  return q;
}

/// What a decode call prepares once from its activation row: the codes in kernel order
/// (ggml_decode_codes) and the legacy kernels' factors and corrections (GgmlLegacyInput).
struct GgmlDecodeInput {
  AlignedBuffer<std::int8_t> codes_buf;
  const std::int8_t* q = nullptr;
  GgmlLegacyInput legacy;
};

template <class L, class Path>
inline void ggml_decode_prepare(Path path, const GgmlQ8Rows& x, GgmlDecodeInput& in) {
  in.q = ggml_decode_codes<L>(path, x, in.codes_buf);
  if constexpr (kGgmlLegacy<L>) ggml_legacy_prepare<L>(path, x, in.legacy);
}

#if defined(INFERKIT_QUANT_AVX2) || defined(INFERKIT_QUANT_AVX512VNNI)
/// R rows against one activation row with 256-bit chunks (file comment); y[r] for rows[r].
template <class L, int R, bool kVnni>
inline void ggml_decode_rows256(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x, float* y) {
  constexpr int kChunks = L::kBlock / 32;
  const std::int8_t* q = x.q_row(0);
  const float* dx = x.d_row(0);
  const std::int16_t* s = x.s_row(0);
  const Index nb = cols / L::kBlock;
  static_assert(L::kBlock != 32);
  __m256 main[R], mins[R];
  for (int r = 0; r < R; ++r) main[r] = mins[r] = _mm256_setzero_ps();
  GgmlParts parts[R];
  for (Index b = 0; b < nb; ++b) {
    for (int r = 0; r < R; ++r) ggml_parts_simd<L>(rows[r] + b * L::kBytes, parts[r]);
    // Two integer accumulators per row (even and odd chunks) halve the multiply-add chain.
    __m256i acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int c = 0; c < kChunks; ++c) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * L::kBlock + 32 * c));
      for (int r = 0; r < R; ++r) {
        const __m256i codes = ggml_chunk<L>(rows[r] + b * L::kBytes, c);
        const __m256i u = kGgmlSignedSimd<L> ? _mm256_abs_epi8(codes) : codes;
        const __m256i sv = ggml_chunk_scales<L>(parts[r], c);
        acc[r][c % 2] = ggml_mac<L, kVnni>(acc[r][c % 2], u, codes, qv, sv);
      }
    }
    for (int r = 0; r < R; ++r)
      ggml_block_terms<L>(parts[r], _mm256_add_epi32(acc[r][0], acc[r][1]), dx[b], s + b * (L::kBlock / 16), main[r],
                          mins[r]);
  }
  for (int r = 0; r < R; ++r) y[r] = ggml_hsum(main[r]) - ggml_hsum(mins[r]);
}
#endif

#if defined(INFERKIT_QUANT_AVX512VNNI)
/// How pair p's 16-bit scale vector is gathered (idx[p]): word w of the pair's 64 maddubs words
/// is weights 2w, 2w + 1 of chunk c = ggml_pair_chunks(p)[w / 16]. Q6_K: vpermw of
/// GgmlParts::sc, word 2c + (w % 16) / 8 (the 16-group's scale). Q4_K / Q5_K: vpshufb of the
/// scale bytes [sc_0 .. sc_7, mn_0 .. mn_7] (ggml_k4_scale_bytes) in every 128-bit lane, byte c
/// then a zero byte (0x80) per word; idx[4] gives GgmlParts::mn's order of the minimums (word w:
/// byte 8 + w / 2), for a 256-bit vpshufb.
template <class L>
struct GgmlPairScaleIndex {
  alignas(64) std::int16_t idx[5][32] = {};
  constexpr GgmlPairScaleIndex() {
    constexpr bool kK4 = L::kType != GgmlType::kQ6_K;
    constexpr int kZeroHigh = 0x80 << 8;
    for (int p = 0; p < 4; ++p)
      for (int w = 0; w < 32; ++w) {
        const int c = ggml_pair_chunks<L>(p)[w / 16];
        idx[p][w] = static_cast<std::int16_t>(kK4 ? (c | kZeroHigh) : 2 * c + (w % 16) / 8);
      }
    for (int w = 0; w < 32; ++w) idx[4][w] = static_cast<std::int16_t>((8 + (w % 16) / 2) | kZeroHigh);
  }
};
template <class L>
inline constexpr GgmlPairScaleIndex<L> kGgmlPairScaleIndex{};

/// 32 bytes at p in both 256-bit halves.
[[gnu::always_inline]] inline __m512i ggml_broadcast32(const std::uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
/// Per-half 16-bit shift counts (lo in the low 256 bits, hi in the high).
[[gnu::always_inline]] inline __m512i ggml_half_counts(short lo, short hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lo)), _mm256_set1_epi16(hi), 1);
}

/// The 64 codes of pair p of block b (the layout equations of ggml_blocks.hpp, two chunks at once).
template <class L>
[[gnu::always_inline]] inline __m512i ggml_pair_codes(const std::uint8_t* b, int p) {
  const __m512i m4 = _mm512_set1_epi8(15);
  if constexpr (L::kType == GgmlType::kQ6_K) {  // chunks 4n + 2h, 4n + 2h + 1: g = 2h, 2h + 1
    const int n = p / 2, h = p % 2;
    const __m512i ql = _mm512_loadu_si512(b + 64 * n);
    const __m512i low = _mm512_and_si512(h ? _mm512_srli_epi16(ql, 4) : ql, m4);
    const __m512i qh = ggml_broadcast32(b + 128 + 32 * n);  // bits 2g, 2g + 1 go to bits 4, 5
    const __m512i high =
        h ? _mm512_srlv_epi16(qh, ggml_half_counts(0, 2)) : _mm512_sllv_epi16(qh, ggml_half_counts(4, 2));
    return _mm512_ternarylogic_epi32(high, _mm512_set1_epi8(0x30), low, 0xEA);  // (high & 0x30) | low
  } else {
    constexpr int kLow = L::kType == GgmlType::kQ4_K ? 16 : 48;
    const __m512i v = _mm512_loadu_si512(b + kLow + 64 * (p / 2));
    const __m512i low = _mm512_and_si512(p % 2 ? _mm512_srli_epi16(v, 4) : v, m4);
    if constexpr (L::kType == GgmlType::kQ4_K) {
      return low;
    } else {  // Q5_K: bit c of qh[e] is chunk c's fifth bit
      const auto [c0, c1] = ggml_pair_chunks<L>(p);
      const __m512i sel = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << c0))),
                                             _mm256_set1_epi8(static_cast<char>(1 << c1)), 1);
      const __mmask64 k = _mm512_test_epi8_mask(ggml_broadcast32(b + 16), sel);
      return _mm512_mask_add_epi8(low, k, low, _mm512_set1_epi8(16));
    }
  }
}

/// R rows against one activation row with 512-bit chunk pairs (file comment); `q` is the
/// activation codes in pair order (ggml_decode_codes). Q4_K / Q5_K decode their scales and
/// factors in registers and add ggml_block_terms' two products themselves (the same operations
/// on the same values: main += cvt(acc) (dx d), mins += cvt(mn16 . S16) (dx dm)); Q6_K goes
/// through GgmlParts and ggml_block_terms.
template <class L, int R>
inline void ggml_decode_rows512(const std::uint8_t* const* rows, Index cols, const GgmlQ8Rows& x, const std::int8_t* q,
                                float* y) {
  constexpr bool kK4 = L::kType != GgmlType::kQ6_K;
  static_assert(!kK4 || L::kOffset == 0);
  const auto& index = kGgmlPairScaleIndex<L>;
  const float* dx = x.d_row(0);
  const std::int16_t* s = x.s_row(0);
  __m256 main[R], mins[R];
  for (int r = 0; r < R; ++r) main[r] = mins[r] = _mm256_setzero_ps();
  GgmlParts parts[R];
  for (Index b = 0; b < cols / 256; ++b) {
    __m512i qv[4];
    for (int p = 0; p < 4; ++p) qv[p] = _mm512_loadu_si512(q + b * 256 + 64 * p);
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + b * 16));
    const __m128 dxv = _mm_set1_ps(dx[b]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* blk = rows[r] + b * L::kBytes;
      __m512i sc;  // Q4_K / Q5_K: the 16 scale bytes in each lane; Q6_K: GgmlParts::sc
      if constexpr (kK4) {
        sc = _mm512_broadcast_i32x4(ggml_k4_scale_bytes(blk + 4));
      } else {
        ggml_parts_simd<L>(blk, parts[r]);
        sc = _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(parts[r].sc)));
      }
      __m512i acc = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const __m512i at = _mm512_load_si512(index.idx[p]);
        const __m512i sv = kK4 ? _mm512_shuffle_epi8(sc, at) : _mm512_permutexvar_epi16(at, sc);
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(ggml_pair_codes<L>(blk, p), qv[p]), sv);
      }
      const __m256i acc8 = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
      if constexpr (kK4) {
        std::int32_t factors;  // d, dmin
        std::memcpy(&factors, blk, 4);
        const __m128 f = _mm_mul_ps(dxv, _mm_cvtph_ps(_mm_cvtsi32_si128(factors)));  // dx d, dx dm
        const __m256i mn16 = _mm256_shuffle_epi8(_mm512_castsi512_si256(sc),
                                                 _mm256_load_si256(reinterpret_cast<const __m256i*>(index.idx[4])));
        main[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc8), _mm256_broadcastss_ps(f), main[r]);
        mins[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mn16, sums)),
                                  _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_set1_epi32(1)), mins[r]);
      } else {
        ggml_block_terms<L>(parts[r], acc8, dx[b], s + b * 16, main[r], mins[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = ggml_hsum(main[r]) - ggml_hsum(mins[r]);
}
#endif

/// y[n - n0] for rows n0 .. n1 of the matrix at `base` (`row_bytes` apart) against activation
/// row 0 of x; `in` from ggml_decode_prepare. kGgmlDecodeRows rows per pass, then single rows.
template <class L, class Path>
requires(!std::is_same_v<Path, ScalarPath>) inline void ggml_decode_rows(Path, const std::uint8_t* base,
                                                                         std::size_t row_bytes, Index n0, Index n1,
                                                                         Index cols, const GgmlQ8Rows& x,
                                                                         const GgmlDecodeInput& in, float* y) {
  const auto pass = [&](Index n, auto R) {
    const std::uint8_t* rows[R()];
    for (int r = 0; r < R(); ++r) rows[r] = base + static_cast<std::size_t>(n + r) * row_bytes;
#if defined(INFERKIT_QUANT_AVX512VNNI)
    if constexpr (std::is_same_v<Path, Avx512VnniPath>) {
      if constexpr (kGgmlLegacy<L>)
        ggml_legacy_decode<L, R()>(Avx512VnniPath{}, rows, cols, x, in.legacy, y + (n - n0));
      else if constexpr (kGgmlPairs512<L>)
        ggml_decode_rows512<L, R()>(rows, cols, x, in.q, y + (n - n0));
      else
        ggml_decode_rows256<L, R(), true>(rows, cols, x, y + (n - n0));
      return;
    }
#endif
#if defined(INFERKIT_QUANT_AVX2)
    if constexpr (std::is_same_v<Path, Avx2Path>) {
      if constexpr (kGgmlLegacy<L>)
        ggml_legacy_decode<L, R()>(Avx2Path{}, rows, cols, x, in.legacy, y + (n - n0));
      else
        ggml_decode_rows256<L, R(), false>(rows, cols, x, y + (n - n0));
    }
#endif
  };
  Index n = n0;
  constexpr int kRows = kGgmlDecodeRows<L, Path>;
  for (; n + kRows <= n1; n += kRows) pass(n, std::integral_constant<int, kRows>{});
  for (; n < n1; ++n) pass(n, std::integral_constant<int, 1>{});
}

}  // namespace inferkit::detail
