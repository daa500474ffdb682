#pragma once
// Constrained decoding in the runner: a GBNF file (--grammar) or a JSON Schema file
// (--json-schema, or a trace request's "grammar" / "json_schema" text) compiled against the
// model's token bytes into the TokenMasker that SamplingConfig::grammar carries; make_chain()
// then puts inferkit's grammar stage first in the chain, so every sampling flag runs on the
// allowed tokens only, and end of generation is allowed exactly where the output is complete.
//
//   const auto trie = llama2c::grammar_trie(text, model.config().vocab_size);
//   s.grammar = llama2c::grammar_masker(llama2c::GrammarSource::kGbnf, read_file(path, "--grammar"),
//                                       "--grammar file '" + path + "'", trie);
//
// Token bytes: a GGUF model's vocabulary as inferkit's TokenTrie takes it (text and byte
// tokens; control tokens never; EOS from tokenizer.ggml.eos_token_id), or llama2.c's
// tokenizer.bin pieces (<0xXX> as its byte; ids 0-2, <unk> <s> </s>, are not text; EOS = 2).
// llama2.c's decoder drops a piece's leading space directly after BOS: with an empty prompt the
// printed text then lacks the first space the grammar saw.

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <inferkit/inferkit.hpp>

#include "sampling_config.hpp"
#include "text.hpp"

namespace llama2c {

/// What a grammar text is.
enum class GrammarSource { kGbnf, kJsonSchema };

/// The trie of the model's token bytes (file comment); std::invalid_argument when the model has
/// no vocabulary (a llama2.c checkpoint without --tokenizer).
inline std::shared_ptr<const inferkit::TokenTrie> grammar_trie(const TextCodec* text, int vocab_size) {
  if (!text)
    throw std::invalid_argument(
        "--grammar / --json-schema need the model's token text: --tokenizer or a GGUF model with a vocabulary");
  if (const inferkit::Tokenizer* t = text->gguf_tokenizer())
    return std::make_shared<const inferkit::TokenTrie>(inferkit::TokenTrie::from_vocabulary(t->vocabulary()));
  std::vector<std::string> pieces(static_cast<std::size_t>(vocab_size));
  const Tokenizer& tok = *text->llama2c_tokenizer();
  for (TokenId id = kEos + 1; id < vocab_size; ++id) pieces[static_cast<std::size_t>(id)] = tok.decode(0, id);
  std::vector<std::string_view> views(pieces.begin(), pieces.end());
  return std::make_shared<const inferkit::TokenTrie>(views, std::vector<TokenId>{kEos});
}

/// The masker of grammar text `source` (GBNF or a JSON Schema) over `trie`; errors start with
/// `name` (e.g. "--grammar file 'g.gbnf'"; "" for none) followed by inferkit's message (GBNF: line and column;
/// JSON: line, column and byte; a schema keyword: its JSON pointer).
inline std::shared_ptr<const inferkit::TokenMasker> grammar_masker(GrammarSource kind, std::string_view source,
                                                                   const std::string& name,
                                                                   std::shared_ptr<const inferkit::TokenTrie> trie) {
  const std::string at = name.empty() ? "" : name + ": ";
  if (trie->eos_ids().empty())
    throw std::invalid_argument(at +
                                "the vocabulary has no end-of-generation token, so a complete output could "
                                "never end");
  try {
    auto g = std::make_shared<const inferkit::Grammar>(
        kind == GrammarSource::kGbnf ? inferkit::parse_gbnf(source) : inferkit::json_schema_grammar(source));
    return std::make_shared<const inferkit::TokenMasker>(std::move(g), std::move(trie));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(at + e.what());
  } catch (const std::length_error& e) {
    throw std::invalid_argument(at + e.what());
  }
}

}  // namespace llama2c
