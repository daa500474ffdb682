#pragma once
// Test helpers: the four vocabularies of ../shared/vocab (INFERKIT_TEST_VOCAB_DIR) and llama.cpp's
// test vectors beside them (.inp strings separated by "__ggml_vocab_test__" lines, .out id lines).

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "inferkit/core/token.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"
#include "inferkit/tokenizer/tokenizer.hpp"

namespace tokenizer_test {

inline const char* const kVocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-llm"};

inline std::optional<std::string> vocab_dir() {
  const char* v = std::getenv("INFERKIT_TEST_VOCAB_DIR");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

inline std::string vocab_path(const std::string& dir, const std::string& name) {
  return dir + "/ggml-vocab-" + name + ".gguf";
}

inline inferkit::Tokenizer load_tokenizer(const std::string& dir, const std::string& name) {
  const auto f = inferkit::GgufFile::open(vocab_path(dir, name));
  return inferkit::Tokenizer(inferkit::vocabulary_from_gguf(f));
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The .inp strings: text between separator lines, without the newline ending a separator line
/// and without the newline before the next separator.
inline std::vector<std::string> read_inp(const std::string& path) {
  const std::string all = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t k = all.find(sep, at);
    if (k == std::string::npos) break;
    out.push_back(all.substr(at, k - at));
    at = k + sep.size();
  }
  return out;
}

inline std::vector<std::vector<inferkit::TokenId>> read_out(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<inferkit::TokenId>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::vector<inferkit::TokenId> ids;
    long v;
    while (s >> v) ids.push_back(static_cast<inferkit::TokenId>(v));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace tokenizer_test
