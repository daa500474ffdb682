#pragma once
// Compaction after token-tree verification (issue 31): the verification pass appended the tree's
// K/V rows after the prefix in tree-position order (slot prefix + u: u = 0 the root, i + 1 node i;
// attention/tree_attention.hpp reads them there). Once verification accepted a root path, the
// root's and the accepted nodes' rows move to consecutive slots prefix, prefix + 1, ... and the
// rejected rows are dropped. Their keys were rotated at position prefix + depth, which is exactly
// the slot they move to, so rows move unchanged and the cache equals the cache of decoding the
// accepted tokens one by one (bitwise: rows are read back as attention reads them, float,
// Float16 or BFloat16 widened exactly, and written back by the cache's own append).
//
//   const inferkit::VerifyResult r = inferkit::verify_tree(tree, q, p, rng, first_draw);
//   inferkit::compact_tree_path(cache, prefix, r.path);  // the cache now holds prefix + 1 + r.accepted tokens
//
// Quantized caches (KIVI's rule: a quantized row is never re-quantized from its codes): rows of
// a tree must not enter a quantized cache before verification; keep them in float, and append
// only the accepted path after it (the same append as decoding, so the same codes). Prefix
// tries (kv/prefix_trie.hpp) are fed from the compacted cache, so they never see a rejected row.

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/attention/kv_copy.hpp"
#include "inferkit/attention/tree_attention.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"

namespace inferkit {

namespace detail {

/// Tree positions kept by a compaction: the root (0), then accepted node i as position i + 1.
/// @throws std::invalid_argument unless the nodes increase (a root path in depth-first order).
inline std::vector<Index> kept_tree_slots(std::span<const Index> accepted_nodes) {
  std::vector<Index> slots{0};
  for (std::size_t j = 0; j < accepted_nodes.size(); ++j) {
    const Index node = accepted_nodes[j];
    require(node >= 0 && node + 1 > slots.back(), "accepted_nodes[" + std::to_string(j) + "]", node,
            "must be >= 0 and increase (a root path of a depth-first tree)");
    slots.push_back(node + 1);
  }
  return slots;
}

/// One layer's kept rows as float K and V [slots, kv_heads, head_dim] (read as attention reads them).
template <KvSource S>
std::pair<std::vector<float>, std::vector<float>> gather_tree_rows(const S& src, Index prefix,
                                                                   std::span<const Index> slots) {
  const TreeRowKv<S> view(src, prefix, slots, false);
  const Index m = static_cast<Index>(slots.size()), h = src.num_kv_heads(), d = src.head_dim();
  std::pair<std::vector<float>, std::vector<float>> kv{std::vector<float>(static_cast<std::size_t>(m * h * d)),
                                                       std::vector<float>(static_cast<std::size_t>(m * h * d))};
  for (Index head = 0; head < h; ++head)
    copy_kv_head(view, head, MatrixView<float>(kv.first.data() + head * d, m, d, h * d),
                 MatrixView<float>(kv.second.data() + head * d, m, d, h * d));
  return kv;
}

}  // namespace detail

/// Keeps the prefix, the tree's root row and the rows of `accepted_nodes` (VerifyResult::path) of
/// a dense cache whose every layer holds prefix + tree rows (file comment).
/// @throws std::invalid_argument for nodes that do not increase or lie past a layer's rows, or a
///         prefix outside a layer's length.
template <class T>
void compact_tree_path(DenseKvCache<T>& cache, Index prefix, std::span<const Index> accepted_nodes) {
  const std::vector<Index> slots = detail::kept_tree_slots(accepted_nodes);
  std::vector<std::pair<std::vector<float>, std::vector<float>>> rows;
  for (Index layer = 0; layer < cache.layers(); ++layer)
    rows.push_back(detail::gather_tree_rows(cache.source(layer), prefix, slots));  // checks prefix and slots
  cache.truncate(prefix);
  const Index m = static_cast<Index>(slots.size());
  for (Index layer = 0; layer < cache.layers(); ++layer) {
    const auto& [k, v] = rows[static_cast<std::size_t>(layer)];
    cache.append(layer, {k.data(), m, cache.kv_heads(), cache.head_dim()},
                 {v.data(), m, cache.kv_heads(), cache.head_dim()});
  }
}

/// compact_tree_path() for a paged table of float, Float16 or BFloat16 rows (quantized tables:
/// see the file comment). Returns false, with the table unchanged, when the pool cannot supply a
/// copy of a shared last page.
template <class T>
requires(!kQuantizedPool<T>) bool compact_tree_path(BlockTable<T>& table, Index prefix,
                                                    std::span<const Index> accepted_nodes) {
  const std::vector<Index> slots = detail::kept_tree_slots(accepted_nodes);
  const Index layers = table.pool().config().layers, heads = table.pool().config().kv_heads,
              dim = table.pool().config().head_dim;
  std::vector<std::pair<std::vector<float>, std::vector<float>>> rows;
  for (Index layer = 0; layer < layers; ++layer)
    rows.push_back(detail::gather_tree_rows(table.source(layer), prefix, slots));
  const Index m = static_cast<Index>(slots.size());
  BlockTable<T> kept = table;  // a fork: the original stays intact if the pool runs out
  kept.truncate(prefix);
  if (!kept.reserve(m)) return false;
  for (Index layer = 0; layer < layers; ++layer) {
    const auto& [k, v] = rows[static_cast<std::size_t>(layer)];
    kept.write(layer, {k.data(), m, heads, dim}, {v.data(), m, heads, dim});
  }
  kept.commit(m);
  table.swap(kept);
  return true;
}

}  // namespace inferkit
