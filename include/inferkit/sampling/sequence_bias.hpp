#pragma once
// Hugging Face's sequence-level biases over the request's history:
//   SequenceBias (SequenceBiasLogitsProcessor): each entry (sequence s, bias b) adds b to the
//     logit of s's last token when s's prefix s[0 .. n-1) is what the history ends with; a
//     one-token sequence always applies. As in Hugging Face, a sequence of n > 1 tokens is
//     considered only when the history holds at least n tokens, and the biases of every
//     matching entry are summed before they are added (score + sum of biases).
//   BadWords (NoBadWordsLogitsProcessor): the same with bias -inf: the last token of a banned
//     sequence whose prefix just appeared is banned. As in Hugging Face, a one-token bad word
//     equal to one of `eos_tokens` is ignored (EOS stays reachable).
// The history is what the caller passes (prompt and generated tokens, or their tail): only its
// last (longest sequence - 1) tokens matter. Cost: O(sum of sequence lengths) per call.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/token_masks.hpp"

namespace inferkit {

/// One biased sequence.
struct SequenceBiasEntry {
  std::vector<TokenId> sequence{};  ///< non-empty token ids
  float bias = 0.0f;                ///< added to the last token's logit; finite or -inf
};

/// HF's sequence_bias.
struct SequenceBias {
  std::vector<SequenceBiasEntry> entries{};  ///< the biased sequences
};

/// HF's bad_words_ids.
struct BadWords {
  std::vector<std::vector<TokenId>> sequences{};  ///< each non-empty
  std::vector<TokenId> eos_tokens{};              ///< one-token bad words equal to these are ignored
};

namespace detail {
/// Checks one sequence (non-empty, ids >= 0); `name` builds the parameter name, on failure only.
template <class Name>
void validate_sequence(const std::vector<TokenId>& s, Name&& name) {
  if (s.empty()) throw_invalid_argument(name() + ".size()", 0, "must be > 0");
  for (std::size_t j = 0; j < s.size(); ++j)
    if (s[j] < 0) throw_invalid_argument(name() + "[" + std::to_string(j) + "]", s[j], "must be >= 0");
}

/// True when the history ends with s's prefix (all but s's last token) and, for n > 1, holds at
/// least n = s.size() tokens (Hugging Face's condition).
inline bool prefix_just_appeared(std::span<const TokenId> history, const std::vector<TokenId>& s) {
  const std::size_t n = s.size();
  if (n == 1) return true;
  if (history.size() < n) return false;
  const std::size_t start = history.size() - (n - 1);
  for (std::size_t j = 0; j + 1 < n; ++j)
    if (history[start + j] != s[j]) return false;
  return true;
}
}  // namespace detail

/// Checks the entries; throws std::invalid_argument naming the bad one.
inline void validate_sequence_bias(const SequenceBias& q) {
  for (std::size_t i = 0; i < q.entries.size(); ++i) {
    const auto name = [i] { return "sequence_bias[" + std::to_string(i) + "]"; };
    detail::validate_sequence(q.entries[i].sequence, [&] { return name() + ".sequence"; });
    const float b = q.entries[i].bias;
    if (std::isnan(b) || b == std::numeric_limits<float>::infinity())
      throw_invalid_argument(name() + ".bias", b, "must be finite or -inf");
  }
}

/// Checks the bad words; throws std::invalid_argument naming the bad one.
inline void validate_bad_words(const BadWords& q) {
  for (std::size_t i = 0; i < q.sequences.size(); ++i)
    detail::validate_sequence(q.sequences[i], [i] { return "bad_words[" + std::to_string(i) + "]"; });
}

/// Applies the sequence biases given the history.
inline void apply_sequence_bias(Candidates& c, std::span<const TokenId> history, const SequenceBias& q) {
  validate_sequence_bias(q);
  const Index vocab = c.vocab_size();
  for (std::size_t i = 0; i < q.entries.size(); ++i)
    for (std::size_t j = 0; j < q.entries[i].sequence.size(); ++j)
      if (const TokenId t = q.entries[i].sequence[j]; t >= vocab)  // the name is built on failure only
        detail::check_token(t, vocab, "sequence_bias[" + std::to_string(i) + "].sequence[" + std::to_string(j) + "]");
  // Sum the matching biases per token first (HF builds a bias row), then add once.
  std::vector<std::pair<TokenId, float>> add;
  for (const SequenceBiasEntry& e : q.entries) {
    if (!detail::prefix_just_appeared(history, e.sequence)) continue;
    const TokenId t = e.sequence.back();
    bool found = false;
    for (auto& [id, b] : add)
      if (id == t) {
        b += e.bias;
        found = true;
      }
    if (!found) add.emplace_back(t, e.bias);
  }
  if (add.empty()) return;
  for (const auto& [id, b] : add) {  // clamped below +inf: a row holds no +inf
    float& l = c.logits()[static_cast<std::size_t>(id)];
    l = std::min(l + b, std::numeric_limits<float>::max());
  }
  c.logits_changed();
}

/// Bans the last token of each bad word whose prefix just appeared.
inline void apply_bad_words(Candidates& c, std::span<const TokenId> history, const BadWords& q) {
  validate_bad_words(q);
  const Index vocab = c.vocab_size();
  for (std::size_t i = 0; i < q.sequences.size(); ++i)
    for (std::size_t j = 0; j < q.sequences[i].size(); ++j)
      if (const TokenId t = q.sequences[i][j]; t >= vocab)  // the name is built on failure only
        detail::check_token(t, vocab, "bad_words[" + std::to_string(i) + "][" + std::to_string(j) + "]");
  bool changed = false;
  for (const auto& s : q.sequences) {
    if (s.size() == 1 && std::find(q.eos_tokens.begin(), q.eos_tokens.end(), s[0]) != q.eos_tokens.end()) continue;
    if (!detail::prefix_just_appeared(history, s)) continue;
    c.logits()[static_cast<std::size_t>(s.back())] = -std::numeric_limits<float>::infinity();
    changed = true;
  }
  if (changed) c.logits_changed();
}

/// In place on one row.
inline void apply_sequence_bias(std::span<float> logits, std::span<const TokenId> history, const SequenceBias& q) {
  Candidates c(logits);
  apply_sequence_bias(c, history, q);
  c.materialize();
}

/// In place on one row.
inline void apply_bad_words(std::span<float> logits, std::span<const TokenId> history, const BadWords& q) {
  Candidates c(logits);
  apply_bad_words(c, history, q);
  c.materialize();
}

}  // namespace inferkit
