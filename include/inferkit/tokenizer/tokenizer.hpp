#pragma once
// Tokenizer: text to ids and back for a Vocabulary, as llama.cpp's tokenizer does it (the reference
// behaviour users of GGUF models see). encode(): special tokens are cut out of the text first
// (user-defined tokens always, control and unknown tokens only with parse_special, longest first),
// then each remaining fragment is encoded by the vocabulary's model: SentencePiece (a space
// prefix before a fragment that starts the text or follows a special token, spaces as U+2581,
// tokenizer/spm.hpp) or byte-level BPE (the pre-tokenizer split, then the merges of each piece,
// tokenizer/bpe.hpp); BOS and EOS as asked. decode(): the tokens' bytes (Vocabulary::token_bytes),
// control tokens rendered only when asked, and the leading space SentencePiece's prefix added
// removed.
//
//   const inferkit::Tokenizer tok(inferkit::vocabulary_from_gguf(file));
//   std::vector<inferkit::TokenId> ids = tok.encode("Hello world");   // BOS as the vocabulary says
//   std::string text = tok.decode(ids);                                 // "Hello world"
//
// Contract: any byte string encodes (invalid UTF-8 included: SentencePiece gives it byte-fallback
// tokens, byte-level BPE its bytes) and decode(encode(s)) == s for every s when the vocabulary has
// byte fallback or a complete byte alphabet and s holds no special-token text. Const and
// thread-safe (each call uses its own scratch buffers). encode is O(n log n) in the text length.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/bpe.hpp"
#include "inferkit/tokenizer/detokenizer.hpp"
#include "inferkit/tokenizer/pre_tokenizer.hpp"
#include "inferkit/tokenizer/spm.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

/// Options of Tokenizer::encode. Unset optionals take the vocabulary's defaults.
struct EncodeOptions {
  std::optional<bool> add_bos{};  ///< prepend BOS (default: Vocabulary::add_bos())
  std::optional<bool> add_eos{};  ///< append EOS (default: Vocabulary::add_eos())
  bool parse_special = false;     ///< turn control-token text ("<s>", "<|im_end|>") into those tokens
};

/// Text to ids and ids to text for one vocabulary, as llama.cpp does it (file comment). Owns its
/// Vocabulary; immutable once built, const access is thread-safe.
class Tokenizer {
 public:
  /// Builds the tokenizer of `vocab` (and, for BPE, its pre-tokenizer: an unknown
  /// VocabularyConfig::pre throws std::invalid_argument naming it).
  explicit Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {
    if (vocab_.model() == TokenizerModel::kBytePair) {
      pre_.emplace(PreTokenizer::named(vocab_.config().pre));
      ignore_merges_ = vocab_.config().ignore_merges.value_or(pre_->ignore_merges());
    }
    build_special_trie();
  }

  const Vocabulary& vocabulary() const { return vocab_; }  ///< the vocabulary it was built from (its own copy)
  /// The BPE pre-tokenizer (nullptr for SentencePiece).
  const PreTokenizer* pre_tokenizer() const { return pre_ ? &*pre_ : nullptr; }

  /// The ids of `text`.
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opt = {}) const {
    std::vector<TokenId> out;
    encode(text, out, opt);
    return out;
  }
  /// Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& opt = {}) const {
    const bool add_bos = opt.add_bos.value_or(vocab_.add_bos());
    const bool add_eos = opt.add_eos.value_or(vocab_.add_eos());
    require(!add_bos || vocab_.bos() >= 0, "add_bos", true, "the vocabulary has no BOS token");
    require(!add_eos || vocab_.eos() >= 0, "add_eos", true, "the vocabulary has no EOS token");
    if (add_bos) out.push_back(vocab_.bos());
    const std::vector<Fragment> frags = partition(text, opt.parse_special);
    if (vocab_.model() == TokenizerModel::kSentencePiece) {
      SpmScratch scratch;
      std::string escaped;
      bool prev_special = true;  // the text's start counts as following a special token
      for (const auto& f : frags) {
        if (f.token >= 0) {
          out.push_back(f.token);
          prev_special = true;
          continue;
        }
        escaped.clear();
        if (vocab_.add_space_prefix() && prev_special) escaped += "\xE2\x96\x81";
        for (std::size_t i = f.begin; i < f.end; ++i) {
          if (text[i] == ' ') {
            escaped += "\xE2\x96\x81";
          } else {
            escaped += text[i];
          }
        }
        spm_encode(vocab_, escaped, out, &scratch);
        prev_special = false;
      }
    } else {
      BpeScratch scratch;
      std::vector<TextSpan> pieces;
      for (const auto& f : frags) {
        if (f.token >= 0) {
          out.push_back(f.token);
          continue;
        }
        pieces.clear();
        pre_->split(text, f.begin, f.end, pieces);
        for (const auto& p : pieces) bpe_encode(vocab_, text.substr(p.begin, p.size()), ignore_merges_, out, &scratch);
      }
    }
    if (add_eos) out.push_back(vocab_.eos());
  }

  /// The text of `ids`: their bytes concatenated (possibly not valid UTF-8 when the ids cut a
  /// character). Throws std::out_of_range naming an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& opt = {}) const {
    // The Detokenizer's bytes joined (its tests check the two agree), without its per-token
    // bookkeeping.
    std::string out;
    bool strip = opt.strip_leading_space.value_or(vocab_.add_space_prefix());
    for (const TokenId id : ids) {
      std::string_view b = opt.render_special ? vocab_.control_text(id) : vocab_.token_bytes(id);
      if (b.empty()) continue;
      if (strip && b.front() == ' ') b.remove_prefix(1);
      strip = false;
      out.append(b);
    }
    return out;
  }
  /// The same for a vector of ids.
  std::string decode(const std::vector<TokenId>& ids, const DecodeOptions& opt = {}) const {
    return decode(std::span<const TokenId>(ids), opt);
  }

  /// The bytes of one token (Vocabulary::token_bytes).
  std::string_view token_bytes(TokenId id) const { return vocab_.token_bytes(id); }

  /// A piece of the text between special tokens ([begin, end), token -1) or a special token.
  struct Fragment {
    std::size_t begin = 0, end = 0;
    TokenId token = -1;  ///< the special token this fragment is, or -1 for text between them
  };

  /// Cuts the special tokens out of `text` as llama.cpp does: tokens in order of decreasing piece
  /// length (ties: lower id), each matched left to right in the text not yet taken; a token with
  /// lstrip / rstrip also takes the ASCII whitespace before / after it.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const {
    std::vector<Fragment> frags;
    // Every occurrence of every candidate token (one trie walk from each position that starts one).
    struct Hit {
      std::size_t pos;
      std::uint32_t len;
      TokenId id;
    };
    std::vector<Hit> hits;
    for (std::size_t p = 0; p < text.size(); ++p) {
      const auto c0 = static_cast<unsigned char>(text[p]);
      if (!first_byte_[c0]) continue;
      std::int32_t node = 0;
      for (std::size_t k = p; k < text.size(); ++k) {
        node = trie_child(node, static_cast<unsigned char>(text[k]));
        if (node < 0) break;
        const TokenId id = trie_[static_cast<std::size_t>(node)].token;
        if (id >= 0 && (parse_special || vocab_.type(id) == TokenType::kUserDefined))
          hits.push_back({p, static_cast<std::uint32_t>(k + 1 - p), id});
      }
    }
    if (hits.empty()) {
      if (!text.empty()) frags.push_back({0, text.size(), -1});
      return frags;
    }
    std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
      if (a.len != b.len) return a.len > b.len;
      if (a.id != b.id) return a.id < b.id;
      return a.pos < b.pos;
    });
    // Taken byte ranges (tokens and the whitespace they strip), by start.
    std::map<std::size_t, std::pair<std::size_t, TokenId>> taken;
    auto free = [&](std::size_t b, std::size_t e) {
      auto it = taken.lower_bound(b);
      if (it != taken.end() && it->first < e) return false;
      if (it != taken.begin() && std::prev(it)->second.first > b) return false;
      return true;
    };
    auto is_space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    for (const Hit& h : hits) {
      if (!free(h.pos, h.pos + h.len)) continue;
      taken.emplace(h.pos, std::make_pair(h.pos + h.len, h.id));
      if (vocab_.lstrip(h.id)) {
        std::size_t b = h.pos;
        while (b > 0 && is_space(text[b - 1]) && free(b - 1, b)) --b;
        if (b < h.pos) taken.emplace(b, std::make_pair(h.pos, -1));
      }
      if (vocab_.rstrip(h.id)) {
        std::size_t e = h.pos + h.len;
        while (e < text.size() && is_space(text[e]) && free(e, e + 1)) ++e;
        if (e > h.pos + h.len) taken.emplace(h.pos + h.len, std::make_pair(e, -1));
      }
    }
    std::size_t at = 0;
    for (const auto& [b, v] : taken) {
      if (at < b) frags.push_back({at, b, -1});
      if (v.second >= 0) frags.push_back({b, v.first, v.second});
      at = v.first;
    }
    if (at < text.size()) frags.push_back({at, text.size(), -1});
    return frags;
  }

 private:
  struct TrieNode {
    std::vector<std::pair<unsigned char, std::int32_t>> kids;  // sorted by byte
    TokenId token = -1;
  };

  std::int32_t trie_child(std::int32_t node, unsigned char c) const {
    const auto& kids = trie_[static_cast<std::size_t>(node)].kids;
    const auto it =
        std::lower_bound(kids.begin(), kids.end(), c,
                         [](const std::pair<unsigned char, std::int32_t>& k, unsigned char x) { return k.first < x; });
    return it != kids.end() && it->first == c ? it->second : -1;
  }

  void build_special_trie() {
    trie_.assign(1, TrieNode{});
    first_byte_.assign(256, false);
    for (const TokenId id : vocab_.special_tokens()) {
      const std::string& p = vocab_.piece(id);
      std::int32_t node = 0;
      for (const char ch : p) {
        const auto c = static_cast<unsigned char>(ch);
        std::int32_t next = trie_child(node, c);
        if (next < 0) {
          next = static_cast<std::int32_t>(trie_.size());
          trie_.push_back(TrieNode{});
          auto& kids = trie_[static_cast<std::size_t>(node)].kids;
          kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, std::int32_t{-1})),
                      std::make_pair(c, next));
        }
        node = next;
      }
      trie_[static_cast<std::size_t>(node)].token = id;
      first_byte_[static_cast<unsigned char>(p[0])] = true;
    }
  }

  Vocabulary vocab_;
  std::optional<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  std::vector<TrieNode> trie_;
  std::vector<bool> first_byte_;
};

// Fields declared together on one line, documented here.
/// @var Tokenizer::Fragment::begin
/// Byte offset of the fragment's first byte in the partitioned text.

/// @var Tokenizer::Fragment::end
/// Byte offset one past its last byte (whitespace a special token strips lies in no fragment).

}  // namespace inferkit
