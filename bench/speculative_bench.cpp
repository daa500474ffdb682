// Speculative verification cost per call, single thread, counter `us`.
//   speculative/{inferkit,naive}/V<vocab>_k<k>/<case>
//   case accept_all: p == q, every draft accepted, bonus token drawn from p_{k+1}
//   case reject_first: the first draft token has p = 0, rejected at once, residual drawn
// naive: the straightforward implementation, which checks every row and builds the residual
// distribution at every position before testing acceptance.
#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/speculative.hpp"

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

}  // namespace
