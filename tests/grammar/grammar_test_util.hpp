#pragma once
// Test helpers for grammar/: the grammar folder (INFERKIT_TEST_GRAMMAR_DIR) and vocabulary folder
// (INFERKIT_TEST_VOCAB_DIR), whole-sentence matching, a synthetic SentencePiece vocabulary built
// from text pieces plus the 256 byte tokens, and a random GBNF grammar generator.

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "inferkit/grammar/byte_matcher.hpp"
#include "inferkit/grammar/grammar.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace grammar_test {

inline std::optional<std::string> env_dir(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}
inline std::optional<std::string> grammar_dir() { return env_dir("INFERKIT_TEST_GRAMMAR_DIR"); }
inline std::optional<std::string> vocab_dir() { return env_dir("INFERKIT_TEST_VOCAB_DIR"); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Whether `text` is a complete sentence of `g`.
inline bool matches(const inferkit::Grammar& g, const std::string& text) {
  inferkit::ByteMatcher m(g);
  return m.accept_bytes(text) && m.is_complete();
}

/// A SentencePiece vocabulary: <unk>, <s>, </s> (control, EOS = 2), the 256 byte tokens, then
/// `texts` (duplicates and empty strings dropped; spaces stay spaces).
inline inferkit::Vocabulary synthetic_vocabulary(const std::vector<std::string>& texts) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<inferkit::TokenType> types = {inferkit::TokenType::kUnknown, inferkit::TokenType::kControl,
                                            inferkit::TokenType::kControl};
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::set<std::string> seen(pieces.begin(), pieces.end());
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    types.push_back(inferkit::TokenType::kByte);
    seen.insert(pieces.back());
  }
  for (const std::string& t : texts) {
    if (t.empty() || !seen.insert(t).second) continue;
    pieces.push_back(t);
    types.push_back(inferkit::TokenType::kNormal);
  }
  inferkit::VocabularyConfig cfg;
  cfg.model = inferkit::TokenizerModel::kSentencePiece;
  cfg.unk = 0;
  cfg.bos = 1;
  cfg.eos = 2;
  return inferkit::Vocabulary(std::move(pieces), {}, std::move(types), {}, cfg);
}

/// Substrings (1 to 6 bytes, any offset, so some split UTF-8 characters) of `samples`.
inline std::vector<std::string> pieces_of(const std::vector<std::string>& samples, std::size_t count,
                                          std::mt19937& rng) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string& s = samples[rng() % samples.size()];
    if (s.empty()) continue;
    const std::size_t at = rng() % s.size();
    const std::size_t len = 1 + rng() % 6;
    out.push_back(s.substr(at, len));
  }
  return out;
}

/// A random GBNF grammar over a small alphabet: rules r0..r{n-1}, r_i referring to any rule after
/// a character and only to later rules first (no left recursion), with literals, classes (some
/// negated, some non-ASCII), groups and every repetition operator.
inline std::string random_gbnf(std::mt19937& rng) {
  const int n = 2 + static_cast<int>(rng() % 4);
  auto pick = [&](int k) { return static_cast<int>(rng() % static_cast<unsigned>(k)); };
  const char* const kAtoms[] = {"\"a\"",  "\"b\"", "\"ab\"", "[a-c]", "[^a]",
                                "[b-dé]", "\"é\"", "[x-z]",  "\"€\"", "\"ba\""};
  const char* const kOps[] = {"", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
  std::string g;
  std::function<std::string(int, int, bool)> seq = [&](int rule, int depth, bool first_only_later) -> std::string {
    std::string s;
    const int len = 1 + pick(3);
    bool at_start = first_only_later;
    for (int i = 0; i < len; ++i) {
      std::string item;
      const int kind = pick(10);
      if (kind < 2 && rule + 1 < n) {
        item = "r" + std::to_string(rule + 1 + pick(n - rule - 1));
      } else if (kind < 3 && !at_start) {
        item = "r" + std::to_string(pick(n));
      } else if (kind < 4 && depth < 2) {
        item = "(" + seq(rule, depth + 1, at_start) + " | " + seq(rule, depth + 1, at_start) + ")";
      } else {
        item = kAtoms[pick(10)];
      }
      const std::string op = kOps[pick(10)];
      s += (s.empty() ? "" : " ") + item + op;
      // Only a certainly non-empty literal ends "at start" (anything else may match empty).
      if (item.size() >= 3 && item[0] == '"' && (op.empty() || op == "+" || op == "{2}")) at_start = false;
    }
    return s;
  };
  for (int r = 0; r < n; ++r) {
    g += (r == 0 ? std::string("root") : "r" + std::to_string(r)) + " ::= ";
    const int alts = 1 + pick(3);
    for (int a = 0; a < alts; ++a) g += (a ? " | " : "") + seq(r, 0, true);
    g += "\n";
  }
  // r0 is root: references to "r0" mean the root.
  std::string out;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g.compare(i, 2, "r0") == 0 && (i + 2 >= g.size() || !std::isdigit(static_cast<unsigned char>(g[i + 2])))) {
      out += "root";
      ++i;
    } else {
      out += g[i];
    }
  }
  return out;
}

}  // namespace grammar_test
