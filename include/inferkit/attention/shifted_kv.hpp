#pragma once
// A KV source whose tokens sit at the positions of another source plus a constant offset. Caches
// number their tokens from position 0; a process that holds only a token range of a longer
// sequence (a context-parallel shard, distributed/context_parallel.hpp) stores that range in an
// ordinary cache and presents it at its global positions through this view, so causal masks,
// sliding windows and ALiBi distances are those of the whole sequence.

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/error.hpp"

namespace inferkit {

/// View of a KvSource with every token position increased by `offset` (blocks, rows and
/// encodings unchanged, nothing copied). The inner source's blocks must number their tokens
/// consecutively (TokenPositions without an explicit array), as dense, quantized and paged
/// caches do; the view holds a copy of the inner source object (itself a view), so the cache
/// must outlive it.
template <KvSource S>
class ShiftedKv {
 public:
  /// @param inner   the source to shift (copied; it is itself a view of its cache)
  /// @param offset  added to every position, in tokens (the first global position of the range)
  /// @throws std::invalid_argument if a block of inner has explicit positions, or if a shifted
  ///         position would leave the int32 range.
  ShiftedKv(S inner, std::int32_t offset) : inner_(std::move(inner)), offset_(offset) {
    for (Index b = 0; b < inner_.num_blocks(); ++b) {
      const auto blk = inner_.block(0, b);
      require(blk.positions.explicit_positions == nullptr, "inner.block(0, " + std::to_string(b) + ").positions",
              "explicit", "must be consecutive (ShiftedKv shifts a first position)");
      const std::int64_t last = std::int64_t{blk.positions.first} + blk.num_tokens - 1 + offset;
      const std::int64_t first = std::int64_t{blk.positions.first} + offset;
      require(first >= std::numeric_limits<std::int32_t>::min() && last <= std::numeric_limits<std::int32_t>::max(),
              "offset", offset, "moves positions outside the int32 range");
    }
  }

  /// KV heads of the inner source.
  Index num_kv_heads() const { return inner_.num_kv_heads(); }
  /// Head dimension of the inner source.
  Index head_dim() const { return inner_.head_dim(); }
  /// Tokens of the inner source.
  Index num_tokens() const { return inner_.num_tokens(); }
  /// Blocks of the inner source.
  Index num_blocks() const { return inner_.num_blocks(); }
  /// Block b of KV head `head`, its positions shifted by the offset.
  auto block(Index head, Index b) const {
    auto blk = inner_.block(head, b);
    blk.positions.first += offset_;
    return blk;
  }
  /// The offset added to every position.
  std::int32_t offset() const { return offset_; }
  /// The inner source.
  const S& inner() const { return inner_; }

 private:
  S inner_;
  std::int32_t offset_;
};

}  // namespace inferkit
