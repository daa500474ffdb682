#pragma once
// A pool of fixed-size KV blocks (PagedAttention, Kwon et al. 2023): each block holds
// `page_size` tokens of keys and values for every layer and KV head, laid out
// [layer][head][block][slot][head_dim] so one (block, layer, head) is `page_size` contiguous rows
// and blocks with consecutive ids continue each other's rows (a block table presents such runs
// to attention as one block: long key tiles over small pages).
// Blocks come from a free list under a hard budget (`max_blocks`, storage reserved up front);
// running out is an explicit result (std::nullopt), never a crash or an overwrite. Blocks are
// reference counted: whoever holds one (a sequence's block table, the prefix trie) retains it,
// and it returns to the free list when the last holder releases it. Single writer.
//
// Block storage policy (the template parameter): float, Float16 or BFloat16 rows, or
// QuantizedKv: each (block, layer, head) holds the page's packed codes and binary16 parameters
// for keys and values, with separate QuantSpecs (BlockPoolConfig::quant; kv/quant_codec.hpp).
// Per-token specs quantize a row when it is written; a per-channel key spec (KIVI, Liu et al.
// 2024) quantizes each group of `group_size` tokens of a page when the group fills, so the
// group size must divide the page size, and the rows of the group still filling live as float
// in the block table (its tail), never in the pool. Codes are never re-quantized; copying a
// block copies its codes. Parameters are stored as (step, minimum) pairs, the layout the
// attention kernels dequantize in registers (QuantRowsView), so bytes_in_use counts 4 bytes
// per group also for symmetric specs.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/quant_codec.hpp"

namespace inferkit {

using BlockId = std::int32_t;

/// Storage-policy tag of a pool of quantized pages: BlockPool<QuantizedKv> (file comment).
struct QuantizedKv {};

/// Whether a pool storage policy is QuantizedKv.
template <class T>
inline constexpr bool kQuantizedPool = std::is_same_v<T, QuantizedKv>;

/// Shape and budget of a block pool.
struct BlockPoolConfig {
  Index layers = 1;         ///< decoder layers
  Index kv_heads = 1;       ///< KV heads per layer
  Index head_dim = 1;       ///< elements per head row
  Index page_size = 16;     ///< tokens per block
  Index max_blocks = 1024;  ///< blocks reserved up front (the budget)
  /// Key and value specs of BlockPool<QuantizedKv> (ignored by float / 16-bit pools).
  KvQuantConfig quant{};
};

/// Checks a quantized pool's specs against its head_dim and page_size: per-token groups divide
/// head_dim, no residual (the float tail of a paged cache is the group still filling), values
/// per token, per-channel key groups divide the page. Throws std::invalid_argument naming the
/// parameter.
inline void validate_paged_quant(const KvQuantConfig& q, Index head_dim, Index page_size) {
  validate_kv_quant(q.keys, head_dim, "keys");
  validate_kv_quant(q.values, head_dim, "values");
  require(q.keys.residual == 0, "keys.residual", q.keys.residual,
          "must be 0 for a paged cache (only the key group still filling stays in float)");
  require(q.values.residual == 0, "values.residual", q.values.residual,
          "must be 0 for a paged cache (values are quantized when written)");
  require(q.values.axis == QuantAxis::kPerToken, "values.axis", "per-channel", "must be per-token in a paged cache");
  if (q.keys.axis == QuantAxis::kPerChannel)
    require(page_size % q.keys.group_size == 0, "page_size", page_size,
            "must be a multiple of keys.group_size (" + std::to_string(q.keys.group_size) +
                ") for per-channel keys: a group of tokens never spans pages");
}

/// Reference-counted fixed-size KV blocks under a hard budget (file comment). T is the storage
/// policy: float, Float16, BFloat16 rows, or QuantizedKv pages. Single writer.
template <class T = float>
class BlockPool {
 public:
  /// Reserves max_blocks blocks. Throws std::invalid_argument naming a non-positive dimension,
  /// and (QuantizedKv) a spec validate_paged_quant() rejects.
  explicit BlockPool(BlockPoolConfig c) : c_(c) {
    require(c.layers > 0, "layers", c.layers, "must be > 0");
    require(c.kv_heads > 0, "kv_heads", c.kv_heads, "must be > 0");
    require(c.head_dim > 0, "head_dim", c.head_dim, "must be > 0");
    require(c.page_size > 0, "page_size", c.page_size, "must be > 0");
    require(c.max_blocks > 0 && c.max_blocks < (Index{1} << 31), "max_blocks", c.max_blocks, "must be in [1, 2^31)");
    const auto streams = static_cast<std::size_t>(c.max_blocks * c.layers * c.kv_heads);
    if constexpr (kQuantizedPool<T>) {
      validate_paged_quant(c.quant, c.head_dim, c.page_size);
      k_codes_ = c.page_size * token_code_bytes_(c.quant.keys);
      v_codes_ = c.page_size * token_code_bytes_(c.quant.values);
      k_params_ = c.page_size * c.head_dim / c.quant.keys.group_size;  // per token or per channel alike
      v_params_ = c.page_size * c.head_dim / c.quant.values.group_size;
      key_codes_.resize(streams * static_cast<std::size_t>(k_codes_));
      value_codes_.resize(streams * static_cast<std::size_t>(v_codes_));
      key_params_.resize(streams * static_cast<std::size_t>(k_params_));
      value_params_.resize(streams * static_cast<std::size_t>(v_params_));
    } else {
      static_assert(std::is_same_v<T, float> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>,
                    "BlockPool stores float, Float16 or BFloat16 rows, or QuantizedKv pages");
      block_elems_ = c.layers * c.kv_heads * c.page_size * c.head_dim;
      keys_.resize(static_cast<std::size_t>(c.max_blocks * block_elems_));
      values_.resize(keys_.size());
    }
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

  /// Adds one reference to allocated block `b` (std::invalid_argument / std::out_of_range otherwise).
  void retain(BlockId b) {
    check_live(b, "retain");
    ++refs_[static_cast<std::size_t>(b)];
  }

  /// Drops one reference; the block is free again when none remain.
  void release(BlockId b) {
    check_live(b, "release");
    if (--refs_[static_cast<std::size_t>(b)] == 0) free_.push_back(b);
  }

  /// References held on block `b` (0 when free).
  Index refcount(BlockId b) const {
    require_index(b, c_.max_blocks, "block");
    return refs_[static_cast<std::size_t>(b)];
  }
  /// Blocks allocated.
  Index used_blocks() const { return c_.max_blocks - static_cast<Index>(free_.size()); }
  /// Blocks on the free list.
  Index free_blocks() const { return static_cast<Index>(free_.size()); }
  /// Bytes of K/V held by live blocks.
  std::size_t bytes_in_use() const { return static_cast<std::size_t>(used_blocks()) * block_bytes(); }
  /// Bytes of one block (every layer and head, keys and values; quantized: codes and parameters).
  std::size_t block_bytes() const {
    if constexpr (kQuantizedPool<T>) {
      return static_cast<std::size_t>(c_.layers * c_.kv_heads) *
             static_cast<std::size_t>(k_codes_ + v_codes_ +
                                      static_cast<Index>(sizeof(QuantParams)) * (k_params_ + v_params_));
    } else {
      return 2 * static_cast<std::size_t>(block_elems_) * sizeof(T);
    }
  }
  /// The pool's KV encoding, part of a prefix-cache context identity (a page of one encoding
  /// never serves a request of another): "f32", "f16", "bf16", or for QuantizedKv
  /// "q:k<bits><s|a>g<group><t|c>,v..." (symmetric / asymmetric, per token / per channel).
  std::string kv_encoding() const {
    if constexpr (kQuantizedPool<T>) {
      const auto spec = [](const QuantSpec& q) {
        return std::to_string(q.bits) + (q.symmetric ? "s" : "a") + "g" + std::to_string(q.group_size) +
               (q.axis == QuantAxis::kPerChannel ? "c" : "t");
      };
      return "q:k" + spec(c_.quant.keys) + ",v" + spec(c_.quant.values);
    } else if constexpr (std::is_same_v<T, float>) {
      return "f32";
    } else if constexpr (std::is_same_v<T, Float16>) {
      return "f16";
    } else {
      return "bf16";
    }
  }

  /// Tokens the whole pool can hold (max_blocks pages).
  Index capacity_tokens() const { return c_.max_blocks * c_.page_size; }

  /// Rows of one (block, layer, head): page_size consecutive tokens of head_dim elements.
  template <class U = T>
  requires(!kQuantizedPool<U>) T* key_rows(BlockId b, Index layer, Index head) {
    return keys_.data() + offset(b, layer, head);
  }
  /// Value rows of one (block, layer, head), as key_rows().
  template <class U = T>
  requires(!kQuantizedPool<U>) T* value_rows(BlockId b, Index layer, Index head) {
    return values_.data() + offset(b, layer, head);
  }
  /// Key rows of one (block, layer, head), read-only.
  template <class U = T>
  requires(!kQuantizedPool<U>) const T* key_rows(BlockId b, Index layer, Index head) const {
    return keys_.data() + offset(b, layer, head);
  }
  /// Value rows of one (block, layer, head), as key_rows().
  template <class U = T>
  requires(!kQuantizedPool<U>) const T* value_rows(BlockId b, Index layer, Index head) const {
    return values_.data() + offset(b, layer, head);
  }

  /// QuantizedKv: the page's packed codes of one (block, layer, head), token after token
  /// (token_code_bytes each), and its parameters (per token: page_size x head_dim / group_size;
  /// per channel: page_size / group_size groups of head_dim).
  template <class U = T>
  requires kQuantizedPool<U> std::uint8_t* key_codes(BlockId b, Index layer, Index head) {
    return key_codes_.data() + stream(b, layer, head) * k_codes_;
  }
  /// Value codes of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U> std::uint8_t* value_codes(BlockId b, Index layer, Index head) {
    return value_codes_.data() + stream(b, layer, head) * v_codes_;
  }
  /// Key parameters of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U> QuantParams* key_params(BlockId b, Index layer, Index head) {
    return key_params_.data() + stream(b, layer, head) * k_params_;
  }
  /// Value parameters of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U> QuantParams* value_params(BlockId b, Index layer, Index head) {
    return value_params_.data() + stream(b, layer, head) * v_params_;
  }
  /// Key codes of one (block, layer, head), read-only.
  template <class U = T>
  requires kQuantizedPool<U>
  const std::uint8_t* key_codes(BlockId b, Index layer, Index head) const {
    return key_codes_.data() + stream(b, layer, head) * k_codes_;
  }
  /// Value codes of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U>
  const std::uint8_t* value_codes(BlockId b, Index layer, Index head) const {
    return value_codes_.data() + stream(b, layer, head) * v_codes_;
  }
  /// Key parameters of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U>
  const QuantParams* key_params(BlockId b, Index layer, Index head) const {
    return key_params_.data() + stream(b, layer, head) * k_params_;
  }
  /// Value parameters of one (block, layer, head), as key_codes().
  template <class U = T>
  requires kQuantizedPool<U>
  const QuantParams* value_params(BlockId b, Index layer, Index head) const {
    return value_params_.data() + stream(b, layer, head) * v_params_;
  }

  /// Copies the first `tokens` slots of every layer and head from one block to another
  /// (quantized pages: their codes and parameters, as they are; nothing is re-quantized).
  void copy_tokens(BlockId from, BlockId to, Index tokens) {
    for (Index l = 0; l < c_.layers; ++l)
      for (Index h = 0; h < c_.kv_heads; ++h) {
        if constexpr (kQuantizedPool<T>) {
          // Whole pages of parameters: per-channel groups are not per slot, and this is cheap.
          std::copy_n(key_codes(from, l, h), tokens * token_code_bytes_(c_.quant.keys), key_codes(to, l, h));
          std::copy_n(value_codes(from, l, h), tokens * token_code_bytes_(c_.quant.values), value_codes(to, l, h));
          std::copy_n(key_params(from, l, h), k_params_, key_params(to, l, h));
          std::copy_n(value_params(from, l, h), v_params_, value_params(to, l, h));
        } else {
          std::copy_n(key_rows(from, l, h), tokens * c_.head_dim, key_rows(to, l, h));
          std::copy_n(value_rows(from, l, h), tokens * c_.head_dim, value_rows(to, l, h));
        }
      }
  }

 private:
  Index token_code_bytes_(const QuantSpec& s) const { return c_.head_dim / s.codes_per_byte(); }
  std::size_t stream(BlockId b, Index layer, Index head) const {
    return static_cast<std::size_t>((layer * c_.kv_heads + head) * c_.max_blocks + static_cast<Index>(b));
  }
  std::size_t offset(BlockId b, Index layer, Index head) const {
    return stream(b, layer, head) * static_cast<std::size_t>(c_.page_size * c_.head_dim);
  }
  void check_live(BlockId b, const char* what) const {
    require_index(b, c_.max_blocks, "block");
    require(refs_[static_cast<std::size_t>(b)] > 0, std::string(what) + " block", b, "is not allocated");
  }

  BlockPoolConfig c_;
  Index block_elems_ = 0;
  std::vector<T> keys_, values_;                                   // float / 16-bit rows
  Index k_codes_ = 0, v_codes_ = 0, k_params_ = 0, v_params_ = 0;  // QuantizedKv: per (block, layer, head)
  std::vector<std::uint8_t> key_codes_, value_codes_;
  std::vector<QuantParams> key_params_, value_params_;
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
