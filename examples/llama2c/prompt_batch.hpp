#pragma once
// A batch of prompts served one after another with prefix reuse (`generate --prompts FILE`):
// one BlockPool (float or quantized pages) and one PrefixTrie; each prompt reuses the whole
// pages of its longest cached prefix, prefills only the rest, generates, and leaves its full
// pages in the trie for the next prompts. Prompts are prefilled one token at a time, so an
// output does not depend on how much of its prompt was reused.
//
//   llama2c::PrefixReuseStats st;
//   const auto outs = llama2c::serve_prompts(model, prompts, 16, s, 16, "my-model", true, &st);

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

struct PrefixReuseStats {
  Index prefill_computed = 0, prefill_saved = 0;
};

namespace detail {
template <class T>
std::vector<std::vector<TokenId>> serve_prompts_on(const Model& m, inferkit::BlockPool<T>& pool,
                                                   const std::vector<std::vector<TokenId>>& prompts, Index steps,
                                                   const SamplingConfig& s, const std::string& fingerprint, bool reuse,
                                                   PrefixReuseStats* stats) {
  const Config& c = m.config();
  const Index page_size = pool.page_size();
  inferkit::PrefixTrie<T> trie(pool);
  const inferkit::ContextIdentity id{fingerprint, "", "rope=adjacent,base=10000"};  // + the pool's KV encoding
  const auto chain = make_chain(s);
  const inferkit::CounterRng rng(s.seed);
  const Index V = c.vocab_size;
  std::vector<std::vector<TokenId>> outs;
  PrefixReuseStats st;
  CacheOptions paged;
  paged.kind = CacheKind::kPaged;
  if constexpr (inferkit::kQuantizedPool<T>)
    paged.quant_pool = &pool;
  else
    paged.pool = &pool;
  for (const auto& prompt : prompts) {
    std::vector<TokenId> seq = start_sequence(m.config(), prompt);
    auto match = reuse ? trie.match(id, seq) : typename inferkit::PrefixTrie<T>::Match{};
    // The last prompt token is always computed: its logits start the generation.
    Index reused = std::min<Index>(match.tokens, (static_cast<Index>(seq.size()) - 1) / page_size * page_size);
    Cache cache(c, paged);
    cache.table<T>().assign_prefix(
        std::span<const inferkit::BlockId>(match.blocks.data(), static_cast<std::size_t>(reused / page_size)), reused);
    std::vector<float> logits(static_cast<std::size_t>(V));
    for (Index t = reused; t < static_cast<Index>(seq.size()); ++t)
      forward(m, cache, &seq[static_cast<std::size_t>(t)], 1, static_cast<std::int32_t>(t), logits.data());
    st.prefill_saved += reused;
    st.prefill_computed += static_cast<Index>(seq.size()) - reused;
    if (reuse) trie.insert(id, seq, cache.table<T>().blocks());
    trie.release(match.handle);
    std::vector<TokenId> out;
    auto state = chain.make_state();
    for (Index i = 0; i < steps; ++i) {
      const TokenId next = chain.sample(logits, seq, state, rng, seq.size());
      chain.accept(state, next);
      out.push_back(next);
      if (i + 1 == steps || ends_constrained(s, next)) break;
      seq.push_back(next);
      forward(m, cache, &next, 1, static_cast<std::int32_t>(seq.size() - 1), logits.data());
    }
    outs.push_back(std::move(out));
  }
  if (stats) *stats = st;
  return outs;
}
}  // namespace detail

/// Serves prompts in order through one block pool and prefix trie: each prompt's longest cached
/// prefix (whole pages) is reused, only the rest is prefilled, and its full pages are cached
/// for the next prompts. Prompts are prefilled one token at a time, so the output of a prompt
/// does not depend on how much of it was reused. With `quant`, the pool holds quantized pages
/// (paged_quant(*quant, page_size)); the trie then caches them as they are.
inline std::vector<std::vector<TokenId>> serve_prompts(
    const Model& m, const std::vector<std::vector<TokenId>>& prompts, Index steps, const SamplingConfig& s,
    Index page_size, const std::string& fingerprint, bool reuse, PrefixReuseStats* stats = nullptr,
    const std::optional<inferkit::KvQuantConfig>& quant = std::nullopt) {
  const Config& c = m.config();
  Index max_tokens = 0;
  for (const auto& p : prompts) max_tokens += static_cast<Index>(p.size()) + steps + 1;
  inferkit::BlockPoolConfig pc{c.n_layers, c.n_kv_heads, c.head_size(), page_size,
                               max_tokens / page_size + 2 * static_cast<Index>(prompts.size()) + 8};
  if (quant) {
    pc.quant = paged_quant(*quant, page_size);
    inferkit::BlockPool<inferkit::QuantizedKv> pool(pc);
    return detail::serve_prompts_on(m, pool, prompts, steps, s, fingerprint, reuse, stats);
  }
  inferkit::BlockPool<float> pool(pc);
  return detail::serve_prompts_on(m, pool, prompts, steps, s, fingerprint, reuse, stats);
}

}  // namespace llama2c
