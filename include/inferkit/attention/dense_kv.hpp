#pragma once
// A dense, contiguous KV source: keys and values as [tokens, kv_heads, head_dim] tensors of
// float, Float16 or BFloat16 with any token and head strides (so both the packed
// [tokens, heads, dim] layout and a per-head [heads, tokens, dim] cache fit), one block per head.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// A KvSource over dense key / value tensors [tokens, kv_heads, head_dim] of T (float, Float16
/// or BFloat16), one block per head. Non-owning: the tensors must outlive the source. Built from
/// const or mutable views alike (`DenseKv src(k, v)` deduces T from either).
template <class T>
class DenseKv {
 public:
  /// The block type of every head.
  using Block = KvBlock<DenseRows<T>, DenseRows<T>>;

  /// Positions 0 .. tokens-1 shifted by first_position.
  /// @throws std::invalid_argument when keys and values differ in shape or have no heads / dims.
  DenseKv(Tensor3View<const T> keys, Tensor3View<const T> values, std::int32_t first_position = 0)
      : keys_(keys), values_(values), positions_{nullptr, first_position} {
    validate();
    // Positions are int32: the last one, first_position + tokens - 1, must be one too.
    require(std::int64_t{first_position} + keys.dim0() - 1 <= std::numeric_limits<std::int32_t>::max(),
            "first_position", first_position,
            "plus the number of tokens (" + std::to_string(keys.dim0()) + ") must stay within int32 positions");
  }

  /// Explicit per-token positions (one per token; the span must outlive the source).
  /// @throws std::invalid_argument as above, or when positions.size() != tokens.
  DenseKv(Tensor3View<const T> keys, Tensor3View<const T> values, std::span<const std::int32_t> positions)
      : keys_(keys), values_(values), positions_{positions.data(), 0} {
    validate();
    require(static_cast<Index>(positions.size()) == keys.dim0(), "positions.size()", positions.size(),
            "must equal the number of tokens (" + std::to_string(keys.dim0()) + ")");
  }

  Index num_kv_heads() const { return keys_.dim1(); }            ///< KV heads (dim1 of the tensors)
  Index head_dim() const { return keys_.dim2(); }                ///< values per head (dim2)
  Index num_tokens() const { return keys_.dim0(); }              ///< tokens (dim0)
  Index num_blocks() const { return keys_.dim0() > 0 ? 1 : 0; }  ///< 1, or 0 when empty

  /// The single block of one KV head (head in [0, num_kv_heads()); not checked).
  Block block(Index head, Index /*b*/) const {
    return {keys_.dim0(), DenseRows<T>{keys_.ptr(0, head), keys_.stride0()},
            DenseRows<T>{values_.ptr(0, head), values_.stride0()}, positions_};
  }

 private:
  void validate() const {
    require(values_.dim0() == keys_.dim0(), "values.dim0()", values_.dim0(),
            "must equal keys.dim0() (" + std::to_string(keys_.dim0()) + " tokens)");
    require(values_.dim1() == keys_.dim1(), "values.dim1()", values_.dim1(),
            "must equal keys.dim1() (" + std::to_string(keys_.dim1()) + " KV heads)");
    require(values_.dim2() == keys_.dim2(), "values.dim2()", values_.dim2(),
            "must equal keys.dim2() (head_dim " + std::to_string(keys_.dim2()) + ")");
    require(keys_.dim1() > 0, "keys.dim1()", keys_.dim1(), "must be > 0 (KV heads)");
    require(keys_.dim2() > 0, "keys.dim2()", keys_.dim2(), "must be > 0 (head_dim)");
  }

  Tensor3View<const T> keys_;
  Tensor3View<const T> values_;
  TokenPositions positions_;
};

/// Deduces DenseKv<T> from const or mutable views: `DenseKv src(k, v)` with Tensor3View<float>.
template <class K, class V>
requires std::is_same_v<std::remove_const_t<K>, std::remove_const_t<V>> DenseKv(Tensor3View<K>, Tensor3View<V>,
                                                                                std::int32_t = 0)
->DenseKv<std::remove_const_t<K>>;
/// Deduces DenseKv<T> from const or mutable views with explicit positions.
template <class K, class V>
requires std::is_same_v<std::remove_const_t<K>, std::remove_const_t<V>> DenseKv(Tensor3View<K>, Tensor3View<V>,
                                                                                std::span<const std::int32_t>)
->DenseKv<std::remove_const_t<K>>;

}  // namespace inferkit
