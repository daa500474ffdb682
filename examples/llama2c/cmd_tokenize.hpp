#pragma once
// `inferkit-llama2c tokenize`: a GGUF model's vocabulary on the command line, as llama.cpp's
// llama-tokenize: --text prints the ids (BOS first when the vocabulary adds it), --ids prints
// the text of the ids.
//
//   inferkit-llama2c tokenize --model tinyllama.gguf --text "Hello world"     # 1 15043 3186
//   inferkit-llama2c tokenize --model tinyllama.gguf --ids "15043 3186"       # Hello world

#include <cstdio>
#include <string>

#include "cmd_common.hpp"
#include "flag_table.hpp"
#include "text.hpp"

namespace llama2c {

/// The tokenize subcommand (see flag_table()).
inline int cmd_tokenize(const cli::Flags& a) {
  const std::string path = a.text("--model");
  if (!TextCodec::is_gguf(path))
    throw std::invalid_argument("--model = '" + path + "' is invalid: tokenize needs a GGUF file with a vocabulary");
  const auto f = inferkit::GgufFile::open(path);
  const inferkit::Tokenizer tok(inferkit::vocabulary_from_gguf(f));
  if (a.has("--text")) {
    print_ids(tok.encode(a.text("--text")));
    return 0;
  }
  const auto ids = parse_ids(a.text("--ids"), "--ids");
  for (TokenId t : ids)
    if (t < 0 || static_cast<std::size_t>(t) >= tok.vocabulary().size())
      throw std::invalid_argument("--ids: token " + std::to_string(t) + " is outside the vocabulary [0, " +
                                  std::to_string(tok.vocabulary().size()) + ")");
  std::printf("%s\n", tok.decode(ids).c_str());
  return 0;
}

}  // namespace llama2c
