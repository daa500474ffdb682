#pragma once
// Paged MLA latent rows (kv/latent_cache.hpp) in an unchanged BlockPool / BlockTable, so the
// prefix trie, forks with copy-on-write and the scheduler work over them as over paged K/V.
// A pool block holds a key and a value stream per layer; latent rows need one stream, so MLA
// layer l lives in pool layer l / 2, as its keys (l even) or its values (l odd): a pool of
// ceil(layers / 2) layers, one KV head and head_dim kv_lora_rank + rope_dim holds every layer's
// rows once (nothing stored twice; an odd layer count leaves one stream of the last pool layer
// unused). Storage float, Float16, BFloat16, or QuantizedKv with LatentInt8's per-token spec for
// both streams (paged_latent_config). write_latent() writes a layer's rows into reserved room;
// PagedLatentSource presents them to mla_attention() with keys = values = the rows.
//
//   BlockPool<BFloat16> pool(paged_latent_config({.layers = 27, .kv_lora_rank = 512, .rope_dim = 64}, 16, 4096));
//   BlockTable<BFloat16> seq(pool);
//   seq.reserve(n); write_latent(pool, seq, layer, seq.num_tokens(), c, k_pe); ...; seq.commit(n);
//   mla_attention(shape, q, PagedLatentSource<BFloat16>(seq, layer), weights, out);

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/latent_cache.hpp"
#include "inferkit/kv/quant_rows.hpp"

namespace inferkit {

/// The BlockPool shape of paged latent rows (file comment): ceil(layers / 2) pool layers, one KV
/// head, head_dim kv_lora_rank + rope_dim; for a BlockPool<QuantizedKv>, LatentInt8's spec for
/// keys and values. latent.capacity is ignored (the pool's budget is max_blocks).
/// @throws std::invalid_argument naming the field: layers or kv_lora_rank <= 0, rope_dim < 0,
///         page_size or max_blocks <= 0.
inline BlockPoolConfig paged_latent_config(const LatentCacheConfig& latent, Index page_size, Index max_blocks) {
  require(latent.layers > 0, "latent.layers", latent.layers, "must be > 0");
  require(latent.kv_lora_rank > 0, "latent.kv_lora_rank", latent.kv_lora_rank, "must be > 0");
  require(latent.rope_dim >= 0, "latent.rope_dim", latent.rope_dim, "must be >= 0");
  require(page_size > 0, "page_size", page_size, "must be > 0");
  require(max_blocks > 0, "max_blocks", max_blocks, "must be > 0");
  return {.layers = (latent.layers + 1) / 2,
          .kv_heads = 1,
          .head_dim = latent.kv_lora_rank + latent.rope_dim,
          .page_size = page_size,
          .max_blocks = max_blocks,
          .quant = {latent_int8_spec(), latent_int8_spec()}};
}

namespace detail {

template <class T>
void validate_latent_pool(const BlockPool<T>& pool) {
  const BlockPoolConfig& c = pool.config();
  require(c.kv_heads == 1, "pool.config().kv_heads", c.kv_heads, "must be 1 for latent rows (paged_latent_config)");
  if constexpr (kQuantizedPool<T>) {
    for (const QuantSpec* s : {&c.quant.keys, &c.quant.values})
      require(s->axis == QuantAxis::kPerToken, "pool.config().quant", "per-channel",
              "must be per-token for latent rows (paged_latent_config)");
  }
}

}  // namespace detail

/// Writes MLA layer `layer`'s latent rows [c; k_pe] for tokens [first, first + c.rows()) of
/// `table` (c [n, kv_lora_rank], k_pe [n, rope_dim]), rounded to the pool's storage. `pool` must
/// be the table's pool. The tokens must lie in room the table reserved (BlockTable::reserve),
/// and a page other tables share is never written: rows of committed tokens may be rewritten
/// only in pages this table alone holds.
/// @throws std::invalid_argument naming the parameter: a pool not shaped for latent rows, layer
///         outside [0, 2 x pool layers), shapes, first outside the reserved room, a shared page.
template <class T>
void write_latent(BlockPool<T>& pool, BlockTable<T>& table, Index layer, Index first, MatrixView<const float> c,
                  MatrixView<const float> k_pe) {
  detail::validate_latent_pool(pool);
  const BlockPoolConfig& cfg = pool.config();
  const Index L = cfg.head_dim, n = c.rows(), page = cfg.page_size;
  require(layer >= 0 && layer < 2 * cfg.layers, "layer", layer,
          "must be in [0, " + std::to_string(2 * cfg.layers) + ") (two MLA layers per pool layer)");
  require(c.cols() > 0 && c.cols() <= L, "c.cols()", c.cols(),
          "must be kv_lora_rank, in (0, " + std::to_string(L) + "]");
  const Index rope = L - c.cols();
  require(k_pe.rows() == n || (rope == 0 && k_pe.empty()), "k_pe.rows()", k_pe.rows(),
          "must equal c.rows() (" + std::to_string(n) + ")");
  require(k_pe.cols() == rope || (rope == 0 && k_pe.empty()), "k_pe.cols()", k_pe.cols(),
          "must equal head_dim - c.cols() (" + std::to_string(rope) + ")");
  const Index room = static_cast<Index>(table.blocks().size()) * page;
  require(first >= 0 && first + n <= room, "first", first,
          "plus c.rows() (" + std::to_string(n) + ") must lie within the reserved room (" + std::to_string(room) +
              " tokens)");
  const Index pool_layer = layer / 2;
  const bool values = layer % 2 == 1;
  std::vector<float> row(static_cast<std::size_t>(L));
  for (Index t = 0; t < n; ++t) {
    const Index pos = first + t;
    const BlockId b = table.blocks()[static_cast<std::size_t>(pos / page)];
    require(pool.refcount(b) == 1, "first", first,
            "writes token " + std::to_string(pos) + " into page " + std::to_string(pos / page) +
                ", which other tables share (copy-on-write happens only in reserve())");
    const Index slot = pos % page;
    std::copy_n(c.row_ptr(t), c.cols(), row.data());
    std::copy_n(k_pe.row_ptr(t), rope, row.data() + c.cols());
    if constexpr (kQuantizedPool<T>) {
      const QuantSpec& s = values ? cfg.quant.values : cfg.quant.keys;
      std::uint8_t* codes = values ? pool.value_codes(b, pool_layer, 0) : pool.key_codes(b, pool_layer, 0);
      QuantParams* params = values ? pool.value_params(b, pool_layer, 0) : pool.key_params(b, pool_layer, 0);
      quantize_token_row(row.data(), s, L, codes + slot * token_code_bytes(s, L), params + slot * token_groups(s, L));
    } else {
      T* dst = values ? pool.value_rows(b, pool_layer, 0) : pool.key_rows(b, pool_layer, 0);
      convert(row.data(), dst + slot * L, static_cast<std::size_t>(L));
    }
  }
}

/// The KvSource of one MLA layer of a paged table (file comment): one KV head of head_dim
/// latent_dim whose keys and values are the layer's rows, blocks as the table's runs of pages.
/// Valid until the table changes.
template <class T>
class PagedLatentSource {
  using Inner = typename BlockTable<T>::Source;
  using Rows = decltype(std::declval<typename BlockTable<T>::Block>().keys);

 public:
  /// The block type: the layer's rows as keys and values.
  using Block = KvBlock<Rows, Rows>;
  /// MLA layer `layer` of `table` (pool layer layer / 2).
  /// @throws std::invalid_argument or std::out_of_range naming the layer when it is outside the pool's.
  PagedLatentSource(const BlockTable<T>& table, Index layer)
      : inner_(table.source(layer >= 0 ? layer / 2 : -1)), values_(layer % 2 == 1) {}
  Index num_kv_heads() const { return 1; }                  ///< one latent stream
  Index head_dim() const { return inner_.head_dim(); }      ///< latent_dim
  Index num_tokens() const { return inner_.num_tokens(); }  ///< committed tokens
  Index num_blocks() const { return inner_.num_blocks(); }  ///< runs of consecutive pages
  /// Run r (head 0; not checked).
  Block block(Index /*head*/, Index r) const {
    const auto b = inner_.block(0, r);
    const Rows rows = values_ ? b.values : b.keys;
    return {b.num_tokens, rows, rows, b.positions};
  }

 private:
  Inner inner_;
  bool values_;
};

}  // namespace inferkit
