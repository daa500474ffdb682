#pragma once
// Plain generation: BOS and the prompt in one prefill chunk (matrix-matrix products), then one decode step per token,
// each sampled by the SamplerChain of a SamplingConfig (sampling_config.hpp) with its own
// SamplerState (Mirostat's mu, the generated-token count). Token i is drawn with draw index
// = the sequence length before it, so a run is reproducible from its seed alone.
//
//   llama2c::SamplingConfig s;
//   s.params.temperature = 0;  // greedy
//   const std::vector<TokenId> out = llama2c::generate(model, {}, 64, s);

#include <chrono>
#include <functional>
#include <span>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

/// What generate() runs besides the model and the sampler.
struct GenerateOptions {
  /// If set, sees (and may edit) the residual stream after each layer (steering.hpp).
  const ResidualHook* hook = nullptr;
  /// The cache (e.g. a context-parallel shard); its naive_attention and arithmetic come from
  /// the SamplingConfig.
  CacheOptions cache{};
  /// If set, called with each token as soon as it is drawn (streaming output).
  const std::function<void(TokenId)>* on_token = nullptr;
};

/// Feeds BOS and the prompt, then generates `steps` tokens (fewer when a grammar's EOS ends the
/// output); returns them (prompt excluded).
inline std::vector<TokenId> generate(const Model& m, const std::vector<TokenId>& prompt, Index steps,
                                     const SamplingConfig& s, GenerateStats* stats = nullptr,
                                     const GenerateOptions& o = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  CacheOptions copt = o.cache;
  copt.naive_attention = s.naive;
  copt.arithmetic = s.arithmetic;
  copt.sink_logits = s.sink_logits;
  Cache cache(m.config(), copt);
  std::vector<TokenId> seq = start_sequence(m.config(), prompt);
  const auto V = static_cast<std::size_t>(m.config().vocab_size);
  std::vector<float> logits(seq.size() * V);
  forward(m, cache, seq.data(), static_cast<Index>(seq.size()), 0, logits.data(), {.hook = o.hook, .batched = true});
  const auto chain = make_chain(s);
  auto state = chain.make_state();
  const inferkit::CounterRng rng(s.seed);
  std::vector<TokenId> out;
  std::span<float> last(logits.data() + (seq.size() - 1) * V, V);  // the logits after the newest token
  for (Index i = 0; i < steps; ++i) {
    const TokenId next = s.naive ? naive_sample(last, last_n(seq, s.repeat_last_n), s, rng, seq.size())
                                 : chain.sample(last, seq, state, rng, seq.size());
    chain.accept(state, next);
    out.push_back(next);
    if (o.on_token && *o.on_token) (*o.on_token)(next);
    if (i + 1 == steps || ends_constrained(s, next)) break;
    seq.push_back(next);
    forward(m, cache, &next, 1, static_cast<std::int32_t>(seq.size() - 1), last.data(), {.hook = o.hook});
  }
  if (stats) stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace llama2c
