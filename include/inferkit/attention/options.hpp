#pragma once
// Options shared by every attention entry point, and the mask rules they imply.
//
// Positions: each key carries a position (from its KV block); query row i of Tq sits at
// query_positions[i] when given, else bottom-right aligned: last_key_position - (Tq - 1 - i),
// which for keys at 0..Tk-1 is Tk - Tq + i.
// Masks, for a query at position p and a key at position k:
//   causal:          visible iff k <= p
//   sliding window W: visible iff p - k < W, i.e. the query sees the W most recent positions
//                    including its own (W = 1 sees only itself); combined with causal or alone.
// Score: s = (q . k) * scale; with softcap c > 0, s = c * tanh(s / c) (Gemma 2); then the ALiBi
// bias -slope_h * (p - k) is added. A row whose keys are all masked outputs zeros with
// LSE = -inf.

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

struct AttentionOptions {
  std::optional<float> scale;                     // default 1 / sqrt(head_dim)
  bool causal = true;
  Index window = 0;                               // 0 = no sliding window
  bool alibi = false;                             // slopes from alibi_slopes(num_q_heads)
  std::span<const float> alibi_slopes = {};       // custom per-query-head slopes (implies alibi)
  float softcap = 0.0f;                           // 0 = off
  std::span<const std::int32_t> query_positions = {};  // default bottom-right aligned
  int num_threads = 0;                            // 0 = OpenMP default
  Index kv_split_tokens = 0;                      // decode split size; 0 = chosen from the shape
};

namespace detail {

/// How a tile of keys relates to a tile of queries under the mask.
enum class TileVisibility { kNone, kPartial, kAll };

struct MaskRule {
  bool causal = true;
  Index window = 0;

  bool visible(std::int64_t q_pos, std::int64_t k_pos) const {
    if (causal && k_pos > q_pos) return false;
    if (window > 0 && q_pos - k_pos >= window) return false;
    return true;
  }

  /// Classifies keys with positions in [k_min, k_max] against queries in [q_min, q_max].
  TileVisibility classify(std::int64_t q_min, std::int64_t q_max, std::int64_t k_min, std::int64_t k_max) const {
    if (causal && k_min > q_max) return TileVisibility::kNone;
    if (window > 0 && q_min - k_max >= window) return TileVisibility::kNone;
    const bool causal_all = !causal || k_max <= q_min;
    const bool window_all = window <= 0 || q_max - k_min < window;
    return causal_all && window_all ? TileVisibility::kAll : TileVisibility::kPartial;
  }
};

inline void validate_options(const AttentionOptions& o, Index num_q_heads) {
  if (o.scale) {
    require(std::isfinite(*o.scale), "scale", *o.scale, "must be finite");
    require(*o.scale > 0.0f, "scale", *o.scale, "must be > 0");
  }
  require(o.window >= 0, "window", o.window, "must be >= 0 (0 = no sliding window)");
  require(std::isfinite(o.softcap) && o.softcap >= 0.0f, "softcap", o.softcap, "must be finite and >= 0 (0 = off)");
  require(o.num_threads >= 0, "num_threads", o.num_threads, "must be >= 0 (0 = OpenMP default)");
  require(o.kv_split_tokens >= 0, "kv_split_tokens", o.kv_split_tokens, "must be >= 0 (0 = automatic)");
  if (!o.alibi_slopes.empty()) {
    require(static_cast<Index>(o.alibi_slopes.size()) == num_q_heads, "alibi_slopes.size()", o.alibi_slopes.size(),
            "must equal num_q_heads (" + std::to_string(num_q_heads) + ")");
    for (float s : o.alibi_slopes) require(std::isfinite(s), "alibi_slopes[i]", s, "must be finite");
  }
}

}  // namespace detail
}  // namespace inferkit
