#pragma once
// Masked argmax: the allowed token with the largest logit, read straight from the logits and a
// grammar's TokenBitset in one pass (the greedy step of constrained decoding, and the max a
// masked softmax subtracts), without writing -inf into the masked logits or listing the allowed
// ids first. A word of 64 mask bits with no bit set skips its 64 logits unread.
//
//   inferkit::TokenBitset mask;
//   matcher.fill_mask(mask);
//   const inferkit::TokenId next = inferkit::masked_argmax(logits, mask);   // -1: nothing allowed
//
// Paths (chosen at compile time): AVX-512 (16 lanes under a __mmask16 taken from the mask word,
// per-lane running maxima and their ids in four independent chains, vcmpps / masked moves), AVX2
// (8 lanes; the lane mask from the mask byte by a broadcast, an AND with the lane bits and a
// compare; four chains), and a scalar loop over the set bits. Every path returns the same id: the largest logit, the
// lowest id among equal ones; NaN and -inf logits are never chosen (-1 when no allowed logit is above -inf).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/grammar/token_bitset.hpp"

namespace inferkit {

/// Which path masked_argmax runs (masked_argmax_path tests each one the build has).
enum class MaskedArgmaxPath {
  kAuto,    ///< the widest this build has
  kScalar,  ///< a loop over the set bits (always available)
  kAvx2,    ///< 8 lanes (builds with AVX2 and xsimd)
  kAvx512,  ///< 16 lanes (builds with AVX-512F)
};

/// Whether this build has path `p`.
constexpr bool has_masked_argmax_path(MaskedArgmaxPath p) {
  switch (p) {
    case MaskedArgmaxPath::kAuto:
    case MaskedArgmaxPath::kScalar:
      return true;
    case MaskedArgmaxPath::kAvx2:
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
      return true;
#else
      return false;
#endif
    case MaskedArgmaxPath::kAvx512:
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
      return true;
#else
      return false;
#endif
  }
  return false;
}

namespace detail {

// Picks (value, id) over the ones found so far: larger value, or equal value and lower id.
inline void better_of(float v, std::int32_t id, float& best_v, std::int32_t& best) {
  if (id >= 0 && (v > best_v || (v == best_v && (best < 0 || id < best)))) {
    best_v = v;
    best = id;
  }
}

inline TokenId masked_argmax_scalar(const float* logits, const std::uint64_t* words, std::size_t n_words) {
  float best_v = -std::numeric_limits<float>::infinity();
  TokenId best = -1;
  for (std::size_t i = 0; i < n_words; ++i)
    for (std::uint64_t w = words[i]; w != 0; w &= w - 1) {
      const auto id = static_cast<TokenId>(i * 64 + static_cast<std::size_t>(std::countr_zero(w)));
      if (logits[id] > best_v) {  // strict: the lowest id wins ties; NaN never compares greater
        best_v = logits[id];
        best = id;
      }
    }
  return best;
}

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
inline TokenId masked_argmax_avx512(const float* logits, const std::uint64_t* words, std::size_t n_words) {
  // Four running maxima, one per 16-id quarter of a mask word: four independent compare / move
  // chains (one chain would wait on its own latency every 16 ids).
  __m512 best[4];
  __m512i best_id[4];
  for (int q = 0; q < 4; ++q) {
    best[q] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    best_id[q] = _mm512_set1_epi32(-1);
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::size_t i = 0; i < n_words; ++i) {
    const std::uint64_t w = words[i];
    if (w == 0) continue;
    for (int q = 0; q < 4; ++q) {
      const auto k = static_cast<__mmask16>(w >> (16 * q));
      const std::size_t at = i * 64 + static_cast<std::size_t>(16 * q);
      const __m512 x = _mm512_maskz_loadu_ps(k, logits + at);  // masked lanes never read (the tail)
      const __mmask16 gt = _mm512_mask_cmp_ps_mask(k, x, best[q], _CMP_GT_OQ);
      best[q] = _mm512_mask_mov_ps(best[q], gt, x);
      best_id[q] =
          _mm512_mask_mov_epi32(best_id[q], gt, _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(at))));
    }
  }
  // Across chains and lanes: the largest value, the lowest id among equal ones (each lane of each
  // chain kept its first).
  alignas(64) float v[64];
  alignas(64) std::int32_t id[64];
  for (int q = 0; q < 4; ++q) {
    _mm512_store_ps(v + 16 * q, best[q]);
    _mm512_store_si512(id + 16 * q, best_id[q]);
  }
  float best_v = -std::numeric_limits<float>::infinity();
  std::int32_t best_i = -1;
  for (int l = 0; l < 64; ++l) better_of(v[l], id[l], best_v, best_i);
  return best_i;
}
#endif

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
inline TokenId masked_argmax_avx2(const float* logits, const std::uint64_t* words, std::size_t n_words) {
  // Four running maxima (bytes q and q + 4 of a mask word share chain q & 3), as on AVX-512.
  __m256 best[4];
  __m256i best_id[4];
  for (int c = 0; c < 4; ++c) {
    best[c] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    best_id[c] = _mm256_set1_epi32(-1);
  }
  const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::size_t i = 0; i < n_words; ++i) {
    const std::uint64_t w = words[i];
    if (w == 0) continue;
    for (int q = 0; q < 8; ++q) {
      const auto byte = static_cast<int>((w >> (8 * q)) & 0xFF);
      const int c = q & 3;
      const std::size_t at = i * 64 + static_cast<std::size_t>(8 * q);
      // Lane j allowed when bit j of the byte is set.
      const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), bits), bits);
      const __m256 x = _mm256_maskload_ps(logits + at, on);  // lanes off are not read (the tail)
      const __m256 gt = _mm256_and_ps(_mm256_castsi256_ps(on), _mm256_cmp_ps(x, best[c], _CMP_GT_OQ));
      best[c] = _mm256_blendv_ps(best[c], x, gt);
      best_id[c] = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(best_id[c]),
                           _mm256_castsi256_ps(_mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(at)))), gt));
    }
  }
  alignas(32) float v[32];
  alignas(32) std::int32_t id[32];
  for (int c = 0; c < 4; ++c) {
    _mm256_store_ps(v + 8 * c, best[c]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(id + 8 * c), best_id[c]);
  }
  float best_v = -std::numeric_limits<float>::infinity();
  std::int32_t best_i = -1;
  for (int l = 0; l < 32; ++l) better_of(v[l], id[l], best_v, best_i);
  return best_i;
}
#endif

}  // namespace detail

/// The allowed id with the largest logit (file comment), on path `path` (std::invalid_argument
/// for a path this build lacks, or a mask whose size is not the logits'); -1 when no allowed
/// logit is above -inf.
inline TokenId masked_argmax(std::span<const float> logits, const TokenBitset& mask,
                             MaskedArgmaxPath path = MaskedArgmaxPath::kAuto) {
  require(mask.size() == logits.size(), "masked_argmax mask size", mask.size(),
          "must equal the logits size " + std::to_string(logits.size()));
  require(has_masked_argmax_path(path), "masked_argmax path", static_cast<int>(path), "is not in this build");
  const std::uint64_t* words = mask.words().data();
  const std::size_t n = mask.words().size();
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  if (path == MaskedArgmaxPath::kAuto || path == MaskedArgmaxPath::kAvx512)
    return detail::masked_argmax_avx512(logits.data(), words, n);
#endif
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
  if (path == MaskedArgmaxPath::kAuto || path == MaskedArgmaxPath::kAvx2)
    return detail::masked_argmax_avx2(logits.data(), words, n);
#endif
  return detail::masked_argmax_scalar(logits.data(), words, n);
}

}  // namespace inferkit
