#pragma once
// A token tree of speculative drafts (SpecInfer, Miao et al. 2024; EAGLE-2, Li et al. 2024): up to
// 64 draft tokens, each with a parent (another draft or the root, the last token already in the
// context), stored in depth-first order so that every subtree is a contiguous range of nodes.
//
//   inferkit::TokenTree tree;
//   const inferkit::Index a = tree.add(inferkit::TokenTree::kRoot, 17);  // node 0, depth 1
//   tree.add(a, 4);                                                       // node 1, child of 0
//   tree.add(inferkit::TokenTree::kRoot, 9);                              // node 2, a sibling of 0
//
// Positions: the target model runs one row per position, position 0 = the root and position
// i + 1 = node i, so the target distributions of a tree of n nodes are a [n + 1, V] matrix.
// Position u's row sits at sequence position prefix + depth(u) and attends to the prefix plus
// the positions in ancestor_mask(u) (its ancestors and itself), which fits one 64-bit word per
// node: that is why the tree holds at most 64 nodes.
//
// Draft distributions exist only where the draft expanded a position (a position with
// children): draft_row(u) numbers those positions 0, 1, ... in position order, the row of q.
// A chain of k drafts has k expanded positions (the root and every node but the last), so its
// q is [k, V] and its p is [k + 1, V], the layout of sampling/speculative.hpp.

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Draft tokens in a tree of at most kMaxNodes nodes, depth-first order.
class TokenTree {
 public:
  static constexpr Index kMaxNodes = 64;  ///< nodes a tree holds (one 64-bit ancestor mask per node)
  static constexpr Index kRoot = -1;      ///< the parent index meaning "the root" (the last context token)

  /// An empty tree: the root alone.
  TokenTree() { first_child_.fill(-1); }

  /// A tree from parallel arrays: tokens[i] with parent parents[i] (kRoot or an earlier node).
  /// @throws std::invalid_argument if the sizes differ or exceed kMaxNodes, a token is negative, or
  ///         the order is not depth-first (see add()).
  TokenTree(std::span<const TokenId> tokens, std::span<const Index> parents) : TokenTree() {
    if (tokens.size() != parents.size())
      throw_invalid_argument("parents.size()", parents.size(),
                             "must equal tokens.size() (" + std::to_string(tokens.size()) + ")");
    for (std::size_t i = 0; i < tokens.size(); ++i) add(parents[i], tokens[i]);
  }

  /// The one-branch tree x_1 -> x_2 -> ... (node i's parent is node i - 1).
  static TokenTree chain(std::span<const TokenId> tokens) {
    TokenTree t;
    for (std::size_t i = 0; i < tokens.size(); ++i) t.add(static_cast<Index>(i) - 1, tokens[i]);
    return t;
  }

  /// A tree from nodes in any topological order (parents[i] is kRoot or < i), reordered depth-first
  /// with children in index order; order[j] receives the input index of output node j when given.
  /// @throws std::invalid_argument for mismatched sizes, more than kMaxNodes nodes, a parent >= its
  ///         node, or a negative token.
  static TokenTree from_topological(std::span<const TokenId> tokens, std::span<const Index> parents,
                                    std::vector<Index>* order = nullptr) {
    const Index n = static_cast<Index>(tokens.size());
    if (parents.size() != tokens.size())
      throw_invalid_argument("parents.size()", parents.size(),
                             "must equal tokens.size() (" + std::to_string(tokens.size()) + ")");
    if (n > kMaxNodes) throw_invalid_argument("tree size", n, "must be <= " + std::to_string(kMaxNodes) + " nodes");
    std::vector<Index> first(static_cast<std::size_t>(n + 1), -1), last(first), next(static_cast<std::size_t>(n), -1);
    for (Index i = 0; i < n; ++i) {
      const Index par = parents[static_cast<std::size_t>(i)];
      if (par != kRoot && !(par >= 0 && par < i))
        throw_invalid_argument("parents[" + std::to_string(i) + "]", par, "must be kRoot (-1) or an earlier node");
      const std::size_t pu = static_cast<std::size_t>(par + 1);
      if (first[pu] < 0)
        first[pu] = i;
      else
        next[static_cast<std::size_t>(last[pu])] = i;
      last[pu] = i;
    }
    TokenTree t;
    std::vector<Index> new_index(static_cast<std::size_t>(n)), stack;
    if (order) order->clear();
    for (Index c = first[0]; c >= 0; c = next[static_cast<std::size_t>(c)]) stack.push_back(c);
    std::reverse(stack.begin(), stack.end());
    while (!stack.empty()) {  // preorder; children pushed in reverse so the first pops first
      const Index i = stack.back();
      stack.pop_back();
      const Index par = parents[static_cast<std::size_t>(i)];
      new_index[static_cast<std::size_t>(i)] =
          t.add(par == kRoot ? kRoot : new_index[static_cast<std::size_t>(par)], tokens[static_cast<std::size_t>(i)]);
      if (order) order->push_back(i);
      const std::size_t mark = stack.size();
      for (Index c = first[static_cast<std::size_t>(i + 1)]; c >= 0; c = next[static_cast<std::size_t>(c)])
        stack.push_back(c);
      std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(mark), stack.end());
    }
    return t;
  }

  /// Appends a node with `token` under `parent` (kRoot or a node) and returns its index. Depth-first
  /// order: the parent must be the root or on the path from the root to the last node added.
  /// @throws std::invalid_argument when the tree is full, the token is negative or the parent breaks the order.
  Index add(Index parent, TokenId token) {
    const Index n = size();
    if (n >= kMaxNodes)
      throw_invalid_argument("tree size", n + 1, "must be <= " + std::to_string(kMaxNodes) + " nodes");
    if (token < 0) throw_invalid_argument("token", token, "must be >= 0 (node " + std::to_string(n) + ")");
    if (parent != kRoot && !(parent >= 0 && parent < n && ((mask_[static_cast<std::size_t>(n - 1)] >> parent) & 1u)))
      throw_invalid_argument("parent", parent,
                             "of node " + std::to_string(n) +
                                 " must be kRoot (-1) or on the path to the last node (depth-first order, every "
                                 "subtree contiguous)");
    tokens_.push_back(token);
    parents_.push_back(parent);
    const std::uint64_t up = parent == kRoot ? 0 : mask_[static_cast<std::size_t>(parent)];
    mask_[static_cast<std::size_t>(n)] = up | (std::uint64_t{1} << n);
    depth_[static_cast<std::size_t>(n)] = parent == kRoot ? 1 : depth_[static_cast<std::size_t>(parent)] + 1;
    max_depth_ = std::max(max_depth_, depth_[static_cast<std::size_t>(n)]);
    // Children are linked in order of addition: the new node is its parent's last child.
    const Index pu = parent + 1;
    next_sibling_[static_cast<std::size_t>(n)] = -1;
    if (first_child_[static_cast<std::size_t>(pu)] < 0) {
      // Depth-first order expands positions in increasing order, so q rows follow position order.
      first_child_[static_cast<std::size_t>(pu)] = n;
      draft_row_[static_cast<std::size_t>(pu)] = expanded_++;
    } else {
      next_sibling_[static_cast<std::size_t>(last_child_[static_cast<std::size_t>(pu)])] = n;
    }
    last_child_[static_cast<std::size_t>(pu)] = n;
    const Index rank = ++children_[static_cast<std::size_t>(pu)];
    max_children_ = std::max(max_children_, rank);
    first_child_[static_cast<std::size_t>(n + 1)] = -1;
    children_[static_cast<std::size_t>(n + 1)] = 0;
    return n;
  }

  Index size() const { return static_cast<Index>(tokens_.size()); }   ///< number of nodes (the root not counted)
  bool empty() const { return tokens_.empty(); }                      ///< true for the root alone
  std::span<const TokenId> tokens() const { return tokens_; }         ///< node tokens, depth-first
  std::span<const Index> parents() const { return parents_; }         ///< node parents (kRoot or a node)
  TokenId token(Index node) const { return tokens_[checked(node)]; }  ///< the token of a node
  Index parent(Index node) const { return parents_[checked(node)]; }  ///< kRoot or the parent node
  /// Depth of a node (children of the root have depth 1).
  Index depth(Index node) const { return depth_[checked(node)]; }
  /// Bit j set when node j is the node itself or one of its ancestors (the root is implicit).
  std::uint64_t ancestor_mask(Index node) const { return mask_[checked(node)]; }
  Index max_depth() const { return max_depth_; }        ///< the deepest node's depth (0 when empty)
  Index max_children() const { return max_children_; }  ///< the most children of one position (0 when empty)
  /// Positions with children (the rows of a draft distribution matrix q).
  Index expanded_count() const { return expanded_; }

  /// First child node of position u (0 = root, i + 1 = node i), -1 when u is a leaf.
  Index first_child(Index position) const { return first_child_[checked_position(position)]; }
  /// The next child of the same parent after node `node`, -1 after the last.
  Index next_sibling(Index node) const { return next_sibling_[checked(node)]; }
  /// Number of children of position u.
  Index child_count(Index position) const { return children_[checked_position(position)]; }

  /// The row of q holding the draft distribution at position u, -1 when u has no children.
  Index draft_row(Index position) const {
    const std::size_t u = checked_position(position);
    return first_child_[u] < 0 ? -1 : draft_row_[u];
  }

  /// Philox blocks a verification of this tree consumes: (max_depth + 1) per sibling rank.
  /// Verification reads block first_draw + rank * (max_depth + 1) + depth for the rank-th child
  /// tried at that depth, so a chain of k consumes k + 1 blocks, like sampling/speculative.hpp.
  std::uint64_t draw_blocks() const {
    return static_cast<std::uint64_t>(max_depth_ + 1) * static_cast<std::uint64_t>(std::max<Index>(max_children_, 1));
  }

 private:
  std::size_t checked(Index node) const {
    if (node < 0 || node >= size()) throw_out_of_range("node", node, "must be in [0, " + std::to_string(size()) + ")");
    return static_cast<std::size_t>(node);
  }
  std::size_t checked_position(Index position) const {
    if (position < 0 || position > size())
      throw_out_of_range("position", position,
                         "must be in [0, " + std::to_string(size()) + "] (0 = root, i + 1 = node i)");
    return static_cast<std::size_t>(position);
  }

  std::vector<TokenId> tokens_;
  std::vector<Index> parents_;
  std::array<std::uint64_t, kMaxNodes> mask_{};
  std::array<Index, kMaxNodes> depth_{};
  std::array<Index, kMaxNodes> next_sibling_{};
  std::array<Index, kMaxNodes + 1> first_child_{};  // by position
  std::array<Index, kMaxNodes + 1> last_child_{};   // by position
  std::array<Index, kMaxNodes + 1> children_{};     // by position
  std::array<Index, kMaxNodes + 1> draft_row_{};    // by position, valid where first_child_ >= 0
  Index max_depth_ = 0;
  Index max_children_ = 0;
  Index expanded_ = 0;
};

}  // namespace inferkit
