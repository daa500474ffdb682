// Speculative verification cost per call, single thread, counter `us`.
//   speculative/{inferkit,naive}/V<vocab>_k<k>/<case>
//   case accept_all: p == q, every draft accepted, bonus token drawn from p_{k+1}
//   case reject_first: the first draft token has p = 0, rejected at once, residual drawn
// naive: the straightforward implementation, which checks every row and builds the residual
// distribution at every position before testing acceptance.
//
// Tree verification (sampling/tree_verify.hpp), 64 nodes: a spine of 8 levels, each spine node
// (and the root) with 8 children, the spine child first:
//   speculative_tree/inferkit/V<vocab>/<case>, counter `us`; the chain baseline is
//   speculative/inferkit/V<vocab>_k8 above (the same depth, 8 drafts).
//   case 0 sampled_accept_path: p == q, the first child accepted at every level, bonus at depth 8
//   case 1 sampled_reject_root: p gives the root's 8 children nothing: 8 rejections, residual draw
//   case 2 deterministic_second: the first child of every level rejected, the second (a leaf)
//          accepted at the root; i.e. one rejection, then a bonus
//   case 3 deterministic_reject_root: all 8 root children rejected (8 removals), draw from the rest
//   case 4 greedy_path: greedy verification along the spine to depth 8
//   case 5 chain_greedy: the chain baseline of case 4, verify_greedy on the 8 spine tokens
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/speculative.hpp"
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
  static constexpr Index kLevels = 8, kWidth = 8;
  Index vocab;
  inferkit::TokenTree tree;
  std::vector<float> q, p, chain_p;  // chain_p: the rows of the root and the spine (case 5)
  std::vector<TokenId> spine_tokens;
  TreeCase(Index v, int kind) : vocab(v) {
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
    if (kind == 4 || kind == 5)  // target logits whose argmax is the spine child at every spine position
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

void BM_verify_tree(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(1));
  const TreeCase c(state.range(0), kind);
  const inferkit::MatrixView<const float> q(c.q.data(), c.tree.expanded_count(), c.vocab),
      p(c.p.data(), c.tree.size() + 1, c.vocab);
  const inferkit::CounterRng rng(3);
  std::uint64_t it = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (kind <= 1) benchmark::DoNotOptimize(inferkit::verify_tree(c.tree, q, p, rng, it));
    if (kind == 2 || kind == 3) benchmark::DoNotOptimize(inferkit::verify_tree_deterministic(c.tree, p, rng, it));
    if (kind == 4) benchmark::DoNotOptimize(inferkit::verify_tree_greedy(c.tree, p));
    if (kind == 5)
      benchmark::DoNotOptimize(inferkit::verify_greedy(
          c.spine_tokens, {c.chain_p.data(), static_cast<Index>(c.spine_tokens.size()) + 1, c.vocab}));
    it += c.tree.draw_blocks();
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

BENCHMARK(BM_verify_tree)
    ->Name("speculative_tree/inferkit")
    ->ArgsProduct({{128256}, {0, 1, 2, 3, 4, 5}})
    ->ArgNames({"V", "case"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
