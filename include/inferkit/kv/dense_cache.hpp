#pragma once
// A dense KV cache: per layer, per KV head, keys and values contiguous by position, stored as
// float, Float16 or BFloat16. Tokens are appended per layer (all KV heads at once) and read
// through the KV block view (one block per head), positions 0 .. length-1. Capacity is fixed at
// construction or grows by doubling (the caller chooses); truncate() drops the newest tokens,
// e.g. rejected speculative drafts. Single writer; const access is thread-safe.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "inferkit/attention/dense_kv.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// What a dense cache does when an append exceeds its capacity.
enum class CacheGrowth {
  kFixed,  ///< throw std::invalid_argument
  kGrow    ///< reallocate to max(needed, 2 * capacity) tokens (copies what is cached)
};

/// Shape and capacity of a DenseKvCache, for designated initializers:
/// `DenseKvCache<BFloat16> cache({.layers = L, .kv_heads = H, .head_dim = D, .capacity = 4096})`.
/// The shape fields have no usable default (0 is rejected), so a forgotten field is an error.
struct DenseKvCacheConfig {
  Index layers = 0;                         ///< transformer layers (> 0)
  Index kv_heads = 0;                       ///< KV heads per layer (> 0)
  Index head_dim = 0;                       ///< values per head (> 0)
  Index capacity = 0;                       ///< tokens reserved up front (>= 0)
  CacheGrowth growth = CacheGrowth::kGrow;  ///< what happens past the capacity
};

/// Dense KV cache (file comment): per layer and KV head, keys and values contiguous by position,
/// stored as T (float, Float16 or BFloat16). Single writer; const access is thread-safe.
template <class T>
class DenseKvCache {
 public:
  /// Builds an empty cache (the preferred form).
  /// @throws std::invalid_argument naming the field: layers, kv_heads or head_dim <= 0, capacity < 0.
  explicit DenseKvCache(const DenseKvCacheConfig& c)
      : DenseKvCache(c.layers, c.kv_heads, c.head_dim, c.capacity, c.growth) {}

  /// Short positional form of DenseKvCache(const DenseKvCacheConfig&), same fields in order.
  DenseKvCache(Index layers, Index kv_heads, Index head_dim, Index capacity, CacheGrowth growth = CacheGrowth::kGrow)
      : layers_(layers),
        heads_(kv_heads),
        dim_(head_dim),
        growth_(growth),
        length_(static_cast<std::size_t>(require_positive(layers, "layers")), 0) {
    require(kv_heads > 0, "kv_heads", kv_heads, "must be > 0");
    require(head_dim > 0, "head_dim", head_dim, "must be > 0");
    require(capacity >= 0, "capacity", capacity, "must be >= 0");
    reserve(std::max<Index>(capacity, 1));
  }

  Index layers() const { return layers_; }      ///< layers
  Index kv_heads() const { return heads_; }     ///< KV heads per layer
  Index head_dim() const { return dim_; }       ///< values per head
  Index capacity() const { return capacity_; }  ///< tokens per layer that fit without growing
  /// Tokens cached in one layer. @throws std::out_of_range for a bad layer.
  Index length(Index layer) const {
    require_index(layer, layers_, "layer");
    return length_[static_cast<std::size_t>(layer)];
  }

  /// Appends tokens [tokens, kv_heads, head_dim] to one layer (converted to T).
  /// @throws std::out_of_range for a bad layer; std::invalid_argument for shapes or, with
  ///         CacheGrowth::kFixed, when the tokens do not fit.
  void append(Index layer, Tensor3View<const float> keys, Tensor3View<const float> values) {
    require_index(layer, layers_, "layer");
    check_rows(keys, "keys");
    check_rows(values, "values");
    require(values.dim0() == keys.dim0(), "values.dim0()", values.dim0(),
            "must equal keys.dim0() (" + std::to_string(keys.dim0()) + ")");
    Index& len = length_[static_cast<std::size_t>(layer)];
    const Index n = keys.dim0();
    if (len + n > capacity_) {
      require(growth_ == CacheGrowth::kGrow, "tokens", len + n,
              "exceed the fixed capacity (" + std::to_string(capacity_) + ")");
      reserve(std::max(len + n, 2 * capacity_));
    }
    for (Index t = 0; t < n; ++t)
      for (Index h = 0; h < heads_; ++h) {
        convert(keys.ptr(t, h), slot(key_, layer, h, len + t), static_cast<std::size_t>(dim_));
        convert(values.ptr(t, h), slot(value_, layer, h, len + t), static_cast<std::size_t>(dim_));
      }
    len += n;
  }

  /// Keeps the first `length` tokens of every layer.
  /// @throws std::invalid_argument when a layer holds fewer than `length` tokens.
  void truncate(Index length) {
    for (Index& len : length_) {
      require(length >= 0 && length <= len, "length", length, "must be in [0, " + std::to_string(len) + "]");
      len = length;
    }
  }

  /// The KV block view of one layer's tokens (valid until the next append or truncate).
  DenseKv<T> source(Index layer) const {
    const Index len = length(layer);
    const T* k = key_.data() + static_cast<std::size_t>(layer * heads_ * capacity_ * dim_);
    const T* v = value_.data() + static_cast<std::size_t>(layer * heads_ * capacity_ * dim_);
    return DenseKv<T>(Tensor3View<const T>(k, len, heads_, dim_, dim_, capacity_ * dim_),
                      Tensor3View<const T>(v, len, heads_, dim_, dim_, capacity_ * dim_));
  }

  /// Storage per cached token over all layers and heads (keys and values).
  double bytes_per_token() const { return 2.0 * static_cast<double>(layers_ * heads_ * dim_) * sizeof(T); }

 private:
  void check_rows(const Tensor3View<const float>& x, const char* name) const {
    require(x.dim1() == heads_, std::string(name) + ".dim1()", x.dim1(),
            "must equal kv_heads (" + std::to_string(heads_) + ")");
    require(x.dim2() == dim_, std::string(name) + ".dim2()", x.dim2(),
            "must equal head_dim (" + std::to_string(dim_) + ")");
  }
  T* slot(std::vector<T>& buf, Index layer, Index head, Index token) {
    return buf.data() + static_cast<std::size_t>(((layer * heads_ + head) * capacity_ + token) * dim_);
  }
  void reserve(Index capacity) {
    std::vector<T> k(static_cast<std::size_t>(layers_ * heads_ * capacity * dim_));
    std::vector<T> v(k.size());
    for (Index l = 0; l < layers_; ++l)
      for (Index h = 0; h < heads_; ++h) {
        const auto n = static_cast<std::size_t>(std::min(capacity_, length_[static_cast<std::size_t>(l)]) * dim_);
        const auto from = static_cast<std::size_t>((l * heads_ + h) * capacity_ * dim_);
        const auto to = static_cast<std::size_t>((l * heads_ + h) * capacity * dim_);
        std::copy_n(key_.begin() + static_cast<std::ptrdiff_t>(from), n, k.begin() + static_cast<std::ptrdiff_t>(to));
        std::copy_n(value_.begin() + static_cast<std::ptrdiff_t>(from), n, v.begin() + static_cast<std::ptrdiff_t>(to));
      }
    key_ = std::move(k);
    value_ = std::move(v);
    capacity_ = capacity;
  }

  Index layers_, heads_, dim_;
  CacheGrowth growth_;
  Index capacity_ = 0;
  std::vector<Index> length_;
  std::vector<T> key_, value_;
};

}  // namespace inferkit
