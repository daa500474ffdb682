#pragma once
// Naive reference encoders, transcribed from the algorithms' definitions (the reference loop of
// Sennrich et al.'s BPE, SentencePiece's greedy merge): after every merge, rescan all adjacent
// pairs for the best one. O(n^2) per fragment; used by the tests as the independent judge of the
// priority-queue encoders and by bench/tokenizer_bench.cpp as the baseline.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/byte_level.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"
#include "inferkit/tokenizer/unicode.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace naive {

/// SentencePiece: `text` already space-escaped.
inline void spm_encode(const inferkit::Vocabulary& v, std::string_view text, std::vector<inferkit::TokenId>& out) {
  std::vector<std::string> sym;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = inferkit::utf8_decode(text, i);
    sym.emplace_back(text.substr(i, c.length));
    i += c.length;
  }
  for (;;) {
    std::size_t best = sym.size();
    float best_score = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const inferkit::TokenId id = v.text_token(sym[i] + sym[i + 1]);
      if (id < 0) continue;
      if (best == sym.size() || v.score(id) > best_score) {  // strict: the leftmost of equal scores wins
        best = i;
        best_score = v.score(id);
      }
    }
    if (best == sym.size()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const auto& s : sym) {
    const inferkit::TokenId id = v.text_token(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    bool unk = false;
    for (const char c : s) {
      const inferkit::TokenId b = v.byte_token(static_cast<std::uint8_t>(c));
      if (b >= 0) {
        out.push_back(b);
      } else if (!unk) {
        out.push_back(v.unk());
        unk = true;
      }
    }
  }
}

/// Byte-level BPE of one pre-token.
inline void bpe_encode(const inferkit::Vocabulary& v, std::string_view bytes, bool ignore_merges,
                       std::vector<inferkit::TokenId>& out) {
  std::vector<std::string> sym;
  std::string whole;
  for (const char c : bytes) {
    std::string s;
    inferkit::utf8_append(s, inferkit::byte_to_unicode(static_cast<std::uint8_t>(c)));
    whole += s;
    sym.push_back(s);
  }
  if (ignore_merges && v.text_token(whole) >= 0) {
    out.push_back(v.text_token(whole));
    return;
  }
  for (;;) {
    std::size_t best = sym.size();
    std::int32_t best_rank = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const inferkit::TokenId l = v.text_token(sym[i]), r = v.text_token(sym[i + 1]);
      if (l < 0 || r < 0) continue;
      const std::int32_t rank = v.merge_rank(l, r);
      if (rank < 0) continue;
      if (best == sym.size() || rank < best_rank) {
        best = i;
        best_rank = rank;
      }
    }
    if (best == sym.size()) break;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const auto& s : sym) {
    const inferkit::TokenId id = v.text_token(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // No piece: its alphabet characters one by one, the unknown token for those without a piece.
    for (std::size_t k = 0; k < s.size();) {
      const auto c = inferkit::utf8_decode(s, k);
      const inferkit::TokenId t = v.text_token(s.substr(k, c.length));
      if (t >= 0) {
        out.push_back(t);
      } else if (v.unk() >= 0) {
        out.push_back(v.unk());
      }
      k += c.length;
    }
  }
}

/// The naive encoders over the fragments Tokenizer::encode makes (special tokens not parsed, no
/// BOS / EOS): what tok.encode(text, {add_bos = false, add_eos = false}) must equal.
inline std::vector<inferkit::TokenId> encode(const inferkit::Tokenizer& tok, std::string_view text) {
  const auto& v = tok.vocabulary();
  std::vector<inferkit::TokenId> out;
  bool prev_special = true;
  for (const auto& f : tok.partition(text, false)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view frag = text.substr(f.begin, f.end - f.begin);
    if (v.model() == inferkit::TokenizerModel::kSentencePiece) {
      std::string esc;
      if (v.add_space_prefix() && prev_special) esc.append("\xE2\x96\x81");
      for (const char c : frag) {
        if (c == ' ') {
          esc.append("\xE2\x96\x81");
        } else {
          esc.push_back(c);
        }
      }
      naive::spm_encode(v, esc, out);
    } else {
      for (const auto p : tok.pre_tokenizer()->pieces(frag))
        naive::bpe_encode(v, p, tok.pre_tokenizer()->ignore_merges(), out);
    }
    prev_special = false;
  }
  return out;
}

}  // namespace naive
