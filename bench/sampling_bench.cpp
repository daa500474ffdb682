// Decoding rules against their sort-based definitions (inferkit/sampling/reference.hpp), single
// thread. Names: sampling/{inferkit,naive}/V<vocab>_<rule>/sigma:<s>, logits drawn as Gaussian
// noise with sigma 1, 3 or 6 (flat to peaked). Counter `us`: microseconds per call, timed around
// the call alone (the copy that restores the logits between calls is not timed).
//   greedy  argmax (naive: std::max_element)
//   topk40, topp095, minp005: the processor alone
//   chain   repetition penalty 1.1 over 64 history tokens, temperature 0.8, top-k 40,
//           top-p 0.95, min-p 0.05, and the draw
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/reference.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_p.hpp"

namespace {

using inferkit::TokenId;
namespace ib = inferkit::bench;

std::vector<TokenId> history_of(std::size_t vocab) {
  std::vector<TokenId> h(64);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<TokenId>((i * 7919) % vocab);
  return h;
}

inferkit::SamplingParams chain_params() {
  inferkit::SamplingParams p;
  p.repetition_penalty = 1.1f;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  return p;
}

// Times fn(logits) on a fresh copy of the same logits every iteration.
void run(benchmark::State& state, const std::function<void(std::vector<float>&, std::uint64_t)>& fn) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const auto pristine = ib::normal_floats(vocab, static_cast<float>(state.range(1)), 11);
  std::vector<float> x(vocab);
  double total = 0.0;
  std::uint64_t it = 0;
  for (auto _ : state) {
    std::copy(pristine.begin(), pristine.end(), x.begin());
    const auto t0 = std::chrono::steady_clock::now();
    fn(x, it++);
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  ib::set_us(state, total);
  ib::label_isa(state);
}

void BM_greedy_inferkit(benchmark::State& s) { run(s, [](auto& x, auto) { benchmark::DoNotOptimize(inferkit::argmax_token(x)); }); }
void BM_greedy_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { benchmark::DoNotOptimize(std::max_element(x.begin(), x.end()) - x.begin()); });
}
void BM_topk_inferkit(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::apply_top_k(x, 40); }); }
void BM_topk_naive(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::reference::top_k(x, 40); }); }
void BM_topp_inferkit(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::apply_top_p(x, 0.95f); }); }
void BM_topp_naive(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::reference::top_p(x, 0.95f); }); }
void BM_minp_inferkit(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::apply_min_p(x, 0.05f); }); }
void BM_minp_naive(benchmark::State& s) { run(s, [](auto& x, auto) { inferkit::reference::min_p(x, 0.05f); }); }

void BM_chain_inferkit(benchmark::State& s) {
  const auto chain = inferkit::SamplerChain::inferkit_default(chain_params());
  const auto history = history_of(static_cast<std::size_t>(s.range(0)));
  const inferkit::CounterRng rng(1);
  run(s, [&](auto& x, std::uint64_t i) { benchmark::DoNotOptimize(chain.sample(x, history, rng, i)); });
}
void BM_chain_naive(benchmark::State& s) {
  const auto history = history_of(static_cast<std::size_t>(s.range(0)));
  const inferkit::CounterRng rng(1);
  run(s, [&](auto& x, std::uint64_t i) {
    inferkit::apply_repetition_penalty(x, history, 1.1f);
    inferkit::reference::temperature(x, 0.8f);
    inferkit::reference::top_k(x, 40);
    inferkit::reference::top_p(x, 0.95f);
    inferkit::reference::min_p(x, 0.05f);
    benchmark::DoNotOptimize(inferkit::reference::draw(x, rng.uniform_double(i)));
  });
}

#define INFERKIT_SAMPLING_BENCH(fn, impl, rule)                                                              \
  BENCHMARK(fn)->Name("sampling/" impl "/V32000_" rule)->ArgsProduct({{32000}, {1, 3, 6}})                   \
      ->ArgNames({"", "sigma"})->UseManualTime()->Unit(benchmark::kMicrosecond);                            \
  BENCHMARK(fn)->Name("sampling/" impl "/V128256_" rule)->ArgsProduct({{128256}, {1, 3, 6}})                 \
      ->ArgNames({"", "sigma"})->UseManualTime()->Unit(benchmark::kMicrosecond);

INFERKIT_SAMPLING_BENCH(BM_greedy_inferkit, "inferkit", "greedy")
INFERKIT_SAMPLING_BENCH(BM_greedy_naive, "naive", "greedy")
INFERKIT_SAMPLING_BENCH(BM_topk_inferkit, "inferkit", "topk40")
INFERKIT_SAMPLING_BENCH(BM_topk_naive, "naive", "topk40")
INFERKIT_SAMPLING_BENCH(BM_topp_inferkit, "inferkit", "topp095")
INFERKIT_SAMPLING_BENCH(BM_topp_naive, "naive", "topp095")
INFERKIT_SAMPLING_BENCH(BM_minp_inferkit, "inferkit", "minp005")
INFERKIT_SAMPLING_BENCH(BM_minp_naive, "naive", "minp005")
INFERKIT_SAMPLING_BENCH(BM_chain_inferkit, "inferkit", "chain")
INFERKIT_SAMPLING_BENCH(BM_chain_naive, "naive", "chain")

}  // namespace

// ---- sweep over the vocabulary size (for the report's sampler plot) -------------------------
// sampling_sweep/{inferkit,naive}/chain/V:N, sigma 3.
namespace {
void sweep_args(benchmark::internal::Benchmark* b) {
  for (long v : {8192L, 32000L, 65536L, 128256L, 262144L}) b->Args({v, 3});
  b->ArgNames({"V", "sigma"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_chain_inferkit)->Name("sampling_sweep/inferkit/chain")->Apply(sweep_args);
BENCHMARK(BM_chain_naive)->Name("sampling_sweep/naive/chain")->Apply(sweep_args);
}  // namespace
