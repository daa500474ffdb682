#pragma once
// Speculative decoding (Leviathan et al. 2023, Chen et al. 2023): a draft model proposes k
// tokens one at a time, the target scores the last token and the k drafts in one chunk, and
// inferkit's acceptance rule (verify_draft; verify_greedy at temperature 0) keeps exactly the
// target's distribution. The draft is another model or the first layers of the target
// (self-speculative). Each model keeps its own dense cache, truncated to the accepted tokens
// after every round. The sampler state (a grammar's matcher, the generated count) advances over
// the drafts, is rolled back (SamplerChain::rollback) and advances again over the target's
// positions, then is rolled back to the accepted drafts: each distribution is the one plain
// sampling would use after the same tokens. A grammar's EOS ends the drafts and the output.
//
//   const auto out = llama2c::generate_speculative(target, nullptr, 2, prompt, 64, 4, s);

#include <algorithm>
#include <chrono>
#include <span>
#include <stdexcept>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

/// Speculative generation: the draft (another model, or the first `draft_layers` layers of the
/// target when `draft` is null) proposes k tokens, the target scores k + 1 positions in one
/// chunk, and inferkit's acceptance rule keeps the target's distribution exactly. At
/// temperature 0 the result equals plain greedy generation.
inline std::vector<TokenId> generate_speculative(const Model& target, const Model* draft, int draft_layers,
                                                 const std::vector<TokenId>& prompt, Index steps, Index k,
                                                 const SamplingConfig& s, GenerateStats* stats = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const Model& dm = draft ? *draft : target;
  const int dl = draft ? -1 : draft_layers;
  const Index V = target.config().vocab_size;
  if (dm.config().vocab_size != V) throw std::invalid_argument("llama2c: --draft must have the target's vocabulary");
  Config dconf = dm.config();  // the draft's cache holds only the layers the draft runs
  if (dl > 0) dconf.n_layers = dl;
  Cache tcache(target.config(), {}), dcache(dconf, {});
  std::vector<TokenId> seq = start_sequence(target.config(), prompt);
  // Prefill both models with everything but the last token, which each round feeds first.
  std::vector<float> scratch((seq.size() + k + 1) * static_cast<std::size_t>(V));
  if (seq.size() > 1) {
    forward(target, tcache, seq.data(), static_cast<Index>(seq.size() - 1), 0, scratch.data());
    forward(dm, dcache, seq.data(), static_cast<Index>(seq.size() - 1), 0, scratch.data(), {.layers = dl});
  }
  const auto chain = make_chain(s);
  if (!chain.can_rollback())  // rejected drafts are undone with SamplerChain::rollback
    throw std::invalid_argument(
        "llama2c: speculative decoding rolls the sampler state back over rejected drafts, which --mirostat's mu "
        "cannot be");
  auto state = chain.make_state();  // the committed tokens' (the grammar's matcher, the generated count)
  const inferkit::CounterRng draft_rng(s.seed, 1), verify_rng(s.seed, 2);
  std::vector<TokenId> out;
  GenerateStats st;
  std::vector<float> q(static_cast<std::size_t>(k * V)), p(static_cast<std::size_t>((k + 1) * V)),
      row(static_cast<std::size_t>(V));
  bool ended = false;  // a grammar's EOS was committed
  while (static_cast<Index>(out.size()) < steps && !ended) {
    const auto pos = static_cast<std::int32_t>(seq.size() - 1);  // position of the last, unfed token
    // Draft up to k tokens, keeping each draft distribution q_i (fewer when a grammar's EOS is drafted).
    std::vector<TokenId> drafts, hist = seq;
    TokenId cur = seq.back();
    for (Index i = 0; i < k && !(i > 0 && ends_constrained(s, cur)); ++i) {
      forward(dm, dcache, &cur, 1, pos + static_cast<std::int32_t>(i), row.data(), {.layers = dl});
      cur = chain.sample(row, last_n(hist, s.repeat_last_n), state, draft_rng, seq.size() + static_cast<std::size_t>(i),
                         std::span<float>(q.data() + i * V, static_cast<std::size_t>(V)));
      chain.accept(state, cur);
      drafts.push_back(cur);
      hist.push_back(cur);
    }
    const auto kd = static_cast<Index>(drafts.size());
    chain.rollback(state, drafts.size());
    // The target scores the last token and the drafts in one chunk.
    std::vector<TokenId> chunk{seq.back()};
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    forward(target, tcache, chunk.data(), kd + 1, pos, p.data());
    ++st.target_passes;
    hist = seq;
    for (Index i = 0; i <= kd; ++i) {  // target distributions after the same processors and states
      std::span<float> pi(p.data() + i * V, static_cast<std::size_t>(V));
      if (i == kd && ends_constrained(s, drafts.back())) {  // nothing follows EOS: a bonus token is never kept
        std::fill(pi.begin(), pi.end(), 0.0f);
        pi[static_cast<std::size_t>(drafts.back())] = 1.0f;
        break;
      }
      std::copy(pi.begin(), pi.end(), row.begin());
      chain.sample(row, last_n(hist, s.repeat_last_n), state, verify_rng, 0, pi);
      if (i < kd) {
        chain.accept(state, drafts[static_cast<std::size_t>(i)]);
        hist.push_back(drafts[static_cast<std::size_t>(i)]);
      }
    }
    const auto r = s.params.temperature == 0.0f
                       ? inferkit::verify_greedy(drafts, {p.data(), kd + 1, V})
                       : inferkit::verify_draft(drafts, {q.data(), kd, V}, {p.data(), kd + 1, V}, verify_rng,
                                                static_cast<std::uint64_t>(pos) * static_cast<std::uint64_t>(k + 1));
    st.drafted += kd;
    st.accepted += r.accepted;
    // The state keeps the accepted drafts, then takes the target's correction (or bonus) token.
    chain.rollback(state, static_cast<std::size_t>(kd - r.accepted));
    // Keep the caches' entries for the fed token and the accepted drafts only.
    tcache.truncate(pos + 1 + r.accepted);
    dcache.truncate(std::min<Index>(pos + 1 + r.accepted, pos + kd));
    for (std::size_t j = 0; j < r.tokens.size() && !ended; ++j) {
      const TokenId t = r.tokens[j];
      if (static_cast<Index>(out.size()) == steps) break;
      if (static_cast<Index>(j) >= r.accepted) chain.accept(state, t);
      out.push_back(t);
      seq.push_back(t);
      ended = ends_constrained(s, t);
    }
    if (r.accepted == kd && !ended) {  // the draft never fed its last token: do it now
      const TokenId last = drafts.back();
      forward(dm, dcache, &last, 1, pos + static_cast<std::int32_t>(kd), row.data(), {.layers = dl});
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace llama2c
