#pragma once
// A pool of fixed-size KV blocks (PagedAttention, Kwon et al. 2023): each block holds
// `page_size` tokens of keys and values for every layer and KV head, laid out
// [block][layer][head][slot][head_dim] so one (block, layer, head) is `page_size` contiguous rows.
// Blocks come from a free list under a hard budget (`max_blocks`, storage reserved up front);
// running out is an explicit result (std::nullopt), never a crash or an overwrite. Blocks are
// reference counted: whoever holds one (a sequence's block table, the prefix trie) retains it,
// and it returns to the free list when the last holder releases it. Single writer.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

using BlockId = std::int32_t;

/// Shape and budget of a BlockPool, for designated initializers.
struct BlockPoolConfig {
  Index layers = 1, kv_heads = 1, head_dim = 1, page_size = 16, max_blocks = 1024;
};

template <class T = float>
/// Fixed-size KV blocks under a hard budget, reference counted (file comment). Single writer.
class BlockPool {
 public:
  /// Reserves storage for c.max_blocks blocks up front.
  /// @throws std::invalid_argument naming a field <= 0 (or max_blocks >= 2^31).
  explicit BlockPool(BlockPoolConfig c) : c_(c) {
    require(c.layers > 0, "layers", c.layers, "must be > 0");
    require(c.kv_heads > 0, "kv_heads", c.kv_heads, "must be > 0");
    require(c.head_dim > 0, "head_dim", c.head_dim, "must be > 0");
    require(c.page_size > 0, "page_size", c.page_size, "must be > 0");
    require(c.max_blocks > 0 && c.max_blocks < (Index{1} << 31), "max_blocks", c.max_blocks, "must be in [1, 2^31)");
    block_elems_ = c.layers * c.kv_heads * c.page_size * c.head_dim;
    keys_.resize(static_cast<std::size_t>(c.max_blocks * block_elems_));
    values_.resize(keys_.size());
    refs_.assign(static_cast<std::size_t>(c.max_blocks), 0);
    free_.reserve(static_cast<std::size_t>(c.max_blocks));
    for (Index b = c.max_blocks; b-- > 0;) free_.push_back(static_cast<BlockId>(b));
  }

  /// The pool's configuration.
  const BlockPoolConfig& config() const { return c_; }
  /// Tokens per block.
  Index page_size() const { return c_.page_size; }

  /// A fresh block with reference count 1, or nullopt when the budget is exhausted.
  std::optional<BlockId> allocate() {
    if (free_.empty()) return std::nullopt;
    const BlockId b = free_.back();
    free_.pop_back();
    refs_[static_cast<std::size_t>(b)] = 1;
    return b;
  }

  /// Adds one reference to a live block. @throws std::invalid_argument for a free or unknown block.
  void retain(BlockId b) {
    check_live(b, "retain");
    ++refs_[static_cast<std::size_t>(b)];
  }

  /// Drops one reference; the block is free again when none remain.
  void release(BlockId b) {
    check_live(b, "release");
    if (--refs_[static_cast<std::size_t>(b)] == 0) free_.push_back(b);
  }

  /// References held on block b (0 = free). @throws std::out_of_range for an unknown block.
  Index refcount(BlockId b) const {
    require_index(b, c_.max_blocks, "block");
    return refs_[static_cast<std::size_t>(b)];
  }
  /// Blocks with at least one reference.
  Index used_blocks() const { return c_.max_blocks - static_cast<Index>(free_.size()); }
  /// Blocks on the free list.
  Index free_blocks() const { return static_cast<Index>(free_.size()); }
  /// Bytes of K/V held by live blocks.
  std::size_t bytes_in_use() const { return static_cast<std::size_t>(used_blocks()) * block_bytes(); }
  /// Bytes of K and V of one block.
  std::size_t block_bytes() const { return 2 * static_cast<std::size_t>(block_elems_) * sizeof(T); }

  /// Key rows of (block, layer, head): page_size rows of head_dim values; not bounds-checked.
  T* key_rows(BlockId b, Index layer, Index head) { return keys_.data() + offset(b, layer, head); }
  /// Value rows of (block, layer, head); not bounds-checked.
  T* value_rows(BlockId b, Index layer, Index head) { return values_.data() + offset(b, layer, head); }
  /// Key rows of (block, layer, head), read only; not bounds-checked.
  const T* key_rows(BlockId b, Index layer, Index head) const { return keys_.data() + offset(b, layer, head); }
  /// Value rows of (block, layer, head), read only; not bounds-checked.
  const T* value_rows(BlockId b, Index layer, Index head) const { return values_.data() + offset(b, layer, head); }

  /// Copies the first `tokens` slots of every layer and head from one block to another.
  void copy_tokens(BlockId from, BlockId to, Index tokens) {
    for (Index l = 0; l < c_.layers; ++l)
      for (Index h = 0; h < c_.kv_heads; ++h) {
        std::copy_n(key_rows(from, l, h), tokens * c_.head_dim, key_rows(to, l, h));
        std::copy_n(value_rows(from, l, h), tokens * c_.head_dim, value_rows(to, l, h));
      }
  }

 private:
  std::size_t offset(BlockId b, Index layer, Index head) const {
    return static_cast<std::size_t>(((static_cast<Index>(b) * c_.layers + layer) * c_.kv_heads + head) * c_.page_size * c_.head_dim);
  }
  void check_live(BlockId b, const char* what) const {
    require_index(b, c_.max_blocks, "block");
    require(refs_[static_cast<std::size_t>(b)] > 0, std::string(what) + " block", b, "is not allocated");
  }

  BlockPoolConfig c_;
  Index block_elems_ = 0;
  std::vector<T> keys_, values_;
  std::vector<Index> refs_;
  std::vector<BlockId> free_;
};

// Fields declared together on one line, documented here.
/// @var BlockPoolConfig::layers
/// Transformer layers (> 0).

/// @var BlockPoolConfig::kv_heads
/// KV heads per layer (> 0).

/// @var BlockPoolConfig::head_dim
/// Values per head (> 0).

/// @var BlockPoolConfig::page_size
/// Tokens per block (> 0).

/// @var BlockPoolConfig::max_blocks
/// Hard budget of blocks, reserved up front (in [1, 2^31)).

}  // namespace inferkit
