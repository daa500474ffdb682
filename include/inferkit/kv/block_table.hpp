#pragma once
// A sequence's KV cache as a list of pool blocks (paged attention): token t lives in block
// t / page_size at slot t % page_size. The table holds one reference to each of its blocks;
// copying a table forks it (both hold the blocks), and appending into a last block that others
// also hold copies it first (copy-on-write), so a shared block is never written. Attention reads
// the table through the KV block view without copying: one block per page, positions
// page_index * page_size + slot.

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_pool.hpp"

namespace inferkit {

template <class T = float>
class BlockTable {
 public:
  explicit BlockTable(BlockPool<T>& pool) : pool_(&pool) {}
  BlockTable(const BlockTable& o) : pool_(o.pool_), blocks_(o.blocks_), tokens_(o.tokens_) {
    for (BlockId b : blocks_) pool_->retain(b);
  }
  BlockTable& operator=(const BlockTable& o) {
    if (this != &o) {
      BlockTable copy(o);
      swap(copy);
    }
    return *this;
  }
  BlockTable(BlockTable&& o) noexcept : pool_(o.pool_), blocks_(std::move(o.blocks_)), tokens_(o.tokens_) {
    o.blocks_.clear();
    o.tokens_ = 0;
  }
  BlockTable& operator=(BlockTable&& o) noexcept {
    swap(o);
    return *this;
  }
  ~BlockTable() { clear(); }

  void swap(BlockTable& o) noexcept {
    std::swap(pool_, o.pool_);
    blocks_.swap(o.blocks_);
    std::swap(tokens_, o.tokens_);
  }

  Index num_tokens() const { return tokens_; }
  const std::vector<BlockId>& blocks() const { return blocks_; }

  /// Starts the table with shared full blocks holding `tokens` tokens (e.g. a prefix-trie match);
  /// the table retains them.
  void assign_prefix(std::span<const BlockId> blocks, Index tokens) {
    require(tokens == static_cast<Index>(blocks.size()) * pool_->page_size(), "tokens", tokens,
            "must fill the given blocks exactly (" + std::to_string(blocks.size()) + " pages)");
    clear();
    for (BlockId b : blocks) {
      pool_->retain(b);
      blocks_.push_back(b);
    }
    tokens_ = tokens;
  }

  /// Replaces the block of full page `page` by `block`, another block holding the same K/V for
  /// the same tokens (e.g. the prefix trie's copy of a page this sequence computed too): retains
  /// `block`, releases the old one, so concurrent copies of a prefix collapse into one.
  /// Throws std::invalid_argument when `page` is not a full page of the table or `block` is not
  /// allocated.
  void share_page(Index page, BlockId block) {
    if (page < 0 || (page + 1) * pool_->page_size() > tokens_) [[unlikely]]
      throw_invalid_argument("page", page, "must be a full page of the table (" + std::to_string(tokens_ / pool_->page_size()) + " full pages)");
    pool_->retain(block);  // first: sharing the block already there must not free it
    pool_->release(blocks_[static_cast<std::size_t>(page)]);
    blocks_[static_cast<std::size_t>(page)] = block;
  }

  /// Makes room for `n` more tokens: copies a shared, partially filled last block, allocates new
  /// blocks. Returns false (and changes nothing the caller can see) when the pool runs out.
  bool reserve(Index n) {
    const Index page = pool_->page_size();
    if (tokens_ % page != 0 && !blocks_.empty() && pool_->refcount(blocks_.back()) > 1) {
      const auto copy = pool_->allocate();
      if (!copy) return false;
      pool_->copy_tokens(blocks_.back(), *copy, tokens_ % page);
      pool_->release(blocks_.back());
      blocks_.back() = *copy;
    }
    const Index need = ceil_div_(tokens_ + n, page);
    std::vector<BlockId> fresh;
    while (static_cast<Index>(blocks_.size() + fresh.size()) < need) {
      const auto b = pool_->allocate();
      if (!b) {
        for (BlockId f : fresh) pool_->release(f);
        return false;
      }
      fresh.push_back(*b);
    }
    blocks_.insert(blocks_.end(), fresh.begin(), fresh.end());
    return true;
  }

  /// Writes tokens [num_tokens(), num_tokens() + k.dim0()) of one layer ([tokens, heads, dim]);
  /// room must have been reserved. commit() makes them visible. Throws std::out_of_range for a
  /// layer outside the pool's, std::invalid_argument for bad shapes or missing room.
  void write(Index layer, Tensor3View<const float> k, Tensor3View<const float> v) {
    const BlockPoolConfig& c = pool_->config();
    require_index(layer, c.layers, "layer");  // the pool's row pointers do not check it
    require(k.dim1() == c.kv_heads && k.dim2() == c.head_dim, "keys.dim1()", k.dim1(),
            "keys must be [tokens, kv_heads, head_dim] of the pool");
    require(v.dim0() == k.dim0() && v.dim1() == k.dim1() && v.dim2() == k.dim2(), "values.dim0()", v.dim0(),
            "values must have the shape of keys");
    require((tokens_ + k.dim0() + c.page_size - 1) / c.page_size <= static_cast<Index>(blocks_.size()), "tokens",
            k.dim0(), "need reserve() first");
    for (Index t = 0; t < k.dim0(); ++t) {
      const Index pos = tokens_ + t, b = pos / c.page_size, slot = pos % c.page_size;
      for (Index h = 0; h < c.kv_heads; ++h) {
        convert(k.ptr(t, h), pool_->key_rows(blocks_[b], layer, h) + slot * c.head_dim, static_cast<std::size_t>(c.head_dim));
        convert(v.ptr(t, h), pool_->value_rows(blocks_[b], layer, h) + slot * c.head_dim, static_cast<std::size_t>(c.head_dim));
      }
    }
  }

  /// Writes one layer's rows for committed tokens [first, first + k.dim0()) (models that commit
  /// a step's tokens before running their layers).
  void write_at(Index layer, Index first, Tensor3View<const float> k, Tensor3View<const float> v) {
    require(first >= 0 && first + k.dim0() <= tokens_, "first", first,
            "rows must lie within the committed tokens (" + std::to_string(tokens_) + ")");
    const Index saved = tokens_;
    tokens_ = first;
    write(layer, k, v);
    tokens_ = saved;
  }

  void commit(Index n) {
    require(n >= 0 && ceil_div_(tokens_ + n, pool_->page_size()) <= static_cast<Index>(blocks_.size()), "n", n,
            "exceeds the reserved room");
    tokens_ += n;
  }

  /// Keeps the first `n` tokens, releasing blocks no longer needed.
  void truncate(Index n) {
    require(n >= 0 && n <= tokens_, "n", n, "must be in [0, " + std::to_string(tokens_) + "]");
    const Index keep = ceil_div_(n, pool_->page_size());
    while (static_cast<Index>(blocks_.size()) > keep) {
      pool_->release(blocks_.back());
      blocks_.pop_back();
    }
    tokens_ = n;
  }

  void clear() {
    for (BlockId b : blocks_) pool_->release(b);
    blocks_.clear();
    tokens_ = 0;
  }

  /// The KV block view of one layer.
  class Source {
   public:
    Source(const BlockTable& t, Index layer) : t_(&t), layer_(layer) {}
    Index num_kv_heads() const { return t_->pool_->config().kv_heads; }
    Index head_dim() const { return t_->pool_->config().head_dim; }
    Index num_tokens() const { return t_->tokens_; }
    Index num_blocks() const { return ceil_div_(t_->tokens_, t_->pool_->page_size()); }
    KvBlock<DenseRows<T>, DenseRows<T>> block(Index head, Index b) const {
      const Index page = t_->pool_->page_size();
      const Index n = std::min(page, t_->tokens_ - b * page);
      const BlockId id = t_->blocks_[static_cast<std::size_t>(b)];
      const BlockPool<T>& pool = *t_->pool_;
      return {n, DenseRows<T>{pool.key_rows(id, layer_, head), head_dim()},
              DenseRows<T>{pool.value_rows(id, layer_, head), head_dim()},
              TokenPositions{nullptr, static_cast<std::int32_t>(b * page)}};
    }

   private:
    const BlockTable* t_;
    Index layer_;
  };
  Source source(Index layer) const {
    require_index(layer, pool_->config().layers, "layer");
    return Source(*this, layer);
  }

 private:
  static Index ceil_div_(Index a, Index b) { return (a + b - 1) / b; }

  BlockPool<T>* pool_;
  std::vector<BlockId> blocks_;
  Index tokens_ = 0;
};

}  // namespace inferkit
