#pragma once
// `inferkit-llama2c convert`: --model (a llama2.c checkpoint or a GGUF file) written to --out as
// GGUF (gguf_model.hpp's save_gguf), matrices in --type, with the vocabulary of --vocab-from.
//
//   inferkit-llama2c convert --model stories260K.bin --out stories260K.gguf
//   inferkit-llama2c convert --model model-f32.gguf --type f16 --out model-f16.gguf

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "flag_table.hpp"
#include "llama2c.hpp"
#include "text.hpp"

namespace llama2c {

/// The GgmlType of a --type value (f32, f16, bf16).
inline inferkit::GgmlType gguf_type_flag(const cli::Flags& a) {
  const std::string t = a.text("--type");
  return t == "f16" ? inferkit::GgmlType::kF16 : t == "bf16" ? inferkit::GgmlType::kBF16 : inferkit::GgmlType::kF32;
}

/// Writes `m` to `out` as GGUF with the --type and --vocab-from flags; `own_vocab` is the model's
/// own GGUF file, whose vocabulary is kept when --vocab-from is absent.
inline void write_gguf_flags(const cli::Flags& a, const Model& m, const std::string& out,
                             const std::string& own_vocab = "") {
  std::optional<inferkit::GgufFile> vocab;
  if (a.has("--vocab-from"))
    vocab.emplace(inferkit::GgufFile::open(a.text("--vocab-from")));
  else if (!own_vocab.empty() && TextCodec::is_gguf(own_vocab))
    vocab.emplace(inferkit::GgufFile::open(own_vocab));
  GgufSaveOptions o;
  o.type = gguf_type_flag(a);
  o.vocabulary = vocab ? &*vocab : nullptr;
  save_gguf(m, out, o);
}

/// The convert subcommand (see flag_table()).
inline int cmd_convert(const cli::Flags& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string in = a.text("--model"), out = a.text("--out");
  const Model m = Model::load(in);
  write_gguf_flags(a, m, out, in);
  const Config& c = m.config();
  std::printf("wrote %s: %s, dim %d hidden %d layers %d heads %d kv_heads %d vocab %d, %s matrices (%.3f s)\n",
              out.c_str(), arch_name(c.arch), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
              a.text("--type").c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace llama2c
