// The llama2.c runner with issue 20's decoding rules: the generation loop keeps a SamplerState
// (min_new_tokens counts through it), DRY forbids repeated bigrams when it is made absolute, and
// the CLI flags parse, run reproducibly and reject bad values by name.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>

#include "cli_util.hpp"
#include "llama2c/runner.hpp"
#include "llama2c/sampling_flags.hpp"

using Catch::Contains;
using llama2c::TokenId;

using cli_test::run_cli;

namespace {

llama2c::Model tiny_model(std::uint64_t seed) {
  llama2c::Config c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.seq_len = 96;
  return llama2c::Model::random(c, seed);
}

// The line of ids the CLI prints with --print-ids.
std::string ids_line(const std::string& out) {
  std::size_t start = 0;
  while (start < out.size()) {
    const std::size_t end = out.find('\n', start);
    const std::string l = out.substr(start, end - start);
    if (!l.empty() && l.find_first_not_of("0123456789 ") == std::string::npos) return l;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

}  // namespace

TEST_CASE("llama2c: min_new_tokens holds EOS back through the generation state", "[example][llama2c][sampling]") {
  const auto m = tiny_model(3);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.0f;
  s.params.sequence_bias = {{{llama2c::kEos}, 50.0f}};  // EOS would win every step
  const auto eager = llama2c::generate(m, {5, 9}, 8, s);
  CHECK(eager.front() == llama2c::kEos);
  s.params.eos_token_ids = {llama2c::kEos};
  s.params.min_new_tokens = 5;
  const auto held = llama2c::generate(m, {5, 9}, 8, s);
  for (int i = 0; i < 5; ++i) CHECK(held[static_cast<std::size_t>(i)] != llama2c::kEos);
  CHECK(held[5] == llama2c::kEos);
}

TEST_CASE("llama2c: an absolute DRY penalty leaves no repeated bigram", "[example][llama2c][sampling]") {
  const auto m = tiny_model(4);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.0f;
  s.params.dry_multiplier = 1e6f;
  s.params.dry_base = 1.0f;
  s.params.dry_allowed_length = 1;
  const std::vector<TokenId> prompt{7, 7, 8};
  const auto out = llama2c::generate(m, prompt, 60, s);
  std::vector<TokenId> seq{llama2c::kBos};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  seq.insert(seq.end(), out.begin(), out.end());
  std::set<std::pair<TokenId, TokenId>> seen;
  // The prompt's own bigram (7, 7) came before any sampling; every sampled token is new.
  for (std::size_t i = prompt.size(); i + 1 < seq.size(); ++i) CHECK(seen.insert({seq[i], seq[i + 1]}).second);
  // Without DRY greedy decoding of this model does repeat itself.
  s.params.dry_multiplier = 0.0f;
  const auto plain = llama2c::generate(m, prompt, 60, s);
  std::set<std::pair<TokenId, TokenId>> bigrams;
  bool repeats = false;
  for (std::size_t i = 0; i + 1 < plain.size(); ++i)
    repeats = repeats || !bigrams.insert({plain[i], plain[i + 1]}).second;
  CHECK(repeats);
}

TEST_CASE("llama2c CLI: the decoding-rule flags run reproducibly and reject bad values",
          "[example][llama2c][sampling]") {
  const auto dir = std::filesystem::temp_directory_path() / "inferkit_llama2c_sampling_test";
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "tiny.bin").string();
  tiny_model(5).save(model);
  const std::string base = "generate --model " + model + " --steps 24 --print-ids --seed 7 ";
  for (const std::string flags :
       {"--temperature 0.9 --mirostat 2 --mirostat-tau 3 --mirostat-eta 0.2", "--temperature 0.8 --mirostat 1",
        "--sampler-order llama.cpp --temperature 0.9 --top-k 40 --typical 0.95 --top-p 0.95 --min-p 0.05 "
        "--xtc-probability 0.5 --xtc-threshold 0.1 --dry-multiplier 0.8 --dry-breakers '13;7 8' "
        "--frequency-penalty 0.1 --presence-penalty 0.1",
        "--dynatemp-range 0.5 --dynatemp-exp 1.5 --top-n-sigma 1.5 --epsilon-cutoff 3e-4 --eta-cutoff 2e-3",
        "--min-new-tokens 4 --exp-decay 10:1.2 --bad-words '2;5 6' --sequence-bias '1 2=-2;9=1.5' --begin-suppress '2 "
        "3'",
        "--top-p 0",
        // speculative decoding with the rules that count generated tokens (SamplerChain::rollback)
        "--draft-layers 1 --temperature 0.9 --min-new-tokens 4 --exp-decay 10:1.2 --begin-suppress '2 3'"}) {
    INFO(flags);
    const auto [status, out] = run_cli(base + flags);
    REQUIRE(status == 0);
    const auto ids = ids_line(out);
    CHECK(!ids.empty());
    CHECK(ids_line(run_cli(base + flags).second) == ids);  // same seed, same tokens
  }
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--mirostat 3", "mirostat = 3"},
      {"--xtc-threshold 1.5 --xtc-probability 0.5", "xtc_threshold = 1.5"},
      {"--dry-multiplier -1", "dry_multiplier = -1"},
      {"--dry-multiplier 1 --dry-breakers '1 x'", "--dry-breakers: 'x'"},
      {"--dry-multiplier 1 --dry-breakers '400'", "dry_sequence_breakers[0][0] = 400"},
      {"--exp-decay 5", "--exp-decay = '5'"},
      {"--sequence-bias '1 2'", "--sequence-bias: '1 2' is not IDS=BIAS"},
      {"--epsilon-cutoff 1", "epsilon_cutoff = 1"},
      {"--sampler-order random", "--sampler-order = 'random'"},
      {"--mirostat 2 --draft-layers 1", "which --mirostat's mu cannot be"},  // its mu cannot be rolled back
  };
  for (const auto& [flags, message] : bad) {
    INFO(flags);
    const auto [status, out] = run_cli(base + flags);
    CHECK(status == 1);
    CHECK_THAT(out, Contains(message));
  }
  std::filesystem::remove_all(dir);
}
