#pragma once
// Attention sinks + sliding window (StreamingLLM, Xiao et al. 2024): keep the first `n_sink`
// tokens and a ring of the `window` most recent; the oldest non-sink token is evicted when a new
// one arrives. The budget n_sink + window counts the token being appended (the current one).
// Two position policies:
//   kOriginal: tokens keep the positions they were appended with (keys may be stored after RoPE).
//   kCache:    positions are re-assigned by slot in age order, 0 .. size-1 (StreamingLLM's
//              choice): keys are stored before RoPE and rotated on read at their slot position
//              (a precomputed cos/sin table), so eviction never needs re-rotation. The query of
//              the newest token then sits at position size-1.
// ALiBi distances follow the chosen positions. Read through the KV block view: sinks, then the
// ring's older run, then its newer run.
// Storage is a policy: DenseSlots<T> (float, binary16, bfloat16) or QuantSlots (per-token
// quantized rows, keys and values with their own QuantSpec; a slot is re-quantized only when a
// new token overwrites it). Per-channel (KIVI) keys need runs of consecutive tokens that a ring
// does not keep, so the quantized policy takes per-token specs only.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/rope.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/quant_rows.hpp"
#include "inferkit/kv/quantized_cache.hpp"

namespace inferkit {

/// Which positions a sink + window cache gives its tokens (file comment).
enum class PositionPolicy {
  kOriginal,  ///< the positions they were appended with (keys may be stored after RoPE)
  kCache      ///< slot positions 0 .. size-1 in age order; keys stored un-rotated, rotated on read
};

/// Shape and policy of a dense SinkWindowCache<T>, for designated initializers:
/// `SinkWindowCache<float> cache({.layers = L, .kv_heads = H, .head_dim = D, .n_sink = 4, .window = 1020})`.
/// The shape fields have no usable default (0 is rejected), so a forgotten field is an error.
struct SinkWindowConfig {
  Index layers = 0;                                      ///< transformer layers (> 0)
  Index kv_heads = 0;                                    ///< KV heads per layer (> 0)
  Index head_dim = 0;                                    ///< values per head (> 0)
  Index n_sink = 0;                                      ///< attention-sink tokens kept from the start (>= 0)
  Index window = 0;                                      ///< most recent tokens kept, the current one included (>= 1)
  PositionPolicy positions = PositionPolicy::kOriginal;  ///< original or cache positions
  RopeOptions rope = {};  ///< RoPE applied on read with PositionPolicy::kCache (ignored otherwise)
};

/// Shape, policy and quantization of a QuantizedSinkWindowCache, for designated initializers:
/// `QuantizedSinkWindowCache cache({.layers = L, .kv_heads = H, .head_dim = D, .n_sink = 4,
/// .window = 1020, .quant = kv_quant_preset("int4")})`. Per-token specs only (a ring keeps no runs
/// of tokens for per-channel groups); they are fitted to head_dim (fit_kv_quant()).
struct QuantizedSinkWindowConfig {
  Index layers = 0;                                      ///< transformer layers (> 0)
  Index kv_heads = 0;                                    ///< KV heads per layer (> 0)
  Index head_dim = 0;                                    ///< values per head (> 0)
  Index n_sink = 0;                                      ///< attention-sink tokens kept from the start (>= 0)
  Index window = 0;                                      ///< most recent tokens kept, the current one included (>= 1)
  PositionPolicy positions = PositionPolicy::kOriginal;  ///< original or cache positions
  RopeOptions rope = {};  ///< RoPE applied on read with PositionPolicy::kCache (ignored otherwise)
  KvQuantConfig quant = kv_quant_preset("int8");  ///< key and value specs (per-token)
};

/// A row store whose rows are rotated on read by RoPE at each row's position from cos / sin
/// tables (or not at all when the tables are null).
template <class Rows>
struct RopedRows {
  Rows rows;                                    ///< the inner row store
  const float* cos = nullptr;                   ///< [position][rotary_dim / 2], or nullptr: no rotation
  const float* sin = nullptr;                   ///< sin table beside cos
  Index rotary_dim = 0;                         ///< rotated dimensions
  RopeStyle style = RopeStyle::kAdjacentPairs;  ///< pair convention
  TokenPositions positions;                     ///< position of each row (indexes the tables)

  /// Un-rotated quantized rows keep the inner store's in-register dequantization.
  QuantRowsView quantized_view() const requires QuantizedRows<Rows> {
    return cos ? QuantRowsView{} : rows.quantized_view();
  }

  /// Float rows [first, first + count), rotated at their positions when the tables are set.
  RowsF32 load_f32(Index first, Index count, Index dim, float* scratch, Index stride, bool allow_in_place) const {
    if (!cos) return rows.load_f32(first, count, dim, scratch, stride, allow_in_place);
    const RowsF32 r = rows.load_f32(first, count, dim, scratch, stride, false);
    const auto half = static_cast<std::size_t>(rotary_dim / 2);
    for (Index i = 0; i < count; ++i) {
      const auto at = static_cast<std::size_t>(positions[first + i]) * half;
      detail::rope_rotate_token(scratch + i * stride, 1, 0, rotary_dim, style, cos + at, sin + at);
    }
    return r;
  }
};

/// Slot storage of plain rows of T (float, Float16 or BFloat16).
template <class T>
class DenseSlots {
 public:
  struct Options {};
  using Rows = DenseRows<T>;  ///< the row store of a run of slots
  DenseSlots(Index rows, Index dim, Options = {})
      : dim_(dim), data_(static_cast<std::size_t>(rows * dim), T{}) {}  ///< `rows` zeroed slots of `dim` values
  void write(Index row, const float* x) {
    convert(x, data_.data() + row * dim_, static_cast<std::size_t>(dim_));
  }  ///< stores x (dim floats, converted to T) in slot row
  Rows rows(Index first) const { return {data_.data() + first * dim_, dim_}; }  ///< the slots from `first` on
  std::size_t bytes() const { return data_.size() * sizeof(T); }                ///< bytes of storage

 private:
  Index dim_;
  std::vector<T> data_;
};

/// Slot storage of per-token quantized rows (codes + binary16 parameters per group).
class QuantSlots {
 public:
  using Options = QuantSpec;    ///< per-stream options: the spec
  using Rows = QuantTokenRows;  ///< the row store of a run of slots
  /// `rows` slots of `dim` values quantized with `spec` (fitted to dim, fit_kv_quant()).
  /// @throws std::invalid_argument for a per-channel spec or one that does not fit dim.
  QuantSlots(Index rows, Index dim, const QuantSpec& spec)
      : dim_(dim), spec_(fit_kv_quant(spec, dim)), code_bytes_(0), groups_(0) {
    require(spec.axis == QuantAxis::kPerToken, "axis", "per-channel",
            "a sink + window cache quantizes per token (a ring keeps no runs of tokens per channel group)");
    validate_kv_quant(spec_, dim, "spec");
    code_bytes_ = token_code_bytes(spec_, dim);
    groups_ = token_groups(spec_, dim);
    codes_.assign(static_cast<std::size_t>(rows * code_bytes_), 0);
    params_.assign(static_cast<std::size_t>(rows * groups_), QuantParams{});
  }
  /// Quantizes x (dim floats) into slot row (overwriting it).
  void write(Index row, const float* x) {
    quantize_token_row(x, spec_, dim_, codes_.data() + row * code_bytes_, params_.data() + row * groups_);
  }
  /// The slots from `first` on.
  Rows rows(Index first) const {
    return {codes_.data() + first * code_bytes_, params_.data() + first * groups_, &spec_, dim_};
  }
  std::size_t bytes() const {
    return codes_.size() + params_.size() * static_cast<std::size_t>(spec_.meta_bytes());
  }  ///< bytes of codes and metadata

 private:
  Index dim_;
  QuantSpec spec_;
  Index code_bytes_, groups_;
  std::vector<std::uint8_t> codes_;
  std::vector<QuantParams> params_;
};

/// Attention sinks + sliding window cache (file comment) over a slot storage policy for keys and
/// values (DenseSlots<T> or QuantSlots). Use the aliases SinkWindowCache<T> and
/// QuantizedSinkWindowCache. Single writer; const access is thread-safe.
template <class KeySlots, class ValueSlots = KeySlots>
class BasicSinkWindowCache {
 public:
  /// The block type of every head (three runs: sinks, older ring run, newer ring run).
  using Block = KvBlock<RopedRows<typename KeySlots::Rows>, typename ValueSlots::Rows>;

  /// Builds an empty dense cache (the preferred form for SinkWindowCache<T>).
  /// @throws std::invalid_argument naming the field: layers, kv_heads or head_dim <= 0,
  ///         n_sink < 0, window < 1, a bad rope.rotary_dim.
  explicit BasicSinkWindowCache(const SinkWindowConfig& c) requires(
      std::is_empty_v<typename KeySlots::Options>&& std::is_empty_v<typename ValueSlots::Options>)
      : BasicSinkWindowCache(c.layers, c.kv_heads, c.head_dim, c.n_sink, c.window, c.positions, c.rope) {}

  /// Builds an empty quantized cache (the preferred form for QuantizedSinkWindowCache).
  /// @throws std::invalid_argument as above, or for a per-channel spec or one that does not fit
  ///         head_dim.
  explicit BasicSinkWindowCache(const QuantizedSinkWindowConfig& c) requires(
      std::is_same_v<typename KeySlots::Options, QuantSpec>&& std::is_same_v<typename ValueSlots::Options, QuantSpec>)
      : BasicSinkWindowCache(c.layers, c.kv_heads, c.head_dim, c.n_sink, c.window, c.positions, c.rope, c.quant.keys,
                             c.quant.values) {}

  /// Short positional form of the config constructors (same fields in order; the quantized
  /// cache takes the key and value QuantSpecs after the RoPE options).
  BasicSinkWindowCache(Index layers, Index kv_heads, Index head_dim, Index n_sink, Index window, PositionPolicy policy,
                       RopeOptions rope = {}, typename KeySlots::Options key_options = {},
                       typename ValueSlots::Options value_options = {})
      : layers_(layers),
        heads_(kv_heads),
        dim_(head_dim),
        sinks_(n_sink),
        window_(window),
        policy_(policy),
        rope_(rope),
        state_(static_cast<std::size_t>(validated_layers(layers, kv_heads, head_dim, n_sink, window))),
        keys_(layers * kv_heads * (n_sink + window), head_dim, key_options),
        values_(layers * kv_heads * (n_sink + window), head_dim, value_options) {
    const Index slots = n_sink + window;
    for (auto& s : state_) s.positions.assign(static_cast<std::size_t>(slots), 0);
    if (policy == PositionPolicy::kCache) {  // cos / sin of every slot position
      rotary_ = detail::rope_rotary_dim(head_dim, rope);
      const std::vector<double> inv_freq = detail::rope_inv_freq(rotary_, rope);
      cos_.resize(static_cast<std::size_t>(slots) * inv_freq.size());
      sin_.resize(cos_.size());
      for (Index p = 0; p < slots; ++p)
        detail::rope_cos_sin(p, inv_freq, cos_.data() + p * rotary_ / 2, sin_.data() + p * rotary_ / 2);
    }
  }

  Index capacity() const { return sinks_ + window_; }  ///< slots per layer and head: n_sink + window
  /// Bytes of key and value storage for every slot of every layer and head (fixed at creation).
  std::size_t bytes() const { return keys_.bytes() + values_.bytes(); }
  /// Tokens held by a layer (at most n_sink + window).
  Index size(Index layer) const {
    const auto& s = st(layer);
    return s.held_sinks + s.ring_count;
  }
  /// Tokens ever appended to a layer.
  std::int64_t seen(Index layer) const { return st(layer).seen; }

  /// Appends tokens [tokens, kv_heads, head_dim] at original positions (one per token).
  /// With PositionPolicy::kCache keys must be un-rotated; with kOriginal they may be rotated.
  void append(Index layer, Tensor3View<const float> keys, Tensor3View<const float> values,
              std::span<const std::int32_t> positions) {
    require(keys.dim1() == heads_ && values.dim1() == heads_, "keys.dim1()", keys.dim1(),
            "keys and values must have kv_heads (" + std::to_string(heads_) + ") heads");
    require(keys.dim2() == dim_ && values.dim2() == dim_, "keys.dim2()", keys.dim2(),
            "keys and values must have head_dim (" + std::to_string(dim_) + ")");
    require(values.dim0() == keys.dim0(), "values.dim0()", values.dim0(), "must equal keys.dim0()");
    require(static_cast<Index>(positions.size()) == keys.dim0(), "positions.size()", positions.size(),
            "must equal the number of tokens (" + std::to_string(keys.dim0()) + ")");
    auto& s = st(layer);
    for (Index t = 0; t < keys.dim0(); ++t) {
      Index slot;
      if (s.held_sinks < sinks_) {
        slot = s.held_sinks++;
      } else if (s.ring_count < window_) {
        slot = sinks_ + (s.ring_start + s.ring_count) % window_;
        ++s.ring_count;
      } else {  // evict the oldest window token
        slot = sinks_ + s.ring_start;
        s.ring_start = (s.ring_start + 1) % window_;
      }
      s.positions[static_cast<std::size_t>(slot)] = positions[t];
      for (Index h = 0; h < heads_; ++h) {
        keys_.write(row(layer, h, slot), keys.ptr(t, h));
        values_.write(row(layer, h, slot), values.ptr(t, h));
      }
      ++s.seen;
    }
  }

  /// Position of the newest token under the policy (where its query sits).
  std::int32_t newest_position(Index layer) const {
    const auto& s = st(layer);
    require(size(layer) > 0, "layer", layer, "has no tokens yet");
    if (policy_ == PositionPolicy::kCache) return static_cast<std::int32_t>(size(layer) - 1);
    const Index newest = s.ring_count > 0 ? sinks_ + (s.ring_start + s.ring_count - 1) % window_ : s.held_sinks - 1;
    return s.positions[static_cast<std::size_t>(newest)];
  }

  /// The KV block view of one layer: three blocks per head (sinks, older ring run, newer run).
  class Source {
   public:
    /// The view of `layer` of `c` as it is now (valid until the next append).
    Source(const BasicSinkWindowCache& c, Index layer) : c_(&c), layer_(layer) {
      const auto& s = c.st(layer);
      // Runs in age order: sinks, ring from its start to the end of storage, then the wrap.
      runs_[0] = {0, s.held_sinks};
      const Index a_len = std::min(s.ring_count, c.window_ - s.ring_start);
      runs_[1] = {c.sinks_ + s.ring_start, a_len};
      runs_[2] = {c.sinks_, s.ring_count - a_len};
    }
    Index num_kv_heads() const { return c_->heads_; }                                ///< KV heads
    Index head_dim() const { return c_->dim_; }                                      ///< values per head
    Index num_tokens() const { return runs_[0].len + runs_[1].len + runs_[2].len; }  ///< tokens held
    Index num_blocks() const { return 3; }                                           ///< always 3 (some may be empty)
    /// Block b (0 sinks, 1 older ring run, 2 newer ring run) of one KV head.
    Block block(Index head, Index b) const {
      const Run r = runs_[b];
      Index before = 0;
      for (Index i = 0; i < b; ++i) before += runs_[i].len;
      const TokenPositions pos = c_->policy_ == PositionPolicy::kCache
                                     ? TokenPositions{nullptr, static_cast<std::int32_t>(before)}
                                     : TokenPositions{c_->st(layer_).positions.data() + r.slot, 0};
      const Index first = c_->row(layer_, head, r.slot);
      const bool rotate = !c_->cos_.empty();
      RopedRows<typename KeySlots::Rows> keys{c_->keys_.rows(first),
                                              rotate ? c_->cos_.data() : nullptr,
                                              rotate ? c_->sin_.data() : nullptr,
                                              c_->rotary_,
                                              c_->rope_.style,
                                              pos};
      return {r.len, keys, c_->values_.rows(first), pos};
    }

   private:
    struct Run {
      Index slot = 0, len = 0;
    };
    const BasicSinkWindowCache* c_;
    Index layer_;
    Run runs_[3];
  };
  /// The KV block view of one layer (valid until the next append). @throws std::out_of_range for a bad layer.
  Source source(Index layer) const {
    require_index(layer, layers_, "layer");
    return Source(*this, layer);
  }

 private:
  struct LayerState {
    Index held_sinks = 0, ring_start = 0, ring_count = 0;
    std::int64_t seen = 0;
    std::vector<std::int32_t> positions;  // original position per slot
  };
  const LayerState& st(Index layer) const {
    require_index(layer, layers_, "layer");
    return state_[static_cast<std::size_t>(layer)];
  }
  LayerState& st(Index layer) {
    require_index(layer, layers_, "layer");
    return state_[static_cast<std::size_t>(layer)];
  }
  // Storage row of (layer, head, slot).
  Index row(Index layer, Index head, Index slot) const { return (layer * heads_ + head) * capacity() + slot; }
  // Validates the shape before any member is sized from it (the first sized member calls it).
  static Index validated_layers(Index layers, Index kv_heads, Index head_dim, Index n_sink, Index window) {
    require_positive(kv_heads, "kv_heads");
    require_positive(head_dim, "head_dim");
    require(n_sink >= 0, "n_sink", n_sink, "must be >= 0");
    require(window >= 1, "window", window, "must be >= 1");
    return require_positive(layers, "layers");
  }

  Index layers_, heads_, dim_, sinks_, window_;
  PositionPolicy policy_;
  RopeOptions rope_;
  Index rotary_ = 0;
  std::vector<float> cos_, sin_;  // [slot position][rotary_ / 2], kCache only
  std::vector<LayerState> state_;
  KeySlots keys_;
  ValueSlots values_;
};

/// Sink + window over plain rows of T (float, Float16 or BFloat16).
template <class T>
using SinkWindowCache = BasicSinkWindowCache<DenseSlots<T>>;
/// Sink + window over per-token quantized rows: pass the key and value QuantSpecs after the
/// RoPE options (e.g. kv_quant_preset("int8", head_dim)).
using QuantizedSinkWindowCache = BasicSinkWindowCache<QuantSlots>;

}  // namespace inferkit
