#pragma once
// Generation and evaluation loops of the llama2.c runner: plain sampling, beam search,
// contrastive search, speculative decoding and streaming evaluation, each a short loop of
// inferkit calls around the model's forward pass.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "inferkit/sampling/reference.hpp"
#include "llama2c.hpp"

namespace llama2c {

constexpr TokenId kBos = 1;

struct SamplingConfig {
  inferkit::SamplingParams params;  // the chain's knobs, run in inferkit's default order
  Index repeat_last_n = 64;         // history the repetition penalty sees
  std::uint64_t seed = 42;
  bool naive = false;  // baseline runs: sort-based sampling and reference attention
  inferkit::AttentionArithmetic arithmetic = inferkit::AttentionArithmetic::kExact;  // --attn-arith
  bool llama_cpp_order = false;  // llama.cpp's preset instead of inferkit's (= Hugging Face's) order
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
/// whole sequence passed to sample().
inline inferkit::SamplerChain make_chain(const SamplingConfig& s) {
  inferkit::SamplingParams p = s.params;
  p.penalty_last_n = std::max<Index>(s.repeat_last_n, 0);
  return s.llama_cpp_order ? inferkit::presets::llama_cpp(p) : inferkit::presets::huggingface(p);
}

/// The last `n` tokens of a history (the window the penalties see).
inline std::span<const TokenId> last_n(const std::vector<TokenId>& h, Index n) {
  const std::size_t k = std::min<std::size_t>(h.size(), static_cast<std::size_t>(std::max<Index>(n, 0)));
  return {h.data() + h.size() - k, k};
}

struct GenerateStats {
  double seconds = 0;
  Index target_passes = 0, drafted = 0, accepted = 0;
};

/// Feeds BOS and the prompt, then generates `steps` tokens; returns them (prompt excluded). `hook`
/// (optional) sees and may edit the residual stream after each layer (steering); `cache` sets
/// the cache (e.g. a context-parallel shard).
inline std::vector<TokenId> generate(const Model& m, const std::vector<TokenId>& prompt, Index steps,
                                     const SamplingConfig& s, GenerateStats* stats = nullptr,
                                     const ResidualHook* hook = nullptr, const CacheOptions& cache_options = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  CacheOptions copt = cache_options;
  copt.naive_attention = s.naive;
  copt.arithmetic = s.arithmetic;
  Cache cache(m.config(), copt);
  std::vector<TokenId> seq{kBos};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  std::vector<float> logits(seq.size() * static_cast<std::size_t>(m.config().vocab_size));
  forward(m, cache, seq.data(), static_cast<Index>(seq.size()), 0, logits.data(), -1, nullptr, hook);
  const auto chain = make_chain(s);
  auto state = chain.make_state();  // Mirostat's mu, the generated-token count
  const inferkit::CounterRng rng(s.seed);
  std::vector<TokenId> out;
  std::span<float> last(logits.data() + (seq.size() - 1) * m.config().vocab_size,
                        static_cast<std::size_t>(m.config().vocab_size));
  for (Index i = 0; i < steps; ++i) {
    const TokenId next = s.naive ? naive_sample(last, last_n(seq, s.repeat_last_n), s, rng, seq.size())
                                 : chain.sample(last, seq, state, rng, seq.size());
    chain.accept(state, next);
    out.push_back(next);
    if (i + 1 == steps) break;
    seq.push_back(next);
    forward(m, cache, &next, 1, static_cast<std::int32_t>(seq.size() - 1), last.data(), -1, nullptr, hook);
  }
  if (stats) stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

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
  std::vector<TokenId> seq{kBos};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  // Prefill both models with everything but the last token, which each round feeds first.
  std::vector<float> scratch((seq.size() + k + 1) * static_cast<std::size_t>(V));
  if (seq.size() > 1) {
    forward(target, tcache, seq.data(), static_cast<Index>(seq.size() - 1), 0, scratch.data());
    forward(dm, dcache, seq.data(), static_cast<Index>(seq.size() - 1), 0, scratch.data(), dl);
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
      forward(dm, dcache, &cur, 1, pos + static_cast<std::int32_t>(i), row.data(), dl);
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
      forward(dm, dcache, &last, 1, pos + static_cast<std::int32_t>(k), row.data(), dl);
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

constexpr TokenId kEos = 2;  // "</s>" in llama2.c's vocabulary

inline void log_softmax(std::span<float> x) {
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double z = 0;
  for (float v : x) z += std::exp(double(v) - mx);
  const float lz = static_cast<float>(mx + std::log(z));
  for (float& v : x) v -= lz;
}

/// Beam search (EOS = 2): one cache per live beam, forked from its parent at every step.
inline std::vector<TokenId> generate_beam(const Model& m, const std::vector<TokenId>& prompt, Index steps, Index beams,
                                          float length_penalty, const std::string& mode,
                                          GenerateStats* stats = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  inferkit::BeamSearchOptions opt;
  opt.num_beams = beams;
  opt.max_new_tokens = steps;
  opt.eos_token_ids = {kEos};
  opt.length_penalty = length_penalty;
  if (mode == "hf")
    opt.length_penalty_mode = inferkit::LengthPenalty::kHuggingFace;
  else if (mode == "gnmt")
    opt.length_penalty_mode = inferkit::LengthPenalty::kGnmt;
  else if (mode == "none")
    opt.length_penalty_mode = inferkit::LengthPenalty::kNone;
  else
    throw std::invalid_argument("--length-penalty-mode = '" + mode + "' is invalid: must be hf, gnmt or none");
  inferkit::BeamSearch search(opt);
  const Index V = m.config().vocab_size;
  std::vector<Cache> caches{Cache(m.config(), {})};
  std::vector<TokenId> seq{kBos};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
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

/// Contrastive search: each step runs the model on every top-k candidate to get its hidden
/// state, then keeps the candidate inferkit scores best.
inline std::vector<TokenId> generate_contrastive(const Model& m, const std::vector<TokenId>& prompt, Index steps,
                                                 Index k, float alpha, GenerateStats* stats = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const Index V = m.config().vocab_size, D = m.config().dim;
  Cache cache(m.config(), {});
  std::vector<TokenId> seq{kBos};
  seq.insert(seq.end(), prompt.begin(), prompt.end());
  std::vector<float> logits(seq.size() * static_cast<std::size_t>(V)), hidden(seq.size() * static_cast<std::size_t>(D));
  forward(m, cache, seq.data(), static_cast<Index>(seq.size()), 0, logits.data(), -1, hidden.data());
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
      forward(m, cache, &cands.tokens[static_cast<std::size_t>(c)], 1, pos, cand_logits.data() + c * V, -1,
              cand_hidden.data() + c * D);
      cache.truncate(pos);
    }
    const Index pick = inferkit::contrastive_select(cands, {cand_hidden.data(), n, D}, context, alpha);
    const TokenId next = cands.tokens[static_cast<std::size_t>(pick)];
    out.push_back(next);
    seq.push_back(next);
    std::vector<float> h(static_cast<std::size_t>(D));
    forward(m, cache, &next, 1, pos, last.data(), -1, h.data());
    context.append(h);
  }
  if (stats) stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

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
    std::vector<TokenId> seq{kBos};
    seq.insert(seq.end(), prompt.begin(), prompt.end());
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
      if (i + 1 == steps) break;
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
