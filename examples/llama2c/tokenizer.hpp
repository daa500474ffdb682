#pragma once
// llama2.c's tokenizer.bin: int32 max_token_length, then for every token a float32 merge score,
// an int32 byte length and the bytes. Encoding follows llama2.c's BPE: a dummy-prefix space,
// one token per UTF-8 codepoint (unknown codepoints fall back to byte tokens <0xXX> = id
// byte + 3), then repeatedly merge the adjacent pair whose concatenation is a token with the
// highest score. Decoding drops the leading space after BOS and turns <0xXX> into its byte.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <inferkit/inferkit.hpp>

namespace llama2c {

class Tokenizer {
 public:
  static Tokenizer load(const std::string& path, int vocab_size) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::invalid_argument("llama2c: cannot open tokenizer file '" + path + "'");
    return load(f, vocab_size, path);
  }

  /// Reads `vocab_size` tokens from a binary stream (a file, or memory); `name` names it in
  /// errors. Throws std::invalid_argument for a truncated or corrupt stream.
  static Tokenizer load(std::istream& f, int vocab_size, const std::string& name) {
    const std::string& path = name;
    Tokenizer t;
    std::int32_t max_len = 0;
    if (!f.read(reinterpret_cast<char*>(&max_len), sizeof(max_len)))
      throw std::invalid_argument("llama2c: tokenizer file '" + path + "' is truncated");
    for (int i = 0; i < vocab_size; ++i) {
      float score = 0;
      std::int32_t len = 0;
      if (!f.read(reinterpret_cast<char*>(&score), sizeof(score)) ||
          !f.read(reinterpret_cast<char*>(&len), sizeof(len)) || len < 0 || len > 1 << 16)
        throw std::invalid_argument("llama2c: tokenizer file '" + path + "' is truncated or corrupt at token " +
                                    std::to_string(i));
      std::string piece(static_cast<std::size_t>(len), '\0');
      if (!f.read(piece.data(), len))
        throw std::invalid_argument("llama2c: tokenizer file '" + path + "' is truncated at token " +
                                    std::to_string(i));
      t.add(piece, score);
    }
    return t;
  }

  /// Writes a tokenizer file (for tests and synthetic models).
  static void save(const std::string& path, const std::vector<std::string>& pieces, const std::vector<float>& scores) {
    std::ofstream f(path, std::ios::binary);
    save(f, pieces, scores);
  }
  /// Writes a tokenizer (the format load() reads) to a binary stream.
  static void save(std::ostream& f, const std::vector<std::string>& pieces, const std::vector<float>& scores) {
    std::int32_t max_len = 0;
    for (const auto& p : pieces) max_len = std::max<std::int32_t>(max_len, static_cast<std::int32_t>(p.size()));
    f.write(reinterpret_cast<const char*>(&max_len), sizeof(max_len));
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const auto len = static_cast<std::int32_t>(pieces[i].size());
      f.write(reinterpret_cast<const char*>(&scores[i]), sizeof(float));
      f.write(reinterpret_cast<const char*>(&len), sizeof(len));
      f.write(pieces[i].data(), len);
    }
  }

  int vocab_size() const { return static_cast<int>(pieces_.size()); }

  /// Token ids of `text`. Throws std::invalid_argument for a byte that neither a token nor a
  /// byte-fallback token (id byte + 3) of this vocabulary covers.
  std::vector<inferkit::TokenId> encode(const std::string& text) const {
    std::vector<inferkit::TokenId> ids;
    if (text.empty()) return ids;
    if (const auto sp = lookup(" "); sp >= 0) ids.push_back(sp);  // dummy prefix, as sentencepiece
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n = 1;  // bytes of this UTF-8 codepoint
      const auto c = static_cast<unsigned char>(text[i]);
      if (c >= 0xF0)
        n = 4;
      else if (c >= 0xE0)
        n = 3;
      else if (c >= 0xC0)
        n = 2;
      n = std::min(n, text.size() - i);
      const auto id = lookup(text.substr(i, n));
      if (id >= 0) {
        ids.push_back(id);
      } else {
        for (std::size_t b = 0; b < n; ++b) {  // <0xXX> = id byte + 3, when the vocabulary has byte tokens
          const int byte = static_cast<unsigned char>(text[i + b]);
          if (byte + 3 >= vocab_size())
            throw std::invalid_argument("llama2c: text byte " + std::to_string(byte) + " at offset " +
                                        std::to_string(i + b) + " has no token: the vocabulary (" +
                                        std::to_string(vocab_size()) +
                                        " tokens) has no byte-fallback token <0x..> at id " + std::to_string(byte + 3));
          ids.push_back(byte + 3);
        }
      }
      i += n;
    }
    while (true) {  // merge the best-scoring adjacent pair until none merges
      float best = -1e30f;
      inferkit::TokenId best_id = -1;
      std::size_t best_at = 0;
      for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
        const auto id =
            lookup(pieces_[static_cast<std::size_t>(ids[i])] + pieces_[static_cast<std::size_t>(ids[i + 1])]);
        if (id >= 0 && scores_[static_cast<std::size_t>(id)] > best) {
          best = scores_[static_cast<std::size_t>(id)];
          best_id = id;
          best_at = i;
        }
      }
      if (best_id < 0) break;
      ids[best_at] = best_id;
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    return ids;
  }

  /// The text of `token` following `prev`.
  std::string decode(inferkit::TokenId prev, inferkit::TokenId token) const {
    if (token < 0 || token >= vocab_size())
      throw std::out_of_range("llama2c: token " + std::to_string(token) + " is outside the tokenizer's vocabulary");
    std::string piece = pieces_[static_cast<std::size_t>(token)];
    if (prev == 1 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    unsigned byte = 0;
    if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1)
      return std::string(1, static_cast<char>(byte));
    return piece;
  }

 private:
  void add(const std::string& piece, float score) {
    index_.emplace(piece, static_cast<inferkit::TokenId>(pieces_.size()));  // the first occurrence wins
    pieces_.push_back(piece);
    scores_.push_back(score);
  }
  inferkit::TokenId lookup(const std::string& s) const {
    const auto it = index_.find(s);
    return it == index_.end() ? -1 : it->second;
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, inferkit::TokenId> index_;
};

}  // namespace llama2c
