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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/rope.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

enum class PositionPolicy { kOriginal, kCache };

/// Rows of T, optionally rotated on read by RoPE at each row's position from a cos/sin table.
template <class T>
struct RopedRows {
  DenseRows<T> rows;
  const float* cos_sin = nullptr;  // [position][rotary_dim / 2][2], or nullptr: no rotation
  Index rotary_dim = 0;
  RopeStyle style = RopeStyle::kAdjacentPairs;
  TokenPositions positions;

  RowsF32 load_f32(Index first, Index count, Index dim, float* scratch, Index stride, bool allow_in_place) const {
    if (!cos_sin) return rows.load_f32(first, count, dim, scratch, stride, allow_in_place);
    const RowsF32 r = rows.load_f32(first, count, dim, scratch, stride, false);
    const Index half = rotary_dim / 2;
    for (Index i = 0; i < count; ++i) {
      float* v = scratch + i * stride;
      const float* cs = cos_sin + static_cast<std::size_t>(positions[first + i]) * static_cast<std::size_t>(rotary_dim);
      for (Index j = 0; j < half; ++j) {
        const Index a = style == RopeStyle::kAdjacentPairs ? 2 * j : j;
        const Index b = style == RopeStyle::kAdjacentPairs ? 2 * j + 1 : j + half;
        const float x0 = v[a], x1 = v[b], c = cs[2 * j], s = cs[2 * j + 1];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
    return r;
  }
};

template <class T>
class SinkWindowCache {
 public:
  using Block = KvBlock<RopedRows<T>, DenseRows<T>>;

  SinkWindowCache(Index layers, Index kv_heads, Index head_dim, Index n_sink, Index window, PositionPolicy policy,
                  RopeOptions rope = {})
      : layers_(layers), heads_(kv_heads), dim_(head_dim), sinks_(n_sink), window_(window), policy_(policy),
        rope_(rope), state_(static_cast<std::size_t>(layers)) {
    require(layers > 0, "layers", layers, "must be > 0");
    require(kv_heads > 0, "kv_heads", kv_heads, "must be > 0");
    require(head_dim > 0, "head_dim", head_dim, "must be > 0");
    require(n_sink >= 0, "n_sink", n_sink, "must be >= 0");
    require(window >= 1, "window", window, "must be >= 1");
    const Index slots = n_sink + window;
    keys_.assign(static_cast<std::size_t>(layers * kv_heads * slots * head_dim), T{});
    values_.assign(keys_.size(), T{});
    for (auto& s : state_) s.positions.assign(static_cast<std::size_t>(slots), 0);
    if (policy == PositionPolicy::kCache) {
      rotary_ = rope.rotary_dim == 0 ? head_dim : rope.rotary_dim;
      require(rotary_ > 0 && rotary_ <= head_dim && rotary_ % 2 == 0, "rotary_dim", rope.rotary_dim,
              "must be 0 or an even number in [2, head_dim]");
      require(std::isfinite(rope.base) && rope.base > 1.0, "base", rope.base, "must be finite and > 1");
      cos_sin_.resize(static_cast<std::size_t>(slots * rotary_));
      for (Index p = 0; p < slots; ++p)
        for (Index j = 0; j < rotary_ / 2; ++j) {
          const double angle = double(p) * std::pow(rope.base, -2.0 * double(j) / double(rotary_));
          cos_sin_[static_cast<std::size_t>(p * rotary_ + 2 * j)] = static_cast<float>(std::cos(angle));
          cos_sin_[static_cast<std::size_t>(p * rotary_ + 2 * j + 1)] = static_cast<float>(std::sin(angle));
        }
    }
  }

  Index capacity() const { return sinks_ + window_; }
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
        convert(keys.ptr(t, h), row(keys_, layer, h, slot), static_cast<std::size_t>(dim_));
        convert(values.ptr(t, h), row(values_, layer, h, slot), static_cast<std::size_t>(dim_));
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

  class Source {
   public:
    Source(const SinkWindowCache& c, Index layer) : c_(&c), layer_(layer) {
      const auto& s = c.st(layer);
      // Runs in age order: sinks, ring from its start to the end of storage, then the wrap.
      runs_[0] = {0, s.held_sinks};
      const Index a_len = std::min(s.ring_count, c.window_ - s.ring_start);
      runs_[1] = {c.sinks_ + s.ring_start, a_len};
      runs_[2] = {c.sinks_, s.ring_count - a_len};
    }
    Index num_kv_heads() const { return c_->heads_; }
    Index head_dim() const { return c_->dim_; }
    Index num_tokens() const { return runs_[0].len + runs_[1].len + runs_[2].len; }
    Index num_blocks() const { return 3; }
    Block block(Index head, Index b) const {
      const Run r = runs_[b];
      Index before = 0;
      for (Index i = 0; i < b; ++i) before += runs_[i].len;
      const TokenPositions pos = c_->policy_ == PositionPolicy::kCache
                                     ? TokenPositions{nullptr, static_cast<std::int32_t>(before)}
                                     : TokenPositions{c_->st(layer_).positions.data() + r.slot, 0};
      const T* k = c_->row_const(c_->keys_, layer_, head, r.slot);
      const T* v = c_->row_const(c_->values_, layer_, head, r.slot);
      RopedRows<T> keys{DenseRows<T>{k, c_->dim_}, c_->cos_sin_.empty() ? nullptr : c_->cos_sin_.data(), c_->rotary_,
                        c_->rope_.style, pos};
      return {r.len, keys, DenseRows<T>{v, c_->dim_}, pos};
    }

   private:
    struct Run {
      Index slot = 0, len = 0;
    };
    const SinkWindowCache* c_;
    Index layer_;
    Run runs_[3];
  };
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
  T* row(std::vector<T>& buf, Index layer, Index head, Index slot) {
    return buf.data() + static_cast<std::size_t>(((layer * heads_ + head) * capacity() + slot) * dim_);
  }
  const T* row_const(const std::vector<T>& buf, Index layer, Index head, Index slot) const {
    return buf.data() + static_cast<std::size_t>(((layer * heads_ + head) * capacity() + slot) * dim_);
  }

  Index layers_, heads_, dim_, sinks_, window_;
  PositionPolicy policy_;
  RopeOptions rope_;
  Index rotary_ = 0;
  std::vector<float> cos_sin_;
  std::vector<LayerState> state_;
  std::vector<T> keys_, values_;
};

}  // namespace inferkit
