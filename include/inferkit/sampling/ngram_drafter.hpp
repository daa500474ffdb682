#pragma once
// Prompt-lookup / n-gram drafting (Saxena 2023, "Prompt Lookup Decoding"; llama.cpp's ngram
// modes): no draft model. The longest suffix of the context (prompt + generated tokens), of
// length n_max down to n_min, that occurred before proposes the tokens that followed it; the
// most recent occurrences (up to max_branches) are merged into a trie, a TokenTree whose children
// are chosen without sampling (verify it with verify_tree_deterministic or verify_tree_greedy).
//
//   inferkit::NgramDrafter drafter({.n_min = 2, .n_max = 4, .max_depth = 8});
//   drafter.extend(prompt);
//   const inferkit::TokenTree tree = drafter.draft();  // after each verification: extend(emitted)
//
// Index: for every n in [n_min, n_max] a hash table from the n-gram ending at each position to
// the positions where it ends, filled as tokens arrive (push costs n_max hash steps and
// n_max - n_min + 1 inserts: O(1) amortized, the context is never rescanned). A lookup hashes
// the suffix once per n and compares candidate occurrences token by token, so hash collisions
// never produce a wrong match. Memory: (n_max - n_min + 1) positions per context token.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/token_tree.hpp"

namespace inferkit {

/// Lengths and budgets of n-gram drafting.
struct NgramDrafterOptions {
  Index n_min = 2;         ///< shortest suffix that may match, >= 1
  Index n_max = 4;         ///< longest suffix tried first, in [n_min, 64]
  Index max_depth = 8;     ///< tokens proposed after one occurrence (tree depth), in [1, 64]
  Index max_branches = 4;  ///< most recent occurrences merged into the tree, >= 1
  Index max_nodes = 16;    ///< tree node budget, in [1, TokenTree::kMaxNodes]
};

/// The occurrences a lookup found: the suffix length n and the end positions of earlier
/// occurrences of the last n context tokens, most recent first (empty when nothing matched).
struct NgramMatch {
  Index n = 0;              ///< matched suffix length (0 = no match)
  std::vector<Index> ends;  ///< positions of the occurrences' last tokens, most recent first
};

/// An incrementally indexed context that drafts token trees from its own n-gram repeats.
class NgramDrafter {
 public:
  /// @throws std::invalid_argument for options outside the documented ranges.
  explicit NgramDrafter(const NgramDrafterOptions& options = {}) : opt_(options) {
    require(opt_.n_min >= 1, "n_min", opt_.n_min, "must be >= 1");
    require(opt_.n_max >= opt_.n_min && opt_.n_max <= 64, "n_max", opt_.n_max, "must be in [n_min, 64]");
    require(opt_.max_depth >= 1 && opt_.max_depth <= TokenTree::kMaxNodes, "max_depth", opt_.max_depth,
            "must be in [1, 64]");
    require(opt_.max_branches >= 1, "max_branches", opt_.max_branches, "must be >= 1");
    require(opt_.max_nodes >= 1 && opt_.max_nodes <= TokenTree::kMaxNodes, "max_nodes", opt_.max_nodes,
            "must be in [1, 64]");
    index_.resize(static_cast<std::size_t>(opt_.n_max - opt_.n_min + 1));
  }

  const NgramDrafterOptions& options() const { return opt_; }   ///< the options
  std::span<const TokenId> context() const { return tokens_; }  ///< every token pushed so far

  /// Appends one context token and indexes the n-grams ending at it. @throws std::invalid_argument for a negative id.
  void push(TokenId token) {
    require(token >= 0, "token", token, "must be >= 0");
    tokens_.push_back(token);
    const Index end = static_cast<Index>(tokens_.size()) - 1;
    std::uint64_t h = kSeed;
    for (Index n = 1; n <= std::min(opt_.n_max, end + 1); ++n) {
      h = step(h, tokens_[static_cast<std::size_t>(end - n + 1)]);
      if (n >= opt_.n_min) index_[static_cast<std::size_t>(n - opt_.n_min)][h].push_back(end);
    }
  }

  /// Appends tokens in order (the prompt, or the tokens a verification emitted).
  void extend(std::span<const TokenId> tokens) {
    for (TokenId t : tokens) push(t);
  }

  /// The longest suffix (n_max down to n_min) with an earlier occurrence that has at least one
  /// following token, and its most recent occurrences (at most max_branches).
  NgramMatch find() const {
    NgramMatch m;
    const Index len = static_cast<Index>(tokens_.size());
    std::uint64_t hashes[64];
    std::uint64_t h = kSeed;
    const Index top = std::min(opt_.n_max, len);
    for (Index n = 1; n <= top; ++n) hashes[n - 1] = h = step(h, tokens_[static_cast<std::size_t>(len - n)]);
    for (Index n = top; n >= opt_.n_min; --n) {
      const auto& table = index_[static_cast<std::size_t>(n - opt_.n_min)];
      const auto it = table.find(hashes[n - 1]);
      if (it == table.end()) continue;
      const std::vector<Index>& ends = it->second;
      for (std::size_t j = ends.size(); j-- > 0 && static_cast<Index>(m.ends.size()) < opt_.max_branches;) {
        const Index e = ends[j];
        if (e >= len - 1 || !same_ngram(e, len - 1, n)) continue;  // the suffix itself, or a collision
        m.ends.push_back(e);
      }
      if (!m.ends.empty()) {
        m.n = n;
        return m;
      }
    }
    return m;
  }

  /// The draft tree: the continuations of find()'s occurrences (up to max_depth tokens each,
  /// most recent first) merged into a trie of at most max_nodes nodes; empty without a match.
  TokenTree draft() const {
    const NgramMatch m = find();
    std::vector<TokenId> tok;
    std::vector<Index> par;
    const Index len = static_cast<Index>(tokens_.size());
    for (Index e : m.ends) {
      Index at = TokenTree::kRoot;
      for (Index j = e + 1; j < std::min(len, e + 1 + opt_.max_depth); ++j) {
        const TokenId t = tokens_[static_cast<std::size_t>(j)];
        Index child = -1;
        for (std::size_t c = 0; c < tok.size() && child < 0; ++c)
          if (par[c] == at && tok[c] == t) child = static_cast<Index>(c);
        if (child < 0) {
          if (static_cast<Index>(tok.size()) >= opt_.max_nodes) break;
          tok.push_back(t);
          par.push_back(at);
          child = static_cast<Index>(tok.size()) - 1;
        }
        at = child;
      }
    }
    return TokenTree::from_topological(tok, par);
  }

 private:
  static constexpr std::uint64_t kSeed = 0x9E3779B97F4A7C15ull;
  // One mixing step per token (splitmix64's finalizer over the running hash and the token).
  static std::uint64_t step(std::uint64_t h, TokenId t) {
    std::uint64_t z = h ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)) + 0x632BE59BD9B4E019ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  bool same_ngram(Index a_end, Index b_end, Index n) const {
    for (Index j = 0; j < n; ++j)
      if (tokens_[static_cast<std::size_t>(a_end - j)] != tokens_[static_cast<std::size_t>(b_end - j)]) return false;
    return true;
  }

  NgramDrafterOptions opt_;
  std::vector<TokenId> tokens_;
  std::vector<std::unordered_map<std::uint64_t, std::vector<Index>>> index_;  // [n - n_min]: hash -> ends
};

}  // namespace inferkit
