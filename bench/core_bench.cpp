// SIMD primitives and 16-bit conversions against plain scalar loops, in one binary.
//   simd/{inferkit,naive}/{exp,max,sum}_N<n>   counter GBps: float bytes read per second
//   convert/{inferkit,naive}/<from>_to_<to>_N<n>  counter GBps: source bytes read per second
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/simd.hpp"

namespace {

constexpr std::size_t kN = 1 << 14;  // 64 KiB of floats: L2-resident, so we measure the math

std::vector<float> random_floats(std::size_t n) { return inferkit::bench::normal_floats(n, 4.0f); }

void set_bytes(benchmark::State& state, std::size_t bytes_per_iter) {
  inferkit::bench::set_gbps(state, static_cast<double>(bytes_per_iter));
  inferkit::bench::label_isa(state);
}

void BM_exp_inferkit(benchmark::State& state) {
  auto x = random_floats(kN);
  std::vector<float> out(kN);
  for (auto _ : state) {
    benchmark::DoNotOptimize(inferkit::simd::exp_shifted(x.data(), out.data(), kN, 1.0f));
    benchmark::ClobberMemory();
  }
  set_bytes(state, kN * sizeof(float));
}
void BM_exp_naive(benchmark::State& state) {
  auto x = random_floats(kN);
  std::vector<float> out(kN);
  for (auto _ : state) {
    float s = 0;
    for (std::size_t i = 0; i < kN; ++i) s += (out[i] = std::exp(x[i] - 1.0f));
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  set_bytes(state, kN * sizeof(float));
}
void BM_max_inferkit(benchmark::State& state) {
  auto x = random_floats(kN);
  for (auto _ : state) benchmark::DoNotOptimize(inferkit::simd::max_of(x.data(), kN));
  set_bytes(state, kN * sizeof(float));
}
void BM_max_naive(benchmark::State& state) {
  auto x = random_floats(kN);
  for (auto _ : state) {
    float m = -INFINITY;
    for (std::size_t i = 0; i < kN; ++i) m = x[i] > m ? x[i] : m;
    benchmark::DoNotOptimize(m);
  }
  set_bytes(state, kN * sizeof(float));
}
void BM_sum_inferkit(benchmark::State& state) {
  auto x = random_floats(kN);
  for (auto _ : state) benchmark::DoNotOptimize(inferkit::simd::sum_of(x.data(), kN));
  set_bytes(state, kN * sizeof(float));
}
void BM_sum_naive(benchmark::State& state) {
  auto x = random_floats(kN);
  for (auto _ : state) {
    float s = 0;
    for (std::size_t i = 0; i < kN; ++i) s += x[i];
    benchmark::DoNotOptimize(s);
  }
  set_bytes(state, kN * sizeof(float));
}

template <class Half, bool kFast>
void BM_widen(benchmark::State& state) {
  auto f = random_floats(kN);
  std::vector<Half> h(kN);
  inferkit::convert(f.data(), h.data(), kN);
  std::vector<float> out(kN);
  for (auto _ : state) {
    if constexpr (kFast) {
      inferkit::convert(h.data(), out.data(), kN);
    } else {
      for (std::size_t i = 0; i < kN; ++i) out[i] = inferkit::to_float(h[i]);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kN * sizeof(Half));
}

template <class Half, bool kFast>
void BM_narrow(benchmark::State& state) {
  auto f = random_floats(kN);
  std::vector<Half> h(kN);
  for (auto _ : state) {
    if constexpr (kFast) {
      inferkit::convert(f.data(), h.data(), kN);
    } else if constexpr (std::is_same_v<Half, inferkit::Float16>) {
      for (std::size_t i = 0; i < kN; ++i) h[i] = inferkit::to_float16(f[i]);
    } else {
      for (std::size_t i = 0; i < kN; ++i) h[i] = inferkit::to_bfloat16(f[i]);
    }
    benchmark::DoNotOptimize(h.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kN * sizeof(float));
}

using inferkit::BFloat16;
using inferkit::Float16;

BENCHMARK(BM_exp_inferkit)->Name("simd/inferkit/exp_N16384");
BENCHMARK(BM_exp_naive)->Name("simd/naive/exp_N16384");
BENCHMARK(BM_max_inferkit)->Name("simd/inferkit/max_N16384");
BENCHMARK(BM_max_naive)->Name("simd/naive/max_N16384");
BENCHMARK(BM_sum_inferkit)->Name("simd/inferkit/sum_N16384");
BENCHMARK(BM_sum_naive)->Name("simd/naive/sum_N16384");
BENCHMARK(BM_widen<Float16, true>)->Name("convert/inferkit/f16_to_f32_N16384");
BENCHMARK(BM_widen<Float16, false>)->Name("convert/naive/f16_to_f32_N16384");
BENCHMARK(BM_widen<BFloat16, true>)->Name("convert/inferkit/bf16_to_f32_N16384");
BENCHMARK(BM_widen<BFloat16, false>)->Name("convert/naive/bf16_to_f32_N16384");
BENCHMARK(BM_narrow<Float16, true>)->Name("convert/inferkit/f32_to_f16_N16384");
BENCHMARK(BM_narrow<Float16, false>)->Name("convert/naive/f32_to_f16_N16384");
BENCHMARK(BM_narrow<BFloat16, true>)->Name("convert/inferkit/f32_to_bf16_N16384");
BENCHMARK(BM_narrow<BFloat16, false>)->Name("convert/naive/f32_to_bf16_N16384");

}  // namespace
