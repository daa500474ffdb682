#pragma once
// GrammarMatcher: one request's grammar state at token level: the mask of allowed next tokens,
// accept(token), rollback(n) (speculative decoding rejected drafted tokens), is_complete(), the
// forced next bytes, and copy (beams, preemption: a copy is an independent state sharing the
// masker). An end-of-generation token is allowed only where the output is a complete sentence;
// after it the matcher is terminated and accepts nothing but a rollback.
//
//   auto masker = std::make_shared<const inferkit::TokenMasker>(grammar, trie);
//   inferkit::GrammarMatcher m(masker);
//   inferkit::TokenBitset mask;
//   m.fill_mask(mask);          // then sample among mask's ids
//   m.accept(token);            // std::invalid_argument naming the token when the mask excludes it
//
// rollback keeps the states of the last `max_rollback` tokens (constructor; default 64).

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/token_bitset.hpp"
#include "inferkit/grammar/token_mask.hpp"

namespace inferkit {

/// A request's token-level grammar state (file comment).
class GrammarMatcher {
 public:
  /// The state before any token, for `masker`'s grammar and vocabulary (never null:
  /// std::invalid_argument); up to `max_rollback` tokens can be rolled back.
  explicit GrammarMatcher(std::shared_ptr<const TokenMasker> masker, std::size_t max_rollback = 64)
      : masker_(std::move(masker)), max_rollback_(max_rollback) {
    require(masker_ != nullptr, "token masker", "null", "must be given");
    history_.emplace_back(masker_->grammar());
  }

  /// Writes the allowed next tokens into `mask` (resized to the vocabulary); none once terminated.
  void fill_mask(TokenBitset& mask) const {
    if (terminated_) {
      mask = TokenBitset(masker_->trie().vocab_size());
      return;
    }
    masker_->fill_mask(history_.back(), mask);
  }
  /// Whether `id` is allowed next (std::out_of_range outside the vocabulary).
  bool allows(TokenId id) const { return !terminated_ && masker_->allows(history_.back(), id); }

  /// Advances by token `id`; throws std::invalid_argument naming the token (id and bytes) when the
  /// grammar does not allow it (the state is then unchanged), std::out_of_range outside the vocabulary.
  void accept(TokenId id) {
    if (!try_accept(id)) {
      std::string shown;
      for (const char c : masker_->trie().bytes(id)) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u < 0x7F && u != '\\') {
          shown += c;
        } else {
          static constexpr char kHex[] = "0123456789abcdef";
          shown += "\\x";
          shown += kHex[u >> 4];
          shown += kHex[u & 15];
        }
      }
      throw_invalid_argument("grammar token " + std::to_string(id) + " (\"" + shown + "\")",
                             terminated_ ? "after end of generation" : "not allowed", "must be in the grammar's mask");
    }
  }
  /// Advances by `id` and returns true when allowed; otherwise returns false, state unchanged.
  bool try_accept(TokenId id) {
    require_index(id, masker_->trie().vocab_size(), "token id");
    if (terminated_) return false;
    if (masker_->trie().is_eos(id)) {
      if (!history_.back().is_complete()) return false;
      push(history_.back());
      terminated_ = true;
      return true;
    }
    const std::string_view b = masker_->trie().bytes(id);
    if (b.empty()) return false;
    ByteMatcher next = history_.back();
    if (!next.accept_bytes(b)) return false;
    push(std::move(next));
    return true;
  }
  /// Undoes the last `n` accepted tokens (std::out_of_range when more than the kept history).
  void rollback(std::size_t n) {
    require(n < history_.size(), "rollback count", n,
            "must be at most the tokens kept for rollback (" + std::to_string(history_.size() - 1) + ")");
    for (std::size_t i = 0; i < n; ++i) {
      history_.pop_back();
      --accepted_;
    }
    if (n > 0) terminated_ = false;  // EOS, if accepted, was the last token
  }

  /// Whether the output is a complete sentence (end of generation would be allowed or was accepted).
  bool is_complete() const { return history_.back().is_complete(); }
  /// Whether an end-of-generation token was accepted.
  bool is_terminated() const { return terminated_; }
  /// Bytes every continuation starts with (ByteMatcher::forced_bytes); empty once terminated.
  std::string forced_bytes(std::size_t max_bytes = 256) const {
    return terminated_ ? std::string() : history_.back().forced_bytes(max_bytes);
  }
  std::size_t accepted_tokens() const { return accepted_; }            ///< tokens accepted and not rolled back
  std::size_t rollback_window() const { return history_.size() - 1; }  ///< tokens rollback can undo now
  const ByteMatcher& state() const { return history_.back(); }         ///< the byte-level state
  const TokenMasker& masker() const { return *masker_; }               ///< the shared masker

 private:
  void push(ByteMatcher s) {
    history_.push_back(std::move(s));
    ++accepted_;
    while (history_.size() > max_rollback_ + 1) history_.pop_front();
  }

  std::shared_ptr<const TokenMasker> masker_;
  std::size_t max_rollback_;
  std::deque<ByteMatcher> history_;
  std::size_t accepted_ = 0;
  bool terminated_ = false;
};

}  // namespace inferkit
