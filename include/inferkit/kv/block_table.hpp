#pragma once
// A sequence's KV cache as a list of pool blocks (paged attention): token t lives in block
// t / page_size at slot t % page_size. The table holds one reference to each of its blocks;
// copying a table forks it (both hold the blocks), and appending into a last block that others
// also hold copies it first (copy-on-write), so a shared block is never written. Attention reads
// the table through the KV block view without copying: one block per page, positions
// page_index * page_size + slot.
//
// Over a quantized pool (BlockPool<QuantizedKv>) a written row is quantized into its page at
// once (per-token specs), or, for per-channel keys, kept in float in the table's tail until its
// group of group_size tokens is complete and then quantized into the page (KIVI): the tail holds
// the group still filling (the float tail of the quantized cache with residual 0) plus the float
// rows of the group quantized last, so rejected speculative tokens can be dropped (truncate)
// without re-quantizing anything. Per-channel keys of a layer are therefore written in token
// order, each token once it is quantized.

#include <algorithm>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/quant_rows.hpp"

namespace inferkit {

template <class T = float>
class BlockTable {
 public:
  /// An empty table over `pool` (which must outlive it).
  explicit BlockTable(BlockPool<T>& pool) : pool_(&pool) {
    if constexpr (kQuantizedPool<T>) {
      const BlockPoolConfig& c = pool.config();
      if (c.quant.keys.axis == QuantAxis::kPerChannel) {
        group_ = c.quant.keys.group_size;
        tail_.assign(static_cast<std::size_t>(c.layers * c.kv_heads * (group_ + c.page_size) * c.head_dim), 0.0f);
        written_.assign(static_cast<std::size_t>(c.layers), 0);
        prev_valid_.assign(static_cast<std::size_t>(c.layers), 0);
      }
    }
  }
  BlockTable(const BlockTable& o)
      : pool_(o.pool_), blocks_(o.blocks_), tokens_(o.tokens_), group_(o.group_), tail_(o.tail_), written_(o.written_),
        prev_valid_(o.prev_valid_) {
    for (BlockId b : blocks_) pool_->retain(b);
  }
  BlockTable& operator=(const BlockTable& o) {
    if (this != &o) {
      BlockTable copy(o);
      swap(copy);
    }
    return *this;
  }
  BlockTable(BlockTable&& o) noexcept
      : pool_(o.pool_), blocks_(std::move(o.blocks_)), tokens_(o.tokens_), group_(o.group_), tail_(std::move(o.tail_)),
        written_(std::move(o.written_)), prev_valid_(std::move(o.prev_valid_)) {
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
    std::swap(group_, o.group_);
    tail_.swap(o.tail_);
    written_.swap(o.written_);
    prev_valid_.swap(o.prev_valid_);
  }

  /// Tokens committed.
  Index num_tokens() const { return tokens_; }
  /// Bytes of the float key tail a quantized pool with per-channel keys keeps per table (0
  /// otherwise): (group_size + page_size) rows per layer and KV head, outside the pool.
  std::size_t tail_bytes() const { return tail_.size() * sizeof(float); }
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
    std::fill(written_.begin(), written_.end(), tokens);  // whole pages: every key group quantized
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
  /// room must have been reserved. commit() makes them visible.
  void write(Index layer, Tensor3View<const float> k, Tensor3View<const float> v) {
    const BlockPoolConfig& c = pool_->config();
    require(k.dim1() == c.kv_heads && k.dim2() == c.head_dim, "keys.dim1()", k.dim1(),
            "keys must be [tokens, kv_heads, head_dim] of the pool");
    require(v.dim0() == k.dim0() && v.dim1() == k.dim1() && v.dim2() == k.dim2(), "values.dim0()", v.dim0(),
            "values must have the shape of keys");
    require((tokens_ + k.dim0() + c.page_size - 1) / c.page_size <= static_cast<Index>(blocks_.size()), "tokens",
            k.dim0(), "need reserve() first");
    require_index(layer, c.layers, "layer");
    for (Index t = 0; t < k.dim0(); ++t) {
      const Index pos = tokens_ + t, b = pos / c.page_size, slot = pos % c.page_size;
      if constexpr (kQuantizedPool<T>) {
        write_quantized(layer, pos, blocks_[static_cast<std::size_t>(b)], slot, k, v, t);
      } else {
        for (Index h = 0; h < c.kv_heads; ++h) {
          convert(k.ptr(t, h), pool_->key_rows(blocks_[b], layer, h) + slot * c.head_dim, static_cast<std::size_t>(c.head_dim));
          convert(v.ptr(t, h), pool_->value_rows(blocks_[b], layer, h) + slot * c.head_dim, static_cast<std::size_t>(c.head_dim));
        }
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

  /// Keeps the first `n` tokens, releasing blocks no longer needed. Per-channel quantized keys:
  /// `n` may cut only into the key group still filling or the one quantized last (their float
  /// rows are kept); otherwise std::invalid_argument, and nothing changes.
  void truncate(Index n) {
    require(n >= 0 && n <= tokens_, "n", n, "must be in [0, " + std::to_string(tokens_) + "]");
    if (group_ > 0) truncate_keys(n);
    const Index keep = ceil_div_(n, pool_->page_size());
    while (static_cast<Index>(blocks_.size()) > keep) {
      pool_->release(blocks_.back());
      blocks_.pop_back();
    }
    tokens_ = n;
  }

  /// Releases every block and forgets every token.
  void clear() {
    for (BlockId b : blocks_) pool_->release(b);
    blocks_.clear();
    tokens_ = 0;
    std::fill(written_.begin(), written_.end(), 0);
    std::fill(prev_valid_.begin(), prev_valid_.end(), 0);
  }

  /// The block type of Source: float / 16-bit rows, or quantized rows (QuantTailRows).
  using Block = std::conditional_t<kQuantizedPool<T>, KvBlock<QuantTailRows, QuantTailRows>,
                                   KvBlock<DenseRows<T>, DenseRows<T>>>;

  /// The KV block view of one layer.
  class Source {
   public:
    Source(const BlockTable& t, Index layer) : t_(&t), layer_(layer) {}
    Index num_kv_heads() const { return t_->pool_->config().kv_heads; }
    Index head_dim() const { return t_->pool_->config().head_dim; }
    Index num_tokens() const { return t_->tokens_; }
    Index num_blocks() const { return ceil_div_(t_->tokens_, t_->pool_->page_size()); }
    Block block(Index head, Index b) const {
      const Index page = t_->pool_->page_size();
      const Index n = std::min(page, t_->tokens_ - b * page);
      const BlockId id = t_->blocks_[static_cast<std::size_t>(b)];
      const BlockPool<T>& pool = *t_->pool_;
      const TokenPositions pos{nullptr, static_cast<std::int32_t>(b * page)};
      if constexpr (kQuantizedPool<T>) {
        const KvQuantConfig& q = pool.config().quant;
        QuantTailRows keys{pool.key_codes(id, layer_, head), pool.key_params(id, layer_, head), &q.keys, n, nullptr};
        if (t_->group_ > 0) {  // per-channel keys: the group still filling is in the table's tail
          const Index f = t_->flushed(layer_);
          if (f < b * page + n && f >= b * page) {
            keys.quantized = f - b * page;
            keys.tail = t_->current_rows(layer_, head);
          }  // a page past the tail's holds only unwritten rows
        }
        return {n, keys,
                QuantTailRows{pool.value_codes(id, layer_, head), pool.value_params(id, layer_, head), &q.values, n, nullptr},
                pos};
      } else {
        return {n, DenseRows<T>{pool.key_rows(id, layer_, head), head_dim()},
                DenseRows<T>{pool.value_rows(id, layer_, head), head_dim()}, pos};
      }
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

  // Per-channel keys: tokens of `layer` whose keys are quantized (whole groups written).
  Index flushed(Index layer) const { return written_[static_cast<std::size_t>(layer)] / group_ * group_; }
  // The tail of (layer, head): the float rows of the group quantized last ([0, group)), then of
  // the group still filling, token flushed(layer) first ([group, group + page)).
  float* previous_rows(Index layer, Index head) {
    const BlockPoolConfig& c = pool_->config();
    return tail_.data() + (layer * c.kv_heads + head) * (group_ + c.page_size) * c.head_dim;
  }
  float* current_rows(Index layer, Index head) { return previous_rows(layer, head) + group_ * pool_->config().head_dim; }
  const float* current_rows(Index layer, Index head) const { return const_cast<BlockTable*>(this)->current_rows(layer, head); }

  // Quantizes token `pos` (row t of k and v) of one layer into slot `slot` of block `id`.
  void write_quantized(Index layer, Index pos, BlockId id, Index slot, Tensor3View<const float> k,
                       Tensor3View<const float> v, Index t) {
    const BlockPoolConfig& c = pool_->config();
    const QuantSpec &ks = c.quant.keys, &vs = c.quant.values;
    const Index d = c.head_dim;
    if (group_ > 0) {  // checked before anything is written
      const Index written = written_[static_cast<std::size_t>(layer)];
      if (pos < flushed(layer)) [[unlikely]]
        throw_invalid_argument("token", pos, "of layer " + std::to_string(layer) +
                                                 ": its per-channel key group is quantized already (keys are written once, in token order)");
      if (pos > written) [[unlikely]]
        throw_invalid_argument("token", pos, "of layer " + std::to_string(layer) + ": per-channel keys are written in token order (next is " +
                                                 std::to_string(written) + ")");
    }
    for (Index h = 0; h < c.kv_heads; ++h) {
      quantize_token_row(v.ptr(t, h), vs, d, pool_->value_codes(id, layer, h) + slot * token_code_bytes(vs, d),
                         pool_->value_params(id, layer, h) + slot * token_groups(vs, d));
      if (group_ == 0)
        quantize_token_row(k.ptr(t, h), ks, d, pool_->key_codes(id, layer, h) + slot * token_code_bytes(ks, d),
                           pool_->key_params(id, layer, h) + slot * token_groups(ks, d));
    }
    if (group_ == 0) return;
    Index& written = written_[static_cast<std::size_t>(layer)];
    const Index f = flushed(layer);
    for (Index h = 0; h < c.kv_heads; ++h) std::copy_n(k.ptr(t, h), d, current_rows(layer, h) + (pos - f) * d);
    if (pos == written) ++written;
    if (written % group_ != 0) return;
    // The group [f, f + group) is complete: quantize it into its page, keep its float rows.
    const Index first_slot = f % c.page_size;
    const BlockId page_block = blocks_[static_cast<std::size_t>(f / c.page_size)];
    for (Index h = 0; h < c.kv_heads; ++h) {
      quantize_channel_group(current_rows(layer, h), group_, ks, d,
                             pool_->key_codes(page_block, layer, h) + first_slot * token_code_bytes(ks, d),
                             pool_->key_params(page_block, layer, h) + (first_slot / group_) * d);
      std::copy_n(current_rows(layer, h), group_ * d, previous_rows(layer, h));
    }
    prev_valid_[static_cast<std::size_t>(layer)] = 1;
  }

  // Per-channel keys: drops keys of tokens >= n, restoring the float rows of the group quantized
  // last when n cuts into it (its codes are then rewritten when it fills again).
  void truncate_keys(Index n) {
    const Index layers = pool_->config().layers;
    for (Index l = 0; l < layers; ++l) {  // check every layer before changing any
      const Index f = flushed(l);
      if (n < f && !(prev_valid_[static_cast<std::size_t>(l)] && n >= f - group_)) [[unlikely]]
        throw_invalid_argument("n", n, "cuts into per-channel quantized keys of layer " + std::to_string(l) +
                                           " whose float rows are gone (tokens before " +
                                           std::to_string(prev_valid_[static_cast<std::size_t>(l)] ? f - group_ : f) +
                                           " are quantized); a per-channel paged cache drops only tokens of its newest two key groups");
    }
    for (Index l = 0; l < layers; ++l) {
      Index& written = written_[static_cast<std::size_t>(l)];
      const Index f = flushed(l);
      if (n >= written) continue;
      if (n < f) {
        for (Index h = 0; h < pool_->config().kv_heads; ++h)
          std::copy_n(previous_rows(l, h), (n - (f - group_)) * pool_->config().head_dim, current_rows(l, h));
        prev_valid_[static_cast<std::size_t>(l)] = 0;
      }
      written = n;
    }
  }

  BlockPool<T>* pool_;
  std::vector<BlockId> blocks_;
  Index tokens_ = 0;
  // Quantized pool with per-channel keys (group_ > 0): the float key tail (previous_rows /
  // current_rows), per layer the tokens whose keys are written, and whether the group quantized
  // last still has its float rows in the tail.
  Index group_ = 0;
  std::vector<float> tail_;
  std::vector<Index> written_;
  std::vector<char> prev_valid_;
};

}  // namespace inferkit
