#pragma once
// A quantized KV cache with keys and values configured independently (their errors enter
// attention at different points: keys through the scores, values through the weighted sum).
// Each (layer, KV head) keeps a stream per K and V: quantized rows plus a full-precision tail
// of the most recent tokens.
//   per-token axis:   a token's head_dim values are split in groups along head_dim; the oldest
//                     tail token is quantized as soon as the tail holds more than `residual`.
//   per-channel axis: each channel is quantized over a group of `group_size` consecutive tokens
//                     (KIVI keys); a group is flushed when the tail holds residual + group_size
//                     tokens, so the tail keeps between `residual` and residual + group - 1.
// Nothing already quantized is ever re-quantized. Attention reads the cache through the KV block
// view; rows are dequantized one tile at a time into the kernel's scratch, never the whole cache.
// Presets (KIVI: Liu et al. 2024): int8, int4, kivi4, kivi2 (see quant_presets()).

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/quant_codec.hpp"
#include "inferkit/kv/quant_rows.hpp"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace inferkit {

/// Named presets: int8 (per-token symmetric, group 32), int4 (per-token asymmetric, group 32),
/// kivi4 / kivi2 (keys per-channel over 32 tokens, values per-token, asymmetric, residual 32).
/// Per-token groups run along head_dim. Without `head_dim` the specs fit any head_dim: a cache
/// whose head_dim is not a multiple of 32 uses groups of gcd(32, head_dim) values (head_dim 80:
/// 16; QuantSpec::fit_group_to_head_dim). With `head_dim` given the groups are gcd(32, head_dim)
/// at once and fixed (a cache of another head_dim that they do not divide throws).
/// @throws std::invalid_argument for an unknown name.
inline KvQuantConfig kv_quant_preset(const std::string& name, Index head_dim = 0) {
  const Index g = head_dim > 0 ? std::gcd<Index>(32, head_dim) : 32;
  const bool fit = head_dim <= 0;
  const QuantSpec int8{8, true, g, QuantAxis::kPerToken, 0, fit};
  const QuantSpec int4{4, false, g, QuantAxis::kPerToken, 0, fit};
  if (name == "int8") return {int8, int8};
  if (name == "int4") return {int4, int4};
  if (name == "kivi4" || name == "kivi2") {
    const int b = name == "kivi4" ? 4 : 2;
    return {QuantSpec{b, false, 32, QuantAxis::kPerChannel, 32}, QuantSpec{b, false, g, QuantAxis::kPerToken, 32, fit}};
  }
  throw_invalid_argument("kv_quant", name, "must be one of int8, int4, kivi4, kivi2");
}

/// Both specs of a config fitted to head_dim (fit_kv_quant()).
inline KvQuantConfig fit_kv_quant(const KvQuantConfig& c, Index head_dim) {
  return {fit_kv_quant(c.keys, head_dim), fit_kv_quant(c.values, head_dim)};
}

/// Shape and quantization of a QuantizedKvCache, for designated initializers:
/// `QuantizedKvCache cache({.layers = L, .kv_heads = H, .head_dim = 80, .quant = kv_quant_preset("kivi4")})`.
/// The shape fields have no usable default (0 is rejected), so a forgotten field is an error.
struct QuantizedKvCacheConfig {
  Index layers = 0;                               ///< transformer layers (> 0)
  Index kv_heads = 0;                             ///< KV heads per layer (> 0)
  Index head_dim = 0;                             ///< values per head (> 0)
  KvQuantConfig quant = kv_quant_preset("int8");  ///< key and value specs (default: int8 preset)
};

namespace detail {

/// One stream (keys or values of one layer and KV head).
struct QuantStream {
  std::vector<std::uint8_t> codes;  // quantized rows, token-major, row_bytes each
  std::vector<QuantParams> params;  // per-token: (dim / group) per token; per-channel: dim per group
  Index quantized = 0;              // tokens in the quantized part
  std::vector<float> tail;          // full-precision rows of the newest tokens
  Index tail_tokens = 0;
};

}  // namespace detail

/// Rows of one stream: token t comes from the quantized part or the full-precision tail.
struct QuantStreamRows {
  const detail::QuantStream* stream = nullptr;  ///< the stream's codes, parameters and float tail
  const QuantSpec* spec = nullptr;              ///< the stream's spec
  Index dim = 0;                                ///< values per row

  Index row_bytes() const { return dim / spec->codes_per_byte(); }  ///< bytes of packed codes per row

  /// The quantized part of the stream, for in-register dequantization.
  QuantRowsView quantized_view() const {
    return quant_view(stream->codes.data(), stream->params.data(), *spec, stream->quantized);
  }

  /// Float rows [first, first + count): tail rows in place when allowed, otherwise dequantized into scratch.
  RowsF32 load_f32(Index first, Index count, Index d, float* scratch, Index stride, bool allow_in_place) const {
    return QuantTailRows{stream->codes.data(), stream->params.data(), spec, stream->quantized, stream->tail.data()}
        .load_f32(first, count, d, scratch, stride, allow_in_place);
  }
};

/// Quantized KV cache (file comment): per layer and KV head, a quantized stream plus a
/// full-precision tail for keys and for values, each with its own QuantSpec. Single writer;
/// const access is thread-safe.
class QuantizedKvCache {
 public:
  /// The block type of every head.
  using Block = KvBlock<QuantStreamRows, QuantStreamRows>;

  /// Builds an empty cache (the preferred form). Specs are fitted to head_dim (fit_kv_quant()).
  /// @throws std::invalid_argument naming the field: layers, kv_heads or head_dim <= 0, or a spec
  ///         that does not fit head_dim (the message says how to fix it).
  explicit QuantizedKvCache(const QuantizedKvCacheConfig& c)
      : QuantizedKvCache(c.layers, c.kv_heads, c.head_dim, c.quant) {}

  /// Short positional form of QuantizedKvCache(const QuantizedKvCacheConfig&).
  QuantizedKvCache(Index layers, Index kv_heads, Index head_dim, KvQuantConfig config)
      : layers_(layers),
        heads_(kv_heads),
        dim_(head_dim),
        config_(fit_kv_quant(config, head_dim)),
        keys_(static_cast<std::size_t>(require_positive(layers, "layers") * require_positive(kv_heads, "kv_heads"))),
        values_(keys_.size()),
        length_(static_cast<std::size_t>(layers), 0) {
    require(head_dim > 0, "head_dim", head_dim, "must be > 0");
    validate_kv_quant(config_.keys, head_dim, "keys");
    validate_kv_quant(config_.values, head_dim, "values");
  }

  Index layers() const { return layers_; }   ///< layers
  Index kv_heads() const { return heads_; }  ///< KV heads per layer
  Index head_dim() const { return dim_; }    ///< values per head
  /// The specs in use (after fit_kv_quant(): the group size actually used).
  const KvQuantConfig& config() const { return config_; }
  /// Tokens cached in one layer. @throws std::out_of_range for a bad layer.
  Index length(Index layer) const {
    require_index(layer, layers_, "layer");
    return length_[static_cast<std::size_t>(layer)];
  }

  /// Appends tokens [tokens, kv_heads, head_dim] to one layer (quantized as the specs say).
  /// @throws std::out_of_range for a bad layer; std::invalid_argument, leaving the cache
  ///         unchanged, for a bad shape, a NaN or infinite value, or a value whose quantization
  ///         group would overflow binary16 (quant_codec.hpp).
  void append(Index layer, Tensor3View<const float> keys, Tensor3View<const float> values) {
    require_index(layer, layers_, "layer");
    require(keys.dim1() == heads_ && values.dim1() == heads_, "keys.dim1()", keys.dim1(),
            "keys and values must have kv_heads (" + std::to_string(heads_) + ") heads");
    require(keys.dim2() == dim_ && values.dim2() == dim_, "keys.dim2()", keys.dim2(),
            "keys and values must have head_dim (" + std::to_string(dim_) + ")");
    require(values.dim0() == keys.dim0(), "values.dim0()", values.dim0(), "must equal keys.dim0()");
    for (Index h = 0; h < heads_; ++h) {  // every check first: a rejected append changes nothing
      check_quantizable(stream(keys_, layer, h), config_.keys, keys, h);
      check_quantizable(stream(values_, layer, h), config_.values, values, h);
    }
    for (Index t = 0; t < keys.dim0(); ++t)
      for (Index h = 0; h < heads_; ++h) {
        push(stream(keys_, layer, h), config_.keys, keys.ptr(t, h));
        push(stream(values_, layer, h), config_.values, values.ptr(t, h));
      }
    length_[static_cast<std::size_t>(layer)] += keys.dim0();
  }

  /// The KV block view of one layer (one block per head; rows decoded tile by tile).
  class Source {
   public:
    /// The view of `layer` of `c` (which must outlive it).
    Source(const QuantizedKvCache& c, Index layer) : c_(&c), layer_(layer) {}
    Index num_kv_heads() const { return c_->heads_; }              ///< KV heads
    Index head_dim() const { return c_->dim_; }                    ///< values per head
    Index num_tokens() const { return c_->length(layer_); }        ///< tokens cached in the layer
    Index num_blocks() const { return num_tokens() > 0 ? 1 : 0; }  ///< 1, or 0 when empty
    /// The single block of one KV head (quantized rows, then the float tail).
    Block block(Index head, Index) const {
      const auto i = static_cast<std::size_t>(layer_ * c_->heads_ + head);
      return {num_tokens(), QuantStreamRows{&c_->keys_[i], &c_->config_.keys, c_->dim_},
              QuantStreamRows{&c_->values_[i], &c_->config_.values, c_->dim_}, TokenPositions{nullptr, 0}};
    }

   private:
    const QuantizedKvCache* c_;
    Index layer_;
  };
  /// The KV block view of one layer (valid while the cache lives; sees later appends).
  /// @throws std::out_of_range for a bad layer.
  Source source(Index layer) const {
    require_index(layer, layers_, "layer");
    return Source(*this, layer);
  }

  /// Bytes held now: codes, binary16 metadata and the float tails, all layers and heads.
  std::size_t bytes_in_use() const {
    std::size_t b = 0;
    for (const auto* streams : {&keys_, &values_})
      for (const auto& s : *streams)
        b += s.codes.size() +
             s.params.size() *
                 static_cast<std::size_t>(streams == &keys_ ? config_.keys.meta_bytes() : config_.values.meta_bytes()) +
             static_cast<std::size_t>(s.tail_tokens * dim_) * sizeof(float);
    return b;
  }

  /// Bytes per token once quantized (codes and metadata, keys and values, all layers and heads).
  double quantized_bytes_per_token() const {
    return static_cast<double>(layers_ * heads_) *
           (stream_bytes_per_token(config_.keys) + stream_bytes_per_token(config_.values));
  }
  /// Bytes per token of one stream quantized with `s` (codes and metadata, one layer and head).
  double stream_bytes_per_token(const QuantSpec& s) const {
    return static_cast<double>(dim_) * s.bits / 8.0 +
           static_cast<double>(dim_) * s.meta_bytes() / static_cast<double>(s.group_size);
  }

 private:
  static detail::QuantStream& stream(std::vector<detail::QuantStream>& v, Index layer, Index head, Index heads) {
    return v[static_cast<std::size_t>(layer * heads + head)];
  }
  detail::QuantStream& stream(std::vector<detail::QuantStream>& v, Index layer, Index head) {
    return stream(v, layer, head, heads_);
  }

  // Throws if head h of x could not be quantized when its groups flush: per-token groups are
  // whole in a row; a per-channel group (tokens [k G, (k + 1) G)) is checked with its members
  // already in the tail, so the flush of a checked group never throws.
  void check_quantizable(const detail::QuantStream& s, const QuantSpec& spec, Tensor3View<const float> x,
                         Index h) const {
    if (spec.axis == QuantAxis::kPerToken) {
      for (Index t = 0; t < x.dim0(); ++t)
        for (Index g = 0; g < token_groups(spec, dim_); ++g)
          (void)choose_params(x.ptr(t, h) + g * spec.group_size, spec.group_size, 1, spec);
      return;
    }
    const Index len = s.quantized + s.tail_tokens, group = spec.group_size;
    for (Index c = 0; c < dim_; ++c) {
      detail::GroupRange r;
      for (Index m = std::max(s.quantized, (len / group) * group); m < len; ++m)
        r.add(s.tail[static_cast<std::size_t>((m - s.quantized) * dim_ + c)]);
      for (Index t = 0; t < x.dim0(); ++t) {
        if ((len + t) % group == 0) r = detail::GroupRange{};
        r.add(x.ptr(t, h)[c]);
        (void)r.params(spec);
      }
    }
  }

  void push(detail::QuantStream& s, const QuantSpec& spec, const float* row) {
    s.tail.insert(s.tail.end(), row, row + dim_);
    ++s.tail_tokens;
    if (spec.axis == QuantAxis::kPerToken) {
      while (s.tail_tokens > spec.residual) flush(s, spec, 1);
    } else {
      while (s.tail_tokens >= spec.residual + spec.group_size) flush(s, spec, spec.group_size);
    }
  }

  // Quantizes the oldest n tail tokens and drops them from the tail.
  void flush(detail::QuantStream& s, const QuantSpec& spec, Index n) {
    const Index rb = dim_ / spec.codes_per_byte();
    const std::size_t code_base = s.codes.size();
    s.codes.resize(code_base + static_cast<std::size_t>(n * rb), 0);
    std::uint8_t* codes = s.codes.data() + code_base;
    const float* x = s.tail.data();
    if (spec.axis == QuantAxis::kPerToken) {
      const Index groups = token_groups(spec, dim_);
      s.params.resize(s.params.size() + static_cast<std::size_t>(n * groups));
      QuantParams* params = s.params.data() + s.params.size() - static_cast<std::size_t>(n * groups);
      for (Index t = 0; t < n; ++t) quantize_token_row(x + t * dim_, spec, dim_, codes + t * rb, params + t * groups);
    } else {
      s.params.resize(s.params.size() + static_cast<std::size_t>(dim_));
      quantize_channel_group(x, n, spec, dim_, codes,
                             s.params.data() + s.params.size() - static_cast<std::size_t>(dim_));
    }
    s.tail.erase(s.tail.begin(), s.tail.begin() + static_cast<std::ptrdiff_t>(n * dim_));
    s.tail_tokens -= n;
    s.quantized += n;
  }

  Index layers_, heads_, dim_;
  KvQuantConfig config_;
  std::vector<detail::QuantStream> keys_, values_;
  std::vector<Index> length_;
};

}  // namespace inferkit
