#pragma once
// TokenTrie: a vocabulary's token bytes as a byte trie laid out in depth-first preorder, each node
// knowing where its subtree ends. A mask walk visits the nodes in order and, when the grammar
// rejects a node's byte, jumps past the whole subtree: tokens sharing a prefix are matched once
// for it (the "prune shared prefixes" walk of llama.cpp's and XGrammar's token tries).
//
//   const inferkit::TokenTrie trie = inferkit::TokenTrie::from_vocabulary(vocab);
//   for (const auto& node : trie.nodes()) { ... node.byte, node.depth, node.subtree_end ... }
//
// Which tokens are in it: from_vocabulary takes normal, undefined, user-defined (their text) and
// byte tokens (their byte); control, unused and unknown tokens never (a grammar constrains text;
// end-of-generation ids are allowed separately, only where the grammar is complete). Tokens with
// no bytes are never in it. Immutable; const access is thread-safe.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

/// Byte trie of token bytes in preorder (file comment).
class TokenTrie {
 public:
  /// One trie node: the byte on the edge into it, its depth (1 = a token's first byte), where its
  /// subtree ends (index of the next node not below it) and the tokens whose bytes end here.
  struct Node {
    std::uint32_t subtree_end;  ///< first node index after this node's subtree
    std::uint32_t token_begin;  ///< tokens()[token_begin, token_end) end at this node
    std::uint32_t token_end;    ///< see token_begin
    std::uint32_t depth;        ///< bytes from the root, >= 1
    std::uint8_t byte;          ///< the byte leading into this node
  };

  /// A trie over `token_bytes[id]` for every id (an empty string: that id is never in the trie).
  /// `eos_ids` are the end-of-generation ids (each below the vocabulary size, else std::out_of_range).
  explicit TokenTrie(std::span<const std::string_view> token_bytes, std::vector<TokenId> eos_ids = {})
      : vocab_size_(token_bytes.size()), eos_(std::move(eos_ids)) {
    for (const TokenId e : eos_) require_index(e, vocab_size_, "end-of-generation token id");
    offsets_.reserve(vocab_size_ + 1);
    offsets_.push_back(0);
    for (const std::string_view b : token_bytes) {
      bytes_ += b;
      offsets_.push_back(bytes_.size());
    }
    for (std::size_t i = 0; i < vocab_size_; ++i)
      if (!token_bytes[i].empty()) tokens_.push_back(static_cast<TokenId>(i));
    std::stable_sort(tokens_.begin(), tokens_.end(), [&](TokenId a, TokenId b) { return bytes(a) < bytes(b); });
    std::vector<std::uint32_t> path;  // open nodes, one per depth
    std::string_view prev;
    for (std::size_t k = 0; k < tokens_.size(); ++k) {
      const std::string_view w = bytes(tokens_[k]);
      std::size_t common = 0;
      while (common < prev.size() && common < w.size() && prev[common] == w[common]) ++common;
      while (path.size() > common) {
        nodes_[path.back()].subtree_end = static_cast<std::uint32_t>(nodes_.size());
        path.pop_back();
      }
      for (std::size_t d = common; d < w.size(); ++d) {
        path.push_back(static_cast<std::uint32_t>(nodes_.size()));
        nodes_.push_back({0, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k),
                          static_cast<std::uint32_t>(d + 1), static_cast<std::uint8_t>(w[d])});
      }
      Node& end = nodes_[path.back()];
      if (end.token_end != k) end.token_begin = static_cast<std::uint32_t>(k);  // first token ending here
      end.token_end = static_cast<std::uint32_t>(k + 1);
      max_depth_ = std::max(max_depth_, w.size());
      prev = w;
    }
    for (const std::uint32_t n : path) nodes_[n].subtree_end = static_cast<std::uint32_t>(nodes_.size());
  }

  /// The trie of a vocabulary's text tokens (file comment), with its end-of-generation ids.
  static TokenTrie from_vocabulary(const Vocabulary& v) {
    std::vector<std::string_view> b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const TokenType t = v.type(static_cast<TokenId>(i));
      if (t == TokenType::kControl || t == TokenType::kUnused || t == TokenType::kUnknown) continue;
      b[i] = v.token_bytes(static_cast<TokenId>(i));
    }
    return TokenTrie(b, v.eos_token_ids());
  }

  const std::vector<Node>& nodes() const { return nodes_; }  ///< preorder
  /// Token ids in the trie sorted by bytes (Node::token_begin indexes this).
  const std::vector<TokenId>& tokens() const { return tokens_; }
  std::size_t vocab_size() const { return vocab_size_; }        ///< ids the masks cover
  std::size_t max_depth() const { return max_depth_; }          ///< bytes of the longest token
  const std::vector<TokenId>& eos_ids() const { return eos_; }  ///< end-of-generation ids
  /// The bytes of token `id` as given (empty: not in the trie). Unchecked id.
  std::string_view bytes(TokenId id) const {
    const auto i = static_cast<std::size_t>(id);
    return std::string_view(bytes_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  /// Whether `id` ends generation.
  bool is_eos(TokenId id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

 private:
  std::size_t vocab_size_;
  std::vector<TokenId> eos_;
  std::string bytes_;
  std::vector<std::size_t> offsets_;
  std::vector<TokenId> tokens_;
  std::vector<Node> nodes_;
  std::size_t max_depth_ = 0;
};

}  // namespace inferkit
