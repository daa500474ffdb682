// Decoding rules against their sort-based definitions (inferkit/sampling/reference.hpp), single
// thread. Names: sampling/{inferkit,naive}/V<vocab>_<rule>/sigma:<s>, logits drawn as Gaussian
// noise with sigma 1, 3 or 6 (flat to peaked). Counter `us`: microseconds per call, timed around
// the call alone (the copy that restores the logits between calls is not timed); `best_us`: the
// fastest call of the run.
//   greedy  argmax (naive: std::max_element)
//   topk40, topp095, minp005: the processor alone
//   chain   repetition penalty 1.1 over 64 history tokens, temperature 0.8, top-k 40,
//           top-p 0.95, min-p 0.05, and the draw
//   chainstate  the same chain with Mirostat's state path: Hugging Face's preset with
//           mirostat 2 (temperature 0.8, mirostat tau 5) through sample(.., state, ..) and
//           accept(), the state kept from call to call (naive: the reference truncation for the
//           same mu, the reference draw and the closed-form mu update)
// Issue 20's rules, V = 128256 only (each alone, naive = its sort-based / quadratic reference):
//   xtc     threshold 0.1, probability 1 (the coin always fires: the full cost)
//   dry4096 multiplier 0.8, base 1.75, allowed 2 over a 4,096-token history of repeated phrases
//           ending inside one; dry4096loop the same over a 10-token phrase repeated (a stuck loop)
//   mirostat1 / mirostat2  truncation for mu = 10 (tau 5)
//   dynatemp  temperature 0.8, range 0.5;  topnsigma1  n = 1;  epsilon  3e-4;  eta  2e-3
//   hfseq   64 biased and 64 banned sequences, min_new_tokens, exponential decay, begin-suppress
//   llamachain  llama.cpp's order: repetition / frequency / presence penalties over the last 64,
//           DRY over 4,096, top-k 40, typical 0.95, top-p 0.95, min-p 0.05, XTC (0.1, 1),
//           temperature 0.8, draw
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/sampling/bad_words.hpp"
#include "inferkit/sampling/begin_suppress_tokens.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/dry.hpp"
#include "inferkit/sampling/dynamic_temperature.hpp"
#include "inferkit/sampling/epsilon_cutoff.hpp"
#include "inferkit/sampling/eta_cutoff.hpp"
#include "inferkit/sampling/exponential_decay_length_penalty.hpp"
#include "inferkit/sampling/min_new_tokens.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/presets.hpp"
#include "inferkit/sampling/reference.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/sampling/sequence_bias.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_n_sigma.hpp"
#include "inferkit/sampling/top_p.hpp"
#include "inferkit/sampling/typical.hpp"
#include "inferkit/sampling/xtc.hpp"

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
  double total = 0.0, best = 1e30;
  std::uint64_t it = 0;
  for (auto _ : state) {
    std::copy(pristine.begin(), pristine.end(), x.begin());
    const auto t0 = std::chrono::steady_clock::now();
    fn(x, it++);
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
    best = std::min(best, s);
  }
  ib::set_us(state, total);
  // The fastest call: on a shared machine the mean mostly measures the other tenants.
  state.counters["best_us"] = benchmark::Counter(best * 1e6);
  ib::label_isa(state);
}

void BM_greedy_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { benchmark::DoNotOptimize(inferkit::argmax_token(x)); });
}
void BM_greedy_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { benchmark::DoNotOptimize(std::max_element(x.begin(), x.end()) - x.begin()); });
}
void BM_topk_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_top_k(x, 40); });
}
void BM_topk_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::top_k(x, 40); });
}
void BM_topp_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_top_p(x, 0.95f); });
}
void BM_topp_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::top_p(x, 0.95f); });
}
void BM_minp_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_min_p(x, 0.05f); });
}
void BM_minp_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::min_p(x, 0.05f); });
}

void BM_chain_inferkit(benchmark::State& s) {
  const auto chain = inferkit::presets::huggingface(chain_params());
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

// The stateful path: a Mirostat chain sampled with its SamplerState and accept() every call.
inferkit::SamplingParams mirostat_params() {
  inferkit::SamplingParams p;
  p.repetition_penalty = 1.1f;
  p.temperature = 0.8f;
  p.mirostat = 2;
  return p;
}
void BM_chainstate_inferkit(benchmark::State& s) {
  const auto chain = inferkit::presets::huggingface(mirostat_params());
  const auto history = history_of(static_cast<std::size_t>(s.range(0)));
  const inferkit::CounterRng rng(1);
  auto state = chain.make_state();
  run(s, [&](auto& x, std::uint64_t i) {
    const TokenId t = chain.sample(x, history, state, rng, i);
    chain.accept(state, t);
    benchmark::DoNotOptimize(t);
  });
}
void BM_chainstate_naive(benchmark::State& s) {
  const auto history = history_of(static_cast<std::size_t>(s.range(0)));
  const inferkit::CounterRng rng(1);
  const inferkit::Mirostat m{2, 5.0f, 0.1f, 100};
  float mu = 2.0f * m.tau;
  run(s, [&](auto& x, std::uint64_t i) {
    inferkit::apply_repetition_penalty(x, history, 1.1f);
    inferkit::reference::temperature(x, 0.8f);
    inferkit::reference::mirostat(x, m, mu);
    const TokenId t = inferkit::reference::draw(x, rng.uniform_double(i));
    double max = -INFINITY, z = 0.0;
    for (float v : x) max = std::max(max, double(v));
    for (float v : x) z += std::exp(double(v) - max);
    mu = inferkit::mirostat_update(m, mu, -std::log2(std::exp(double(x[std::size_t(t)]) - max) / z));
    benchmark::DoNotOptimize(t);
  });
}

#define INFERKIT_SAMPLING_BENCH(fn, impl, rule) \
  BENCHMARK(fn)                                 \
      ->Name("sampling/" impl "/V32000_" rule)  \
      ->ArgsProduct({{32000}, {1, 3, 6}})       \
      ->ArgNames({"", "sigma"})                 \
      ->UseManualTime()                         \
      ->Unit(benchmark::kMicrosecond);          \
  BENCHMARK(fn)                                 \
      ->Name("sampling/" impl "/V128256_" rule) \
      ->ArgsProduct({{128256}, {1, 3, 6}})      \
      ->ArgNames({"", "sigma"})                 \
      ->UseManualTime()                         \
      ->Unit(benchmark::kMicrosecond);

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
INFERKIT_SAMPLING_BENCH(BM_chainstate_inferkit, "inferkit", "chainstate")
INFERKIT_SAMPLING_BENCH(BM_chainstate_naive, "naive", "chainstate")

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

// ---- issue 20's rules ------------------------------------------------------------------------
namespace {

// 4,096 tokens of phrases drawn from a pool of 40 (2-12 tokens each), with a random token now and
// then: text that repeats itself at every length, the case DRY exists for.
std::vector<TokenId> phrase_history(std::size_t vocab, std::size_t length = 4096) {
  std::mt19937 rng(5);
  std::vector<std::vector<TokenId>> pool(40);
  for (auto& p : pool) {
    p.resize(2 + rng() % 11);
    for (auto& t : p) t = static_cast<TokenId>(rng() % vocab);
  }
  std::vector<TokenId> h;
  while (h.size() < length) {
    const auto& p = pool[rng() % pool.size()];
    h.insert(h.end(), p.begin(), p.end());
    if (rng() % 3 == 0) h.push_back(static_cast<TokenId>(rng() % vocab));
  }
  // End inside a phrase seen before, so the next token would extend a repeat (DRY's case).
  const auto& last = pool[0];
  h.insert(h.end(), last.begin(), last.end() - 1);
  h.erase(h.begin(), h.end() - static_cast<std::ptrdiff_t>(length));
  return h;
}

// A generation stuck in a loop: one 10-token phrase over and over (the naive scan is quadratic).
std::vector<TokenId> loop_history(std::size_t vocab, std::size_t length = 4096) {
  std::vector<TokenId> h(length);
  for (std::size_t i = 0; i < length; ++i) h[i] = static_cast<TokenId>((i % 10) * 977 % vocab);
  return h;
}

const inferkit::Dry kDry{0.8f, 1.75f, 2, -1, {{13}, {29871, 13}}};
const inferkit::Xtc kXtc{0.1f, 1.0f, 1};

void BM_xtc_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_xtc(std::span<float>(x), kXtc, inferkit::CounterRng(1), 0); });
}
void BM_xtc_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::xtc(x, kXtc, 0.0); });
}
void BM_dry_inferkit(benchmark::State& s) {
  const auto h = phrase_history(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) { inferkit::apply_dry(std::span<float>(x), h, kDry); });
}
void BM_dry_naive(benchmark::State& s) {
  const auto h = phrase_history(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) { inferkit::reference::dry(x, h, kDry); });
}
void BM_dryloop_inferkit(benchmark::State& s) {
  const auto h = loop_history(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) { inferkit::apply_dry(std::span<float>(x), h, kDry); });
}
void BM_dryloop_naive(benchmark::State& s) {
  const auto h = loop_history(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) { inferkit::reference::dry(x, h, kDry); });
}
void BM_mirostat1_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_mirostat(std::span<float>(x), {.version = 1}, 10.0f); });
}
void BM_mirostat1_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::mirostat(x, {.version = 1}, 10.0f); });
}
void BM_mirostat2_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_mirostat(std::span<float>(x), {.version = 2}, 10.0f); });
}
void BM_mirostat2_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::mirostat(x, {.version = 2}, 10.0f); });
}
void BM_dynatemp_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_dynamic_temperature(std::span<float>(x), {0.8f, 0.5f, 1.0f}); });
}
void BM_dynatemp_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::dynamic_temperature(x, {0.8f, 0.5f, 1.0f}); });
}
void BM_topnsigma_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_top_n_sigma(std::span<float>(x), 1.0f); });
}
void BM_topnsigma_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::top_n_sigma(x, 1.0f); });
}
void BM_epsilon_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_epsilon_cutoff(std::span<float>(x), {3e-4f, 1}); });
}
void BM_epsilon_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::epsilon_cutoff(x, {3e-4f, 1}); });
}
void BM_eta_inferkit(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::apply_eta_cutoff(std::span<float>(x), {2e-3f, 1}); });
}
void BM_eta_naive(benchmark::State& s) {
  run(s, [](auto& x, auto) { inferkit::reference::eta_cutoff(x, {2e-3f, 1}); });
}

struct HfSequenceRules {
  inferkit::SequenceBias bias;
  inferkit::BadWords bad;
  inferkit::MinNewTokens min_new{8, {2}};
  inferkit::ExponentialDecayLengthPenalty decay{16, 1.05f, {2}};
  inferkit::BeginSuppressTokens suppress{{2, 13}};
  std::vector<TokenId> history;
  explicit HfSequenceRules(std::size_t vocab) : history(phrase_history(vocab, 256)) {
    std::mt19937 rng(9);
    for (int i = 0; i < 64; ++i) {
      std::vector<TokenId> seq(1 + rng() % 4);
      for (auto& t : seq) t = static_cast<TokenId>(rng() % vocab);
      if (i % 4 == 0)
        std::copy(history.end() - static_cast<std::ptrdiff_t>(seq.size() - 1), history.end(), seq.begin());
      bias.entries.push_back({seq, -2.0f});
      seq.back() = static_cast<TokenId>((seq.back() + 1) % static_cast<TokenId>(vocab));
      bad.sequences.push_back(seq);
    }
  }
};
void BM_hfseq_inferkit(benchmark::State& s) {
  const HfSequenceRules r(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) {
    inferkit::Candidates c(x);
    inferkit::apply_sequence_bias(c, r.history, r.bias);
    inferkit::apply_bad_words(c, r.history, r.bad);
    inferkit::apply_min_new_tokens(c, r.min_new, 20);
    inferkit::apply_exponential_decay_length_penalty(c, r.decay, 20);
    inferkit::apply_begin_suppress_tokens(c, r.suppress, 20);
    c.materialize();
  });
}
void BM_hfseq_naive(benchmark::State& s) {
  const HfSequenceRules r(static_cast<std::size_t>(s.range(0)));
  run(s, [&](auto& x, auto) {
    inferkit::reference::sequence_bias(x, r.history, r.bias);
    inferkit::reference::bad_words(x, r.history, r.bad);
    inferkit::reference::min_new_tokens(x, r.min_new, 20);
    inferkit::reference::exponential_decay_length_penalty(x, r.decay, 20);
    inferkit::reference::begin_suppress_tokens(x, r.suppress, 20);
  });
}

inferkit::SamplingParams llama_chain_params() {
  inferkit::SamplingParams p;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.1f;
  p.presence_penalty = 0.1f;
  p.penalty_last_n = 64;
  p.dry_multiplier = kDry.multiplier;
  p.dry_sequence_breakers = kDry.sequence_breakers;
  p.top_k = 40;
  p.typical_p = 0.95f;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.xtc_probability = kXtc.probability;
  p.xtc_threshold = kXtc.threshold;
  p.temperature = 0.8f;
  return p;
}
void BM_llamachain_inferkit(benchmark::State& s) {
  const auto chain = inferkit::presets::llama_cpp(llama_chain_params());
  const auto h = phrase_history(static_cast<std::size_t>(s.range(0)));
  const inferkit::CounterRng rng(1);
  run(s, [&](auto& x, std::uint64_t i) { benchmark::DoNotOptimize(chain.sample(x, h, rng, i)); });
}
void BM_llamachain_naive(benchmark::State& s) {
  const auto h = phrase_history(static_cast<std::size_t>(s.range(0)));
  const std::span<const TokenId> last64(h.data() + h.size() - 64, 64);
  const inferkit::CounterRng rng(1);
  run(s, [&](auto& x, std::uint64_t i) {
    inferkit::apply_repetition_penalty(x, last64, 1.1f);
    inferkit::apply_frequency_presence_penalty(x, last64, 0.1f, 0.1f);
    inferkit::reference::dry(x, h, kDry);
    inferkit::reference::top_k(x, 40);
    inferkit::apply_typical(std::span<float>(x), 0.95f);
    inferkit::reference::top_p(x, 0.95f);
    inferkit::reference::min_p(x, 0.05f);
    inferkit::reference::xtc(x, kXtc, inferkit::xtc_uniform(rng, i));
    inferkit::reference::temperature(x, 0.8f);
    benchmark::DoNotOptimize(inferkit::reference::draw(x, rng.uniform_double(i)));
  });
}

#define INFERKIT_SAMPLING_BENCH_128K(fn, impl, rule) \
  BENCHMARK(fn)                                      \
      ->Name("sampling/" impl "/V128256_" rule)      \
      ->ArgsProduct({{128256}, {1, 3, 6}})           \
      ->ArgNames({"", "sigma"})                      \
      ->UseManualTime()                              \
      ->Unit(benchmark::kMicrosecond);

INFERKIT_SAMPLING_BENCH_128K(BM_xtc_inferkit, "inferkit", "xtc")
INFERKIT_SAMPLING_BENCH_128K(BM_xtc_naive, "naive", "xtc")
INFERKIT_SAMPLING_BENCH_128K(BM_dry_inferkit, "inferkit", "dry4096")
INFERKIT_SAMPLING_BENCH_128K(BM_dry_naive, "naive", "dry4096")
INFERKIT_SAMPLING_BENCH_128K(BM_dryloop_inferkit, "inferkit", "dry4096loop")
INFERKIT_SAMPLING_BENCH_128K(BM_dryloop_naive, "naive", "dry4096loop")
INFERKIT_SAMPLING_BENCH_128K(BM_mirostat1_inferkit, "inferkit", "mirostat1")
INFERKIT_SAMPLING_BENCH_128K(BM_mirostat1_naive, "naive", "mirostat1")
INFERKIT_SAMPLING_BENCH_128K(BM_mirostat2_inferkit, "inferkit", "mirostat2")
INFERKIT_SAMPLING_BENCH_128K(BM_mirostat2_naive, "naive", "mirostat2")
INFERKIT_SAMPLING_BENCH_128K(BM_dynatemp_inferkit, "inferkit", "dynatemp")
INFERKIT_SAMPLING_BENCH_128K(BM_dynatemp_naive, "naive", "dynatemp")
INFERKIT_SAMPLING_BENCH_128K(BM_topnsigma_inferkit, "inferkit", "topnsigma1")
INFERKIT_SAMPLING_BENCH_128K(BM_topnsigma_naive, "naive", "topnsigma1")
INFERKIT_SAMPLING_BENCH_128K(BM_epsilon_inferkit, "inferkit", "epsilon")
INFERKIT_SAMPLING_BENCH_128K(BM_epsilon_naive, "naive", "epsilon")
INFERKIT_SAMPLING_BENCH_128K(BM_eta_inferkit, "inferkit", "eta")
INFERKIT_SAMPLING_BENCH_128K(BM_eta_naive, "naive", "eta")
INFERKIT_SAMPLING_BENCH_128K(BM_hfseq_inferkit, "inferkit", "hfseq")
INFERKIT_SAMPLING_BENCH_128K(BM_hfseq_naive, "naive", "hfseq")
INFERKIT_SAMPLING_BENCH_128K(BM_llamachain_inferkit, "inferkit", "llamachain")
INFERKIT_SAMPLING_BENCH_128K(BM_llamachain_naive, "naive", "llamachain")

}  // namespace
