// Serving throughput and latency (issue 13, section 5): the llama2.c example's serving loop
// (examples/llama2c/serve.hpp: inferkit's Scheduler + one batched forward per iteration) on a
// stories15M-shaped random model (dim 288, 6 layers, 6 heads, hidden 768, vocab 32000), 2
// threads, the serving workload (examples/llama2c/serving_workload.hpp: prompts 32..512 tokens, 16 shared system
// prompts, outputs 16..256 tokens, sampling at temperature 0.8, top-p 0.95).
//
//   serving/sequential   one request at a time through today's runner (llama2c::generate():
//                        matrix-vector products per token, logits of every prompt token); the
//                        first 16 requests of the workload (the whole trace would take minutes)
//   serving/static       groups of 16 run to completion (the same loop, ServeOptions::static_batch)
//   serving/continuous   continuous batching, prefix cache, budget 1024 tokens, 64 sequences
//   serving/continuous/.../deterministic:1   the same in deterministic mode (its cost)
//   serving/online/chunked:{0,1,2}  Poisson arrivals (kOnlineRate requests/s), same budget
//                        and sequence cap: whole prefills (0) vs chunks of kChunk tokens per
//                        request per iteration (1) vs at most kPrefillTokens prefill tokens per
//                        iteration over all requests (2: SchedulerConfig::max_prefill_tokens,
//                        SGLang's chunked_prefill_size); time between tokens p99 and throughput
//
// Every run is one iteration (a whole trace); counters carry the figures. Ratios to the
// baselines are counters too when the baselines ran first in the same process (the order
// below; run the whole filter `serving/(sequential|static|continuous|online)`).
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>

#include "llama2c/generate.hpp"
#include "llama2c/serve.hpp"
#include "llama2c/serving_workload.hpp"

namespace {

using llama2c::Index;

constexpr Index kBudget = 1024, kSequences = 64;

// The trace length and thread count: 256 and 2 (issue 13), or INFERKIT_BENCH_SERVING_REQUESTS /
// INFERKIT_BENCH_SERVING_THREADS for a shorter run on a loaded machine.
const llama2c::Model& model();

Index env_or(const char* name, Index def) {
  const char* v = std::getenv(name);
  return v && std::atol(v) > 0 ? std::atol(v) : def;
}
const Index kRequests = env_or("INFERKIT_BENCH_SERVING_REQUESTS", 256);
const Index kSequentialRequests = std::min<Index>(env_or("INFERKIT_BENCH_SERVING_SEQUENTIAL", 16), kRequests);
const int kThreads = static_cast<int>(env_or("INFERKIT_BENCH_SERVING_THREADS", 2));
// Online runs: Poisson arrivals (requests/s; INFERKIT_BENCH_SERVING_RATE) and the chunk of the
// chunked run (INFERKIT_BENCH_SERVING_CHUNK).
const double kOnlineRate = [] {
  const char* v = std::getenv("INFERKIT_BENCH_SERVING_RATE");
  return v && std::atof(v) > 0 ? std::atof(v) : 4.0;
}();
const Index kChunk = env_or("INFERKIT_BENCH_SERVING_CHUNK", 32);
const Index kPrefillTokens = env_or("INFERKIT_BENCH_SERVING_PREFILL_TOKENS", 256);
// INFERKIT_BENCH_SERVING_CLOCK=cpu: time is the process's CPU time (plus waits for arrivals),
// a machine of our own for single-threaded runs on a machine shared with other jobs; wall-clock
// time otherwise.
const bool kCpuClock = [] {
  const char* v = std::getenv("INFERKIT_BENCH_SERVING_CLOCK");
  return v && std::string(v) == "cpu";
}();

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * double(ts.tv_sec) + 1e-6 * double(ts.tv_nsec);
}

class CpuClock final : public llama2c::ServeClock {
 public:
  double now_ms() override { return cpu_ms() - t0_ + offset_; }
  void wait_until(double ms) override { offset_ += std::max(0.0, ms - now_ms()); }

 private:
  double t0_ = cpu_ms(), offset_ = 0;
};

// Serves with the clock the environment asks for.
llama2c::ServeSummary run(const std::vector<llama2c::TraceRequest>& t, llama2c::ServeOptions o) {
  CpuClock cpu;
  if (kCpuClock) o.clock = &cpu;
  return llama2c::serve(model(), t, o).summary;
}

const llama2c::Model& model() {
  static const llama2c::Model m = llama2c::Model::random(llama2c::stories15M_shape(1024), 15);
  return m;
}

std::vector<llama2c::TraceRequest> trace(double rate) {
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.params.top_p = 0.95f;
  return llama2c::synthetic_trace(kRequests, rate, llama2c::ServingWorkloadConfig{}, s);
}

// Results of the runs so far in this process, for the ratio counters.
double g_sequential = 0, g_static = 0, g_unchunked_tbt = 0, g_unchunked_tps = 0;

llama2c::ServeOptions options() {
  llama2c::ServeOptions o;
  o.scheduler.max_batched_tokens = kBudget;
  o.scheduler.max_sequences = kSequences;
  o.num_threads = kThreads;
  o.fingerprint = "stories15M-random";
  return o;
}

void report(benchmark::State& state, const llama2c::ServeSummary& s) {
  state.counters["out_tok_per_s"] = s.throughput;
  state.counters["ttft_p50_ms"] = s.ttft_p50_ms;
  state.counters["ttft_p99_ms"] = s.ttft_p99_ms;
  state.counters["tbt_p50_ms"] = s.tbt_p50_ms;
  state.counters["tbt_p99_ms"] = s.tbt_p99_ms;
  state.counters["output_tokens"] = static_cast<double>(s.output_tokens);
  state.counters["prefill_saved"] = static_cast<double>(s.prefill_saved);
  state.counters["prefill_computed"] = static_cast<double>(s.prefill_computed);
  state.counters["preemptions"] = static_cast<double>(s.preemptions);
  state.counters["iterations"] = static_cast<double>(s.iterations);
  state.counters["requests"] = static_cast<double>(s.requests);
  state.counters["threads"] = kThreads;
  state.counters["cpu_clock"] = kCpuClock ? 1 : 0;
}

void BM_sequential(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const auto& m = model();
  const auto t = trace(0);
  double tokens = 0, seconds = 0;
  for (auto _ : state) {
    for (Index i = 0; i < kSequentialRequests; ++i) {
      const auto& r = t[static_cast<std::size_t>(i)];
      llama2c::GenerateStats st;
      const double c0 = cpu_ms();
      const auto out = llama2c::generate(m, r.prompt, r.max_new_tokens, r.sampling, &st);
      tokens += static_cast<double>(out.size());
      seconds += kCpuClock ? (cpu_ms() - c0) / 1e3 : st.seconds;
    }
  }
  g_sequential = tokens / seconds;
  state.counters["out_tok_per_s"] = g_sequential;
  state.counters["requests"] = static_cast<double>(kSequentialRequests);
  state.counters["threads"] = kThreads;
  state.counters["cpu_clock"] = kCpuClock ? 1 : 0;
  state.counters["output_tokens"] = tokens;
}

void BM_static(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const auto t = trace(0);
  auto o = options();
  o.static_batch = 16;
  llama2c::ServeSummary s;
  for (auto _ : state) s = run(t, o);
  report(state, s);
  g_static = s.throughput;
  if (g_sequential > 0) state.counters["x_sequential"] = s.throughput / g_sequential;
}

void BM_continuous(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const auto t = trace(0);
  auto o = options();
  o.deterministic = state.range(0) != 0;
  llama2c::ServeSummary s;
  for (auto _ : state) s = run(t, o);
  report(state, s);
  if (g_sequential > 0) state.counters["x_sequential"] = s.throughput / g_sequential;
  if (g_static > 0) state.counters["x_static"] = s.throughput / g_static;
}

void BM_online(benchmark::State& state) {
  Eigen::setNbThreads(kThreads);
  const auto t = trace(kOnlineRate);
  auto o = options();
  const bool chunked = state.range(0) != 0;
  o.scheduler.chunked_prefill = chunked;
  o.scheduler.max_prefill_chunk = state.range(0) == 1 ? kChunk : 0;
  o.scheduler.max_prefill_tokens = state.range(0) == 2 ? kPrefillTokens : 0;
  llama2c::ServeSummary s;
  for (auto _ : state) s = run(t, o);
  report(state, s);
  if (!chunked) {
    g_unchunked_tbt = s.tbt_p99_ms;
    g_unchunked_tps = s.throughput;
  } else if (g_unchunked_tbt > 0) {
    state.counters["tbt_p99_vs_unchunked"] = s.tbt_p99_ms / g_unchunked_tbt;
    state.counters["tput_vs_unchunked"] = s.throughput / g_unchunked_tps;
  }
}

BENCHMARK(BM_sequential)->Name("serving/sequential/stories15M")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_static)->Name("serving/static/stories15M")->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_continuous)
    ->Name("serving/continuous/stories15M")
    ->ArgName("deterministic")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK(BM_online)
    ->Name("serving/online/stories15M")
    ->ArgName("chunked")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace
