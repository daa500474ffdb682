#pragma once
// Teacher-forced evaluation of a token file (`eval --eval-ids FILE`): the ids go through the
// model under the chosen cache policy (dense, window, sink window, paged, quantized) exactly
// as in generation, and the mean negative log-likelihood of the predicted positions gives the
// perplexity. With a window cache this measures what the policy's eviction costs.
//
//   const llama2c::EvalResult r = llama2c::evaluate(model, ids, {}, 1, Index(ids.size()));

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama2c.hpp"

namespace llama2c {

struct EvalResult {
  double mean_nll = 0;
  Index count = 0;
  double kv_bytes = 0;  // held by the cache after the last token
  double ppl() const { return std::exp(mean_nll); }
};

/// Teacher-forced streaming evaluation: ids fed one at a time (the cache policy applies exactly
/// as in generation, the current token included in its budget); after token t the logits
/// predict token t + 1. Averages over predicted positions in [first, last).
inline EvalResult evaluate(const Model& m, const std::vector<TokenId>& ids, const CacheOptions& copt, Index first,
                           Index last, Index chunk = 1) {
  if (chunk < 1)
    throw std::invalid_argument("llama2c: eval chunk = " + std::to_string(chunk) + " is invalid: must be >= 1");
  Cache cache(m.config(), copt);
  const Index V = m.config().vocab_size;
  std::vector<float> logits(static_cast<std::size_t>(V * chunk));
  EvalResult r;
  double total = 0;
  // Tokens go through the model `chunk` at a time (1: one-token steps; more: prefill chunks, in
  // which an MoE model's capacity limits act on the chunk's tokens together).
  for (std::size_t t0 = 0; t0 + 1 < ids.size(); t0 += static_cast<std::size_t>(chunk)) {
    const Index n = std::min<Index>(chunk, static_cast<Index>(ids.size() - 1 - t0));
    forward(m, cache, &ids[t0], n, static_cast<std::int32_t>(t0), logits.data());
    for (Index i = 0; i < n; ++i) {
      const std::size_t t = t0 + static_cast<std::size_t>(i);
      const Index target = static_cast<Index>(t + 1);
      if (target < first || target >= last) continue;
      const float* row = logits.data() + i * V;
      float mx = -INFINITY;
      for (Index v = 0; v < V; ++v) mx = std::max(mx, row[v]);
      double z = 0;
      for (Index v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
      total += -(double(row[ids[t + 1]]) - mx - std::log(z));
      ++r.count;
    }
  }
  r.mean_nll = r.count ? total / double(r.count) : 0.0;
  r.kv_bytes = cache.bytes_held(m.config());
  return r;
}

}  // namespace llama2c
