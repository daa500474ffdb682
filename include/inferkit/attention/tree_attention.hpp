#pragma once
// Tree attention (SpecInfer, Miao et al. 2024, "tree-based parallel decoding"): the rows of a
// token tree of drafts (sampling/token_tree.hpp) attend the cached prefix plus their own root
// path. A source holds the prefix (tokens [0, prefix)) followed by the tree's K/V rows in
// position order (slot prefix + u for tree position u: 0 = root, i + 1 = node i), as appending
// the tree's rows to a cache leaves them. Row u sits at position prefix + depth(u) and sees the
// prefix and the slots of its ancestors and itself (a parents array; no T x T mask is built).
//
//   const std::vector<inferkit::Index> parents(tree.parents().begin(), tree.parents().end());
//   inferkit::tree_attention(q, cache.source(layer), prefix, parents, out, lse, opt);
//
// TreeRowKv presents one row's view of such a source as a KvSource: the prefix's blocks clipped
// at `prefix`, then one block per path slot with positions prefix, prefix + 1, ... (the depths),
// reusing the source's row stores (dense rows by pointer offset, others through their load_f32),
// so every attention option (GQA, ALiBi, windows, soft-cap, LSE, batch-invariant) applies as is.
//
// tree_attention() computes every row in one of two ways:
//   batch_invariant: each row is its own sequence over TreeRowKv (prefix + path), so its bits are
//     those of decoding its path token by token (the batch-invariant mode's promise);
//   otherwise: one sequence of all rows over the prefix (read once for the whole tree) and one
//     short sequence per row over its path, merged exactly by log-sum-exp (cascade attention,
//     core/online_softmax.hpp): cost = one pass over the prefix + the real path tokens. Sink
//     logits join the prefix pass only, so each row counts its sink once.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// A row store read from token `offset` of another (token i here = token offset + i there).
template <class Rows>
struct OffsetRows {
  Rows rows;         ///< the underlying row store
  Index offset = 0;  ///< first token of the underlying store seen here

  /// Float rows [first, first + count) of this view (see kv_block.hpp).
  RowsF32 load_f32(Index first, Index count, Index dim, float* scratch, Index scratch_stride,
                   bool allow_in_place) const {
    return rows.load_f32(offset + first, count, dim, scratch, scratch_stride, allow_in_place);
  }
};

namespace detail {

template <class Rows>
struct IsDenseRows : std::false_type {};
template <class T>
struct IsDenseRows<DenseRows<T>> : std::true_type {};

/// Dense rows stay dense (a pointer offset keeps the kernels' in-register widening); other stores
/// are wrapped in OffsetRows.
template <class Rows>
auto rows_from(const Rows& rows, Index offset) {
  if constexpr (IsDenseRows<Rows>::value)
    return Rows{rows.data + offset * rows.row_stride, rows.row_stride};
  else
    return OffsetRows<Rows>{rows, offset};
}

}  // namespace detail

/// One tree row's view of a source holding the prefix and then the tree's rows (file comment).
template <KvSource S>
class TreeRowKv {
  using BaseBlock = decltype(std::declval<const S&>().block(0, 0));
  using KeyRows = decltype(detail::rows_from(std::declval<BaseBlock>().keys, 0));
  using ValueRows = decltype(detail::rows_from(std::declval<BaseBlock>().values, 0));

 public:
  /// The block type of every head.
  using Block = KvBlock<KeyRows, ValueRows>;

  /// @param base     the source: prefix tokens, then tree rows in position order (not owned; must outlive this view)
  /// @param prefix   cached tokens before the tree's rows
  /// @param slots    tree positions this row sees, root path order (0 = root first, the row itself last);
  ///                 copied. Empty: the prefix alone
  /// @param with_prefix  false: the path slots alone (positions still prefix + depth)
  /// @throws std::invalid_argument if prefix is outside [0, base.num_tokens()], a slot's token is
  ///         past the base's end, or a position leaves the int32 range.
  TreeRowKv(const S& base, Index prefix, std::span<const Index> slots, bool with_prefix = true)
      : base_(&base), prefix_(with_prefix ? prefix : 0), slots_(slots.begin(), slots.end()), first_position_(prefix) {
    require(prefix >= 0 && prefix <= base.num_tokens(), "prefix", prefix,
            "must be in [0, base.num_tokens() = " + std::to_string(base.num_tokens()) + "]");
    require(prefix + static_cast<Index>(slots.size()) <= std::int64_t{std::numeric_limits<std::int32_t>::max()},
            "prefix", prefix, "plus the path length must fit int32 positions");
    Index start = 0;
    for (Index b = 0; b < base.num_blocks(); ++b) {
      starts_.push_back(start);
      start += base.block(0, b).num_tokens;
    }
    for (std::size_t j = 0; j < slots_.size(); ++j)
      require(slots_[j] >= 0 && prefix + slots_[j] < base.num_tokens(), "slots[" + std::to_string(j) + "]", slots_[j],
              "must be a tree position whose row the base holds (prefix + slot < " + std::to_string(base.num_tokens()) +
                  ")");
    prefix_blocks_ = 0;
    while (prefix_blocks_ < base.num_blocks() && starts_[static_cast<std::size_t>(prefix_blocks_)] < prefix_)
      ++prefix_blocks_;
  }

  Index num_kv_heads() const { return base_->num_kv_heads(); }                      ///< KV heads of the base
  Index head_dim() const { return base_->head_dim(); }                              ///< head dimension of the base
  Index num_tokens() const { return prefix_ + static_cast<Index>(slots_.size()); }  ///< prefix + path tokens
  Index num_blocks() const {
    return prefix_blocks_ + static_cast<Index>(slots_.size());
  }  ///< prefix blocks + one per slot

  /// Block b of KV head `head`: a prefix block (clipped at the prefix) or one path token.
  Block block(Index head, Index b) const {
    if (b < prefix_blocks_) {
      const BaseBlock blk = base_->block(head, b);
      const Index start = starts_[static_cast<std::size_t>(b)];
      return {std::min(blk.num_tokens, prefix_ - start), detail::rows_from(blk.keys, 0),
              detail::rows_from(blk.values, 0), blk.positions};
    }
    const Index j = b - prefix_blocks_;
    const Index token = first_position_ + slots_[static_cast<std::size_t>(j)];  // the slot's token in the base
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), token);
    const Index bb = static_cast<Index>(it - starts_.begin()) - 1;
    const BaseBlock blk = base_->block(head, bb);
    const Index at = token - starts_[static_cast<std::size_t>(bb)];
    return {1, detail::rows_from(blk.keys, at), detail::rows_from(blk.values, at),
            TokenPositions{nullptr, static_cast<std::int32_t>(first_position_ + j)}};
  }

 private:
  const S* base_;
  Index prefix_;               // prefix tokens shown (0 without the prefix)
  std::vector<Index> slots_;   // tree positions of the path
  Index first_position_;       // the prefix length: position of the root, and where the tree's slots start
  std::vector<Index> starts_;  // first token of each base block
  Index prefix_blocks_ = 0;
};

/// The root path of every tree position (0 = root, i + 1 = node i) from a parents array
/// (parents[i] = -1 for the root's children, else an earlier node).
/// @throws std::invalid_argument for a parent that is not -1 or an earlier node.
inline std::vector<std::vector<Index>> tree_row_paths(std::span<const Index> parents) {
  std::vector<std::vector<Index>> paths(parents.size() + 1);
  paths[0] = {0};
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const Index p = parents[i];
    require(p >= -1 && p < static_cast<Index>(i), "parents[" + std::to_string(i) + "]", p,
            "must be -1 (the root) or an earlier node");
    paths[i + 1] = paths[static_cast<std::size_t>(p + 1)];
    paths[i + 1].push_back(static_cast<Index>(i) + 1);
  }
  return paths;
}

/// Attention of a token tree's rows (file comment). q, out [n + 1, Hq, d] and lse [n + 1, Hq]
/// (optional) hold the rows in position order; `base` holds the prefix then the n + 1 tree rows;
/// parents has n entries (TokenTree::parents()). opt.query_positions must be empty (the tree sets
/// them: prefix + depth); every other option applies.
/// @throws std::invalid_argument for q rows != parents.size() + 1, a base shorter than
///         prefix + n + 1 tokens, explicit query positions, or what attention_batch() rejects.
template <KvSource S>
void tree_attention(Tensor3View<const float> q, const S& base, Index prefix, std::span<const Index> parents,
                    Tensor3View<float> out, MatrixView<float> lse, const AttentionOptions& opt = {}) {
  const Index rows = static_cast<Index>(parents.size()) + 1;
  require(q.dim0() == rows, "q.dim0()", q.dim0(), "must equal tree nodes + 1 (" + std::to_string(rows) + ")");
  require(prefix >= 0 && prefix + rows <= base.num_tokens(), "base.num_tokens()", base.num_tokens(),
          "must hold the prefix (" + std::to_string(prefix) + ") and the tree's rows (" + std::to_string(rows) + ")");
  require(opt.query_positions.empty(), "opt.query_positions.size()", opt.query_positions.size(),
          "must be 0: tree_attention places row u at prefix + depth(u)");
  const auto paths = tree_row_paths(parents);
  std::vector<std::int32_t> positions;
  for (const auto& p : paths) positions.push_back(static_cast<std::int32_t>(prefix + static_cast<Index>(p.size()) - 1));
  AttentionOptions o = opt;
  o.query_positions = positions;
  std::vector<TreeRowKv<S>> path_sources;
  std::vector<Index> cu_rows;
  for (Index r = 0; r <= rows; ++r) cu_rows.push_back(r);
  if (opt.batch_invariant) {  // each row alone over prefix + path: the bits of decoding its path
    for (const auto& p : paths) path_sources.emplace_back(base, prefix, p, true);
    attention_batch(q, cu_rows, path_sources, out, lse, o);
    return;
  }
  const Index hq = q.dim1(), d = q.dim2();
  // The prefix once for every row, then each row's path, merged by LSE.
  AlignedBuffer<float> o_prefix(static_cast<std::size_t>(rows * hq * d)), o_path(o_prefix.size());
  AlignedBuffer<float> l_prefix(static_cast<std::size_t>(rows * hq)), l_path(l_prefix.size());
  const Tensor3View<float> op(o_prefix.data(), rows, hq, d), oq(o_path.data(), rows, hq, d);
  const MatrixView<float> lp(l_prefix.data(), rows, hq), lq(l_path.data(), rows, hq);
  const std::vector<TreeRowKv<S>> prefix_source{TreeRowKv<S>(base, prefix, {}, true)};
  const std::vector<Index> cu_all{0, rows};
  attention_batch(q, cu_all, prefix_source, op, lp, o);
  for (const auto& p : paths) path_sources.emplace_back(base, prefix, p, false);
  AttentionOptions path_opt = o;
  path_opt.sink_logits = {};  // a sink enters once per row: with the prefix pass (options.hpp)
  attention_batch(q, cu_rows, path_sources, oq, lq, path_opt);
  merge_attention_states(Tensor3View<const float>(op), MatrixView<const float>(lp), Tensor3View<const float>(oq),
                         MatrixView<const float>(lq), out, lse);
}

/// tree_attention() without the LSE output.
template <KvSource S>
void tree_attention(Tensor3View<const float> q, const S& base, Index prefix, std::span<const Index> parents,
                    Tensor3View<float> out, const AttentionOptions& opt = {}) {
  tree_attention(q, base, prefix, parents, out, MatrixView<float>{}, opt);
}

}  // namespace inferkit
