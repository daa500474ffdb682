#pragma once
// Beam search: inferkit::BeamSearch keeps the best `beams` hypotheses by summed log-probability
// (finished ones ranked under a length penalty: Hugging Face's, GNMT's or none); the model runs
// one decode step per live beam, each on its own copy of its parent's dense cache.
//
//   const auto best = llama2c::generate_beam(model, prompt, 32, {.beams = 4, .length_penalty = 1.0f});

#include <chrono>
#include <span>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

/// Beam width and length penalty (--beams, --length-penalty, --length-penalty-mode).
struct BeamOptions {
  Index beams = 4;                                                       ///< live hypotheses (>= 1)
  float length_penalty = 1.0f;                                           ///< exponent of the length normalization
  inferkit::LengthPenalty mode = inferkit::LengthPenalty::kHuggingFace;  ///< hf, gnmt or none
};

/// Beam search (EOS = 2): one cache per live beam, forked from its parent at every step;
/// returns the best finished hypothesis (prompt excluded).
inline std::vector<TokenId> generate_beam(const Model& m, const std::vector<TokenId>& prompt, Index steps,
                                          const BeamOptions& o, GenerateStats* stats = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  inferkit::BeamSearchOptions opt;
  opt.num_beams = o.beams;
  opt.max_new_tokens = steps;
  opt.eos_token_ids = {kEos};
  opt.length_penalty = o.length_penalty;
  opt.length_penalty_mode = o.mode;
  inferkit::BeamSearch search(opt);
  const Index V = m.config().vocab_size;
  std::vector<Cache> caches{Cache(m.config(), {})};
  std::vector<TokenId> seq = start_sequence(m.config(), prompt);
  std::vector<float> rows(seq.size() * static_cast<std::size_t>(V));
  forward(m, caches[0], seq.data(), static_cast<Index>(seq.size()), 0, rows.data());
  rows.erase(rows.begin(), rows.end() - V);  // the last token's logits
  const auto pos0 = static_cast<std::int32_t>(seq.size());
  while (true) {
    for (Index b = 0; b < search.num_live(); ++b) log_softmax({rows.data() + b * V, static_cast<std::size_t>(V)});
    const inferkit::BeamStep st = search.step({rows.data(), search.num_live(), V});
    if (st.done) break;
    std::vector<Cache> next;
    rows.assign(st.token.size() * static_cast<std::size_t>(V), 0.0f);
    for (std::size_t j = 0; j < st.token.size(); ++j) {
      next.push_back(caches[static_cast<std::size_t>(st.parent[j])]);  // fork the parent's cache
      forward(m, next.back(), &st.token[j], 1, pos0 + static_cast<std::int32_t>(search.steps() - 1),
              rows.data() + j * V);
    }
    caches = std::move(next);
  }
  if (stats) stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto best = search.finished();
  return best.empty() ? std::vector<TokenId>{} : best.front().tokens;
}

}  // namespace llama2c
