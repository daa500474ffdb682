#pragma once
// The MLA latent KV cache (DeepSeek-V2 section 2.1, attention/mla.hpp): per layer and token one
// latent row [c; k_pe] of kv_lora_rank + qk_rope_dim values shared by every head, instead of
// materialized per-head keys and values (DeepSeek-V2-Lite: 576 values per token and layer
// against 16 x (192 + 128) = 5,120; V3: 128 heads, 71x). Rows are stored as float, BFloat16 or
// LatentInt8 (per token, symmetric 8-bit codes with one binary16 step per kLatentInt8Group
// values: 576 + 18 x 4 = 648 bytes a row at 576 values). The source of a layer is a KvSource with
// one KV head of head_dim latent_dim() whose keys and values are the same rows, which
// mla_attention() and attention() read. Positions 0 .. length-1; the capacity grows by doubling.
// Single writer; const access is thread-safe; a source is valid until the next append.
//
//   LatentCache<BFloat16> cache({.layers = 27, .kv_lora_rank = 512, .rope_dim = 64});
//   cache.append(layer, c, k_pe);  // c [n, 512], k_pe [n, 64] (RoPE applied)
//   mla_attention(shape, q, cache.source(layer), weights, out);

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "inferkit/attention/dense_kv.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/quant_codec.hpp"
#include "inferkit/kv/quant_rows.hpp"

namespace inferkit {

/// Tag of the int8 latent row format (file comment): per token, symmetric 8-bit codes with one
/// binary16 step per kLatentInt8Group values.
struct LatentInt8 {};

/// Values per step of the LatentInt8 format; latent_dim must be a multiple.
inline constexpr Index kLatentInt8Group = 32;

/// The quantization of LatentInt8 rows, as the quantized KV rows spell it (kv/quant_codec.hpp).
inline const QuantSpec& latent_int8_spec() {
  static const QuantSpec spec{.bits = 8, .symmetric = true, .group_size = kLatentInt8Group};
  return spec;
}

/// Storage formats of latent rows, for planning (memory_planner.hpp) without a cache type.
enum class LatentFormat {
  kF32,   ///< float rows
  kBF16,  ///< BFloat16 rows
  kInt8   ///< LatentInt8 rows
};

/// Bytes of one latent row of latent_dim values in a format (LatentInt8: codes plus a 4-byte
/// (step, minimum) pair per group, as quantized KV rows store them).
/// @throws std::invalid_argument when latent_dim <= 0, or not a multiple of kLatentInt8Group for kInt8.
inline Index latent_row_bytes(LatentFormat f, Index latent_dim) {
  require(latent_dim > 0, "latent_dim", latent_dim, "must be > 0");
  if (f == LatentFormat::kF32) return 4 * latent_dim;
  if (f == LatentFormat::kBF16) return 2 * latent_dim;
  require(latent_dim % kLatentInt8Group == 0, "latent_dim", latent_dim,
          "must be a multiple of " + std::to_string(kLatentInt8Group) + " for int8 latent rows");
  return latent_dim + (latent_dim / kLatentInt8Group) * static_cast<Index>(sizeof(QuantParams));
}

/// Shape of a LatentCache, for designated initializers (0 shape fields are rejected).
struct LatentCacheConfig {
  Index layers = 0;        ///< transformer layers (> 0)
  Index kv_lora_rank = 0;  ///< values of c per token (> 0)
  Index rope_dim = 0;      ///< values of k_pe per token (>= 0)
  Index capacity = 0;      ///< tokens reserved per layer up front (>= 0)
};

/// A KvSource over LatentInt8 rows: one KV head, keys and values the same quantized rows.
class LatentInt8Source {
 public:
  /// The block type: quantized rows as keys and values.
  using Block = KvBlock<QuantTokenRows, QuantTokenRows>;
  /// Rows [0, tokens) of latent_dim values at codes / params (the cache's storage).
  LatentInt8Source(const std::uint8_t* codes, const QuantParams* params, Index tokens, Index latent_dim)
      : rows_{codes, params, &latent_int8_spec(), latent_dim}, tokens_(tokens) {}
  Index num_kv_heads() const { return 1; }                  ///< one latent stream
  Index head_dim() const { return rows_.dim; }              ///< latent_dim
  Index num_tokens() const { return tokens_; }              ///< cached tokens
  Index num_blocks() const { return tokens_ > 0 ? 1 : 0; }  ///< 1, or 0 when empty
  /// The single block (head 0; not checked).
  Block block(Index /*head*/, Index /*b*/) const { return {tokens_, rows_, rows_, TokenPositions{nullptr, 0}}; }

 private:
  QuantTokenRows rows_;
  Index tokens_ = 0;
};

/// MLA latent cache (file comment) with rows stored as T: float, BFloat16 or LatentInt8.
template <class T>
class LatentCache {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, BFloat16> || std::is_same_v<T, LatentInt8>,
                "LatentCache stores float, BFloat16 or LatentInt8 rows");
  static constexpr bool kInt8 = std::is_same_v<T, LatentInt8>;
  using Element = std::conditional_t<kInt8, std::uint8_t, T>;

 public:
  /// The row format of T.
  static constexpr LatentFormat kFormat =
      kInt8 ? LatentFormat::kInt8 : (std::is_same_v<T, float> ? LatentFormat::kF32 : LatentFormat::kBF16);
  /// The KvSource of one layer: DenseKv over the rows (keys = values), or LatentInt8Source.
  using Source = std::conditional_t<kInt8, LatentInt8Source, DenseKv<std::conditional_t<kInt8, float, T>>>;

  /// @throws std::invalid_argument naming the config field: layers or kv_lora_rank <= 0,
  ///         rope_dim or capacity < 0, an int8 latent_dim not a multiple of kLatentInt8Group.
  explicit LatentCache(const LatentCacheConfig& c)
      : layers_(c.layers),
        rank_(c.kv_lora_rank),
        rope_(c.rope_dim),
        layer_(static_cast<std::size_t>(std::max<Index>(c.layers, 0))) {
    require(c.layers > 0, "config.layers", c.layers, "must be > 0");
    require(c.kv_lora_rank > 0, "config.kv_lora_rank", c.kv_lora_rank, "must be > 0");
    require(c.rope_dim >= 0, "config.rope_dim", c.rope_dim, "must be >= 0");
    require(c.capacity >= 0, "config.capacity", c.capacity, "must be >= 0");
    if constexpr (kInt8)
      require(latent_dim() % kLatentInt8Group == 0, "config.kv_lora_rank + config.rope_dim", latent_dim(),
              "must be a multiple of " + std::to_string(kLatentInt8Group) + " for LatentInt8 rows");
    for (auto& l : layer_) {
      l.rows.reserve(static_cast<std::size_t>(c.capacity * row_elements()));
      if constexpr (kInt8) l.params.reserve(static_cast<std::size_t>(c.capacity * groups()));
    }
  }

  Index num_layers() const { return layers_; }                                 ///< layers
  Index kv_lora_rank() const { return rank_; }                                 ///< values of c per token
  Index rope_dim() const { return rope_; }                                     ///< values of k_pe per token
  Index latent_dim() const { return rank_ + rope_; }                           ///< values per latent row
  Index row_bytes() const { return latent_row_bytes(kFormat, latent_dim()); }  ///< bytes per row
  /// Tokens cached in a layer.
  /// @throws std::invalid_argument when layer is out of range.
  Index length(Index layer) const { return at(layer).tokens; }
  /// Bytes the cached rows of every layer hold (row_bytes() per token and layer).
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& l : layer_) n += static_cast<std::size_t>(l.tokens * row_bytes());
    return n;
  }

  /// Appends n tokens to a layer: c [n, kv_lora_rank] and k_pe [n, rope_dim] (RoPE already
  /// applied) become rows [c; k_pe], rounded to T (BFloat16: nearest even; LatentInt8: per group,
  /// kv/quant_codec.hpp).
  /// @throws std::invalid_argument naming the parameter: layer out of range, shapes, or a length
  ///         beyond int32 positions.
  void append(Index layer, MatrixView<const float> c, MatrixView<const float> k_pe) {
    Layer& l = at(layer);
    const Index n = c.rows(), L = latent_dim();
    require(c.cols() == rank_, "c.cols()", c.cols(), "must equal kv_lora_rank (" + std::to_string(rank_) + ")");
    require(k_pe.rows() == n || (rope_ == 0 && k_pe.empty()), "k_pe.rows()", k_pe.rows(),
            "must equal c.rows() (" + std::to_string(n) + ")");
    require(k_pe.cols() == rope_, "k_pe.cols()", k_pe.cols(), "must equal rope_dim (" + std::to_string(rope_) + ")");
    require(l.tokens + n <= std::numeric_limits<std::int32_t>::max(), "c.rows()", n,
            "would take layer " + std::to_string(layer) + " past int32 positions (" + std::to_string(l.tokens) +
                " cached)");
    std::vector<float> row(static_cast<std::size_t>(L));
    l.rows.resize(static_cast<std::size_t>((l.tokens + n) * row_elements()));
    if constexpr (kInt8) l.params.resize(static_cast<std::size_t>((l.tokens + n) * groups()));
    for (Index t = 0; t < n; ++t) {
      std::copy_n(c.row_ptr(t), rank_, row.data());
      std::copy_n(k_pe.row_ptr(t), rope_, row.data() + rank_);
      const Index at_row = l.tokens + t;
      if constexpr (kInt8)
        quantize_token_row(row.data(), latent_int8_spec(), L, l.rows.data() + at_row * row_elements(),
                           l.params.data() + at_row * groups());
      else
        convert(row.data(), l.rows.data() + at_row * L, static_cast<std::size_t>(L));
    }
    l.tokens += n;
  }

  /// Drops a layer's newest tokens so that `tokens` remain (rejected speculative drafts).
  /// @throws std::invalid_argument when layer is out of range or tokens is not in [0, length(layer)].
  void truncate(Index layer, Index tokens) {
    Layer& l = at(layer);
    require(tokens >= 0 && tokens <= l.tokens, "tokens", tokens,
            "must be in [0, " + std::to_string(l.tokens) + "] (the layer's length)");
    l.tokens = tokens;
    l.rows.resize(static_cast<std::size_t>(tokens * row_elements()));
    if constexpr (kInt8) l.params.resize(static_cast<std::size_t>(tokens * groups()));
  }

  /// The layer's KvSource (file comment); valid until the next append or truncate.
  /// @throws std::invalid_argument when layer is out of range.
  Source source(Index layer) const {
    const Layer& l = at(layer);
    if constexpr (kInt8) {
      return LatentInt8Source(l.rows.data(), l.params.data(), l.tokens, latent_dim());
    } else {
      const Tensor3View<const T> rows(l.rows.data(), l.tokens, 1, latent_dim());
      return DenseKv<T>(rows, rows);
    }
  }

 private:
  struct Layer {
    std::vector<Element> rows;        // tokens x row_elements()
    std::vector<QuantParams> params;  // LatentInt8: tokens x groups()
    Index tokens = 0;
  };
  Index row_elements() const { return kInt8 ? token_code_bytes(latent_int8_spec(), latent_dim()) : latent_dim(); }
  Index groups() const { return latent_dim() / kLatentInt8Group; }
  const Layer& at(Index layer) const {
    require(layer >= 0 && layer < layers_, "layer", layer, "must be in [0, " + std::to_string(layers_) + ")");
    return layer_[static_cast<std::size_t>(layer)];
  }
  Layer& at(Index layer) { return const_cast<Layer&>(std::as_const(*this).at(layer)); }

  Index layers_, rank_, rope_;
  std::vector<Layer> layer_;
};

}  // namespace inferkit
