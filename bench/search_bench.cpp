// Per-step cost of beam search and contrastive search, single thread, counter `us`.
//   search/{inferkit,naive}/beam<B>_V<V>: one beam step with B live beams (no EOS);
//     naive sorts all B * V candidates to take the best 2B (inferkit selects per row).
//   search/{inferkit,naive}/contrastive_k<K>_ctx<T>_H4096: max cosine of K candidate hidden
//     states against T context states; naive recomputes norms and uses a scalar dot per pair.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/beam_search.hpp"
#include "inferkit/sampling/contrastive_search.hpp"

namespace {

using inferkit::Index;
using inferkit::TokenId;
namespace ib = inferkit::bench;

std::vector<float> log_softmax_rows(Index rows, Index vocab, unsigned seed) {
  auto x = ib::normal_floats(static_cast<std::size_t>(rows * vocab), 2.0f, seed);
  for (Index r = 0; r < rows; ++r) {
    float* row = x.data() + r * vocab;
    const float m = *std::max_element(row, row + vocab);
    double z = 0;
    for (Index i = 0; i < vocab; ++i) z += std::exp(double(row[i] - m));
    const float lz = static_cast<float>(m + std::log(z));
    for (Index i = 0; i < vocab; ++i) row[i] -= lz;
  }
  return x;
}

void BM_beam_inferkit(benchmark::State& state) {
  const Index beams = state.range(0), vocab = state.range(1);
  const auto first = log_softmax_rows(1, vocab, 1), rows = log_softmax_rows(beams, vocab, 2);
  double total = 0;
  for (auto _ : state) {
    inferkit::BeamSearch bs({.num_beams = beams, .max_new_tokens = 100});
    bs.step({first.data(), 1, vocab});  // now `beams` live beams
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(bs.step({rows.data(), beams, vocab}));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  ib::set_us(state, total);
}

void BM_beam_naive(benchmark::State& state) {
  const Index beams = state.range(0), vocab = state.range(1);
  const auto rows = log_softmax_rows(beams, vocab, 2);
  const std::vector<double> sums(static_cast<std::size_t>(beams), -1.0);
  struct Cand {
    double score;
    Index beam;
    TokenId token;
  };
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Cand> all;
    all.reserve(static_cast<std::size_t>(beams * vocab));
    for (Index b = 0; b < beams; ++b)
      for (Index t = 0; t < vocab; ++t) all.push_back({sums[b] + rows[b * vocab + t], b, static_cast<TokenId>(t)});
    std::sort(all.begin(), all.end(), [](const Cand& a, const Cand& c) {
      return a.score > c.score || (a.score == c.score && (a.beam < c.beam || (a.beam == c.beam && a.token < c.token)));
    });
    all.resize(static_cast<std::size_t>(2 * beams));
    benchmark::DoNotOptimize(all.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  ib::set_us(state, total);
}

constexpr Index kHidden = 4096;

void BM_contrastive_inferkit(benchmark::State& state) {
  const Index k = state.range(0), ctx_len = state.range(1);
  const auto ctx_states = ib::normal_floats(static_cast<std::size_t>(ctx_len * kHidden), 1.0f, 3);
  const auto cand = ib::normal_floats(static_cast<std::size_t>(k * kHidden), 1.0f, 4);
  inferkit::ContextStates ctx(kHidden);
  for (Index j = 0; j < ctx_len; ++j) ctx.append({ctx_states.data() + j * kHidden, static_cast<std::size_t>(kHidden)});
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(ctx.max_cosine({cand.data(), k, kHidden}));
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void BM_contrastive_naive(benchmark::State& state) {
  const Index k = state.range(0), ctx_len = state.range(1);
  const auto ctx_states = ib::normal_floats(static_cast<std::size_t>(ctx_len * kHidden), 1.0f, 3);
  const auto cand = ib::normal_floats(static_cast<std::size_t>(k * kHidden), 1.0f, 4);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    std::vector<float> best(static_cast<std::size_t>(k), -INFINITY);
    for (Index i = 0; i < k; ++i) {
      const float* a = cand.data() + i * kHidden;
      const float na = std::sqrt(std::inner_product(a, a + kHidden, a, 0.0f));
      for (Index j = 0; j < ctx_len; ++j) {
        const float* b = ctx_states.data() + j * kHidden;
        const float nb = std::sqrt(std::inner_product(b, b + kHidden, b, 0.0f));
        best[i] = std::max(best[i], std::inner_product(a, a + kHidden, b, 0.0f) / (na * nb));
      }
    }
    benchmark::DoNotOptimize(best.data());
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

BENCHMARK(BM_beam_inferkit)
    ->Name("search/inferkit/beam")
    ->ArgsProduct({{4, 8}, {32000, 128256}})
    ->ArgNames({"B", "V"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_beam_naive)
    ->Name("search/naive/beam")
    ->ArgsProduct({{4, 8}, {32000, 128256}})
    ->ArgNames({"B", "V"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_contrastive_inferkit)
    ->Name("search/inferkit/contrastive_H4096")
    ->ArgsProduct({{4, 10}, {512, 4096}})
    ->ArgNames({"k", "ctx"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_contrastive_naive)
    ->Name("search/naive/contrastive_H4096")
    ->ArgsProduct({{4, 10}, {512, 4096}})
    ->ArgNames({"k", "ctx"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
