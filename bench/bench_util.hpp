#pragma once
// Shared helpers for inferkit's benchmarks: throughput counters and deterministic inputs.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <vector>

#include "inferkit/core/simd.hpp"

namespace inferkit::bench {

/// Sets counter `GBps`: `bytes_per_iteration` bytes touched per iteration, in 1e9 bytes/s.
inline void set_gbps(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GBps"] =
      benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// Sets counter `GFLOPS`: `flops_per_iteration` floating-point operations per iteration.
inline void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

/// Sets counter `us`: mean wall time per iteration in microseconds (use with UseRealTime()).
inline void set_us(benchmark::State& state, double seconds_total) {
  state.counters["us"] = benchmark::Counter(seconds_total * 1e6 / static_cast<double>(state.iterations()));
}

/// Labels the run with the compiled SIMD instruction set.
inline void label_isa(benchmark::State& state) { state.SetLabel(inferkit::simd::isa_name()); }

inline std::vector<float> normal_floats(std::size_t n, float sigma = 1.0f, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace inferkit::bench
