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
  /// Node::summary of a node without one.
  static constexpr std::uint32_t kNoSummary = 0xFFFFFFFFu;
  /// One trie node: the byte on the edge into it, its depth (1 = a token's first byte), where its
  /// subtree ends (index of the next node not below it) and the tokens whose bytes end here.
  struct Node {
    std::uint32_t subtree_end;           ///< first node index after this node's subtree
    std::uint32_t token_begin;           ///< tokens()[token_begin, token_end) end at this node
    std::uint32_t token_end;             ///< see token_begin
    std::uint32_t depth;                 ///< bytes from the root, >= 1
    std::uint8_t byte;                   ///< the byte leading into this node
    std::uint32_t summary = kNoSummary;  ///< index into summaries(), or kNoSummary
  };

  /// What lies strictly below a node (its subtree's edges), for walks that take a whole subtree
  /// at once when every byte in it leaves the grammar state as it was (token_mask.hpp).
  struct Summary {
    std::uint64_t ascii[2];  ///< bit b: some edge below carries ASCII byte b
    bool non_ascii;          ///< some edge below carries a byte >= 0x80
    bool well_formed;        ///< every path below is well-formed UTF-8 (Table 3-7), possibly cut short
  };
  /// Nodes with at least this many nodes below them, whose bytes end on a character boundary,
  /// have a Summary (smaller subtrees are cheaper to walk than to check).
  static constexpr std::uint32_t kSummaryMinNodes = 4;

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
    summarize();
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
  /// The summaries Node::summary indexes.
  const std::vector<Summary>& summaries() const { return summaries_; }
  /// tokens()[nodes()[i].token_begin, subtree_token_end(i)) are the tokens at node i and below it
  /// (tokens are sorted by bytes, so a subtree's tokens are contiguous).
  std::uint32_t subtree_token_end(std::size_t i) const {
    const std::uint32_t e = nodes_[i].subtree_end;
    return e < nodes_.size() ? nodes_[e].token_begin : static_cast<std::uint32_t>(tokens_.size());
  }

 private:
  // UTF-8 decoding state of a path: continuation bytes still due (bits 3-4) and which range the
  // next one must lie in (bits 0-2: 80-BF, A0-BF after E0, 80-9F after ED, 90-BF after F0,
  // 80-8F after F4; Unicode 15 Table 3-7); kBadUtf8 once ill-formed.
  static constexpr std::uint8_t kBadUtf8 = 0xFF;
  static std::uint8_t utf8_next(std::uint8_t ph, std::uint8_t b) {
    if (ph == kBadUtf8) return kBadUtf8;
    if ((ph >> 3) == 0) {
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1 << 3;
      if (b == 0xE0) return 2 << 3 | 1;
      if (b == 0xED) return 2 << 3 | 2;
      if (b >= 0xE1 && b <= 0xEF) return 2 << 3;
      if (b == 0xF0) return 3 << 3 | 3;
      if (b == 0xF4) return 3 << 3 | 4;
      if (b >= 0xF1 && b <= 0xF3) return 3 << 3;
      return kBadUtf8;
    }
    static constexpr std::uint8_t kLo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, kHi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
    const int g = ph & 7;
    if (b < kLo[g] || b > kHi[g]) return kBadUtf8;
    return static_cast<std::uint8_t>(((ph >> 3) - 1) << 3);
  }

  // Fills Node::summary: the UTF-8 state of every node's path top-down, then each subtree's
  // bytes and well-formedness bottom-up (children of node i: i + 1, then each one's subtree_end).
  void summarize() {
    const std::size_t n = nodes_.size();
    std::vector<std::uint8_t> phase(n), at_depth(max_depth_ + 1, 0);
    for (std::size_t i = 0; i < n; ++i) {
      phase[i] = utf8_next(at_depth[nodes_[i].depth - 1], nodes_[i].byte);
      at_depth[nodes_[i].depth] = phase[i];
    }
    std::vector<Summary> below(n);
    for (std::size_t i = n; i-- > 0;) {
      Summary sm{{0, 0}, false, true};
      for (std::size_t c = i + 1; c < nodes_[i].subtree_end; c = nodes_[c].subtree_end) {
        const std::uint8_t b = nodes_[c].byte;
        if (b < 0x80)
          sm.ascii[b >> 6] |= std::uint64_t{1} << (b & 63);
        else
          sm.non_ascii = true;
        sm.ascii[0] |= below[c].ascii[0];
        sm.ascii[1] |= below[c].ascii[1];
        sm.non_ascii = sm.non_ascii || below[c].non_ascii;
        sm.well_formed = sm.well_formed && phase[c] != kBadUtf8 && below[c].well_formed;
      }
      below[i] = sm;
    }
    for (std::size_t i = 0; i < n; ++i)
      if (nodes_[i].subtree_end - i - 1 >= kSummaryMinNodes && phase[i] == 0) {
        nodes_[i].summary = static_cast<std::uint32_t>(summaries_.size());
        summaries_.push_back(below[i]);
      }
  }

  std::size_t vocab_size_;
  std::vector<TokenId> eos_;
  std::string bytes_;
  std::vector<std::size_t> offsets_;
  std::vector<TokenId> tokens_;
  std::vector<Node> nodes_;
  std::vector<Summary> summaries_;
  std::size_t max_depth_ = 0;
};

}  // namespace inferkit
