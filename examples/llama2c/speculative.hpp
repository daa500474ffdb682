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
// Token trees (generate --spec tree|ngram): a tree of drafts (the draft model's EAGLE-2 tree at
// temperature 0, its sampled siblings above, or prompt lookup over the context with no draft model) is scored by the
// target in one pass of tree rows (tree attention), verified with the tree rules of sampling/tree_verify.hpp, and the
// accepted path's K/V rows are compacted in the target's cache (kv/tree_compaction.hpp).
//
//   const auto out = llama2c::generate_speculative(target, nullptr, 2, prompt, 64, 4, s);
//   const auto t = llama2c::generate_speculative_tree(target, nullptr, 0, true, prompt, 64, {}, s);

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "llama2c.hpp"
#include "sampling_config.hpp"

namespace llama2c {

/// make_chain(s), refused when a rule keeps state: the draft and target distributions would need
/// per-branch states.
inline inferkit::SamplerChain speculative_chain(const SamplingConfig& s) {
  auto chain = make_chain(s);
  if (chain.stateful())
    throw std::invalid_argument(
        "llama2c: tree speculation (--spec tree|ngram) takes stateless sampling rules only (no --grammar, "
        "--json-schema, --mirostat, --min-new-tokens, --exp-decay or --begin-suppress)");
  return chain;
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

/// Budgets of token-tree drafts (generate --spec tree|ngram, --draft-k, --spec-nodes, --spec-top-k,
/// --spec-ngram-min, --spec-ngram-max).
struct TreeSpecOptions {
  Index depth = 4;      ///< deepest draft token: DraftTreeOptions::max_depth, or NgramDrafterOptions::max_depth
  Index nodes = 16;     ///< tree nodes verified per target pass, in [1, 64]
  Index top_k = 4;      ///< tree: children of an expanded candidate and candidates expanded per depth
  Index ngram_min = 1;  ///< ngram: the shortest context suffix looked up (NgramDrafterOptions::n_min)
  Index ngram_max = 4;  ///< ngram: the longest, tried first (NgramDrafterOptions::n_max), in [ngram_min, 64]
};

/// The sampled-sibling tree's shape for `o` (temperature > 0 with a draft model): `width` siblings
/// at each of `depth` depths, width = min(top_k, nodes) and depth = min(o.depth, nodes / width),
/// so the tree's depth * width nodes never exceed o.nodes (top_k above nodes gives one depth of
/// `nodes` siblings).
struct SampledTreeShape {
  Index depth = 1, width = 1;
};
inline SampledTreeShape sampled_tree_shape(const TreeSpecOptions& o) {
  const Index width = std::max<Index>(1, std::min(o.top_k, o.nodes));
  return {std::min<Index>(o.depth, std::max<Index>(1, o.nodes / width)), width};
}

/// An EAGLE-2 dynamic tree (inferkit::DraftTreeBuilder) from the draft model `dm` (its first
/// `dl` layers; -1 = all) after `seq`. The draft cache holds `dlen` tokens: it is fed the rest of
/// `seq` (the root's distribution is its last row), then each depth's wave runs as tree rows over
/// the candidates the wave's paths pass through (ForwardOptions::tree) and is truncated away, so
/// the cache ends holding seq.size() - 1 tokens (dlen is updated).
inline inferkit::TokenTree draft_token_tree(const Model& dm, Cache& dcache, int dl, const std::vector<TokenId>& seq,
                                            Index& dlen, const TreeSpecOptions& o, std::vector<float>& logits) {
  const Index V = dm.config().vocab_size, pos = static_cast<Index>(seq.size()) - 1,
              fresh = static_cast<Index>(seq.size()) - dlen;
  logits.resize(static_cast<std::size_t>(std::max<Index>(fresh, inferkit::TokenTree::kMaxNodes + 1) * V));
  forward(dm, dcache, seq.data() + dlen, fresh, static_cast<std::int32_t>(dlen), logits.data(), {.layers = dl});
  dcache.truncate(pos);
  dlen = pos;
  const auto probs = [&](Index row) {  // the draft's own distribution ranks the candidates
    std::span<float> r(logits.data() + row * V, static_cast<std::size_t>(V));
    log_softmax(r);
    for (float& x : r) x = std::exp(x);
    return r;
  };
  inferkit::DraftTreeBuilder b({.top_k = o.top_k, .expand_width = o.top_k, .max_depth = o.depth, .max_nodes = o.nodes},
                               probs(fresh - 1));
  for (auto wave = b.next_to_expand(); !wave.empty(); wave = b.next_to_expand()) {
    // The wave and its ancestors, in candidate order (parents first), as tree rows.
    std::vector<char> member(static_cast<std::size_t>(b.candidates()), 0);
    for (Index c : wave)
      for (Index a = c; a != inferkit::TokenTree::kRoot && !member[static_cast<std::size_t>(a)]; a = b.parent(a))
        member[static_cast<std::size_t>(a)] = 1;
    std::vector<Index> local(member.size(), -1), parents;
    std::vector<TokenId> tokens;
    for (Index c = 0; c < b.candidates(); ++c)
      if (member[static_cast<std::size_t>(c)]) {
        local[static_cast<std::size_t>(c)] = static_cast<Index>(tokens.size());
        tokens.push_back(b.token(c));
        parents.push_back(b.parent(c) == inferkit::TokenTree::kRoot ? inferkit::TokenTree::kRoot
                                                                    : local[static_cast<std::size_t>(b.parent(c))]);
      }
    std::vector<Index> order;  // tree node j = member order[j]
    const inferkit::TokenTree rows = inferkit::TokenTree::from_topological(tokens, parents, &order);
    std::vector<Index> row_of(tokens.size());
    for (std::size_t j = 0; j < order.size(); ++j)
      row_of[static_cast<std::size_t>(order[j])] = static_cast<Index>(j) + 1;
    std::vector<TokenId> fed{seq.back()};
    fed.insert(fed.end(), rows.tokens().begin(), rows.tokens().end());
    forward(dm, dcache, fed.data(), rows.size() + 1, static_cast<std::int32_t>(pos), logits.data(),
            {.layers = dl, .tree = &rows});
    dcache.truncate(pos);
    for (Index c : wave) b.expand(c, probs(row_of[static_cast<std::size_t>(local[static_cast<std::size_t>(c)])]));
  }
  return b.build();
}

/// A sampled-sibling tree (SpecInfer, Miao et al. 2024: siblings drawn independently from the
/// draft, verified by verify_tree's multi-step rule) from the draft `dm` after `seq`, for
/// temperature > 0. The draft advances along the spine (each depth's first draw) as the chain
/// does, and at each of `depth` depths draws `width` children i.i.d. from its distribution q
/// after the sampling rules: child j at depth i takes draw seq.size() + i + j * 2^40 of `rng`, so
/// with one child a depth the tree is generate_speculative()'s chain. `dtoks` lists the tokens
/// the draft cache holds (their common prefix with seq is kept); q receives the rows in
/// draft_row() order.
inline inferkit::TokenTree draft_sampled_tree(const Model& dm, Cache& dcache, int dl, const std::vector<TokenId>& seq,
                                              std::vector<TokenId>& dtoks, Index depth, Index width,
                                              const inferkit::SamplerChain& chain, const SamplingConfig& s,
                                              const inferkit::CounterRng& rng, std::vector<float>& q) {
  const Index V = dm.config().vocab_size;
  std::size_t keep = 0;
  while (keep < dtoks.size() && keep + 1 < seq.size() && dtoks[keep] == seq[keep]) ++keep;
  dcache.truncate(static_cast<Index>(keep));
  std::vector<float> last(static_cast<std::size_t>(V)), row(last.size()), spine_q(static_cast<std::size_t>(depth * V));
  // The tokens before the root in one chunk, the root alone (the chain's steps, bit for bit).
  const Index before = static_cast<Index>(seq.size() - 1 - keep);
  if (before > 0) {
    std::vector<float> chunk(static_cast<std::size_t>(before * V));
    forward(dm, dcache, seq.data() + keep, before, static_cast<std::int32_t>(keep), chunk.data(), {.layers = dl});
  }
  forward(dm, dcache, &seq.back(), 1, static_cast<std::int32_t>(seq.size() - 1), last.data(), {.layers = dl});
  dtoks = seq;
  std::vector<TokenId> tok, hist = seq;
  std::vector<Index> par;
  Index spine = inferkit::TokenTree::kRoot;
  for (Index i = 0; i < depth; ++i) {
    const std::uint64_t draw = seq.size() + static_cast<std::uint64_t>(i);
    const Index first = static_cast<Index>(tok.size());
    for (Index j = 0; j < width; ++j) {
      std::copy(last.begin(), last.end(), row.begin());
      tok.push_back(chain.sample(
          row, last_n(hist, s.repeat_last_n), rng, draw + (static_cast<std::uint64_t>(j) << 40),
          j == 0 ? std::span<float>(spine_q.data() + i * V, static_cast<std::size_t>(V)) : std::span<float>{}));
      par.push_back(spine);
    }
    spine = first;
    hist.push_back(tok[static_cast<std::size_t>(first)]);
    if (i + 1 < depth) {  // the draft's distribution after the spine child
      forward(dm, dcache, &hist.back(), 1, static_cast<std::int32_t>(hist.size() - 1), last.data(), {.layers = dl});
      dtoks.push_back(hist.back());
    }
  }
  std::vector<Index> order;  // tree node j = input node order[j]
  const inferkit::TokenTree tree = inferkit::TokenTree::from_topological(tok, par, &order);
  std::vector<Index> node_of(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) node_of[static_cast<std::size_t>(order[j])] = static_cast<Index>(j);
  q.assign(static_cast<std::size_t>(tree.expanded_count() * V), 0.0f);
  for (Index i = 0; i < depth; ++i) {  // depth i's children hang under the root or the spine node of depth i - 1
    const Index position = i == 0 ? 0 : node_of[static_cast<std::size_t>((i - 1) * width)] + 1;
    std::copy_n(spine_q.data() + i * V, V, q.data() + tree.draft_row(position) * V);
  }
  return tree;
}

/// Speculative generation over token trees: each round drafts a tree (ngram: prompt lookup over
/// the context, inferkit::NgramDrafter, no draft model; otherwise from the draft model, or the
/// target's first `draft_layers` layers when `draft` is null: at temperature 0 an EAGLE-2 tree of
/// the draft's top-k, above it a sampled-sibling tree of sampled_tree_shape(o)), the target scores the root and every
/// node in one pass of tree rows (tree attention), and verification keeps the target's distribution exactly:
/// verify_tree_greedy at temperature 0 (the output then equals plain greedy generation), verify_tree for sampled
/// siblings, verify_tree_deterministic for lookup tokens. The accepted path's K/V rows are
/// compacted in the target cache.
inline std::vector<TokenId> generate_speculative_tree(const Model& target, const Model* draft, int draft_layers,
                                                      bool ngram, const std::vector<TokenId>& prompt, Index steps,
                                                      const TreeSpecOptions& o, const SamplingConfig& s,
                                                      GenerateStats* stats = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const Index V = target.config().vocab_size;
  const Model* dm = ngram ? nullptr : draft ? draft : &target;
  const int dl = draft ? -1 : draft_layers;
  if (dm && dm->config().vocab_size != V)
    throw std::invalid_argument("llama2c: --draft must have the target's vocabulary");
  const auto chain = speculative_chain(s);
  std::optional<Cache> dcache;
  if (dm) {
    Config dconf = dm->config();  // the draft's cache holds only the layers the draft runs
    if (dl > 0) dconf.n_layers = dl;
    dcache.emplace(dconf, CacheOptions{});
  }
  Cache tcache(target.config(), {});
  std::vector<TokenId> seq = start_sequence(target.config(), prompt);
  std::vector<float> logits(seq.size() * static_cast<std::size_t>(V)), p, draft_logits;
  if (seq.size() > 1) forward(target, tcache, seq.data(), static_cast<Index>(seq.size() - 1), 0, logits.data());
  inferkit::NgramDrafter drafter({.n_min = o.ngram_min,
                                  .n_max = o.ngram_max,
                                  .max_depth = o.depth,
                                  .max_branches = o.top_k,
                                  .max_nodes = o.nodes});
  if (ngram) drafter.extend(seq);
  const inferkit::CounterRng draft_rng(s.seed, 1), verify_rng(s.seed, 2);
  const bool sampled = !ngram && s.params.temperature > 0.0f;
  const auto [depth, width] = sampled_tree_shape(o);
  std::uint64_t first_draw = 0;
  Index dlen = 0;
  std::vector<TokenId> out, hist, dtoks;
  std::vector<float> q;
  GenerateStats st;
  while (static_cast<Index>(out.size()) < steps) {
    const Index pos = static_cast<Index>(seq.size()) - 1;  // the root: the last, unfed token
    const inferkit::TokenTree tree =
        ngram     ? drafter.draft()
        : sampled ? draft_sampled_tree(*dm, *dcache, dl, seq, dtoks, depth, width, chain, s, draft_rng, q)
                  : draft_token_tree(*dm, *dcache, dl, seq, dlen, o, draft_logits);
    const Index n = tree.size() + 1;
    std::vector<TokenId> fed{seq.back()};
    fed.insert(fed.end(), tree.tokens().begin(), tree.tokens().end());
    logits.resize(static_cast<std::size_t>(n * V));
    forward(target, tcache, fed.data(), n, static_cast<std::int32_t>(pos), logits.data(), {.tree = &tree});
    ++st.target_passes;
    inferkit::VerifyResult r;
    if (s.params.temperature == 0.0f) {
      r = inferkit::verify_tree_greedy(tree, {logits.data(), n, V});
    } else {
      p.resize(logits.size());
      for (Index u = 0; u < n; ++u) {  // the target's distribution after its root path, same processors
        hist = seq;
        const std::size_t at = hist.size();
        for (Index a = u - 1; a != inferkit::TokenTree::kRoot; a = tree.parent(a))
          hist.insert(hist.begin() + at, tree.token(a));
        std::span<float> row(logits.data() + u * V, static_cast<std::size_t>(V));
        chain.sample(row, last_n(hist, s.repeat_last_n), verify_rng, 0,
                     std::span<float>(p.data() + u * V, static_cast<std::size_t>(V)));
      }
      if (sampled) {  // draws as the chain's: the blocks of a round start at pos * (depth + 1) * width
        r = inferkit::verify_tree(tree, {q.data(), tree.expanded_count(), V}, {p.data(), n, V}, verify_rng,
                                  static_cast<std::uint64_t>(pos) * static_cast<std::uint64_t>((depth + 1) * width));
      } else {
        r = inferkit::verify_tree_deterministic(tree, {p.data(), n, V}, verify_rng, first_draw);
        first_draw += tree.draw_blocks();
      }
    }
    st.drafted += tree.size();
    st.accepted += r.accepted;
    tcache.compact_tree(pos, r.path);  // the cache holds the root and the accepted drafts
    for (TokenId t : r.tokens) {
      if (static_cast<Index>(out.size()) == steps) break;
      out.push_back(t);
      seq.push_back(t);
      if (ngram) drafter.push(t);
    }
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace llama2c
