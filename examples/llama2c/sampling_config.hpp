#pragma once
// What every generation loop of the runner shares: the sampling configuration (inferkit's
// SamplingParams plus the runner's penalty window and seed), the SamplerChain it builds, the
// sort-based reference sampler of the naive baseline, llama2.c's BOS and EOS ids and the
// statistics a loop reports.
//
//   llama2c::SamplingConfig s;
//   s.params.temperature = 0.8f;
//   const inferkit::SamplerChain chain = llama2c::make_chain(s);  // validates the parameters

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include <inferkit/inferkit.hpp>
#include <inferkit/sampling/reference.hpp>

namespace llama2c {

using inferkit::Index;
using inferkit::TokenId;

constexpr TokenId kBos = 1;  // "<s>" in llama2.c's vocabulary: every sequence starts with it
constexpr TokenId kEos = 2;  // "</s>"

struct SamplingConfig {
  inferkit::SamplingParams params;  // the chain's knobs, run in inferkit's default order
  Index repeat_last_n = 64;         // history the repetition penalty sees
  std::uint64_t seed = 42;
  bool naive = false;  // baseline runs: sort-based sampling and reference attention
  inferkit::AttentionArithmetic arithmetic = inferkit::AttentionArithmetic::kExact;  // --attn-arith
  std::vector<float> sink_logits;  // --sink-logit: one per query head, or empty (none)
  bool llama_cpp_order = false;    // llama.cpp's preset instead of inferkit's (= Hugging Face's) order
  // --grammar / --json-schema (grammar_flags.hpp): the grammar stage runs first in the chain.
  std::shared_ptr<const inferkit::TokenMasker> grammar{};
};

/// The sort-based reference of the default chain (the naive baseline of the benchmarks).
inline TokenId naive_sample(std::span<float> logits, std::span<const TokenId> history, const SamplingConfig& s,
                            const inferkit::CounterRng& rng, std::uint64_t draw) {
  const inferkit::SamplingParams& p = s.params;
  inferkit::apply_repetition_penalty(logits, history, p.repetition_penalty);
  inferkit::reference::temperature(logits, p.temperature);
  inferkit::reference::top_k(logits, p.top_k);
  inferkit::reference::top_p(logits, p.top_p);
  inferkit::reference::min_p(logits, p.min_p);
  return inferkit::reference::draw(logits, rng.uniform_double(draw));
}

/// The chain: the penalties see the last repeat_last_n tokens, DRY and the sequence rules the
/// whole sequence passed to sample(); with a grammar, its stage first (masks before penalties,
/// temperature and truncation: a truncation run first could leave no allowed token). When the
/// rest starts with temperature 0 (no penalty or bias before it; every stage after it sees the
/// argmax alone), the grammar stage takes its greedy path (one masked argmax over the row, no
/// list of allowed ids): the same token.
inline inferkit::SamplerChain make_chain(const SamplingConfig& s) {
  inferkit::SamplingParams p = s.params;
  p.penalty_last_n = std::max<Index>(s.repeat_last_n, 0);
  inferkit::SamplerChain preset =
      s.llama_cpp_order ? inferkit::presets::llama_cpp(p) : inferkit::presets::huggingface(p);
  if (!s.grammar) return preset;
  const auto& rest = preset.processors();
  const bool greedy = !rest.empty() && std::holds_alternative<inferkit::Temperature>(rest[0]) &&
                      std::get<inferkit::Temperature>(rest[0]).value == 0.0f;
  inferkit::SamplerChain chain;
  chain.add(inferkit::GrammarConstraint{s.grammar, greedy});
  for (const inferkit::Processor& q : preset.processors()) chain.add(q);
  return chain;
}

/// Whether `t` ends a constrained generation (an end-of-generation id of the grammar's
/// vocabulary: the grammar allowed it, so the output is complete).
inline bool ends_constrained(const SamplingConfig& s, TokenId t) { return s.grammar && s.grammar->trie().is_eos(t); }

/// The last `n` tokens of a history (the window the penalties see).
inline std::span<const TokenId> last_n(const std::vector<TokenId>& h, Index n) {
  const std::size_t k = std::min<std::size_t>(h.size(), static_cast<std::size_t>(std::max<Index>(n, 0)));
  return {h.data() + h.size() - k, k};
}

/// What a generation loop reports: its time, and for speculative decoding the target passes,
/// the drafted and the accepted tokens.
struct GenerateStats {
  double seconds = 0;
  Index target_passes = 0, drafted = 0, accepted = 0;
};

/// x -= log(sum(exp(x))) in place (log-probabilities; fp64 sum).
inline void log_softmax(std::span<float> x) {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double z = 0;
  for (float v : x) z += std::exp(double(v) - mx);
  const float lz = static_cast<float>(mx + std::log(z));
  for (float& v : x) v -= lz;
}

}  // namespace llama2c
