// Speculative verification cost per call, single thread, counter `us`.
//   speculative/{inferkit,naive}/V<vocab>_k<k>/<case>
//   case accept_all: p == q, every draft accepted, bonus token drawn from p_{k+1}
//   case reject_first: the first draft token has p = 0, rejected at once, residual drawn
// naive: the straightforward implementation, which checks every row and builds the residual
// distribution at every position before testing acceptance.
//
// Tree verification (sampling/tree_verify.hpp), 64 nodes: a spine of 8 levels, each spine node
// (and the root) with 8 children, the spine child first; 16 nodes: 4 levels of 4 children:
//   speculative_tree/inferkit/V<vocab>/nodes<n>/<case>, counter `us`; the chain baseline is
//   speculative/inferkit/V<vocab>_k8 above (k4 for 16 nodes: the same depth, one draft per level).
//   case 0 sampled_accept_path: p == q, the first child accepted at every level, bonus at depth 8
//   case 1 sampled_reject_root: p gives the root's 8 children nothing: 8 rejections, residual draw
//   case 2 deterministic_second: the first child of every level rejected, the second (a leaf)
//          accepted at the root; i.e. one rejection, then a bonus
//   case 3 deterministic_reject_root: all 8 root children rejected (8 removals), draw from the rest
//   case 4 greedy_path: greedy verification along the spine to depth 8 (4)
//   case 5 chain_greedy: the chain baseline of case 4, verify_greedy on the 8 (4) spine tokens
//   case 6 greedy_scan_logits: case 4 by the greedy walk before row_argmax (every node visited,
//          scan_logits on the root and matching rows), the same-binary baseline of case 4
//
// The greedy rule's row read (sampling/row_argmax.hpp), V = 128,256, nine rows of a 65-row matrix
// (the 64-node tree's spine, as in case 4; 4.6 MB, so the rows come from L3), counter us per row:
//   speculative_argmax/inferkit: row_argmax; speculative_argmax/scan_logits: logits.hpp's
//   scan_logits (the argmax before row_argmax); speculative_argmax/naive: a scalar loop.
//
// Accepted tokens per target pass, tree against chain at the same number of verified rows
// (16: 15 drafts + the root), synthetic Markov target P and draft Q (V = 64, Q a perturbed P;
// draft 0 close to P, draft 1 flatter and noisier, draft 2 a peaked target; see MarkovPair):
//   speculative_accept/rows16/kind:<k>/draft:<d>, counter tokens_per_pass (emitted / verifications)
//   kind 0 chain_sampled: 15 drafts sampled from Q, verify_draft (temperature 1)
//   kind 1 tree_topk: DraftTreeBuilder (top_k 4, expand_width 4, max_depth 15, 15 nodes),
//          verify_tree_deterministic (temperature 1)
//   kind 2 chain_greedy: the draft's 15 argmax tokens, verify_greedy (temperature 0)
//   kind 3 tree_greedy: the same tree as kind 1, verify_tree_greedy (temperature 0)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/row_argmax.hpp"
#include "inferkit/sampling/speculative.hpp"
#include "inferkit/sampling/tree_builder.hpp"
#include "inferkit/sampling/tree_verify.hpp"

namespace {

using inferkit::Index;
using inferkit::TokenId;
namespace ib = inferkit::bench;

struct Case {
  Index vocab, k;
  std::vector<float> q, p;
  std::vector<TokenId> draft;
  Case(Index v, Index kk, bool reject_first) : vocab(v), k(kk) {
    auto logits = ib::normal_floats(static_cast<std::size_t>(v), 2.0f, 5);
    std::vector<float> row(static_cast<std::size_t>(v));
    double z = 0;
    for (Index i = 0; i < v; ++i) z += std::exp(double(logits[i]));
    for (Index i = 0; i < v; ++i) row[i] = static_cast<float>(std::exp(double(logits[i])) / z);
    for (Index i = 0; i < k; ++i) q.insert(q.end(), row.begin(), row.end());
    for (Index i = 0; i <= k; ++i) p.insert(p.end(), row.begin(), row.end());
    for (Index i = 0; i < k; ++i) draft.push_back(static_cast<TokenId>((i * 7919) % v));
    if (reject_first) {  // move token draft[0]'s target mass elsewhere
      p[static_cast<std::size_t>(draft[0]) + 1 >= static_cast<std::size_t>(v)
            ? 0
            : static_cast<std::size_t>(draft[0]) + 1] += p[static_cast<std::size_t>(draft[0])];
      p[static_cast<std::size_t>(draft[0])] = 0.0f;
    }
  }
};

inferkit::VerifyResult naive_verify(const Case& c, const inferkit::CounterRng& rng, std::uint64_t first) {
  const inferkit::MatrixView<const float> q(c.q.data(), c.k, c.vocab), p(c.p.data(), c.k + 1, c.vocab);
  inferkit::VerifyResult r;
  std::vector<float> residual(static_cast<std::size_t>(c.vocab));
  for (Index i = 0; i <= c.k; ++i) {
    inferkit::detail::check_prob_row(p.row(i), 1e-3, "p");
    if (i < c.k) inferkit::detail::check_prob_row(q.row(i), 1e-3, "q");
  }
  for (Index i = 0; i < c.k; ++i) {
    double total = 0;
    for (Index v = 0; v < c.vocab; ++v) total += (residual[v] = std::max(0.0f, p(i, v) - q(i, v)));
    const auto blk = rng.block(first + static_cast<std::uint64_t>(i));
    const TokenId x = c.draft[i];
    if (inferkit::CounterRng::to_unit_double(blk[0], blk[1]) * q(i, x) < p(i, x)) {
      r.tokens.push_back(x);
      ++r.accepted;
      continue;
    }
    r.tokens.push_back(static_cast<TokenId>(inferkit::detail::walk_to(
        residual.data(), residual.size(), 0.0, inferkit::CounterRng::to_unit_double(blk[2], blk[3]) * total)));
    return r;
  }
  double total = 0;
  for (Index v = 0; v < c.vocab; ++v) total += p(c.k, v);
  const auto blk = rng.block(first + static_cast<std::uint64_t>(c.k));
  r.tokens.push_back(
      static_cast<TokenId>(inferkit::detail::walk_to(p.row_ptr(c.k), static_cast<std::size_t>(c.vocab), 0.0,
                                                     inferkit::CounterRng::to_unit_double(blk[2], blk[3]) * total)));
  r.bonus = true;
  return r;
}

template <bool kNaive>
void BM_verify(benchmark::State& state) {
  const Case c(state.range(0), state.range(1), state.range(2) == 1);
  const inferkit::CounterRng rng(3);
  std::uint64_t it = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if constexpr (kNaive) {
      benchmark::DoNotOptimize(naive_verify(c, rng, it));
    } else {
      benchmark::DoNotOptimize(
          inferkit::verify_draft(c.draft, {c.q.data(), c.k, c.vocab}, {c.p.data(), c.k + 1, c.vocab}, rng, it));
    }
    it += 16;
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void args(benchmark::internal::Benchmark* b) {
  for (long v : {32000L, 128256L})
    for (long k : {4L, 8L})
      for (long reject : {0L, 1L}) b->Args({v, k, reject});
  b->ArgNames({"V", "k", "reject_first"})->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_verify<false>)->Name("speculative/inferkit")->Apply(args);
BENCHMARK(BM_verify<true>)->Name("speculative/naive")->Apply(args);

struct TreeCase {
  Index kLevels, kWidth;
  Index vocab;
  inferkit::TokenTree tree;
  std::vector<float> q, p, chain_p;  // chain_p: the rows of the root and the spine (case 5)
  std::vector<TokenId> spine_tokens;
  TreeCase(Index v, Index nodes, int kind) : kLevels(nodes == 16 ? 4 : 8), kWidth(nodes == 16 ? 4 : 8), vocab(v) {
    // Nodes level by level (spine child first), reordered depth-first.
    std::vector<TokenId> tok;
    std::vector<Index> par;
    Index spine = inferkit::TokenTree::kRoot;
    for (Index l = 0; l < kLevels; ++l) {
      const Index first = static_cast<Index>(tok.size());
      for (Index c = 0; c < kWidth; ++c) {
        tok.push_back(static_cast<TokenId>((l * kWidth + c) * 1999 % v));
        par.push_back(spine);
      }
      spine = first;
    }
    tree = inferkit::TokenTree::from_topological(tok, par);
    auto logits = ib::normal_floats(static_cast<std::size_t>(v), 2.0f, 5);
    std::vector<float> row(static_cast<std::size_t>(v));
    double z = 0;
    for (Index i = 0; i < v; ++i) z += std::exp(double(logits[i]));
    for (Index i = 0; i < v; ++i) row[i] = static_cast<float>(std::exp(double(logits[i])) / z);
    for (Index i = 0; i < tree.expanded_count(); ++i) q.insert(q.end(), row.begin(), row.end());
    for (Index i = 0; i <= tree.size(); ++i) p.insert(p.end(), row.begin(), row.end());
    if (kind >= 4)  // target logits whose argmax is the spine child at every spine position
      for (Index u = 0; u <= tree.size(); ++u)
        if (tree.first_child(u) >= 0) p[static_cast<std::size_t>(u * v + tree.token(tree.first_child(u)))] = 2.0f;
    for (Index u = 0; u <= tree.size(); u = tree.first_child(u) + 1) {
      chain_p.insert(chain_p.end(), p.begin() + u * v, p.begin() + (u + 1) * v);
      if (tree.first_child(u) < 0) break;
      spine_tokens.push_back(tree.token(tree.first_child(u)));
    }
    if (kind == 1 || kind == 3 || kind == 2) {  // move the root children's target mass to token 0
      const Index n_zero = kind == 2 ? 1 : kWidth;
      Index c = tree.first_child(0);
      for (Index j = 0; j < n_zero; ++j, c = tree.next_sibling(c)) {
        const auto x = static_cast<std::size_t>(tree.token(c));
        p[0] += p[x];
        p[x] = 0.0f;
      }
      if (kind == 2) {  // the root's second child certain (a leaf)
        const auto x = static_cast<std::size_t>(tree.token(tree.next_sibling(tree.first_child(0))));
        std::fill(p.begin(), p.begin() + v, 0.0f);
        p[x] = 1.0f;
      }
    }
  }
};

// verify_tree_greedy as it was before row_argmax: scan_logits at the root and every matching node.
inferkit::VerifyResult greedy_scan_logits(const inferkit::TokenTree& tree, inferkit::MatrixView<const float> t) {
  std::vector<TokenId> best(static_cast<std::size_t>(tree.size() + 1), -1);
  best[0] = inferkit::argmax_token(t.row(0));
  Index end = -1;
  for (Index i = 0; i < tree.size(); ++i) {
    const TokenId want = best[static_cast<std::size_t>(tree.parent(i) + 1)];
    if (want < 0 || tree.token(i) != want) continue;
    best[static_cast<std::size_t>(i + 1)] = inferkit::argmax_token(t.row(i + 1));
    if (end < 0 || tree.depth(i) > tree.depth(end)) end = i;
  }
  inferkit::VerifyResult r;
  for (Index a = end; a >= 0; a = tree.parent(a)) r.path.insert(r.path.begin(), a);
  for (Index a : r.path) r.tokens.push_back(tree.token(a));
  r.accepted = static_cast<Index>(r.path.size());
  r.tokens.push_back(best[static_cast<std::size_t>(end + 1)]);
  return r;
}

void BM_verify_tree(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(2));
  const TreeCase c(state.range(0), state.range(1), kind);
  const inferkit::MatrixView<const float> q(c.q.data(), c.tree.expanded_count(), c.vocab),
      p(c.p.data(), c.tree.size() + 1, c.vocab);
  const inferkit::CounterRng rng(3);
  std::uint64_t it = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (kind <= 1) benchmark::DoNotOptimize(inferkit::verify_tree(c.tree, q, p, rng, it));
    if (kind == 2 || kind == 3) benchmark::DoNotOptimize(inferkit::verify_tree_deterministic(c.tree, p, rng, it));
    if (kind == 4) benchmark::DoNotOptimize(inferkit::verify_tree_greedy(c.tree, p));
    if (kind == 6) benchmark::DoNotOptimize(greedy_scan_logits(c.tree, p));
    if (kind == 5)
      benchmark::DoNotOptimize(inferkit::verify_greedy(
          c.spine_tokens, {c.chain_p.data(), static_cast<Index>(c.spine_tokens.size()) + 1, c.vocab}));
    it += c.tree.draw_blocks();
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

template <int kImpl>
void BM_argmax(benchmark::State& state) {
  const Index v = state.range(0);
  const auto m = ib::normal_floats(static_cast<std::size_t>(v) * 65, 2.0f, 9);
  const std::size_t rows[9] = {0, 1, 9, 17, 25, 33, 41, 49, 57};
  double calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (std::size_t r : rows) {
      const std::span<const float> row(m.data() + r * static_cast<std::size_t>(v), static_cast<std::size_t>(v));
      if constexpr (kImpl == 0) benchmark::DoNotOptimize(inferkit::row_argmax(row));
      if constexpr (kImpl == 1) benchmark::DoNotOptimize(inferkit::scan_logits(row));
      if constexpr (kImpl == 2) {
        std::size_t best = 0;
        for (std::size_t i = 1; i < row.size(); ++i)
          if (row[i] > row[best]) best = i;
        benchmark::DoNotOptimize(best);
      }
    }
    calls += 9;
  }
  state.counters["us"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6 / calls;
}

BENCHMARK(BM_argmax<0>)->Name("speculative_argmax/inferkit")->Arg(128256)->ArgName("V")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_argmax<1>)
    ->Name("speculative_argmax/scan_logits")
    ->Arg(128256)
    ->ArgName("V")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_argmax<2>)->Name("speculative_argmax/naive")->Arg(128256)->ArgName("V")->Unit(benchmark::kMicrosecond);

/// Markov target and draft over 64 tokens: P rows of gamma(k) weights, Q = P^a * noise (draft 0:
/// k = 0.3 (mean top probability 0.15), a = 0.7, noise in [0.5, 1.5], close to P; draft 1: k = 0.3,
/// a = 0.3, noise in [0.1, 1.9]; draft 2: a peaked target, k = 0.05, with draft 0's Q rule).
struct MarkovPair {
  static constexpr Index kV = 64;
  std::vector<std::vector<float>> P, Q;
  explicit MarkovPair(int draft) {
    std::mt19937 gen(17);
    std::gamma_distribution<double> g(draft == 2 ? 0.05 : 0.3, 1.0);
    const double a = draft == 1 ? 0.3 : 0.7, spread = draft == 1 ? 0.9 : 0.5;
    std::uniform_real_distribution<double> noise(1.0 - spread, 1.0 + spread);
    for (Index s = 0; s < kV; ++s) {
      std::vector<double> w(static_cast<std::size_t>(kV)), d(w.size());
      double zw = 0, zd = 0;
      for (std::size_t i = 0; i < w.size(); ++i) zw += (w[i] = g(gen) + 1e-6);
      for (std::size_t i = 0; i < w.size(); ++i) zd += (d[i] = std::pow(w[i] / zw, a) * noise(gen));
      std::vector<float> p(w.size()), q(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        p[i] = static_cast<float>(w[i] / zw);
        q[i] = static_cast<float>(d[i] / zd);
      }
      P.push_back(p);
      Q.push_back(q);
    }
  }
};

TokenId inverse_cdf(const std::vector<float>& d, double u) {
  double c = 0;
  for (std::size_t i = 0; i < d.size(); ++i)
    if (u < (c += d[i])) return static_cast<TokenId>(i);
  return static_cast<TokenId>(d.size() - 1);
}

void BM_tokens_per_pass(benchmark::State& state) {
  static const MarkovPair pairs[3] = {MarkovPair(0), MarkovPair(1), MarkovPair(2)};
  const MarkovPair& m = pairs[state.range(1)];
  const int kind = static_cast<int>(state.range(0));
  constexpr Index kDrafts = 15;
  const inferkit::CounterRng draft_rng(1, 1), verify_rng(1, 2);
  std::uint64_t draft_draw = 0, verify_draw = 0;
  double emitted = 0, passes = 0;
  TokenId ctx = 0;
  std::vector<float> pm, qm;
  for (auto _ : state) {
    for (int pass = 0; pass < 200; ++pass) {
      inferkit::VerifyResult r;
      if (kind == 0 || kind == 2) {  // a chain from the draft
        std::vector<TokenId> draft;
        pm.clear();
        qm.clear();
        TokenId c = ctx;
        for (Index i = 0; i < kDrafts; ++i) {
          const auto& q = m.Q[static_cast<std::size_t>(c)];
          const TokenId x =
              kind == 0 ? inverse_cdf(q, draft_rng.uniform_double(draft_draw++)) : inferkit::argmax_token(q);
          qm.insert(qm.end(), q.begin(), q.end());
          pm.insert(pm.end(), m.P[static_cast<std::size_t>(c)].begin(), m.P[static_cast<std::size_t>(c)].end());
          draft.push_back(c = x);
        }
        pm.insert(pm.end(), m.P[static_cast<std::size_t>(c)].begin(), m.P[static_cast<std::size_t>(c)].end());
        const inferkit::MatrixView<const float> pv(pm.data(), kDrafts + 1, MarkovPair::kV);
        r = kind == 0 ? inferkit::verify_draft(draft, {qm.data(), kDrafts, MarkovPair::kV}, pv, verify_rng, verify_draw)
                      : inferkit::verify_greedy(draft, pv);
        verify_draw += kDrafts + 1;
      } else {  // an EAGLE-2 tree from the draft
        inferkit::DraftTreeBuilder b({.top_k = 4, .expand_width = 4, .max_depth = kDrafts, .max_nodes = kDrafts},
                                     m.Q[static_cast<std::size_t>(ctx)]);
        for (auto wave = b.next_to_expand(); !wave.empty(); wave = b.next_to_expand())
          for (Index c : wave) b.expand(c, m.Q[static_cast<std::size_t>(b.token(c))]);
        const inferkit::TokenTree tree = b.build();
        pm.clear();
        for (Index u = 0; u <= tree.size(); ++u) {
          const auto& row = m.P[static_cast<std::size_t>(u == 0 ? ctx : tree.token(u - 1))];
          pm.insert(pm.end(), row.begin(), row.end());
        }
        const inferkit::MatrixView<const float> pv(pm.data(), tree.size() + 1, MarkovPair::kV);
        r = kind == 1 ? inferkit::verify_tree_deterministic(tree, pv, verify_rng, verify_draw)
                      : inferkit::verify_tree_greedy(tree, pv);
        verify_draw += tree.draw_blocks();
      }
      emitted += static_cast<double>(r.tokens.size());
      passes += 1;
      ctx = r.tokens.back();
    }
  }
  state.counters["tokens_per_pass"] = emitted / passes;
}

BENCHMARK(BM_tokens_per_pass)
    ->Name("speculative_accept/rows16")
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}})
    ->ArgNames({"kind", "draft"});

BENCHMARK(BM_verify_tree)
    ->Name("speculative_tree/inferkit")
    ->ArgsProduct({{128256}, {16, 64}, {0, 1, 2, 3, 4, 5, 6}})
    ->ArgNames({"V", "nodes", "case"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
