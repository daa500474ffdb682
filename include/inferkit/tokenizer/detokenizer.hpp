#pragma once
// Detokenizer: ids to bytes, token by token, for streaming output. Each push() returns the bytes
// that are final: a token that ends inside a UTF-8 character (byte-fallback tokens, byte-level
// pieces that split a character) holds those bytes back until the character completes, so every
// chunk handed out is whole characters. Bytes that can never complete a character (invalid UTF-8)
// are not held: they pass through as they are, so the chunks concatenated (with flush()) are
// exactly the tokens' bytes, the same bytes Tokenizer::decode returns.
//
//   inferkit::Detokenizer d(vocab);
//   for (TokenId id : generated) std::cout << d.push(id);
//   std::cout << d.flush();
//
// Options: control tokens give nothing unless render_special (then their piece); one leading space
// is dropped from the first token with bytes when the vocabulary adds SentencePiece's space prefix
// (strip_leading_space overrides), so decoding an encoded text gives the text back.
// Contract: push() throws std::out_of_range for an id outside the vocabulary (the state is then
// unchanged). The returned view is valid until the next call.

#include <optional>
#include <string>
#include <string_view>

#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/unicode.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

/// Options of Tokenizer::decode and Detokenizer.
struct DecodeOptions {
  bool render_special = false;                ///< write control tokens' pieces instead of nothing
  std::optional<bool> strip_leading_space{};  ///< drop one leading space (default: the vocabulary's space prefix)
};

/// Turns a stream of ids into text chunks of whole UTF-8 characters (file comment). One object
/// per stream; not for concurrent use.
class Detokenizer {
 public:
  /// A detokenizer over `vocab`, which it keeps by pointer (it must outlive this object), with
  /// the options `opt`.
  explicit Detokenizer(const Vocabulary& vocab, DecodeOptions opt = {})
      : vocab_(&vocab), opt_(opt), strip_(opt.strip_leading_space.value_or(vocab.add_space_prefix())) {}

  /// Appends token `id`; returns the bytes now final.
  std::string_view push(TokenId id) {
    std::string_view b = opt_.render_special ? vocab_->control_text(id) : vocab_->token_bytes(id);
    emitted_.clear();
    if (b.empty()) return emitted_;
    if (strip_ && b.front() == ' ') b.remove_prefix(1);
    strip_ = false;
    held_.append(b);
    const std::size_t keep = utf8_incomplete_tail(held_);
    emitted_.assign(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return emitted_;
  }

  /// Returns the bytes still held (an incomplete character at the end of the stream) and clears them.
  std::string_view flush() {
    emitted_.swap(held_);
    held_.clear();
    return emitted_;
  }

  /// Starts a new stream (the leading-space rule applies again).
  void reset() {
    held_.clear();
    emitted_.clear();
    strip_ = opt_.strip_leading_space.value_or(vocab_->add_space_prefix());
  }

  std::string_view held() const { return held_; }  ///< bytes waiting for the rest of a character

 private:
  const Vocabulary* vocab_;
  DecodeOptions opt_;
  bool strip_;
  std::string held_, emitted_;
};

}  // namespace inferkit
