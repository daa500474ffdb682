#pragma once
// Contrastive search (Su et al. 2022): each step looks one token ahead along each of the top-k
// candidates (a forward step, then the cache is truncated back), and keeps the candidate with
// the best (1 - alpha) * probability - alpha * max cosine similarity of its hidden state to the
// context's (inferkit::contrastive_candidates / contrastive_select).
//
//   const auto out = llama2c::generate_contrastive(model, prompt, 32, {.k = 4, .alpha = 0.6f});

#include <chrono>
#include <span>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

/// Candidates and degeneration penalty (--contrastive K, --alpha A).
struct ContrastiveOptions {
  Index k = 4;         ///< candidates looked ahead per step (>= 1)
  float alpha = 0.6f;  ///< weight of the similarity penalty, in [0, 1]
};

/// Contrastive search: each step runs the model on every top-k candidate to get its hidden
/// state, then keeps the candidate inferkit scores best.
inline std::vector<TokenId> generate_contrastive(const Model& m, const std::vector<TokenId>& prompt, Index steps,
                                                 const ContrastiveOptions& o, GenerateStats* stats = nullptr) {
  const Index k = o.k;
  const float alpha = o.alpha;
  const auto t0 = std::chrono::steady_clock::now();
  const Index V = m.config().vocab_size, D = m.config().dim;
  Cache cache(m.config(), {});
  std::vector<TokenId> seq = start_sequence(m.config(), prompt);
  std::vector<float> logits(seq.size() * static_cast<std::size_t>(V)), hidden(seq.size() * static_cast<std::size_t>(D));
  forward(m, cache, seq.data(), static_cast<Index>(seq.size()), 0, logits.data(), {.hidden = hidden.data()});
  inferkit::ContextStates context(D);
  for (std::size_t t = 0; t < seq.size(); ++t) context.append({hidden.data() + t * D, static_cast<std::size_t>(D)});
  std::vector<float> last(logits.end() - V, logits.end());
  std::vector<TokenId> out;
  for (Index i = 0; i < steps; ++i) {
    const auto cands = inferkit::contrastive_candidates(last, k);
    const Index n = static_cast<Index>(cands.tokens.size());
    std::vector<float> cand_hidden(static_cast<std::size_t>(n * D)), cand_logits(static_cast<std::size_t>(n * V));
    const auto pos = static_cast<std::int32_t>(seq.size());
    for (Index c = 0; c < n; ++c) {  // look one token ahead along each candidate, then rewind
      forward(m, cache, &cands.tokens[static_cast<std::size_t>(c)], 1, pos, cand_logits.data() + c * V,
              {.hidden = cand_hidden.data() + c * D});
      cache.truncate(pos);
    }
    const Index pick = inferkit::contrastive_select(cands, {cand_hidden.data(), n, D}, context, alpha);
    const TokenId next = cands.tokens[static_cast<std::size_t>(pick)];
    out.push_back(next);
    seq.push_back(next);
    std::vector<float> h(static_cast<std::size_t>(D));
    forward(m, cache, &next, 1, pos, last.data(), {.hidden = h.data()});
    context.append(h);
  }
  if (stats) stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace llama2c
