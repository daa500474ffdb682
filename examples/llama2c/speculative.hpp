#pragma once
// Speculative decoding (Leviathan et al. 2023, Chen et al. 2023): a draft model proposes k
// tokens one at a time, the target scores the last token and the k drafts in one chunk, and
// inferkit's acceptance rule (verify_draft; verify_greedy at temperature 0) keeps exactly the
// target's distribution. The draft is another model or the first layers of the target
// (self-speculative). Each model keeps its own dense cache, truncated to the accepted tokens
// after every round.
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
  if (chain.stateful())  // the draft and target distributions would need per-branch states
    throw std::invalid_argument(
        "llama2c: speculative decoding takes stateless sampling rules only (no --mirostat, "
        "--min-new-tokens, --exp-decay or --begin-suppress)");
  const inferkit::CounterRng draft_rng(s.seed, 1), verify_rng(s.seed, 2);
  std::vector<TokenId> out;
  GenerateStats st;
  std::vector<float> q(static_cast<std::size_t>(k * V)), p(static_cast<std::size_t>((k + 1) * V)),
      row(static_cast<std::size_t>(V));
  while (static_cast<Index>(out.size()) < steps) {
    const auto pos = static_cast<std::int32_t>(seq.size() - 1);  // position of the last, unfed token
    // Draft k tokens, keeping each draft distribution q_i.
    std::vector<TokenId> drafts, hist = seq;
    TokenId cur = seq.back();
    for (Index i = 0; i < k; ++i) {
      forward(dm, dcache, &cur, 1, pos + static_cast<std::int32_t>(i), row.data(), {.layers = dl});
      cur = chain.sample(row, last_n(hist, s.repeat_last_n), draft_rng, seq.size() + static_cast<std::size_t>(i),
                         std::span<float>(q.data() + i * V, static_cast<std::size_t>(V)));
      drafts.push_back(cur);
      hist.push_back(cur);
    }
    // The target scores the last token and the k drafts in one chunk.
    std::vector<TokenId> chunk{seq.back()};
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    forward(target, tcache, chunk.data(), k + 1, pos, p.data());
    ++st.target_passes;
    hist = seq;
    for (Index i = 0; i <= k; ++i) {  // target distributions after the same processors
      std::span<float> pi(p.data() + i * V, static_cast<std::size_t>(V));
      std::copy(pi.begin(), pi.end(), row.begin());
      chain.sample(row, last_n(hist, s.repeat_last_n), verify_rng, 0, pi);
      if (i < k) hist.push_back(drafts[static_cast<std::size_t>(i)]);
    }
    const auto r = s.params.temperature == 0.0f
                       ? inferkit::verify_greedy(drafts, {p.data(), k + 1, V})
                       : inferkit::verify_draft(drafts, {q.data(), k, V}, {p.data(), k + 1, V}, verify_rng,
                                                static_cast<std::uint64_t>(pos) * static_cast<std::uint64_t>(k + 1));
    st.drafted += k;
    st.accepted += r.accepted;
    // Keep the caches' entries for the fed token and the accepted drafts only.
    tcache.truncate(pos + 1 + r.accepted);
    dcache.truncate(std::min<Index>(pos + 1 + r.accepted, pos + k));
    if (r.accepted == k) {  // the draft never fed its last token: do it now
      const TokenId last = drafts.back();
      forward(dm, dcache, &last, 1, pos + static_cast<std::int32_t>(k), row.data(), {.layers = dl});
    }
    for (TokenId t : r.tokens) {
      if (static_cast<Index>(out.size()) == steps) break;
      out.push_back(t);
      seq.push_back(t);
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace llama2c
