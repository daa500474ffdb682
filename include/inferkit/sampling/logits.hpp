#pragma once
// Logits validation and the small helpers every decoding rule shares.
//
// The one documented behaviour for non-finite logits: -inf means "filtered" and is allowed
// anywhere; NaN and +inf are errors (std::invalid_argument naming the first bad index); a row
// that is empty or entirely -inf is an error too.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Decoding order over a row: higher logit first, ties to the lower id.
struct DecodingOrder {
  std::span<const float> x;  ///< the row compared
  /// True when token a comes before token b.
  bool operator()(TokenId a, TokenId b) const {
    const float xa = x[static_cast<std::size_t>(a)], xb = x[static_cast<std::size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  }
};

/// Largest finite logit of a row and where it is.
struct LogitsSummary {
  float max = -std::numeric_limits<float>::infinity();  ///< largest logit
  TokenId argmax = -1;                                  ///< lowest id holding the maximum
};

namespace detail {
[[noreturn]] inline void throw_bad_logit(std::span<const float> logits, std::string_view name) {
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      throw_invalid_argument(std::string(name) + "[" + std::to_string(i) + "]", x,
                             "logits must be finite or -inf (filtered)");
  }
  throw_invalid_argument(std::string(name) + ".size()", logits.size(), "no logit is finite (all are -inf)");
}
}  // namespace detail

/// Validates a row of logits and returns its maximum and argmax (lowest id among ties).
/// Throws std::invalid_argument for an empty row, NaN, +inf or all -inf. One SIMD pass over
/// blocks of 1,024 logits: four independent max chains per block (a single chain is
/// latency-bound), a mask collecting "finite or -inf" (x < +inf is false exactly for NaN and
/// +inf), and the first block holding the overall max; the argmax is then searched in that
/// block only.
inline LogitsSummary scan_logits(std::span<const float> logits, std::string_view name = "logits") {
  require(!logits.empty(), std::string(name) + ".size()", logits.size(), "must be > 0 (empty vocabulary)");
  using simd::VecF;
  constexpr std::size_t W = simd::kWidth, kBlock = 1024;
  const float* x = logits.data();
  const std::size_t n = logits.size();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const VecF neg_inf = simd::broadcast(kNegInf), pos_inf = simd::broadcast(std::numeric_limits<float>::infinity());
  auto ok = pos_inf > neg_inf;  // all lanes true
  float best = kNegInf;
  std::size_t best_block = 0;
  for (std::size_t b0 = 0; b0 < n; b0 += kBlock) {
    const std::size_t end = std::min(n, b0 + kBlock);
    VecF m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
    std::size_t i = b0;
    for (; i + 4 * W <= end; i += 4 * W) {
      const VecF a = simd::load(x + i), b = simd::load(x + i + W), c = simd::load(x + i + 2 * W),
                 d = simd::load(x + i + 3 * W);
      ok = simd::both(ok, simd::both(simd::both(a < pos_inf, b < pos_inf), simd::both(c < pos_inf, d < pos_inf)));
      m0 = simd::max(m0, a);
      m1 = simd::max(m1, b);
      m2 = simd::max(m2, c);
      m3 = simd::max(m3, d);
    }
    for (; i < end; i += W) {
      const VecF v = i + W <= end ? simd::load(x + i) : simd::load_partial(x + i, end - i, kNegInf);
      ok = simd::both(ok, v < pos_inf);
      m0 = simd::max(m0, v);
    }
    const float block_max = simd::hmax(simd::max(simd::max(m0, m1), simd::max(m2, m3)));
    if (block_max > best) {  // strict: the first block holding the max wins
      best = block_max;
      best_block = b0;
    }
  }
  if (!simd::all(ok)) detail::throw_bad_logit(logits, name);
  if (!(best > kNegInf)) detail::throw_bad_logit(logits, name);
  std::size_t j = best_block;
  while (x[j] != best) ++j;
  return {best, static_cast<TokenId>(j)};
}

}  // namespace inferkit
