#pragma once
// The KV block view (docs/design.md, "The KV block view"): every cache presents one sequence's
// cached tokens for one KV head as an ordered list of blocks. A block says how many tokens it
// holds, where their keys and values are and how they are encoded (a row store), and each
// token's position. Attention kernels are templated on the source, loop over its blocks and ask
// the row stores for float rows of a token range, so a new cache policy never touches attention
// code and a new encoding touches only its row store.
//
// A row store is any type with
//   RowsF32 load_f32(Index first, Index count, Index dim, float* scratch, Index scratch_stride,
//                    bool allow_in_place) const;
// returning float rows [first, first + count): in place when the store holds float rows and
// allow_in_place is true, otherwise decoded into `scratch` (count rows of scratch_stride floats).
// A store of plain float / Float16 / BFloat16 rows may also expose `direct_rows()` and
// `row_stride`, so the decode kernel widens its elements in registers instead of decoding into
// a scratch buffer; a store of per-token group-quantized rows may expose `quantized_view()`
// (below), so the decode kernel dequantizes its codes in registers.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Positions of a block's tokens: an explicit array, or consecutive values from `first`.
struct TokenPositions {
  const std::int32_t* explicit_positions = nullptr;  ///< per-token positions, or nullptr for consecutive positions
  std::int32_t first = 0;                            ///< position of token 0 when explicit_positions is null

  /// Position of token i.
  std::int32_t operator[](Index i) const {
    return explicit_positions ? explicit_positions[i] : first + static_cast<std::int32_t>(i);
  }
  /// The positions of the tokens from index i on.
  TokenPositions offset(Index i) const {
    return explicit_positions ? TokenPositions{explicit_positions + i, 0}
                              : TokenPositions{nullptr, first + static_cast<std::int32_t>(i)};
  }
};

/// Float rows handed to a kernel: row i starts at data + i * stride.
struct RowsF32 {
  const float* data = nullptr;  ///< row 0
  Index stride = 0;             ///< floats between consecutive rows
};

/// Rows of one head stored one token after another as T (float, Float16 or BFloat16).
template <class T>
struct DenseRows {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>,
                "DenseRows stores float, Float16 or BFloat16");
  const T* data = nullptr;  ///< row 0 (token 0 of the block)
  Index row_stride = 0;     ///< elements between consecutive tokens

  /// Float rows [first, first + count) of dim values: in place for float when allowed, else converted into scratch
  /// (rows of scratch_stride floats).
  RowsF32 load_f32(Index first, Index count, Index dim, float* scratch, Index scratch_stride,
                   bool allow_in_place) const {
    const T* src = data + first * row_stride;
    if constexpr (std::is_same_v<T, float>) {
      if (allow_in_place) return {src, row_stride};
    }
    for (Index i = 0; i < count; ++i)
      convert(src + i * row_stride, scratch + i * scratch_stride, static_cast<std::size_t>(dim));
    return {scratch, scratch_stride};
  }

  /// Direct access for kernels that widen T in registers: row i starts at data + i * row_stride.
  const T* direct_rows() const { return data; }
};

/// Group-quantized rows, one token after another, for kernels that dequantize in registers
/// (kv/quant_rows.hpp and kv/quantized_cache.hpp write them). Token t: `code_bytes` packed codes
/// (8, 4 or 2 bits, low bits first) at codes + t * code_bytes. Parameters are 4-byte pairs
/// (binary16 step, then binary16 minimum) at params: per token (pair t * groups + g for the
/// g-th group of `group_size` values along the row) or, per channel, per group of
/// `group_size` consecutive tokens (pair (t / group_size) * dim + channel). A value is
/// code * step + zero, zero = min (asymmetric) or -2^(bits-1) * step (symmetric).
/// Rows [0, tokens) are stored this way (later ones, e.g. a full-precision tail, are not).
struct QuantRowsView {
  const std::uint8_t* codes = nullptr;  ///< packed codes of token 0
  const std::byte* params = nullptr;    ///< (binary16 step, binary16 minimum) pairs
  int bits = 0;                         ///< bits per code: 8, 4 or 2
  bool symmetric = true;                ///< symmetric codes (zero = -2^(bits-1) * step)
  bool per_channel = false;             ///< parameters per channel over token groups (else per token along the row)
  Index group_size = 0;                 ///< values (per token) or tokens (per channel) per parameter pair
  Index tokens = 0;                     ///< leading rows stored this way
};
template <class Rows>
concept QuantizedRows = requires(const Rows& r) {
  { r.quantized_view() } -> std::same_as<QuantRowsView>;
};

/// One block of a sequence's cache for one KV head.
template <class KeyRows, class ValueRows>
struct KvBlock {
  Index num_tokens = 0;      ///< tokens in the block
  KeyRows keys;              ///< key row store
  ValueRows values;          ///< value row store
  TokenPositions positions;  ///< position of each token
};

/// A source of KV blocks for one sequence: the same block structure for every KV head.
template <class S>
concept KvSource = requires(const S& s, Index head, Index b) {
  { s.num_kv_heads() } -> std::convertible_to<Index>;
  { s.head_dim() } -> std::convertible_to<Index>;
  { s.num_tokens() } -> std::convertible_to<Index>;
  { s.num_blocks() } -> std::convertible_to<Index>;
  { s.block(head, b).num_tokens } -> std::convertible_to<Index>;
  { s.block(head, b).positions } -> std::convertible_to<TokenPositions>;
};

/// Position of the last token of a source (-1 when empty): the bottom-right anchor of queries.
template <KvSource S>
std::int32_t last_position(const S& kv) {
  for (Index b = kv.num_blocks() - 1; b >= 0; --b) {
    const auto blk = kv.block(0, b);
    if (blk.num_tokens > 0) return blk.positions[blk.num_tokens - 1];
  }
  return -1;
}

}  // namespace inferkit
