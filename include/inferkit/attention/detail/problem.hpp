#pragma once
// One sequence's attention problem after validation: what every kernel unit reads.

#include <cstdint>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

struct SequenceProblem {
  Tensor3View<const float> q;  // [Tq, Hq, d]
  Tensor3View<float> out;      // [Tq, Hq, d]
  MatrixView<float> lse;       // [Tq, Hq], or no rows when not requested
  TokenPositions q_pos;        // position of each query token
  Index group = 1;             // query heads per KV head
  float scale = 1.0f;
  MaskRule mask;
  float softcap = 0.0f;
  const float* slopes = nullptr;  // ALiBi slope per query head, or nullptr

  Index num_queries() const { return q.dim0(); }
  Index head_dim() const { return q.dim2(); }
};

/// Smallest and largest position among n positions.
inline void position_range(TokenPositions pos, Index n, std::int64_t& lo, std::int64_t& hi) {
  if (!pos.explicit_positions) {
    lo = pos.first;
    hi = std::int64_t{pos.first} + n - 1;
    return;
  }
  lo = hi = pos[0];
  for (Index i = 1; i < n; ++i) {
    lo = std::min<std::int64_t>(lo, pos[i]);
    hi = std::max<std::int64_t>(hi, pos[i]);
  }
}

}  // namespace inferkit::detail
