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

struct KvQuantConfig {
  QuantSpec keys;
  QuantSpec values;
};

/// Named presets: int8 (per-token symmetric, group 32), int4 (per-token asymmetric, group 32),
/// kivi4 / kivi2 (keys per-channel over 32 tokens, values per-token, asymmetric, residual 32).
/// Per-token groups run along head_dim: with `head_dim` given, a group is gcd(32, head_dim)
/// values so small heads (e.g. 8) still divide into whole groups.
inline KvQuantConfig kv_quant_preset(const std::string& name, Index head_dim = 0) {
  const Index g = head_dim > 0 ? std::gcd<Index>(32, head_dim) : 32;
  const QuantSpec int8{8, true, g, QuantAxis::kPerToken, 0};
  const QuantSpec int4{4, false, g, QuantAxis::kPerToken, 0};
  if (name == "int8") return {int8, int8};
  if (name == "int4") return {int4, int4};
  if (name == "kivi4" || name == "kivi2") {
    const int b = name == "kivi4" ? 4 : 2;
    return {QuantSpec{b, false, 32, QuantAxis::kPerChannel, 32}, QuantSpec{b, false, g, QuantAxis::kPerToken, 32}};
  }
  throw_invalid_argument("kv_quant", name, "must be one of int8, int4, kivi4, kivi2");
}

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
  const detail::QuantStream* stream = nullptr;
  const QuantSpec* spec = nullptr;
  Index dim = 0;

  Index row_bytes() const { return dim / spec->codes_per_byte(); }

  /// The quantized part of the stream, for in-register dequantization.
  QuantRowsView quantized_view() const {
    return quant_view(stream->codes.data(), stream->params.data(), *spec, stream->quantized);
  }

  RowsF32 load_f32(Index first, Index count, Index d, float* scratch, Index stride, bool allow_in_place) const {
    const Index q = stream->quantized;
    if (first >= q && allow_in_place)  // the whole range is in the tail: read it where it is
      return {stream->tail.data() + (first - q) * d, d};
    const QuantSpec& s = *spec;
    const Index rb = row_bytes(), groups = d / s.group_size;  // divisions hoisted out of the row loop
    std::vector<float> step, zero;  // per-channel parameters of the current token group
    Index params_group = -1, group_end = 0;
    for (Index r = 0; r < count; ++r) {
      const Index t = first + r;
      float* out = scratch + r * stride;
      if (t >= q) {
        std::memcpy(out, stream->tail.data() + (t - q) * d, static_cast<std::size_t>(d) * sizeof(float));
        continue;
      }
      if (s.axis == QuantAxis::kPerToken) {
        dequantize_token_row(stream->codes.data() + t * rb, stream->params.data() + t * groups, s, d, out);
      } else {
        detail::codes_to_float(stream->codes.data() + t * rb, d, s.bits, out);
        if (t >= group_end) {  // decode the group's binary16 parameters once
          params_group = t / s.group_size;
          group_end = (params_group + 1) * s.group_size;
          const QuantParams* p = stream->params.data() + params_group * d;
          step.resize(static_cast<std::size_t>(d));
          zero.resize(static_cast<std::size_t>(d));
          for (Index c = 0; c < d; ++c) {
            step[c] = to_float(p[c].step);
            zero[c] = p[c].zero(s);
          }
        }
        std::size_t c = 0;
        for (; c + simd::kWidth <= static_cast<std::size_t>(d); c += simd::kWidth)
          simd::store(out + c, simd::fma(simd::load(out + c), simd::load(step.data() + c), simd::load(zero.data() + c)));
        for (; c < static_cast<std::size_t>(d); ++c) out[c] = out[c] * step[c] + zero[c];
      }
    }
    return {scratch, stride};
  }

};

class QuantizedKvCache {
 public:
  using Block = KvBlock<QuantStreamRows, QuantStreamRows>;

  QuantizedKvCache(Index layers, Index kv_heads, Index head_dim, KvQuantConfig config)
      : layers_(layers), heads_(kv_heads), dim_(head_dim), config_(config),
        keys_(static_cast<std::size_t>(require_positive(layers, "layers") * require_positive(kv_heads, "kv_heads"))),
        values_(keys_.size()), length_(static_cast<std::size_t>(layers), 0) {
    require(head_dim > 0, "head_dim", head_dim, "must be > 0");
    validate_kv_quant(config.keys, head_dim, "keys");
    validate_kv_quant(config.values, head_dim, "values");
  }

  Index layers() const { return layers_; }
  Index kv_heads() const { return heads_; }
  Index head_dim() const { return dim_; }
  const KvQuantConfig& config() const { return config_; }
  Index length(Index layer) const {
    require_index(layer, layers_, "layer");
    return length_[static_cast<std::size_t>(layer)];
  }

  /// Appends tokens [tokens, kv_heads, head_dim] to one layer. Throws std::invalid_argument,
  /// leaving the cache unchanged, for a bad shape, a NaN or infinite value, or a value whose
  /// quantization group would overflow binary16 (quant_codec.hpp).
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
    Source(const QuantizedKvCache& c, Index layer) : c_(&c), layer_(layer) {}
    Index num_kv_heads() const { return c_->heads_; }
    Index head_dim() const { return c_->dim_; }
    Index num_tokens() const { return c_->length(layer_); }
    Index num_blocks() const { return num_tokens() > 0 ? 1 : 0; }
    Block block(Index head, Index) const {
      const auto i = static_cast<std::size_t>(layer_ * c_->heads_ + head);
      return {num_tokens(), QuantStreamRows{&c_->keys_[i], &c_->config_.keys, c_->dim_},
              QuantStreamRows{&c_->values_[i], &c_->config_.values, c_->dim_}, TokenPositions{nullptr, 0}};
    }

   private:
    const QuantizedKvCache* c_;
    Index layer_;
  };
  Source source(Index layer) const {
    require_index(layer, layers_, "layer");
    return Source(*this, layer);
  }

  /// Bytes held now: codes, binary16 metadata and the float tails, all layers and heads.
  std::size_t bytes_in_use() const {
    std::size_t b = 0;
    for (const auto* streams : {&keys_, &values_})
      for (const auto& s : *streams)
        b += s.codes.size() + s.params.size() * static_cast<std::size_t>(streams == &keys_ ? config_.keys.meta_bytes()
                                                                                           : config_.values.meta_bytes()) +
             static_cast<std::size_t>(s.tail_tokens * dim_) * sizeof(float);
    return b;
  }

  /// Bytes per token once quantized (codes and metadata, keys and values, all layers and heads).
  double quantized_bytes_per_token() const {
    return static_cast<double>(layers_ * heads_) * (stream_bytes_per_token(config_.keys) + stream_bytes_per_token(config_.values));
  }
  double stream_bytes_per_token(const QuantSpec& s) const {
    return static_cast<double>(dim_) * s.bits / 8.0 + static_cast<double>(dim_) * s.meta_bytes() / static_cast<double>(s.group_size);
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
  void check_quantizable(const detail::QuantStream& s, const QuantSpec& spec, Tensor3View<const float> x, Index h) const {
    if (spec.axis == QuantAxis::kPerToken) {
      for (Index t = 0; t < x.dim0(); ++t)
        for (Index g = 0; g < token_groups(spec, dim_); ++g) (void)choose_params(x.ptr(t, h) + g * spec.group_size, spec.group_size, 1, spec);
      return;
    }
    const Index len = s.quantized + s.tail_tokens, group = spec.group_size;
    for (Index c = 0; c < dim_; ++c) {
      detail::GroupRange r;
      for (Index m = std::max(s.quantized, (len / group) * group); m < len; ++m) r.add(s.tail[static_cast<std::size_t>((m - s.quantized) * dim_ + c)]);
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
      for (Index c = 0; c < dim_; ++c) {
        const QuantParams p = choose_params(x + c, n, dim_, spec);
        s.params.push_back(p);
        for (Index t = 0; t < n; ++t) put_code(codes + t * rb, c, encode(x[t * dim_ + c], p, spec), spec.bits);
      }
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
