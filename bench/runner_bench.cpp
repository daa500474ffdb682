// End to end: generation tokens per second of the llama2.c runner example on a
// stories15M-shaped random model (dim 288, hidden 768, 6 layers, 6 heads, vocab 32000), 128
// tokens from BOS with repetition penalty 1.1, temperature 0.8, top-k 40, top-p 0.95; 1 and 2
// threads. naive: the same runner with inferkit's attention kernels replaced by the fp64
// reference and the sampler chain by the sort-based definitions.
//   runner/{inferkit,naive}/stories15M_random/threads:N   counter tokens_per_s
#include <benchmark/benchmark.h>

#include <chrono>

#include "llama2c/runner.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

const llama2c::Model& model() {
  static const llama2c::Model m = llama2c::Model::random(llama2c::stories15M_shape(), 1);
  return m;
}

template <bool kNaive>
void BM_generate(benchmark::State& state) {
#if defined(_OPENMP)
  omp_set_num_threads(static_cast<int>(state.range(0)));
#endif
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.params.top_k = 40;
  s.params.top_p = 0.95f;
  s.params.repetition_penalty = 1.1f;
  s.naive = kNaive;
  double tokens = 0, seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens += static_cast<double>(llama2c::generate(model(), {}, 128, s).size());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["tokens_per_s"] = tokens / seconds;
}

BENCHMARK(BM_generate<false>)
    ->Name("runner/inferkit/stories15M_random")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_generate<true>)
    ->Name("runner/naive/stories15M_random")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
