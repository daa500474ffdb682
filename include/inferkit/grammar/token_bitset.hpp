#pragma once
// TokenBitset: one bit per vocabulary id, the form a grammar mask takes (1 = allowed). 64 ids per
// word, so clearing, or-ing and counting a 128k mask touch 2,000 words.
//
//   inferkit::TokenBitset mask(vocab.size());
//   matcher.fill_mask(mask);
//   if (mask.test(id)) { ... }

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"

namespace inferkit {

/// A set of token ids below a fixed vocabulary size, as bits.
class TokenBitset {
 public:
  TokenBitset() = default;  ///< an empty set over an empty vocabulary
  /// An empty set over ids [0, size).
  explicit TokenBitset(std::size_t size) : size_(size), words_((size + 63) / 64, 0) {}

  std::size_t size() const { return size_; }  ///< the vocabulary size (ids it can hold)
  /// Whether `id` is in the set; ids outside [0, size()) are not.
  bool test(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < size_ &&
           ((words_[static_cast<std::size_t>(id) >> 6] >> (static_cast<std::size_t>(id) & 63)) & 1);
  }
  /// Adds `id` (unchecked: callers pass ids below size()).
  void set(TokenId id) { words_[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63); }
  /// Removes `id` (unchecked).
  void reset(TokenId id) { words_[static_cast<std::size_t>(id) >> 6] &= ~(std::uint64_t{1} << (id & 63)); }
  /// Empties the set.
  void clear() {
    for (auto& w : words_) w = 0;
  }
  /// Adds every id of `o` (same size; std::invalid_argument otherwise).
  TokenBitset& operator|=(const TokenBitset& o) {
    require(o.size_ == size_, "token bitset size", o.size_, "must equal " + std::to_string(size_));
    for (std::size_t i = 0; i < words_.size(); ++i) words_[i] |= o.words_[i];
    return *this;
  }
  /// Number of ids in the set.
  std::size_t count() const {
    std::size_t n = 0;
    for (const auto w : words_) n += static_cast<std::size_t>(std::popcount(w));
    return n;
  }
  /// Calls f(id) for each id in the set, ascending.
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < words_.size(); ++i)
      for (std::uint64_t w = words_[i]; w != 0; w &= w - 1)
        f(static_cast<TokenId>(i * 64 + static_cast<std::size_t>(std::countr_zero(w))));
  }
  const std::vector<std::uint64_t>& words() const { return words_; }  ///< bit i of word i/64 is id i
  std::uint64_t* word_data() { return words_.data(); }                ///< the words, writable (fast fills)
  bool operator==(const TokenBitset&) const = default;                ///< same size and ids

 private:
  std::size_t size_ = 0;
  std::vector<std::uint64_t> words_;
};

}  // namespace inferkit
