#pragma once
// A sequence's KV cache as a list of pool blocks (paged attention): token t lives in block
// t / page_size at slot t % page_size. The table holds one reference to each of its blocks;
// copying a table forks it (both hold the blocks), and appending into a last block that others
// also hold copies it first (copy-on-write), so a shared block is never written. Attention reads
// the table through the KV block view without copying: one block per run of pages with
// consecutive block ids (their rows are contiguous in the pool, so a fresh pool's sequence is a
// few long blocks and decode tiles stay full), positions page_index * page_size + slot.
//
// Over a quantized pool (BlockPool<QuantizedKv>) a written row is quantized into its page at
// once (per-token specs), or, for per-channel keys, kept in float in the table's tail until its
// group of group_size tokens is complete and then quantized into the page (KIVI): the tail holds
// the group still filling (the float tail of the quantized cache with residual 0) plus the float
// rows of the last kPagedKeyHistory tokens (rounded up to whole groups) quantized before it, so
// rejected speculative tokens can be dropped (truncate) and their groups refilled from the
// original floats, never re-quantized from codes. Per-channel keys of a layer are therefore
// written in token order, and a token is not rewritten once its group is quantized.

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

/// Tokens before the key group still filling whose float keys a per-channel quantized table
/// keeps (rounded up to whole groups): how far truncate() may cut back into quantized groups.
inline constexpr Index kPagedKeyHistory = 16;

/// One sequence's paged KV cache: its blocks of a BlockPool<T> (file comment). Copying forks it.
template <class T = float>
class BlockTable {
 public:
  /// An empty table over `pool` (which must outlive it).
  explicit BlockTable(BlockPool<T>& pool) : pool_(&pool) {
    if constexpr (kQuantizedPool<T>) {
      const BlockPoolConfig& c = pool.config();
      if (c.quant.keys.axis == QuantAxis::kPerChannel) {
        group_ = c.quant.keys.group_size;
        history_ = (kPagedKeyHistory + group_ - 1) / group_ * group_;
        tail_.assign(static_cast<std::size_t>(c.layers * c.kv_heads * (history_ + c.page_size) * c.head_dim), 0.0f);
        written_.assign(static_cast<std::size_t>(c.layers), 0);
        history_from_.assign(static_cast<std::size_t>(c.layers), 0);
      }
    }
  }
  /// A fork: retains every block of `o` and copies its key tail.
  BlockTable(const BlockTable& o)
      : pool_(o.pool_),
        blocks_(o.blocks_),
        tokens_(o.tokens_),
        group_(o.group_),
        history_(o.history_),
        tail_(o.tail_),
        written_(o.written_),
        history_from_(o.history_from_) {
    for (BlockId b : blocks_) pool_->retain(b);
  }
  /// Releases this table's blocks and forks `o`.
  BlockTable& operator=(const BlockTable& o) {
    if (this != &o) {
      BlockTable copy(o);
      swap(copy);
    }
    return *this;
  }
  /// Takes `o`'s blocks; `o` is left empty.
  BlockTable(BlockTable&& o) noexcept
      : pool_(o.pool_),
        blocks_(std::move(o.blocks_)),
        tokens_(o.tokens_),
        group_(o.group_),
        history_(o.history_),
        tail_(std::move(o.tail_)),
        written_(std::move(o.written_)),
        history_from_(std::move(o.history_from_)) {
    o.blocks_.clear();
    o.tokens_ = 0;
  }
  /// Swaps with `o` (whose destructor then releases this table's old blocks).
  BlockTable& operator=(BlockTable&& o) noexcept {
    swap(o);
    return *this;
  }
  ~BlockTable() { clear(); }

  /// Exchanges the contents of two tables.
  void swap(BlockTable& o) noexcept {
    std::swap(pool_, o.pool_);
    blocks_.swap(o.blocks_);
    std::swap(tokens_, o.tokens_);
    std::swap(group_, o.group_);
    tail_.swap(o.tail_);
    written_.swap(o.written_);
    std::swap(history_, o.history_);
    history_from_.swap(o.history_from_);
  }

  /// Tokens committed.
  Index num_tokens() const { return tokens_; }
  /// The pool the table's blocks come from.
  const BlockPool<T>& pool() const { return *pool_; }
  /// Bytes of the float key tail a quantized pool with per-channel keys keeps per table (0
  /// otherwise): kPagedKeyHistory (in whole groups) + page_size rows per layer and KV head,
  /// outside the pool.
  std::size_t tail_bytes() const { return tail_.size() * sizeof(float); }
  /// The table's blocks, page by page.
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
    std::fill(written_.begin(), written_.end(), tokens);            // whole pages: every key group quantized
    std::fill(history_from_.begin(), history_from_.end(), tokens);  // and no float rows of them
  }

  /// Replaces the block of full page `page` by `block`, another block holding the same K/V for
  /// the same tokens (e.g. the prefix trie's copy of a page this sequence computed too): retains
  /// `block`, releases the old one, so concurrent copies of a prefix collapse into one.
  /// Throws std::invalid_argument when `page` is not a full page of the table or `block` is not
  /// allocated.
  void share_page(Index page, BlockId block) {
    if (page < 0 || (page + 1) * pool_->page_size() > tokens_) [[unlikely]]
      throw_invalid_argument(
          "page", page,
          "must be a full page of the table (" + std::to_string(tokens_ / pool_->page_size()) + " full pages)");
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
    require_index(layer, c.layers, "layer");
    for (Index t = 0; t < k.dim0(); ++t) {
      const Index pos = tokens_ + t, b = pos / c.page_size, slot = pos % c.page_size;
      if constexpr (kQuantizedPool<T>) {
        write_quantized(layer, pos, blocks_[static_cast<std::size_t>(b)], slot, k, v, t);
      } else {
        for (Index h = 0; h < c.kv_heads; ++h) {
          convert(k.ptr(t, h), pool_->key_rows(blocks_[b], layer, h) + slot * c.head_dim,
                  static_cast<std::size_t>(c.head_dim));
          convert(v.ptr(t, h), pool_->value_rows(blocks_[b], layer, h) + slot * c.head_dim,
                  static_cast<std::size_t>(c.head_dim));
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

  /// Makes `n` more reserved tokens visible (std::invalid_argument beyond the reserved room).
  void commit(Index n) {
    require(n >= 0 && ceil_div_(tokens_ + n, pool_->page_size()) <= static_cast<Index>(blocks_.size()), "n", n,
            "exceeds the reserved room");
    tokens_ += n;
  }

  /// Keeps the first `n` tokens, releasing blocks no longer needed. Per-channel quantized keys:
  /// `n` may cut back into quantized key groups only as far as the table kept their float rows
  /// (kPagedKeyHistory tokens this table wrote); otherwise std::invalid_argument, and nothing
  /// changes.
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
    std::fill(history_from_.begin(), history_from_.end(), 0);
  }

  /// The block type of Source: float / 16-bit rows, or quantized rows (QuantTailRows).
  using Block =
      std::conditional_t<kQuantizedPool<T>, KvBlock<QuantTailRows, QuantTailRows>, KvBlock<DenseRows<T>, DenseRows<T>>>;

  /// The KV block view of one layer: one block per run of pages whose block ids are
  /// consecutive (per-channel keys: a run ends at the page of the key group still filling).
  class Source {
   public:
    /// The view of `layer` of table `t`.
    Source(const BlockTable& t, Index layer) : t_(&t), layer_(layer) {
      const Index page = t.pool_->page_size(), pages = ceil_div_(t.tokens_, page);
      const Index tail_page = t.group_ > 0 ? t.flushed(layer) / page : -1;
      for (Index p = 0; p < pages; ++p)
        if (p == 0 || t.blocks_[static_cast<std::size_t>(p)] != t.blocks_[static_cast<std::size_t>(p - 1)] + 1 ||
            p - 1 == tail_page)
          run_start_.push_back(p);
      run_start_.push_back(pages);
    }
    Index num_kv_heads() const { return t_->pool_->config().kv_heads; }             ///< KV heads
    Index head_dim() const { return t_->pool_->config().head_dim; }                 ///< elements per row
    Index num_tokens() const { return t_->tokens_; }                                ///< committed tokens
    Index num_blocks() const { return static_cast<Index>(run_start_.size()) - 1; }  ///< runs of pages
    /// Run `r` of KV head `head`: its tokens, rows and positions.
    Block block(Index head, Index r) const {
      const Index page = t_->pool_->page_size();
      const Index first = run_start_[static_cast<std::size_t>(r)] * page;
      const Index n = std::min(run_start_[static_cast<std::size_t>(r) + 1] * page, t_->tokens_) - first;
      const BlockId id = t_->blocks_[static_cast<std::size_t>(run_start_[static_cast<std::size_t>(r)])];
      const BlockPool<T>& pool = *t_->pool_;
      const TokenPositions pos{nullptr, static_cast<std::int32_t>(first)};
      if constexpr (kQuantizedPool<T>) {
        const KvQuantConfig& q = pool.config().quant;
        QuantTailRows keys{pool.key_codes(id, layer_, head), pool.key_params(id, layer_, head), &q.keys, n, nullptr};
        if (t_->group_ > 0) {  // per-channel keys: the group still filling is in the table's tail
          const Index f = t_->flushed(layer_);
          if (f < first + n && f >= first) {  // the run's last page holds it
            keys.quantized = f - first;
            keys.tail = t_->current_rows(layer_, head);
          }  // a run past the tail's holds only unwritten rows
        }
        return {n, keys,
                QuantTailRows{pool.value_codes(id, layer_, head), pool.value_params(id, layer_, head), &q.values, n,
                              nullptr},
                pos};
      } else {
        return {n, DenseRows<T>{pool.key_rows(id, layer_, head), head_dim()},
                DenseRows<T>{pool.value_rows(id, layer_, head), head_dim()}, pos};
      }
    }

   private:
    const BlockTable* t_;
    Index layer_;
    std::vector<Index> run_start_;  // first page of each run, then the page count
  };
  /// The KV block view of `layer` (std::out_of_range for a bad layer); valid until the table changes.
  Source source(Index layer) const {
    require_index(layer, pool_->config().layers, "layer");
    return Source(*this, layer);
  }

 private:
  static Index ceil_div_(Index a, Index b) { return (a + b - 1) / b; }

  // Per-channel keys: tokens of `layer` whose keys are quantized (whole groups written).
  Index flushed(Index layer) const { return written_[static_cast<std::size_t>(layer)] / group_ * group_; }
  // The tail of (layer, head): history_ rows, a ring holding token t's float keys at t % history_
  // for tokens [history_from_, flushed) , then the group still filling, token flushed(layer)
  // first (page rows).
  float* history_rows(Index layer, Index head) {
    const BlockPoolConfig& c = pool_->config();
    return tail_.data() + (layer * c.kv_heads + head) * (history_ + c.page_size) * c.head_dim;
  }
  float* current_rows(Index layer, Index head) {
    return history_rows(layer, head) + history_ * pool_->config().head_dim;
  }
  const float* current_rows(Index layer, Index head) const {
    return const_cast<BlockTable*>(this)->current_rows(layer, head);
  }

  // Quantizes token `pos` (row t of k and v) of one layer into slot `slot` of block `id`.
  void write_quantized(Index layer, Index pos, BlockId id, Index slot, Tensor3View<const float> k,
                       Tensor3View<const float> v, Index t) {
    const BlockPoolConfig& c = pool_->config();
    const QuantSpec &ks = c.quant.keys, &vs = c.quant.values;
    const Index d = c.head_dim;
    if (group_ > 0) {  // checked before anything is written
      const Index written = written_[static_cast<std::size_t>(layer)];
      if (pos < flushed(layer)) [[unlikely]]
        throw_invalid_argument(
            "token", pos,
            "of layer " + std::to_string(layer) +
                ": its per-channel key group is quantized already (keys are written once, in token order)");
      if (pos > written) [[unlikely]]
        throw_invalid_argument("token", pos,
                               "of layer " + std::to_string(layer) +
                                   ": per-channel keys are written in token order (next is " + std::to_string(written) +
                                   ")");
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
      for (Index i = 0; i < group_; ++i)
        std::copy_n(current_rows(layer, h) + i * d, d, history_rows(layer, h) + (f + i) % history_ * d);
    }
    Index& from = history_from_[static_cast<std::size_t>(layer)];
    from = std::max(from, f + group_ - history_);
  }

  // Per-channel keys: drops keys of tokens >= n; when n cuts into quantized groups, the float rows
  // of their kept tokens come back from the history (the groups' codes are rewritten from them
  // when they fill again).
  void truncate_keys(Index n) {
    const BlockPoolConfig& c = pool_->config();
    const Index refill = n / group_ * group_;  // first token of the group n falls in
    for (Index l = 0; l < c.layers; ++l) {     // check every layer before changing any
      const Index from = history_from_[static_cast<std::size_t>(l)];
      if (n < flushed(l) && refill < from) [[unlikely]]
        throw_invalid_argument(
            "n", n,
            "cuts into per-channel quantized keys of layer " + std::to_string(l) +
                " whose float rows are gone (the table keeps those of tokens from " + std::to_string(from) +
                ", at most kPagedKeyHistory = " + std::to_string(kPagedKeyHistory) + " before the group filling)");
    }
    for (Index l = 0; l < c.layers; ++l) {
      Index& written = written_[static_cast<std::size_t>(l)];
      if (n >= written) continue;
      if (n < flushed(l))
        for (Index h = 0; h < c.kv_heads; ++h)
          for (Index t = refill; t < n; ++t)
            std::copy_n(history_rows(l, h) + t % history_ * c.head_dim, c.head_dim,
                        current_rows(l, h) + (t - refill) * c.head_dim);
      written = n;
    }
  }

  BlockPool<T>* pool_;
  std::vector<BlockId> blocks_;
  Index tokens_ = 0;
  // Quantized pool with per-channel keys (group_ > 0): the float key tail (history_rows /
  // current_rows), per layer the tokens whose keys are written and the first token whose float
  // keys the history holds.
  Index group_ = 0, history_ = 0;
  std::vector<float> tail_;
  std::vector<Index> written_;
  std::vector<Index> history_from_;
};

}  // namespace inferkit
