#pragma once
// Options shared by every attention entry point, and the score and mask rules they imply (the
// kernels apply them through one rule, detail/score_rule.hpp).
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
// LSE = -inf. Scores are floats: masks compare integer positions exactly at any distance, and
// the ALiBi bias is exact for distances below 2^24, beyond which it rounds like any float score
// (a few ulp of |s|); scores or scaled queries beyond the float range overflow, and the row's
// output is then unspecified.
//
// Batch-invariant mode (batch_invariant = true): a query row's output and LSE bits depend only
// on its query, the keys / values / positions of its sequence's source, and the options; not on
// how many other rows the call has, which of them share its sequence (how a prompt is chunked),
// whether it would take the decode or the prefill path, what else is batched, or the thread
// count. Every row runs one kernel (query rows in SIMD lanes, each lane's arithmetic its own)
// over key tiles at fixed token indices (multiples of kBatchInvariantKeyTile), and the KV range
// is cut at fixed multiples of the split size (kv_split_tokens, default
// kBatchInvariantSplitTokens) whose partial states fold in order. Tokens are tiled by their
// index in the source, so the guarantee covers sources whose tokens keep their index as more
// are appended (dense and paged caches), within one build (the instruction set changes bits).
// docs/design.md, "Batch-invariant mode", has the design and its cost.
//
// Arithmetic (arithmetic = AttentionArithmetic::kReduced, opt-in; kExact is the default): the
// decode path (up to kDecodeMaxQueries query tokens) may round what it multiplies, like
// llama.cpp's CPU flash attention does by default. Over per-token quantized keys each query row
// is rounded to int8, symmetric, one scale per row, head and key group (q.k then runs as integer
// dot products, AVX-512 VNNI vpdpbusd); over bf16 keys the query is rounded to bf16 (vdpbf16ps).
// Over per-token quantized values of 8 or 4 bits the products p * step of each (row, value
// group, key tile) are rounded to 8 bits (u8, one scale per row, group and tile) and p.v runs
// as integer dot products; over bf16 values p is rounded to bf16. Everything else (f32 / f16
// caches, per-channel KIVI keys, 2-bit values, prefill, batch-invariant mode) stays exact.
// The bounds on the added error: docs/design.md, "Reduced-precision decode arithmetic".
//
// Sink logits (sink_logits, gpt-oss; Xiao et al. 2023, "attention sinks"): one learned logit S_h
// per query head joins the softmax denominator and carries no value. With m = max(S_h, max_j s_j),
//   o = sum_j e^(s_j - m) v_j / (e^(S_h - m) + sum_j e^(s_j - m)),
// so the weights sum to less than one, and a row whose keys are all masked outputs zeros. The
// sink enters once per row, after the split-KV pieces merge. The returned LSE includes it:
// LSE = log(e^S_h + sum_j e^s_j) (S_h for a fully masked row), so out = sum_j e^(s_j - LSE) v_j
// and merge_attention_states stays exact when exactly one of the merged partials carried the
// sink (a sink is itself the partial (o = 0, lse = S_h)). S_h = -inf is no sink, bit for bit.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "inferkit/core/error.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Key tile of the batch-invariant mode, in tokens: tiles start at multiples of it.
inline constexpr Index kBatchInvariantKeyTile = 64;
/// KV split of the batch-invariant mode when kv_split_tokens is 0, in tokens.
inline constexpr Index kBatchInvariantSplitTokens = 1024;

/// Arithmetic of the decode path (file comment; docs/design.md).
enum class AttentionArithmetic {
  kExact,    ///< fp32 products of the (dequantized) cache with the unrounded query (default)
  kReduced,  ///< the query (and p) may be rounded to the cache's dot-product type: int8 / bf16
};

/// The arithmetic's name, as the example runner's --attn-arith flag spells it: "exact" or "reduced".
inline const char* arithmetic_name(AttentionArithmetic a) {
  return a == AttentionArithmetic::kExact ? "exact" : "reduced";
}

/// Options of every attention entry point (file comment: positions, masks, score, batch-invariant
/// mode). An aggregate for designated initializers: `{.causal = false, .window = 4096}`.
struct AttentionOptions {
  std::optional<float> scale = std::nullopt;           ///< score scale; default 1 / sqrt(head_dim)
  bool causal = true;                                  ///< causal mask (key visible iff k_pos <= q_pos)
  Index window = 0;                                    ///< sliding window W in positions; 0 = none
  bool alibi = false;                                  ///< ALiBi with slopes alibi_slopes(num_q_heads)
  std::span<const float> alibi_slopes = {};            ///< custom per-query-head slopes (implies alibi)
  float softcap = 0.0f;                                ///< score soft-cap c (c * tanh(s / c)); 0 = off
  std::span<const std::int32_t> query_positions = {};  ///< one per query row; default bottom-right aligned
  int num_threads = 0;                                 ///< OpenMP threads; 0 = OpenMP default
  Index kv_split_tokens = 0;                           ///< decode split size in tokens; 0 = chosen from the shape
  /// Batch-invariant mode (file comment): a row's bits do not depend on its batch mates, its
  /// chunking, its path or the thread count. kv_split_tokens, if set, must then be a multiple of
  /// kBatchInvariantKeyTile; it is part of what the bits depend on.
  bool batch_invariant = false;
  /// Decode arithmetic: kExact (default) or the opt-in kReduced (file comment). Ignored by
  /// prefill and by batch-invariant mode, which stay exact.
  AttentionArithmetic arithmetic = AttentionArithmetic::kExact;
  /// Learned sink logits, one per query head in the units of the scaled scores (file comment);
  /// empty = none. Finite or -inf (no sink for that head); the LSE output includes the sink.
  std::span<const float> sink_logits = {};
};

namespace detail {

inline void validate_options(const AttentionOptions& o, Index num_q_heads) {
  if (o.scale) {
    require(std::isfinite(*o.scale), "scale", *o.scale, "must be finite");
    require(*o.scale > 0.0f, "scale", *o.scale, "must be > 0");
  }
  require(o.window >= 0, "window", o.window, "must be >= 0 (0 = no sliding window)");
  require(std::isfinite(o.softcap) && o.softcap >= 0.0f, "softcap", o.softcap, "must be finite and >= 0 (0 = off)");
  // The kernels multiply by 1 / softcap: below the smallest normal float it would be infinite.
  require(o.softcap == 0.0f || o.softcap >= std::numeric_limits<float>::min(), "softcap", o.softcap,
          "must be 0 (off) or at least the smallest normal float, 1.17549e-38");
  require_thread_count("num_threads", o.num_threads);
  require(o.arithmetic == AttentionArithmetic::kExact || o.arithmetic == AttentionArithmetic::kReduced, "arithmetic",
          static_cast<int>(o.arithmetic), "must be AttentionArithmetic::kExact or kReduced");
  require(o.kv_split_tokens >= 0, "kv_split_tokens", o.kv_split_tokens, "must be >= 0 (0 = automatic)");
  if (o.batch_invariant)
    require(o.kv_split_tokens % kBatchInvariantKeyTile == 0, "kv_split_tokens", o.kv_split_tokens,
            "must be a multiple of " + std::to_string(kBatchInvariantKeyTile) + " in batch-invariant mode");
  if (!o.alibi_slopes.empty()) {
    require(static_cast<Index>(o.alibi_slopes.size()) == num_q_heads, "alibi_slopes.size()", o.alibi_slopes.size(),
            "must equal num_q_heads (" + std::to_string(num_q_heads) + ")");
    for (float s : o.alibi_slopes) require(std::isfinite(s), "alibi_slopes[i]", s, "must be finite");
  }
  if (!o.sink_logits.empty()) {
    require(static_cast<Index>(o.sink_logits.size()) == num_q_heads, "sink_logits.size()", o.sink_logits.size(),
            "must equal num_q_heads (" + std::to_string(num_q_heads) + ")");
    for (std::size_t h = 0; h < o.sink_logits.size(); ++h)
      require(!std::isnan(o.sink_logits[h]) && o.sink_logits[h] != std::numeric_limits<float>::infinity(),
              "sink_logits[" + std::to_string(h) + "]", o.sink_logits[h], "must be finite or -inf (no sink)");
  }
}

}  // namespace detail
}  // namespace inferkit
