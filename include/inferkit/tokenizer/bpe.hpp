#pragma once
// Byte-level BPE encoding of one pre-token (`tokenizer.ggml.model = gpt2`): the bytes are mapped to
// the byte-level alphabet (tokenizer/byte_level.hpp), one symbol per byte; then, repeatedly, the
// adjacent pair with the lowest merge rank merges (ties: the leftmost pair), until no pair has a
// rank (Sennrich et al. 2016; GPT-2's encoder). With `ignore_merges` (Llama 3), a pre-token that is
// a piece as a whole is that piece. A priority queue of candidate pairs with lazy deletion makes a
// pre-token of n bytes O(n log n) (the reference loop rescans all pairs per merge: O(n^2)).
//
//   std::vector<inferkit::TokenId> ids;
//   inferkit::bpe_encode(vocab, " world", /*ignore_merges=*/false, ids);  // {995} with GPT-2's vocabulary
//
// Contract: a symbol left without a piece (a vocabulary missing some byte of the alphabet) is
// emitted byte by byte as the alphabet pieces that exist, then the unknown token, else dropped
// (llama.cpp drops it).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/byte_level.hpp"
#include "inferkit/tokenizer/spm.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

/// Reusable buffers for bpe_encode.
struct BpeScratch {
  std::string mapped;                         ///< the pre-token's bytes as byte-level alphabet characters (UTF-8)
  std::vector<detail::MergeSymbol> symbols;   ///< the symbols being merged (one per byte at the start)
  std::vector<detail::MergeCandidate> queue;  ///< heap of candidate merges, lowest rank first (lazy deletion)
};

/// Appends the ids of the pre-token `bytes` to `out`.
inline void bpe_encode(const Vocabulary& vocab, std::string_view bytes, bool ignore_merges, std::vector<TokenId>& out,
                       BpeScratch* scratch = nullptr) {
  if (bytes.empty()) return;
  BpeScratch local;
  BpeScratch& s = scratch ? *scratch : local;
  std::string& m = s.mapped;
  m.clear();
  auto& sym = s.symbols;
  auto& q = s.queue;
  sym.clear();
  q.clear();
  for (const char c : bytes) {
    const auto begin = static_cast<std::uint32_t>(m.size());
    utf8_append(m, byte_to_unicode(static_cast<std::uint8_t>(c)));
    const auto idx = static_cast<std::int32_t>(sym.size());
    const auto size = static_cast<std::uint32_t>(m.size()) - begin;
    sym.push_back({begin, size, idx - 1, -1, -1});
    if (idx > 0) sym[static_cast<std::size_t>(idx - 1)].next = idx;
  }
  const std::string_view text(m);
  if (ignore_merges) {
    if (const TokenId whole = vocab.text_token(text); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  for (auto& x : sym) x.id = vocab.text_token(text.substr(x.begin, x.size));
  auto try_pair = [&](std::int32_t l, std::int32_t r) {
    if (l < 0 || r < 0) return;
    const auto& a = sym[static_cast<std::size_t>(l)];
    const auto& b = sym[static_cast<std::size_t>(r)];
    if (a.id < 0 || b.id < 0) return;
    const std::int32_t rank = vocab.merge_rank(a.id, b.id);
    if (rank < 0) return;
    const std::uint32_t size = a.size + b.size;
    q.push_back({-static_cast<float>(rank), l, size, vocab.text_token(text.substr(a.begin, size))});
    std::push_heap(q.begin(), q.end(), detail::CandidateOrder{});
  };
  detail::run_merges(sym, q, try_pair);
  for (std::int32_t i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) {
    const auto& x = sym[static_cast<std::size_t>(i)];
    if (x.id >= 0) {
      out.push_back(x.id);
      continue;
    }
    for (std::size_t k = x.begin; k < x.begin + x.size;) {
      const Utf8Char ch = utf8_decode(text, k);
      const TokenId t = vocab.text_token(text.substr(k, ch.length));
      if (t >= 0) {
        out.push_back(t);
      } else if (vocab.unk() >= 0) {
        out.push_back(vocab.unk());
      }
      k += ch.length;
    }
  }
}

}  // namespace inferkit
