#pragma once
// SentencePiece-style BPE encoding (`tokenizer.ggml.model = llama`): the text, spaces already
// written as U+2581, is split into UTF-8 characters; then, repeatedly, the adjacent pair whose
// concatenation is a vocabulary piece with the highest score merges (ties: the leftmost pair), until
// no pair is a piece. A character that is no piece becomes its bytes' <0xNN> tokens (byte fallback;
// the unknown token when the vocabulary has no byte tokens). A priority queue of candidate pairs
// with lazy deletion makes this O(n log n) in the text length (the naive loop rescans every pair
// after each merge: O(n^2)).
//
//   std::vector<inferkit::TokenId> ids;
//   inferkit::spm_encode(vocab, "\xE2\x96\x81Hello", ids);  // {15043} with Llama 2's vocabulary
//
// Contract: only pieces plain text may produce take part (normal, undefined and user-defined:
// never control, unknown, unused or byte tokens); an invalid UTF-8 byte is a character of its own.
// A byte with neither a byte token nor an unknown token throws std::invalid_argument naming it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/unicode.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

namespace detail {
struct MergeSymbol {
  std::uint32_t begin, size;  // bytes of the text
  std::int32_t prev, next;    // neighbours in the list (-1: none)
  TokenId id;                 // the piece it is, or -1
};
struct MergeCandidate {
  float score;         // SentencePiece: the piece's score (higher first); BPE: -rank
  std::int32_t left;   // left symbol (ties: lower first)
  std::uint32_t size;  // bytes of the pair when queued (stale when the symbols changed)
  TokenId id;          // the merged piece
};
struct CandidateOrder {
  bool operator()(const MergeCandidate& a, const MergeCandidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// Queues every adjacent pair (try_pair(l, r) pushes a candidate or nothing), then merges the best
// candidate until none is left, skipping stale ones: a candidate is stale when its left symbol was
// merged away or its pair's size changed (symbols only grow, by absorbing their right neighbour).
template <class TryPair>
void run_merges(std::vector<MergeSymbol>& sym, std::vector<MergeCandidate>& q, TryPair&& try_pair) {
  for (std::int32_t i = 1; i < static_cast<std::int32_t>(sym.size()); ++i) try_pair(i - 1, i);
  while (!q.empty()) {
    std::pop_heap(q.begin(), q.end(), CandidateOrder{});
    const MergeCandidate c = q.back();
    q.pop_back();
    auto& a = sym[static_cast<std::size_t>(c.left)];
    if (a.size == 0 || a.next < 0) continue;
    auto& b = sym[static_cast<std::size_t>(a.next)];
    if (a.size + b.size != c.size) continue;
    a.size += b.size;
    a.id = c.id;
    b.size = 0;
    a.next = b.next;
    if (a.next >= 0) sym[static_cast<std::size_t>(a.next)].prev = c.left;
    try_pair(a.prev, c.left);
    try_pair(c.left, a.next);
  }
}
}  // namespace detail

/// Reusable buffers for spm_encode (optional: saves allocations across calls).
struct SpmScratch {
  std::vector<detail::MergeSymbol> symbols;   ///< the symbols being merged (one per UTF-8 character at the start)
  std::vector<detail::MergeCandidate> queue;  ///< heap of candidate merges, highest score first (lazy deletion)
};

/// Appends the ids of `text` (spaces already U+2581) to `out`.
inline void spm_encode(const Vocabulary& vocab, std::string_view text, std::vector<TokenId>& out,
                       SpmScratch* scratch = nullptr) {
  SpmScratch local;
  SpmScratch& s = scratch ? *scratch : local;
  auto& sym = s.symbols;
  auto& q = s.queue;
  sym.clear();
  q.clear();
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_decode(text, i);
    const auto idx = static_cast<std::int32_t>(sym.size());
    sym.push_back({static_cast<std::uint32_t>(i), c.length, idx - 1, -1, vocab.text_token(text.substr(i, c.length))});
    if (idx > 0) sym[static_cast<std::size_t>(idx - 1)].next = idx;
    i += c.length;
  }
  auto try_pair = [&](std::int32_t l, std::int32_t r) {
    if (l < 0 || r < 0) return;
    const auto& a = sym[static_cast<std::size_t>(l)];
    const auto& b = sym[static_cast<std::size_t>(r)];
    const std::uint32_t size = a.size + b.size;
    const TokenId id = vocab.text_token(text.substr(a.begin, size));
    if (id < 0) return;
    q.push_back({vocab.score(id), l, size, id});
    std::push_heap(q.begin(), q.end(), detail::CandidateOrder{});
  };
  detail::run_merges(sym, q, try_pair);
  for (std::int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
    const auto& m = sym[static_cast<std::size_t>(i)];
    if (m.id >= 0) {
      out.push_back(m.id);
      continue;
    }
    bool unk_done = false;
    for (std::uint32_t k = 0; k < m.size; ++k) {
      const auto b = static_cast<std::uint8_t>(text[m.begin + k]);
      const TokenId t = vocab.byte_token(b);
      if (t >= 0) {
        out.push_back(t);
      } else if (vocab.unk() >= 0) {
        if (!unk_done) out.push_back(vocab.unk());
        unk_done = true;
      } else {
        throw_invalid_argument("byte", static_cast<unsigned>(b),
                               "has no piece, no <0xNN> token and the vocabulary no unknown token");
      }
    }
  }
}

}  // namespace inferkit
