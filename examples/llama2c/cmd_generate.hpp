#pragma once
// `inferkit-llama2c generate`: the flags of flag_table() turned into one of the generation
// loops (generate.hpp, beam.hpp, contrastive.hpp, speculative.hpp, prompt_batch.hpp), then the
// ids (--print-ids), the text (--tokenizer) and the speed (stderr).
//
//   return llama2c::cmd_generate(cli::parse_flags(llama2c::flag_table(), "generate", argc, argv, 2));

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bounds.hpp"
#include "cmd_common.hpp"
#include "flag_table.hpp"
#include "grammar_flags.hpp"
#include "runner.hpp"
#include "sampling_flags.hpp"
#include "text.hpp"
#ifdef INFERKIT_LLAMA2C_MPI
#include "context_parallel.hpp"
#include "expert_parallel.hpp"
#endif

namespace llama2c {

/// --prompts FILE: one prompt of token ids a line (blank lines skipped).
inline std::vector<std::vector<TokenId>> read_prompts_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument("cannot open --prompts file '" + path + "'");
  std::vector<std::vector<TokenId>> prompts;
  std::string line;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) prompts.push_back(parse_ids(line, "--prompts"));
  return prompts;
}

/// Rejects, before any allocation, a generation whose positions exceed int32 or whose KV
/// caches (`copies` of the sequence's) cannot fit in memory; names --steps and the bound.
inline void check_generation_fits(const Config& c, std::size_t prompt, Index steps, double copies = 1.0) {
  const double positions = double(prompt) + double(steps);  // BOS + prompt + steps - 1 (the last is never fed)
  if (positions > double(kMaxPositions))
    throw std::invalid_argument("--steps = " + std::to_string(steps) + " is invalid: BOS + prompt (" +
                                std::to_string(prompt) + " tokens) + steps - 1 must be at most 2^31-1 positions");
  const double kv = kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_size());
  require_fits_memory("--steps", steps, copies * positions * kv,
                      "BOS + prompt (" + std::to_string(prompt) + " tokens) + steps - 1 positions of KV cache (" +
                          bytes_text(kv) + " each" +
                          (copies > 1 ? ", " + std::to_string(long(copies)) + " caches" : "") + ")");
}

/// Rejects, before any allocation, a beam width whose per-step scratch cannot fit in memory:
/// every live beam's row of logits, and the search's candidates (the best 2 * beams tokens of
/// each row, 24 bytes each: inferkit::BeamSearch::step()).
inline void check_beams_fit(const Config& c, long long beams) {
  const double b = double(beams), v = double(c.vocab_size);
  require_fits_memory(
      "--beams", beams, b * v * sizeof(float) + b * std::min(2.0 * b, v) * 24.0,
      "a row of logits (" + std::to_string(c.vocab_size) + " tokens) and the best 2 * beams candidates for each beam");
}

/// Rejects, before any allocation, a contrastive search whose per-step lookahead cannot fit in
/// memory: the logits and the hidden state of each of the min(K, vocabulary) candidates.
inline void check_contrastive_fits(const Config& c, long long k) {
  const double n = std::min(double(k), double(c.vocab_size));
  require_fits_memory("--contrastive", k, n * (double(c.vocab_size) + double(c.dim)) * sizeof(float),
                      "the logits and hidden states of min(K, " + std::to_string(c.vocab_size) + ") candidates");
}

/// generate --prompts: prefix reuse over the file's prompts; prints each output.
inline int generate_prompt_batch(const cli::Flags& a, const Model& model, Index steps, const SamplingConfig& s) {
  const auto prompts = read_prompts_file(a.text("--prompts"));
  {  // the pool serve_prompts() reserves: every prompt and its steps (bounded before it is allocated)
    const Config& c = model.config();
    double tokens = 0;
    for (const auto& p : prompts) tokens += double(p.size()) + double(steps) + 1.0;
    const auto quant = quant_config(a, c.head_size());
    const double kv =
        kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_size(),
                           quant ? std::optional(paged_quant(*quant, a.integer("--page-size"))) : std::nullopt);
    require_fits_memory("--steps", steps,
                        (tokens + 3.0 * double(a.integer("--page-size")) * double(prompts.size() + 8)) * kv,
                        std::to_string(prompts.size()) + " prompts of --prompts and their steps in KV pages");
  }
  PrefixReuseStats ps;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outs = serve_prompts(model, prompts, steps, s, a.integer("--page-size"), a.text("--model"), true, &ps,
                                  quant_config(a, model.config().head_size()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t tokens = 0;
  for (const auto& o : outs) {
    if (a.has("--print-ids")) print_ids(o);
    tokens += o.size();
  }
  std::fprintf(stderr, "prefix reuse: prefill tokens computed %ld, saved %ld (%.1f%%)\n",
               static_cast<long>(ps.prefill_computed), static_cast<long>(ps.prefill_saved),
               100.0 * double(ps.prefill_saved) / double(std::max<Index>(1, ps.prefill_computed + ps.prefill_saved)));
  std::fprintf(stderr, "%zu tokens in %.3f s: %.1f tokens/s\n", tokens, seconds, double(tokens) / seconds);
  return 0;
}

#ifdef INFERKIT_LLAMA2C_MPI
/// generate --context-parallel / --expert-parallel under mpirun: plain sampling with the KV
/// cache (a token range per rank) or the experts (a range per rank) split across the ranks.
inline std::vector<TokenId> generate_distributed(const cli::Flags& a, Model& model, const std::vector<TokenId>& prompt,
                                                 Index steps, const SamplingConfig& s, GenerateStats& st) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  CacheOptions copt;
  std::optional<ContextParallelShard> shard;
  if (a.has("--context-parallel")) {
    const Index per =
        a.has("--cp-shard-tokens") ? a.integer("--cp-shard-tokens") : (model.config().seq_len + ranks - 1) / ranks;
    shard.emplace(MPI_COMM_WORLD, static_cast<std::int32_t>(per));
    copt.shard = &*shard;
  }
  std::optional<ExpertParallelMoe> experts;
  if (a.has("--expert-parallel")) {
    if (!model.config().moe())
      throw std::invalid_argument("--expert-parallel needs an MoE model (make-random --experts)");
    experts.emplace(MPI_COMM_WORLD, model.config().n_experts);
    model.moe_ffn().parallel = &*experts;
  }
  auto out = generate(model, prompt, steps, s, &st, {.cache = copt});
  if (model.config().moe()) model.moe_ffn().parallel = nullptr;
  return out;
}
#endif

/// The generate subcommand (see flag_table()).
inline int cmd_generate(const cli::Flags& a) {
  auto model = Model::load_any(a.text("--model"));
  apply_quant_flags(a, model);
  apply_moe_flags(a, model);
  const Index steps = a.integer("--steps");
  SamplingConfig s;
  s.arithmetic = attn_arith(a);
  s.sink_logits = sink_logits_flag(a, model.config().n_heads);
  apply_sampling_flags(a, s);
  make_chain(s);  // validates the sampling parameters before any work
  const auto text =
      TextCodec::open(a.text("--model"), a.has("--tokenizer") ? a.text("--tokenizer") : "", model.config().vocab_size);
  for (const auto& [flag, kind] :
       {std::pair{"--grammar", GrammarSource::kGbnf}, {"--json-schema", GrammarSource::kJsonSchema}})
    if (a.has(flag))
      s.grammar =
          grammar_masker(kind, read_file(a.text(flag), flag), std::string(flag) + " file '" + a.text(flag) + "'",
                         grammar_trie(text ? &*text : nullptr, model.config().vocab_size));
  if (a.has("--prompts")) return generate_prompt_batch(a, model, steps, s);
  const auto tok = tokenizer_flag(a, model.config().vocab_size);  // llama2.c's, for text steering prompts
  if (a.has("--prompt") && !text)
    throw std::invalid_argument("--prompt needs --tokenizer or a GGUF model with a vocabulary (or give --prompt-ids)");
  const auto prompt = a.has("--prompt")
                          ? text->encode(a.text("--prompt"))
                          : parse_ids(a.has("--prompt-ids") ? a.text("--prompt-ids") : "", "--prompt-ids");
  const bool speculative = a.has("--draft") || a.has("--draft-layers") || a.holds("--spec=ngram");
  const double copies = a.has("--beams") ? 2.0 * double(a.integer("--beams")) : speculative ? 2.0 : 1.0;
  check_generation_fits(model.config(), prompt.size(), steps, copies);  // beams: parents' and children's caches
  if (a.has("--beams")) check_beams_fit(model.config(), a.integer("--beams"));
  if (a.has("--contrastive")) check_contrastive_fits(model.config(), a.integer("--contrastive"));
  GenerateStats st;
  std::vector<TokenId> out;
  bool streamed = false;
  if (const auto steer = steering_spec(a, tok ? &*tok : nullptr)) {  // plain sampling with a residual hook
    const auto sv = build_steering_vector(model, *steer);
    std::fprintf(stderr, "%s\n", describe(*steer, sv).c_str());
    const auto plan = make_plan(model, *steer, sv.v);
    const auto hook = steering_hook(plan, 1 + static_cast<Index>(prompt.size()));
    out = generate(model, prompt, steps, s, &st, {.hook = &hook});
  } else if (a.has("--beams")) {
    const std::string mode = a.text("--length-penalty-mode");
    const BeamOptions bo{.beams = a.integer("--beams"),
                         .length_penalty = a.real("--length-penalty"),
                         .mode = mode == "gnmt"   ? inferkit::LengthPenalty::kGnmt
                                 : mode == "none" ? inferkit::LengthPenalty::kNone
                                                  : inferkit::LengthPenalty::kHuggingFace};
    out = generate_beam(model, prompt, steps, bo, &st);
  } else if (a.has("--contrastive")) {
    out =
        generate_contrastive(model, prompt, steps, {.k = a.integer("--contrastive"), .alpha = a.real("--alpha")}, &st);
  } else if (speculative) {
    const Index k = a.integer("--draft-k");
    std::optional<Model> draft;
    if (a.has("--draft")) draft = Model::load_any(a.text("--draft"));
    const long long layers = a.has("--draft-layers") ? a.integer("--draft-layers") : model.config().n_layers;
    if (!draft && layers > model.config().n_layers)
      throw std::invalid_argument("--draft-layers = " + std::to_string(layers) + " is invalid: must be in [1, " +
                                  std::to_string(model.config().n_layers) + "] (the target's layers)");
    const std::string spec = a.text("--spec");
    if (spec == "chain")
      out = generate_speculative(model, draft ? &*draft : nullptr, static_cast<int>(layers), prompt, steps, k, s, &st);
    else {
      const long long ngram_min = a.integer("--spec-ngram-min"), ngram_max = a.integer("--spec-ngram-max");
      if (ngram_max < ngram_min)  // the flag given names the error (the other may be its default)
        throw std::invalid_argument(a.has("--spec-ngram-max") ? "--spec-ngram-max = " + std::to_string(ngram_max) +
                                                                    " is invalid: must be >= --spec-ngram-min (" +
                                                                    std::to_string(ngram_min) + ")"
                                                              : "--spec-ngram-min = " + std::to_string(ngram_min) +
                                                                    " is invalid: must be <= --spec-ngram-max (" +
                                                                    std::to_string(ngram_max) + ")");
      out = generate_speculative_tree(model, draft ? &*draft : nullptr, static_cast<int>(layers), spec == "ngram",
                                      prompt, steps,
                                      {.depth = k,
                                       .nodes = a.integer("--spec-nodes"),
                                       .top_k = a.integer("--spec-top-k"),
                                       .ngram_min = ngram_min,
                                       .ngram_max = ngram_max},
                                      s, &st);
    }
    std::fprintf(stderr,
                 "speculative (%s): acceptance %.3f, tokens per target pass %.2f (k = %ld, %ld target passes, "
                 "%ld drafts, %ld accepted)\n",
                 spec.c_str(), st.drafted ? double(st.accepted) / double(st.drafted) : 0.0,
                 st.target_passes ? double(out.size()) / double(st.target_passes) : 0.0, static_cast<long>(k),
                 static_cast<long>(st.target_passes), static_cast<long>(st.drafted), static_cast<long>(st.accepted));
  } else if (a.has("--context-parallel") || a.has("--expert-parallel")) {
#ifdef INFERKIT_LLAMA2C_MPI
    out = generate_distributed(a, model, prompt, steps, s, st);
#else
    throw std::invalid_argument(
        "--context-parallel / --expert-parallel need inferkit-llama2c built with MPI (INFERKIT_WITH_MPI)");
#endif
  } else if (text) {  // plain sampling, the text streamed as it is generated
    auto stream = text->stream();
    for (TokenId t : prompt) std::fputs(stream.push(t).c_str(), stdout);
    std::fflush(stdout);
    const std::function<void(TokenId)> print = [&](TokenId t) {
      if (ends_constrained(s, t)) return;  // EOS has no text (llama2.c's tokenizer would print "</s>")
      std::fputs(stream.push(t).c_str(), stdout);
      std::fflush(stdout);
    };
    out = generate(model, prompt, steps, s, &st, {.on_token = &print});
    std::printf("%s\n", stream.flush().c_str());
    streamed = true;
  } else {
    out = generate(model, prompt, steps, s, &st);
  }
  if (a.has("--print-ids")) print_ids(out);
  if (text && !streamed) {  // the text, as llama2.c prints it
    auto stream = text->stream();
    std::string all;
    for (TokenId t : prompt) all += stream.push(t);
    for (TokenId t : out)
      if (!ends_constrained(s, t)) all += stream.push(t);
    std::printf("%s%s\n", all.c_str(), stream.flush().c_str());
  }
  if (s.grammar && (out.empty() || !ends_constrained(s, out.back())))
    std::fprintf(stderr, "grammar: the output is not complete after --steps = %ld tokens\n", static_cast<long>(steps));
  if (model.config().moe()) std::fprintf(stderr, "%s\n", model.moe_ffn().totals.describe().c_str());
  std::fprintf(stderr, "%zu tokens in %.3f s: %.1f tokens/s\n", out.size(), st.seconds,
               double(out.size()) / st.seconds);
  return 0;
}

}  // namespace llama2c
