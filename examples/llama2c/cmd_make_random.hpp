#pragma once
// `inferkit-llama2c make-random`: a random-weight checkpoint of the flags' shape (dense, or
// mixture of experts with --experts), written to --out (a .gguf name: GGUF, cmd_convert.hpp).
//
//   return llama2c::cmd_make_random(cli::parse_flags(llama2c::flag_table(), "make-random", argc, argv, 2));

#include <cstdint>
#include <cstdio>
#include <string>

#include "cmd_convert.hpp"
#include "flag_table.hpp"
#include "llama2c.hpp"
#include "moe_model.hpp"

namespace llama2c {

/// The make-random subcommand (see flag_table()).
inline int cmd_make_random(const cli::Flags& a) {
  Config c;
  c.dim = static_cast<int>(a.integer("--dim"));
  c.hidden_dim = static_cast<int>(a.integer("--hidden"));
  c.n_layers = static_cast<int>(a.integer("--layers"));
  c.n_heads = static_cast<int>(a.integer("--heads"));
  c.n_kv_heads = static_cast<int>(a.has("--kv-heads") ? a.integer("--kv-heads") : c.n_heads);
  c.vocab_size = static_cast<int>(a.integer("--vocab"));
  c.seq_len = static_cast<int>(a.integer("--seq-len"));
  if (a.has("--experts")) {
    c.n_experts = static_cast<int>(a.integer("--experts"));
    c.experts_per_token = static_cast<int>(a.integer("--experts-per-token"));
    c.router = parse_router_mode(a.text("--router"));
  }
  const std::string out = a.text("--out");
  const Model m = Model::random(c, static_cast<std::uint64_t>(a.integer("--seed")));
  if (out.size() >= 5 && out.compare(out.size() - 5, 5, ".gguf") == 0)
    write_gguf_flags(a, m, out);
  else if (a.has("--vocab-from") || a.text("--type") != "f32")
    throw std::invalid_argument("--vocab-from and --type need an --out name ending in .gguf (a GGUF file)");
  else
    m.save(out);
  std::printf("wrote %s: dim %d hidden %d layers %d heads %d kv_heads %d vocab %d seq_len %d", out.c_str(), c.dim,
              c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
  if (c.moe())
    std::printf(" experts %d experts_per_token %d router %s", c.n_experts, c.experts_per_token,
                router_mode_name(c.router));
  std::printf("\n");
  return 0;
}

}  // namespace llama2c
