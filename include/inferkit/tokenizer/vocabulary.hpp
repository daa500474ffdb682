#pragma once
// Vocabulary: a tokenizer's pieces, scores, token types, BPE merges and special ids, built from
// plain arrays (tokenizer/gguf_vocabulary.hpp builds one from GGUF metadata), with the tables the
// encoders need (piece -> id for the tokens plain text may produce, byte-fallback ids, merge ranks)
// and each token's bytes: what the token stands for in the output text, for stop strings, DRY
// sequence breakers, grammar masks and the detokenizer.
//
//   inferkit::VocabularyConfig cfg;
//   cfg.model = inferkit::TokenizerModel::kSentencePiece;
//   cfg.bos = 1;
//   inferkit::Vocabulary v(pieces, scores, types, /*merges=*/{}, cfg);
//   std::string_view bytes = v.token_bytes(15043);  // " Hello" ("▁Hello" unescaped)
//
// Token types are GGUF's (`tokenizer.ggml.token_type`): 1 normal, 2 unknown, 3 control, 4 user-
// defined, 5 unused, 6 byte (0 undefined counts as normal). Token bytes: normal, undefined and
// user-defined tokens give their text (SentencePiece: U+2581 '▁' as a space; byte-level BPE: each
// character mapped back to its byte, user-defined pieces as written); byte tokens `<0xNN>` the byte
// NN; control and unused tokens nothing (control_text() gives a control token's piece for callers
// that render special tokens); the unknown token, in SentencePiece vocabularies, U+2585 '▅' (as
// llama.cpp prints it) and, in BPE ones, its piece.
//
// Contract: pieces are unique and non-empty; scores and types are empty (all 0 / normal) or one per
// piece; special ids are -1 (none) or in range; every merge is "left right" with the space not
// first (merges whose halves are not pieces can never apply and are ignored). Violations throw
// std::invalid_argument naming the index or key and the value. Immutable once built; const access
// is thread-safe.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/tokenizer/byte_level.hpp"

namespace inferkit {

/// GGUF token types (`tokenizer.ggml.token_type`).
enum class TokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

/// Which algorithm turns text into ids (`tokenizer.ggml.model`).
enum class TokenizerModel {
  kSentencePiece,  ///< "llama": score-driven merges over characters, U+2581 for spaces, byte fallback
  kBytePair,       ///< "gpt2": byte-level BPE, merges by rank after a pre-tokenizer split
};

/// What a vocabulary needs besides its arrays.
struct VocabularyConfig {
  TokenizerModel model = TokenizerModel::kSentencePiece;  ///< how text becomes ids (tokenizer.ggml.model)
  std::string pre = "default";  ///< BPE pre-tokenizer name (tokenizer.ggml.pre); unused by SentencePiece
  TokenId bos = -1, eos = -1, unk = -1, pad = -1;
  TokenId eot = -1, eom = -1;            ///< end-of-message id (eot: see the end of the header); -1: none
  bool add_bos = true;                   ///< encode() adds BOS by default
  bool add_eos = false;                  ///< encode() adds EOS by default
  std::optional<bool> add_space_prefix;  ///< SentencePiece's dummy prefix; default: true for it, false for BPE
  std::optional<bool> ignore_merges;     ///< BPE: emit a pre-token that is a piece whole; default: the pre-tokenizer's
  /// Ids of the tokens whose match as a special token also takes the ASCII whitespace before it
  /// (Hugging Face's added-token lstrip; rstrip: see the end of the header). Each must be in range.
  std::vector<TokenId> lstrip, rstrip;
};

/// A tokenizer's pieces, scores, types, merges and special ids, with the lookup tables the
/// encoders use and each token's output bytes (file comment). Immutable once built; const access
/// is thread-safe.
class Vocabulary {
 public:
  /// Builds the vocabulary from parallel arrays: `pieces` (unique, non-empty, at most 2^31 - 1),
  /// `scores` and `types` (empty, meaning 0 / normal, or one per piece; types in [0, 6]), `merges`
  /// ("left right", rank = position, the first of duplicates wins) and `config` (special ids -1 or
  /// in range; add_bos / add_eos need a BOS / EOS id). Byte tokens must be spelled <0xNN>.
  /// Violations throw std::invalid_argument naming the index or key and the value;
  /// an lstrip / rstrip id outside the vocabulary throws std::out_of_range.
  Vocabulary(std::vector<std::string> pieces, std::vector<float> scores, std::vector<TokenType> types,
             std::vector<std::string> merges, VocabularyConfig config)
      : pieces_(std::move(pieces)), scores_(std::move(scores)), types_(std::move(types)), config_(std::move(config)) {
    const std::size_t n = pieces_.size();
    require(n > 0 && n <= static_cast<std::size_t>(std::numeric_limits<TokenId>::max()), "vocabulary size", n,
            "must be in [1, 2^31 - 1]");
    require(scores_.empty() || scores_.size() == n, "scores size", scores_.size(),
            "must be 0 or the number of pieces (" + std::to_string(n) + ")");
    require(types_.empty() || types_.size() == n, "token types size", types_.size(),
            "must be 0 or the number of pieces (" + std::to_string(n) + ")");
    if (scores_.empty()) scores_.assign(n, 0.0f);
    if (types_.empty()) types_.assign(n, TokenType::kNormal);
    for (TokenId* id : {&config_.bos, &config_.eos, &config_.unk, &config_.pad, &config_.eot, &config_.eom})
      require(*id >= -1 && *id < static_cast<TokenId>(n), "special token id", *id,
              "must be -1 (none) or below the vocabulary size " + std::to_string(n));
    for (const auto* list : {&config_.lstrip, &config_.rstrip})
      for (const TokenId id : *list) require_index(id, n, "strip token id");
    if (!config_.add_space_prefix) config_.add_space_prefix = config_.model == TokenizerModel::kSentencePiece;
    require(!config_.add_bos || config_.bos >= 0, "add_bos", true, "needs a BOS id");
    require(!config_.add_eos || config_.eos >= 0, "add_eos", true, "needs an EOS id");

    all_.reserve(n);
    text_.reserve(n);
    byte_ids_.fill(-1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto id = static_cast<TokenId>(i);
      const std::string& p = pieces_[i];
      require(!p.empty(), "piece " + std::to_string(i), "\"\"", "must not be empty");
      const auto t = static_cast<std::int32_t>(types_[i]);
      require(t >= 0 && t <= 6, "token type of piece " + std::to_string(i), t, "must be in [0, 6]");
      if (!all_.emplace(p, id).second)
        throw_invalid_argument("piece " + std::to_string(i), p,
                               "duplicates piece " + std::to_string(all_.at(p)) + " (pieces must be unique)");
      switch (types_[i]) {
        case TokenType::kUndefined:
        case TokenType::kNormal:
        case TokenType::kUserDefined:
          text_.emplace(p, id);
          break;
        case TokenType::kByte: {
          const int b = parse_byte_piece(p);
          require(b >= 0, "byte token " + std::to_string(i), p, "must be spelled <0xNN>");
          if (byte_ids_[static_cast<std::size_t>(b)] < 0) byte_ids_[static_cast<std::size_t>(b)] = id;
          break;
        }
        default:
          break;
      }
      if (types_[i] == TokenType::kControl || types_[i] == TokenType::kUserDefined || types_[i] == TokenType::kUnknown)
        special_.push_back(id);
      max_piece_bytes_ = std::max(max_piece_bytes_, p.size());
    }

    ranks_.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const std::size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      require(sp != std::string::npos, "merge " + std::to_string(r), m, "must be \"left right\"");
      const auto l = all_.find(std::string_view(m).substr(0, sp));
      const auto rr = all_.find(std::string_view(m).substr(sp + 1));
      if (l == all_.end() || rr == all_.end()) continue;                              // can never apply
      ranks_.emplace(pair_key(l->second, rr->second), static_cast<std::int32_t>(r));  // first rank wins
    }
    build_token_bytes();
    detect_end_of_generation();
  }

  std::size_t size() const { return pieces_.size(); }     ///< number of tokens
  TokenizerModel model() const { return config_.model; }  ///< SentencePiece or byte-level BPE
  /// The configuration given, with add_space_prefix resolved (true for SentencePiece, false for BPE,
  /// when it was unset).
  const VocabularyConfig& config() const { return config_; }
  const std::string& piece(TokenId id) const { return pieces_[checked(id)]; }  ///< as stored
  /// The piece's score (SentencePiece: merge priority, higher first; 0 when none were given).
  /// score(), type() and is_control() throw std::out_of_range for an id outside the vocabulary.
  float score(TokenId id) const { return scores_[checked(id)]; }
  TokenType type(TokenId id) const { return types_[checked(id)]; }               ///< its GGUF token type
  bool is_control(TokenId id) const { return type(id) == TokenType::kControl; }  ///< type(id) is kControl

  TokenId bos() const { return config_.bos; }  ///< beginning-of-sequence id, -1 for none
  TokenId eos() const { return config_.eos; }  ///< end-of-sequence id, -1 for none
  TokenId unk() const { return config_.unk; }  ///< unknown-token id (what unencodable text becomes), -1 for none
  TokenId pad() const { return config_.pad; }  ///< padding id, -1 for none (stored for callers; encoding never uses it)
  bool add_bos() const { return config_.add_bos; }  ///< whether Tokenizer::encode prepends BOS by default
  bool add_eos() const { return config_.add_eos; }  ///< whether Tokenizer::encode appends EOS by default
  /// Whether SentencePiece encoding writes a space before a fragment that starts the text or
  /// follows a special token; also the default of DecodeOptions::strip_leading_space.
  bool add_space_prefix() const { return *config_.add_space_prefix; }
  /// Every id that ends generation: EOS, EOT, EOM and the control tokens llama.cpp recognizes as
  /// such by their text (<|eot_id|>, <|im_end|>, <|end|>, <|endoftext|>, \<end_of_turn\>, ...).
  const std::vector<TokenId>& eos_token_ids() const { return eos_ids_; }

  /// The id of a piece of any type, or nullopt.
  std::optional<TokenId> find(std::string_view piece) const {
    const auto it = all_.find(piece);
    if (it == all_.end()) return std::nullopt;
    return it->second;
  }
  /// The id of a piece plain text may produce (normal, undefined or user-defined), or -1.
  TokenId text_token(std::string_view piece) const {
    const auto it = text_.find(piece);
    return it == text_.end() ? -1 : it->second;
  }
  /// The byte-fallback token <0xNN> of byte b, or -1.
  TokenId byte_token(std::uint8_t b) const { return byte_ids_[b]; }
  /// The rank of merging `left` and `right` (lower merges first), or -1.
  std::int32_t merge_rank(TokenId left, TokenId right) const {
    const auto it = ranks_.find(pair_key(left, right));
    return it == ranks_.end() ? -1 : it->second;
  }
  std::size_t merge_count() const { return ranks_.size(); }         ///< merges that can apply
  std::size_t max_piece_bytes() const { return max_piece_bytes_; }  ///< bytes of the longest piece as stored

  /// Control, user-defined and unknown tokens: the ones matched as whole strings before the
  /// model's own algorithm (control and unknown only when the caller parses special tokens).
  const std::vector<TokenId>& special_tokens() const { return special_; }
  /// Whether a special-token match of `id` also takes the whitespace before it
  /// (VocabularyConfig::lstrip; false for any id not listed, in range or not).
  bool lstrip(TokenId id) const {
    return std::find(config_.lstrip.begin(), config_.lstrip.end(), id) != config_.lstrip.end();
  }
  /// Whether it also takes the whitespace after it (VocabularyConfig::rstrip), likewise.
  bool rstrip(TokenId id) const {
    return std::find(config_.rstrip.begin(), config_.rstrip.end(), id) != config_.rstrip.end();
  }

  /// The bytes token `id` stands for in output text (see the header comment; empty for control
  /// and unused tokens). Throws std::out_of_range for an id outside the vocabulary.
  std::string_view token_bytes(TokenId id) const {
    const std::size_t i = checked(id);
    return std::string_view(bytes_).substr(bytes_offsets_[i], bytes_offsets_[i + 1] - bytes_offsets_[i]);
  }
  /// A control token's piece as written (for rendering special tokens); token_bytes otherwise.
  std::string_view control_text(TokenId id) const {
    return is_control(id) ? std::string_view(piece(id)) : token_bytes(id);
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, TokenId, Hash, std::equal_to<>>;

  static std::uint64_t pair_key(TokenId l, TokenId r) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) | static_cast<std::uint32_t>(r);
  }
  std::size_t checked(TokenId id) const {
    require_index(id, pieces_.size(), "token id");
    return static_cast<std::size_t>(id);
  }
  static int parse_byte_piece(std::string_view p) {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                    : -1;
    };
    const int hi = hex(p[3]), lo = hex(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }

  void build_token_bytes() {
    bytes_offsets_.reserve(pieces_.size() + 1);
    bytes_offsets_.push_back(0);
    const bool spm = config_.model == TokenizerModel::kSentencePiece;
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const std::string& p = pieces_[i];
      switch (types_[i]) {
        case TokenType::kUndefined:
        case TokenType::kNormal:
        case TokenType::kUserDefined:
          if (spm) {
            unescape_spaces(p, bytes_);
          } else if (types_[i] == TokenType::kUserDefined) {
            bytes_ += p;
          } else {
            byte_level_decode(p, bytes_);  // characters outside the alphabet stay as written
          }
          break;
        case TokenType::kByte:
          bytes_ += static_cast<char>(parse_byte_piece(p));
          break;
        case TokenType::kUnknown:
          bytes_ += spm ? std::string_view("\xE2\x96\x85") : std::string_view(p);
          break;
        case TokenType::kControl:
        case TokenType::kUnused:
          break;
      }
      bytes_offsets_.push_back(bytes_.size());
    }
  }

  static void unescape_spaces(std::string_view p, std::string& out) {
    for (std::size_t i = 0; i < p.size();) {
      if (p.substr(i, 3) == "\xE2\x96\x81") {
        out += ' ';
        i += 3;
      } else {
        out += p[i++];
      }
    }
  }

  void detect_end_of_generation() {
    auto add = [&](TokenId id) {
      if (id >= 0 && std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
    };
    add(config_.eos);
    add(config_.eot);
    add(config_.eom);
    static constexpr const char* kEnds[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<|end_of_text|>",
                                            "<EOT>",
                                            "<|eom_id|>",
                                            ("<\xEF\xBD\x9C"
                                             "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")};
    for (const char* e : kEnds)
      if (const auto id = find(e); id && is_control(*id)) add(*id);
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  VocabularyConfig config_;
  PieceMap all_, text_;
  std::array<TokenId, 256> byte_ids_{};
  std::unordered_map<std::uint64_t, std::int32_t> ranks_;
  std::vector<TokenId> special_;
  std::vector<TokenId> eos_ids_;
  std::string bytes_;
  std::vector<std::size_t> bytes_offsets_;
  std::size_t max_piece_bytes_ = 0;
};

// Fields declared together on one line, documented here.
/// @var VocabularyConfig::bos
/// Beginning-of-sequence token id (tokenizer.ggml.bos_token_id); -1: none.

/// @var VocabularyConfig::eos
/// End-of-sequence token id (tokenizer.ggml.eos_token_id); -1: none. When set, the first of
/// Vocabulary::eos_token_ids().

/// @var VocabularyConfig::unk
/// Unknown token id: what text no piece or byte token covers becomes; -1: none.

/// @var VocabularyConfig::pad
/// Padding token id; -1: none. Stored for callers; encoding and decoding never use it.

/// @var VocabularyConfig::eot
/// End-of-turn token id (tokenizer.ggml.eot_token_id); -1: none. Counted in
/// Vocabulary::eos_token_ids().

/// @var VocabularyConfig::rstrip
/// Ids of the tokens whose match as a special token also takes the ASCII whitespace after it
/// (Hugging Face's added-token rstrip). Each must be in range.

}  // namespace inferkit
