#pragma once
// Dynamic draft trees from a draft model's per-step top-k (EAGLE-2, Li et al. 2024, section 4):
// the value of a candidate is its cumulative draft probability (the product of the draft
// probabilities along its root path, kept as a sum of logs). Expansion: each depth, the
// `expand_width` most valuable candidates of the newest depth are run through the draft and each
// adds its top_k tokens as children. Reranking: the tree is the max_nodes most valuable
// candidates overall. A child is never worth more than its parent and ties go to the earlier
// (parent-first) candidate, so the selection is always a connected tree.
//
//   inferkit::DraftTreeBuilder b(options, root_probs);        // the draft's distribution after the context
//   for (auto wave = b.next_to_expand(); !wave.empty(); wave = b.next_to_expand())
//     for (inferkit::Index c : wave) b.expand(c, draft_probs_after(b.path(c)));
//   std::vector<inferkit::Index> picked;
//   const inferkit::TokenTree tree = b.build(&picked);        // verify_tree_deterministic(tree, p, ...)
//
// The children are the draft's top-k, not samples, so the tree is verified with the lossless
// deterministic rule (sampling/tree_verify.hpp); greedy verification works as well.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/token_tree.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

/// Budgets of EAGLE-2-style tree construction.
struct DraftTreeOptions {
  Index top_k = 8;         ///< children an expanded candidate adds (its draft's top-k), >= 1
  Index expand_width = 8;  ///< candidates of the newest depth expanded per step, >= 1
  Index max_depth = 6;     ///< candidate depth limit, in [1, TokenTree::kMaxNodes]
  Index max_nodes = 64;    ///< nodes of the final tree, in [1, TokenTree::kMaxNodes]
  double min_prob = 0.0;   ///< draft probabilities <= this never become candidates, in [0, 1)
};

/// Grows candidates from draft distributions and selects the final tree (see the file header).
class DraftTreeBuilder {
 public:
  /// Starts from the draft's distribution after the context (root_probs, V entries, the root's top_k become depth 1).
  /// @throws std::invalid_argument for options outside their ranges or a bad row (see expand()).
  DraftTreeBuilder(const DraftTreeOptions& options, std::span<const float> root_probs) : opt_(options) {
    require(opt_.top_k >= 1, "top_k", opt_.top_k, "must be >= 1");
    require(opt_.expand_width >= 1, "expand_width", opt_.expand_width, "must be >= 1");
    require(opt_.max_depth >= 1 && opt_.max_depth <= TokenTree::kMaxNodes, "max_depth", opt_.max_depth,
            "must be in [1, 64]");
    require(opt_.max_nodes >= 1 && opt_.max_nodes <= TokenTree::kMaxNodes, "max_nodes", opt_.max_nodes,
            "must be in [1, 64]");
    require(opt_.min_prob >= 0.0 && opt_.min_prob < 1.0, "min_prob", opt_.min_prob, "must be in [0, 1)");
    add_children(TokenTree::kRoot, root_probs);
    newest_depth_ = 1;
  }

  Index candidates() const { return static_cast<Index>(token_.size()); }  ///< candidates so far
  TokenId token(Index c) const { return token_[checked(c)]; }             ///< a candidate's token
  Index parent(Index c) const { return parent_[checked(c)]; }             ///< TokenTree::kRoot or a candidate
  Index depth(Index c) const { return depth_[checked(c)]; }               ///< 1 for the root's children
  double log_value(Index c) const { return log_value_[checked(c)]; }      ///< sum of log draft probabilities
  bool expanded(Index c) const { return expanded_[checked(c)] != 0; }     ///< expand() was called on it
  /// The tokens from the root to candidate c (what the draft model must have seen to expand c).
  std::vector<TokenId> path(Index c) const {
    std::vector<TokenId> out;
    for (Index a = static_cast<Index>(checked(c)); a != TokenTree::kRoot; a = parent_[static_cast<std::size_t>(a)])
      out.push_back(token_[static_cast<std::size_t>(a)]);
    std::reverse(out.begin(), out.end());
    return out;
  }

  /// The next wave: the expand_width most valuable candidates of the newest depth (ties to the
  /// earlier candidate), or empty once max_depth is reached or the newest depth has none. Each
  /// call moves to the next depth; expand them before calling again.
  std::vector<Index> next_to_expand() {
    std::vector<Index> wave;
    if (newest_depth_ >= opt_.max_depth) return wave;
    for (Index c = 0; c < candidates(); ++c)
      if (depth_[static_cast<std::size_t>(c)] == newest_depth_) wave.push_back(c);
    const auto better = [&](Index a, Index b) { return before(a, b); };
    if (static_cast<Index>(wave.size()) > opt_.expand_width) {
      std::partial_sort(wave.begin(), wave.begin() + opt_.expand_width, wave.end(), better);
      wave.resize(static_cast<std::size_t>(opt_.expand_width));
    } else {
      std::sort(wave.begin(), wave.end(), better);
    }
    ++newest_depth_;
    return wave;
  }

  /// Adds the top_k tokens of `probs` (the draft's distribution after path(c), V entries) as
  /// children of candidate c. @throws std::invalid_argument when c was expanded already, is at
  /// max_depth, or probs has an entry that is negative, NaN or above 1.
  void expand(Index c, std::span<const float> probs) {
    const std::size_t i = checked(c);
    if (expanded_[i]) throw_invalid_argument("candidate", c, "was expanded already");
    if (depth_[i] >= opt_.max_depth)
      throw_invalid_argument("candidate", c, "is at max_depth (" + std::to_string(opt_.max_depth) + ")");
    expanded_[i] = 1;
    add_children(c, probs);
  }

  /// The max_nodes most valuable candidates as a depth-first TokenTree; picked[j] receives the
  /// candidate of tree node j when given.
  TokenTree build(std::vector<Index>* picked = nullptr) const {
    std::vector<Index> order(static_cast<std::size_t>(candidates()));
    for (Index c = 0; c < candidates(); ++c) order[static_cast<std::size_t>(c)] = c;
    const auto better = [&](Index a, Index b) { return before(a, b); };
    const std::size_t keep = std::min(order.size(), static_cast<std::size_t>(opt_.max_nodes));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), better);
    order.resize(keep);
    std::sort(order.begin(), order.end());  // candidate order is topological (parents first)
    std::vector<Index> local(static_cast<std::size_t>(candidates()), -1);
    std::vector<TokenId> tok;
    std::vector<Index> par;
    for (Index c : order) {
      local[static_cast<std::size_t>(c)] = static_cast<Index>(tok.size());
      tok.push_back(token_[static_cast<std::size_t>(c)]);
      const Index up = parent_[static_cast<std::size_t>(c)];
      par.push_back(up == TokenTree::kRoot ? TokenTree::kRoot : local[static_cast<std::size_t>(up)]);
    }
    std::vector<Index> tree_order;
    TokenTree t = TokenTree::from_topological(tok, par, &tree_order);
    if (picked) {
      picked->clear();
      for (Index j : tree_order) picked->push_back(order[static_cast<std::size_t>(j)]);
    }
    return t;
  }

 private:
  std::size_t checked(Index c) const {
    if (c < 0 || c >= candidates())
      throw_out_of_range("candidate", c, "must be in [0, " + std::to_string(candidates()) + ")");
    return static_cast<std::size_t>(c);
  }
  // More valuable first; equal values: the earlier candidate (a parent precedes its children).
  bool before(Index a, Index b) const {
    const double va = log_value_[static_cast<std::size_t>(a)], vb = log_value_[static_cast<std::size_t>(b)];
    return va != vb ? va > vb : a < b;
  }
  void add_children(Index c, std::span<const float> probs) {
    require(!probs.empty(), "probs.size()", probs.size(), "must be > 0 (vocabulary size)");
    for (std::size_t v = 0; v < probs.size(); ++v)
      if (!(probs[v] >= 0.0f && probs[v] <= 1.0f))
        throw_invalid_argument("probs[" + std::to_string(v) + "]", probs[v],
                               "must be a probability in [0, 1] (candidate " + std::to_string(c) + ")");
    std::vector<TokenId> ids = detail::select_top_k_dense(probs, opt_.top_k);
    std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
      return probs[static_cast<std::size_t>(a)] != probs[static_cast<std::size_t>(b)]
                 ? probs[static_cast<std::size_t>(a)] > probs[static_cast<std::size_t>(b)]
                 : a < b;
    });
    const double base = c == TokenTree::kRoot ? 0.0 : log_value_[static_cast<std::size_t>(c)];
    const Index d = c == TokenTree::kRoot ? 1 : depth_[static_cast<std::size_t>(c)] + 1;
    for (TokenId t : ids) {
      const float q = probs[static_cast<std::size_t>(t)];
      if (!(static_cast<double>(q) > opt_.min_prob)) continue;
      token_.push_back(t);
      parent_.push_back(c);
      depth_.push_back(d);
      log_value_.push_back(base + std::log(static_cast<double>(q)));
      expanded_.push_back(0);
    }
  }

  DraftTreeOptions opt_;
  std::vector<TokenId> token_;
  std::vector<Index> parent_;
  std::vector<Index> depth_;
  std::vector<double> log_value_;
  std::vector<std::uint8_t> expanded_;
  Index newest_depth_ = 1;
};

}  // namespace inferkit
