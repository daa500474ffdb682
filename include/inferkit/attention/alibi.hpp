#pragma once
// ALiBi slopes (Press et al. 2022, "Train Short, Test Long"), as in BLOOM, MPT and ggml: with c
// the largest power of two <= n, head h (0-based) gets 2^(-8(h+1)/c) for h < c, and the extra
// heads of a non-power-of-two count interleave the slopes of 2c heads: 2^(-4(2(h-c)+1)/c).
// The bias added to score(i, j) is -slope * (pos_i - pos_j); it is fused into the kernels'
// score loop and never materialized.

#include <cmath>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

inline std::vector<float> alibi_slopes(Index num_heads) {
  require(num_heads > 0, "num_heads", num_heads, "must be > 0");
  Index c = 1;
  while (c * 2 <= num_heads) c *= 2;
  std::vector<float> slopes(static_cast<std::size_t>(num_heads));
  for (Index h = 0; h < num_heads; ++h) {
    const double e = h < c ? -8.0 * double(h + 1) / double(c) : -4.0 * double(2 * (h - c) + 1) / double(c);
    slopes[static_cast<std::size_t>(h)] = static_cast<float>(std::exp2(e));
  }
  return slopes;
}

}  // namespace inferkit
