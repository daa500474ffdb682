#pragma once
// vocabulary_from_gguf: the Vocabulary a GGUF file's `tokenizer.ggml.*` metadata describes. The one
// header of tokenizer/ that reads io/; everything else builds from plain arrays.
//
//   const auto file = inferkit::GgufFile::open("model.gguf");
//   const inferkit::Vocabulary vocab = inferkit::vocabulary_from_gguf(file);
//
// Keys read: tokenizer.ggml.model ("llama": SentencePiece, "gpt2": byte-level BPE; any other is an
// error naming it), .pre (BPE; absent means "default", as llama.cpp reads it; an unknown name is
// an error when the tokenizer is built), .tokens (required, array of string), .scores (array of
// float32 or int32), .token_type (array of int32), .merges (array of string "left right"),
// .bos_token_id, .eos_token_id, .unknown_token_id, .padding_token_id, .eot_token_id,
// .eom_token_id (integers; 0xFFFFFFFF or -1 means none), .add_bos_token, .add_eos_token,
// .add_space_prefix (bool). Defaults as llama.cpp's: SentencePiece adds BOS, BPE does not unless
// its pre-tokenizer is Llama 3's; llama-bpe ignores merges for whole pieces. Phi-3 files
// (general.name containing "phi-3" or "phi3") get llama.cpp's right-strip of whitespace after
// their special tokens except <unk>, <s> and <|endoftext|>.
//
// Contract: a missing or mistyped required key, arrays of the wrong length or type, and special
// ids outside the vocabulary throw std::invalid_argument naming the key and the value.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/tokenizer/vocabulary.hpp"

namespace inferkit {

inline Vocabulary vocabulary_from_gguf(const GgufFile& f) {
  VocabularyConfig cfg;
  const std::string model = f.get<std::string>("tokenizer.ggml.model");
  if (model == "llama") {
    cfg.model = TokenizerModel::kSentencePiece;
  } else if (model == "gpt2") {
    cfg.model = TokenizerModel::kBytePair;
  } else {
    throw_invalid_argument("tokenizer.ggml.model", model, "is not supported (\"llama\" or \"gpt2\")");
  }
  if (cfg.model == TokenizerModel::kBytePair) cfg.pre = f.find<std::string>("tokenizer.ggml.pre").value_or("default");

  const GgufArray& tokens = f.get<GgufArray>("tokenizer.ggml.tokens");
  const std::size_t n = tokens.size();
  std::vector<std::string> pieces;
  pieces.reserve(n);
  for (std::size_t i = 0; i < n; ++i) pieces.emplace_back(tokens.string(i, "tokenizer.ggml.tokens"));

  std::vector<float> scores;
  if (const GgufValue* v = f.find_value("tokenizer.ggml.scores")) {
    const GgufArray& a = v->as<GgufArray>("tokenizer.ggml.scores");
    require(a.size() == n, "tokenizer.ggml.scores size", a.size(), "must equal the token count " + std::to_string(n));
    if (a.element_type() == GgufValueType::kInt32) {
      for (const auto s : a.values<std::int32_t>()) scores.push_back(static_cast<float>(s));
    } else {
      const auto s = a.values<float>("tokenizer.ggml.scores");
      scores.assign(s.begin(), s.end());
    }
  }
  std::vector<TokenType> types;
  if (const GgufValue* v = f.find_value("tokenizer.ggml.token_type")) {
    const auto t = v->as<GgufArray>("tokenizer.ggml.token_type").values<std::int32_t>("tokenizer.ggml.token_type");
    require(t.size() == n, "tokenizer.ggml.token_type size", t.size(),
            "must equal the token count " + std::to_string(n));
    types.reserve(n);
    for (const auto x : t) types.push_back(static_cast<TokenType>(x));  // range checked by Vocabulary
  }
  std::vector<std::string> merges;
  if (const GgufValue* v = f.find_value("tokenizer.ggml.merges")) {
    const GgufArray& a = v->as<GgufArray>("tokenizer.ggml.merges");
    merges.reserve(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) merges.emplace_back(a.string(i, "tokenizer.ggml.merges"));
  }

  auto id = [&](const char* key) -> TokenId {
    const GgufValue* v = f.find_value(key);
    if (v == nullptr) return -1;
    const auto x = v->as_integer<std::int64_t>(key);
    if (x == -1 || x == 0xFFFFFFFFll) return -1;
    require(x >= 0 && x < static_cast<std::int64_t>(n), key, x,
            "must be a token id below the vocabulary size " + std::to_string(n));
    return static_cast<TokenId>(x);
  };
  cfg.bos = id("tokenizer.ggml.bos_token_id");
  cfg.eos = id("tokenizer.ggml.eos_token_id");
  cfg.unk = id("tokenizer.ggml.unknown_token_id");
  cfg.pad = id("tokenizer.ggml.padding_token_id");
  cfg.eot = id("tokenizer.ggml.eot_token_id");
  cfg.eom = id("tokenizer.ggml.eom_token_id");

  const bool llama3 = cfg.model == TokenizerModel::kBytePair &&
                      (cfg.pre == "llama3" || cfg.pre == "llama-v3" || cfg.pre == "llama-bpe" || cfg.pre == "falcon3" ||
                       cfg.pre == "falcon-h1" || cfg.pre == "pixtral");
  cfg.add_bos = cfg.model == TokenizerModel::kSentencePiece || llama3;
  cfg.add_eos = false;
  if (const auto b = f.find<bool>("tokenizer.ggml.add_bos_token")) cfg.add_bos = *b;
  if (const auto b = f.find<bool>("tokenizer.ggml.add_eos_token")) cfg.add_eos = *b;
  if (const auto b = f.find<bool>("tokenizer.ggml.add_space_prefix")) cfg.add_space_prefix = *b;
  require(!cfg.add_bos || cfg.bos >= 0, "tokenizer.ggml.add_bos_token", true,
          "needs tokenizer.ggml.bos_token_id, which is missing");
  require(!cfg.add_eos || cfg.eos >= 0, "tokenizer.ggml.add_eos_token", true,
          "needs tokenizer.ggml.eos_token_id, which is missing");

  // Phi-3: llama.cpp's rule (its GGUF files carry no per-token strip flags).
  std::string name = f.find<std::string>("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto t = types.empty() ? TokenType::kNormal : types[i];
      const bool special = t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
      if ((special || pieces[i] == "</s>") && pieces[i] != "<unk>" && pieces[i] != "<s>" &&
          pieces[i] != "<|endoftext|>")
        cfg.rstrip.push_back(static_cast<TokenId>(i));
    }
  }
  return Vocabulary(std::move(pieces), std::move(scores), std::move(types), std::move(merges), std::move(cfg));
}

}  // namespace inferkit
