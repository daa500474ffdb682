#pragma once
// Memory planning for a Llama-shaped decoder: bytes of weights, KV cache and scratch for a model
// shape, context length, batch and cache policy. The arithmetic people get wrong, spelled out:
//   KV cache = 2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes per element
//   (GQA with 32 query / 8 KV heads needs a quarter of MHA's cache); a quantized cache adds its
//   metadata (int4 with group 32 and a binary16 scale: 4 + 16/32 = 4.5 bits per element; with a
//   binary16 minimum as well: 5 bits) and the full-precision residual tokens (float).
//   A sink + window cache holds at most n_sink + window tokens whatever the context.
//   A paged cache (kPaged) holds whole pages: ceil(context / page_size) per sequence, each page
//   page_size tokens of float / 16-bit rows (element_bytes) or, with paged_quantized, of
//   quantized rows as BlockPool<QuantizedKv> stores them (codes plus a 4-byte (step, minimum)
//   pair per group, symmetric specs too), plus per sequence the block table's float key tail
//   when keys are per channel (BlockTable::tail_bytes()).
// An MLA model (kv/latent_cache.hpp) caches one latent row per token and layer:
//   latent cache = layers x tokens x batch x latent_row_bytes(format, kv_lora_rank + rope_dim)
// against 2-stream materialized K/V of layers x heads x (qk_nope + rope + v) values per token.
// Weights: token embedding (and an untied classifier), per layer wq, wk, wv, wo, w1, w2, w3 and
// two norms, the final norm, at `weight_bytes` per parameter (0.5625 for 4.5-bit weights, ...).
// Scratch: per sequence, the activations of one token step (x, xb, q, k, v, attention output,
// hidden h1/h3, logits) in float, plus one attention tile workspace per thread.

#include <algorithm>
#include <cmath>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/latent_cache.hpp"
#include "inferkit/kv/quant_codec.hpp"
#include "inferkit/kv/quantized_cache.hpp"

namespace inferkit {

/// Shape of a Llama-style decoder, for plan_memory().
struct ModelShape {
  Index layers = 0;             ///< transformer layers
  Index dim = 0;                ///< model (residual) width
  Index hidden_dim = 0;         ///< FFN hidden width
  Index q_heads = 0;            ///< query heads
  Index kv_heads = 0;           ///< KV heads (GQA: q_heads is a multiple)
  Index vocab = 0;              ///< vocabulary size
  Index head_dim = 0;           ///< values per head; 0 = dim / q_heads
  bool tied_embeddings = true;  ///< classifier shares the token embedding
  double weight_bytes = 4;      ///< bytes per parameter (4 f32, 2 bf16, 0.5625 for 4.5-bit weights)
  /// head_dim, or dim / q_heads when head_dim is 0.
  Index head_dim_or_default() const { return head_dim > 0 ? head_dim : dim / q_heads; }
};

/// Which cache a plan assumes.
enum class CacheKind {
  kDense,       ///< DenseKvCache
  kQuantized,   ///< QuantizedKvCache
  kSinkWindow,  ///< SinkWindowCache (at most n_sink + window tokens)
  kPaged        ///< BlockPool / BlockTable pages (float, 16-bit or quantized)
};

/// The cache policy of a plan.
struct CachePolicy {
  CacheKind kind = CacheKind::kDense;  ///< cache container
  double element_bytes = 2;            ///< dense, sink-window and float paged storage: 4 (f32), 2 (f16/bf16)
  KvQuantConfig quant{};               ///< kQuantized, and kPaged with paged_quantized: the key and value specs
  Index n_sink = 0;                    ///< kSinkWindow: sink tokens
  Index window = 0;                    ///< kSinkWindow: window tokens
  Index page_size = 16;                ///< kPaged: tokens per page
  bool paged_quantized = false;        ///< kPaged: pages hold `quant` codes (BlockPool<QuantizedKv>)
};

/// Bytes of a plan (see plan_memory()).
struct MemoryPlan {
  double weights = 0;   ///< model parameters
  double kv_cache = 0;  ///< KV cache of every sequence (with quantization metadata and tails)
  double scratch = 0;   ///< per-sequence activations of one step plus per-thread attention tiles
  double total() const { return weights + kv_cache + scratch; }  ///< weights + kv_cache + scratch
};

/// Parameters of the model.
inline double parameter_count(const ModelShape& m) {
  const double d = double(m.dim), hd = double(m.head_dim_or_default());
  const double q = double(m.q_heads) * hd, kv = double(m.kv_heads) * hd;
  const double per_layer = d * q + 2.0 * d * kv + q * d + 3.0 * d * double(m.hidden_dim) + 2.0 * d;
  return double(m.vocab) * d * (m.tied_embeddings ? 1.0 : 2.0) + double(m.layers) * per_layer + d;
}

/// KV bytes per token of one sequence under a policy (quantized: codes and metadata only; paged:
/// per token of a full page).
inline double kv_bytes_per_token(const ModelShape& m, const CachePolicy& c) {
  const double elems = double(m.layers) * double(m.kv_heads) * double(m.head_dim_or_default());
  if (c.kind == CacheKind::kPaged && c.paged_quantized) {  // parameters stored as 4-byte pairs
    const auto stream = [&](const QuantSpec& s) {
      return elems * (s.bits / 8.0 + double(sizeof(QuantParams)) / double(s.group_size));
    };
    return stream(c.quant.keys) + stream(c.quant.values);
  }
  if (c.kind != CacheKind::kQuantized) return 2.0 * elems * c.element_bytes;
  const auto stream = [&](const QuantSpec& spec) {  // the group the cache would use (fit_kv_quant)
    const QuantSpec s = fit_kv_quant(spec, m.head_dim_or_default());
    return elems * (s.bits / 8.0 + double(s.meta_bytes()) / double(s.group_size));
  };
  return stream(c.quant.keys) + stream(c.quant.values);
}

/// Bytes of weights, KV cache and scratch for `batch` sequences of `context` tokens under a cache
/// policy, with `threads` attention workers (file comment has the arithmetic).
/// @throws std::invalid_argument naming the bad shape field, context < 0 or batch < 1.
inline MemoryPlan plan_memory(const ModelShape& m, Index context, Index batch, const CachePolicy& c,
                              Index threads = 1) {
  require(m.layers > 0 && m.dim > 0 && m.q_heads > 0 && m.kv_heads > 0 && m.vocab > 0 && m.hidden_dim > 0, "model",
          m.layers, "layers, dim, hidden_dim, heads and vocab must all be > 0");
  require(m.q_heads % m.kv_heads == 0, "q_heads", m.q_heads, "must be a multiple of kv_heads");
  require(context >= 0, "context", context, "must be >= 0");
  require(batch >= 1, "batch", batch, "must be >= 1");
  MemoryPlan p;
  p.weights = parameter_count(m) * m.weight_bytes;
  const double elems = double(m.layers) * double(m.kv_heads) * double(m.head_dim_or_default());
  double tokens = double(context);
  if (c.kind == CacheKind::kSinkWindow) tokens = std::min<double>(tokens, double(c.n_sink + c.window));
  if (c.kind == CacheKind::kPaged) {
    require(c.page_size > 0, "page_size", c.page_size, "must be > 0");
    if (c.paged_quantized) validate_paged_quant(c.quant, m.head_dim_or_default(), c.page_size);
    tokens = std::ceil(double(context) / double(c.page_size)) * double(c.page_size);  // whole pages
  }
  p.kv_cache = kv_bytes_per_token(m, c) * tokens * double(batch);
  if (c.kind == CacheKind::kPaged && c.paged_quantized && c.quant.keys.axis == QuantAxis::kPerChannel) {
    const Index g = c.quant.keys.group_size, history = (kPagedKeyHistory + g - 1) / g * g;  // BlockTable's key tail
    p.kv_cache += elems * double(history + c.page_size) * 4.0 * double(batch);
  }
  if (c.kind == CacheKind::kQuantized) {  // full-precision residual tails (at most residual + group - 1)
    const auto tail = [&](const QuantSpec& s) {
      const double r = double(s.residual + (s.axis == QuantAxis::kPerChannel ? s.group_size - 1 : 0));
      return elems * std::min(r, double(context)) * 4.0;
    };
    p.kv_cache += (tail(c.quant.keys) + tail(c.quant.values)) * double(batch);
  }
  const double hd = double(m.head_dim_or_default());
  const double step = 2.0 * double(m.dim) + double(m.q_heads) * hd * 2.0 + 2.0 * double(m.kv_heads) * hd +
                      2.0 * double(m.hidden_dim) + double(m.vocab);
  p.scratch = 4.0 * step * double(batch) + double(threads) * 4.0 * (4.0 * 64.0 * 256.0);  // tile workspace
  return p;
}

/// An MLA model's cache geometry, for latent_cache_bytes() and materialized_mla_kv_bytes().
struct LatentCachePlan {
  Index layers = 0;                           ///< transformer layers
  Index kv_lora_rank = 0;                     ///< latent c values per token
  Index rope_dim = 0;                         ///< shared k_pe values per token
  Index num_heads = 0;                        ///< query heads (for the materialized comparison)
  Index qk_nope_dim = 0;                      ///< per-head key part without RoPE (materialized)
  Index v_head_dim = 0;                       ///< per-head value width (materialized)
  LatentFormat format = LatentFormat::kBF16;  ///< latent row storage
  /// 0: a dense LatentCache; > 0: paged (kv/paged_latent.hpp) in pages of this many tokens,
  /// whole pages of ceil(layers / 2) pool layers x 2 streams.
  Index page_size = 0;
};

/// Bytes of the latent caches of `batch` sequences of `context` tokens (LatentCache rows, or
/// whole pages of paged latent rows when plan.page_size > 0).
/// @throws std::invalid_argument when layers <= 0, context < 0, batch < 1 or the row is invalid
///         for the format (latent_row_bytes()), page_size < 0.
inline double latent_cache_bytes(const LatentCachePlan& p, Index context, Index batch) {
  require(p.layers > 0, "plan.layers", p.layers, "must be > 0");
  require(context >= 0, "context", context, "must be >= 0");
  require(batch >= 1, "batch", batch, "must be >= 1");
  require(p.page_size >= 0, "plan.page_size", p.page_size, "must be >= 0 (0 = dense)");
  const double row = double(latent_row_bytes(p.format, p.kv_lora_rank + p.rope_dim));
  if (p.page_size == 0) return double(p.layers) * row * double(context) * double(batch);
  const double tokens = std::ceil(double(context) / double(p.page_size)) * double(p.page_size);
  return double((p.layers + 1) / 2 * 2) * row * tokens * double(batch);
}

/// Bytes the same model's materialized per-head K and V would take: layers x heads x
/// (qk_nope_dim + rope_dim + v_head_dim) x element_bytes per token (the GQA-equivalent cache).
/// @throws std::invalid_argument when layers or num_heads <= 0, context < 0, batch < 1 or
///         element_bytes <= 0.
inline double materialized_mla_kv_bytes(const LatentCachePlan& p, Index context, Index batch, double element_bytes) {
  require(p.layers > 0, "plan.layers", p.layers, "must be > 0");
  require(p.num_heads > 0, "plan.num_heads", p.num_heads, "must be > 0");
  require(context >= 0, "context", context, "must be >= 0");
  require(batch >= 1, "batch", batch, "must be >= 1");
  require(element_bytes > 0, "element_bytes", element_bytes, "must be > 0");
  return double(p.layers) * double(p.num_heads) * double(p.qk_nope_dim + p.rope_dim + p.v_head_dim) * element_bytes *
         double(context) * double(batch);
}

}  // namespace inferkit
