#pragma once
// The runner's text side: a prompt's ids and the generated ids' text, from llama2.c's
// tokenizer.bin (--tokenizer) or from the vocabulary a GGUF model file carries
// (`tokenizer.ggml.*`, inferkit's Tokenizer and streaming Detokenizer).
//
//   const auto text = llama2c::TextCodec::open(model_path, tokenizer_path, model.config().vocab_size);
//   const auto ids = text->encode("Once upon a time");   // no BOS: start_sequence() adds the model's
//   auto stream = text->stream();
//   for (TokenId t : out) std::fputs(stream.push(t).c_str(), stdout);
//
// Encoding leaves BOS out (the generation loops feed Config::bos first, which a GGUF model takes
// from its vocabulary) and never parses special-token text. Decoding a stream gives whole UTF-8
// characters only (a byte-fallback token that ends inside a character is held back).

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <inferkit/inferkit.hpp>

#include "sampling_config.hpp"
#include "tokenizer.hpp"

namespace llama2c {

/// Text to ids and back for one model (file comment).
class TextCodec {
 public:
  /// The codec of `tokenizer_path` (llama2.c tokenizer.bin) when given, else the vocabulary of
  /// the GGUF file `model_path` if it has one; std::nullopt when neither exists.
  static std::optional<TextCodec> open(const std::string& model_path, const std::string& tokenizer_path,
                                       int vocab_size) {
    TextCodec c;
    if (!tokenizer_path.empty()) {
      c.llama2c_ = std::make_shared<Tokenizer>(Tokenizer::load(tokenizer_path, vocab_size));
      return c;
    }
    if (!is_gguf(model_path)) return std::nullopt;
    const auto f = inferkit::GgufFile::open(model_path);
    if (!f.contains("tokenizer.ggml.tokens")) return std::nullopt;
    c.gguf_ = std::make_shared<inferkit::Tokenizer>(inferkit::vocabulary_from_gguf(f));
    return c;
  }

  /// The codec of a llama2.c tokenizer already loaded.
  static TextCodec of(Tokenizer tokenizer) {
    TextCodec c;
    c.llama2c_ = std::make_shared<Tokenizer>(std::move(tokenizer));
    return c;
  }

  /// Whether `path` starts with the GGUF magic.
  static bool is_gguf(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    return f.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
  }

  /// The ids of `text`, without BOS or EOS.
  std::vector<TokenId> encode(const std::string& text) const {
    if (llama2c_) return llama2c_->encode(text);
    inferkit::EncodeOptions o;
    o.add_bos = false;
    o.add_eos = false;
    return gguf_->encode(text, o);
  }

  /// The text of `ids` (the first one following BOS).
  std::string decode(const std::vector<TokenId>& ids) const {
    Stream s = stream();
    std::string out;
    for (TokenId t : ids) out += s.push(t);
    return out + s.flush();
  }

  /// Decodes a sequence token by token.
  class Stream {
   public:
    /// The text `id` completes (possibly empty).
    std::string push(TokenId id) {
      if (codec_->llama2c_) return codec_->llama2c_->decode(std::exchange(prev_, id), id);
      return std::string(detok_->push(id));
    }
    /// What is still held back (an unfinished character's bytes).
    std::string flush() { return detok_ ? std::string(detok_->flush()) : std::string(); }

   private:
    friend class TextCodec;
    explicit Stream(const TextCodec& c) : codec_(&c) {
      if (c.gguf_) detok_.emplace(c.gguf_->vocabulary());
    }
    const TextCodec* codec_;
    TokenId prev_ = kBos;  // llama2.c drops a piece's leading space after BOS
    std::optional<inferkit::Detokenizer> detok_;
  };

  /// A stream at the start of a sequence (valid while this codec lives).
  Stream stream() const { return Stream(*this); }

  /// The GGUF vocabulary's tokenizer, or nullptr for a llama2.c tokenizer.
  const inferkit::Tokenizer* gguf_tokenizer() const { return gguf_.get(); }
  /// llama2.c's tokenizer (--tokenizer), or nullptr for a GGUF vocabulary.
  const Tokenizer* llama2c_tokenizer() const { return llama2c_.get(); }

 private:
  TextCodec() = default;
  std::shared_ptr<const Tokenizer> llama2c_;
  std::shared_ptr<const inferkit::Tokenizer> gguf_;
};

}  // namespace llama2c
