#pragma once
// Key tiles at fixed token indices: the prefill kernel walks a source's tokens [begin, end) of
// one KV head in tiles [begin + k * tile, begin + (k + 1) * tile), whatever the block layout. A
// tile inside one block is read in place; a tile spanning blocks (pages smaller than the tile)
// is gathered into scratch, one copy per tile shared by all the unit's query rows. Fixed tile
// boundaries make a paged sequence's arithmetic the same as a dense one's (and keep tiles full:
// 16-token pages would otherwise mean 16-key tiles), which the batch-invariant mode relies on.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

template <KvSource S>
class KeyTileWalker {
 public:
  using Block = std::remove_cvref_t<decltype(std::declval<const S&>().block(0, 0))>;
  struct Piece {
    Block block;
    Index first = 0, count = 0;  // rows [first, first + count) of the block
  };

  /// Tiles of `tile` tokens over tokens [begin, end) of KV head g (token indices across blocks).
  KeyTileWalker(const S& kv, Index g, Index begin, Index end, Index tile)
      : kv_(&kv), g_(g), end_(end), tile_(tile), next_(begin), num_blocks_(kv.num_blocks()) {
    pieces_.reserve(4);
  }

  /// Moves to the next tile; false when none is left.
  bool next() {
    if (next_ >= end_) return false;
    begin_ = next_;
    const Index stop = std::min(next_ + tile_, end_);
    pieces_.clear();
    for (Index t = begin_; t < stop;) {
      while (block_offset_ + block_tokens_ <= t) {  // advance to the block holding token t
        block_offset_ += block_tokens_;
        if (++block_ >= num_blocks_) {
          next_ = end_;
          count_ = t - begin_;
          return count_ > 0;
        }
        block_tokens_ = kv_->block(g_, block_).num_tokens;
      }
      const Index first = t - block_offset_, n = std::min(block_tokens_ - first, stop - t);
      pieces_.push_back({kv_->block(g_, block_), first, n});
      t += n;
    }
    count_ = stop - begin_;
    next_ = stop;
    return true;
  }

  /// Index of the tile's first token and its token count.
  Index begin() const { return begin_; }
  Index count() const { return count_; }

  /// The tile's token positions; gathered into `scratch` (count() entries) when it spans blocks.
  TokenPositions positions(std::int32_t* scratch) const {
    if (pieces_.size() == 1) return pieces_[0].block.positions.offset(pieces_[0].first);
    Index o = 0;
    for (const Piece& p : pieces_)
      for (Index i = 0; i < p.count; ++i) scratch[o++] = p.block.positions[p.first + i];
    return {scratch, 0};
  }

  /// The tile's key (or value) rows as floats: in place when the tile lies in one float block
  /// and allow_in_place, else decoded or gathered into `scratch` (count() rows of `stride`).
  RowsF32 keys(Index d, float* scratch, Index stride, bool allow_in_place) const {
    return rows(
        d, scratch, stride, allow_in_place, [](const Block& b) -> const auto& { return b.keys; });
  }
  RowsF32 values(Index d, float* scratch, Index stride, bool allow_in_place) const {
    return rows(
        d, scratch, stride, allow_in_place, [](const Block& b) -> const auto& { return b.values; });
  }

 private:
  template <class Select>
  RowsF32 rows(Index d, float* scratch, Index stride, bool allow_in_place, Select select) const {
    if (pieces_.size() == 1)
      return select(pieces_[0].block).load_f32(pieces_[0].first, pieces_[0].count, d, scratch, stride, allow_in_place);
    Index o = 0;
    for (const Piece& p : pieces_) {
      float* dst = scratch + o * stride;
      const RowsF32 r = select(p.block).load_f32(p.first, p.count, d, dst, stride, false);
      if (r.data != dst)
        for (Index i = 0; i < p.count; ++i) std::copy_n(r.data + i * r.stride, d, dst + i * stride);
      o += p.count;
    }
    return {scratch, stride};
  }

  const S* kv_;
  Index g_, end_, tile_, next_, num_blocks_;
  Index begin_ = 0, count_ = 0;
  Index block_ = -1, block_offset_ = 0, block_tokens_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace inferkit::detail
