// GGUF weight types (quant/ggml_*.hpp) beside their baselines, in one binary.
//   ggml/inferkit/matvec_<type>/<N>x<K>/threads:T   decode y = W x on T threads, counter GBps
//       (weight bytes per second: the figure a memory-bound product is judged by); 256x4096 for
//       the K-quants, Q8_0 and Q4_0 keeps the weights in L2 (the kernel's own speed)
//   ggml/memread/<type>/<N>x<K>/threads:T           a SIMD float sum over the same weight bytes
//       on the same threads: the bandwidth bound (ratio inferkit / memread = share of it)
//   ggml/naive/matvec_f32_eigen/<N>x<K>/threads:T   Eigen f32 GEMV (rows split across threads)
//   ggml/inferkit/matmul_<type>/512x<N>x<K>/threads:T   prefill Y = X W^T, counter GFLOPS
//   ggml/naive/matmul_f32_eigen/512x<N>x<K>/threads:T   Eigen f32 GEMM (its own OpenMP threads)
// Weights: random blocks with binary16 factors of about 0.01 (timing does not depend on values).
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/quant/ggml_matvec.hpp"
#include "inferkit/quant/ggml_weights.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using inferkit::GgmlType;
using inferkit::GgmlWeights;
using inferkit::Index;
namespace ib = inferkit::bench;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Held {
  std::vector<std::byte> bytes;
  GgmlWeights w;
};

// Random weights of `type`, rows x cols, built once per (type, shape).
const GgmlWeights& weights(GgmlType type, Index rows, Index cols) {
  static std::map<std::tuple<int, Index, Index>, std::unique_ptr<Held>> cache;
  auto& slot = cache[{static_cast<int>(type), rows, cols}];
  if (!slot) {
    slot = std::make_unique<Held>();
    const auto* codec = inferkit::detail::ggml_block_codec(type);
    const std::size_t row_bytes = inferkit::ggml_row_bytes(type, static_cast<std::uint64_t>(cols));
    slot->bytes.resize(row_bytes * static_cast<std::size_t>(rows));
    std::mt19937 rng(5);
    if (inferkit::detail::ggml_plain_float(type)) {
      const auto v = ib::normal_floats(static_cast<std::size_t>(rows * cols), 0.02f, 3);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (type == GgmlType::kF32) std::memcpy(slot->bytes.data() + 4 * i, &v[i], 4);
        const std::uint16_t h =
            type == GgmlType::kF16 ? inferkit::to_float16(v[i]).bits : inferkit::to_bfloat16(v[i]).bits;
        if (type != GgmlType::kF32) std::memcpy(slot->bytes.data() + 2 * i, &h, 2);
      }
    } else {
      for (auto& b : slot->bytes) b = static_cast<std::byte>(rng());
      const std::uint16_t h = inferkit::to_float16(0.01f).bits;
      for (std::size_t b = 0; b < slot->bytes.size(); b += static_cast<std::size_t>(codec->block_bytes))
        for (int f = 0; f < codec->factor_count; ++f)
          std::memcpy(slot->bytes.data() + b + codec->factor_offsets[f], &h, 2);
    }
    slot->w = GgmlWeights::view(type, rows, cols, slot->bytes, "bench");
  }
  return slot->w;
}

void BM_matvec(benchmark::State& state, GgmlType type, Index rows, Index cols) {
  const int threads = static_cast<int>(state.range(0));
  const auto& w = weights(type, rows, cols);
  const auto x = ib::normal_floats(static_cast<std::size_t>(cols), 1.0f, 2);
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (auto _ : state) {
    inferkit::ggml_matvec(w, x, y, threads);
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, static_cast<double>(w.bytes().size()));
  ib::label_isa(state);
}

// The bandwidth bound: the same bytes read as floats by a SIMD sum, split across the threads.
void BM_memread(benchmark::State& state, GgmlType type, Index rows, Index cols) {
  const int threads = static_cast<int>(state.range(0));
  const auto& w = weights(type, rows, cols);
  const auto* f = reinterpret_cast<const float*>(w.bytes().data());
  const auto n = static_cast<std::int64_t>(w.bytes().size() / sizeof(float));
  constexpr std::int64_t kChunk = 1 << 16;
  for (auto _ : state) {
    float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (std::int64_t c = 0; c < n; c += kChunk)
      total += inferkit::simd::sum_of(f + c, static_cast<std::size_t>(std::min(kChunk, n - c)));
    benchmark::DoNotOptimize(total);
  }
  ib::set_gbps(state, static_cast<double>(w.bytes().size()));
  ib::label_isa(state);
}

void BM_matvec_eigen(benchmark::State& state, Index rows, Index cols) {
  const int threads = static_cast<int>(state.range(0));
  const auto wv = ib::normal_floats(static_cast<std::size_t>(rows * cols), 0.02f, 1);
  const auto x = ib::normal_floats(static_cast<std::size_t>(cols), 1.0f, 2);
  std::vector<float> y(static_cast<std::size_t>(rows));
  const Eigen::Map<const RowMatrix> w(wv.data(), rows, cols);
  const Eigen::Map<const Eigen::VectorXf> xv(x.data(), cols);
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const Index r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
      Eigen::Map<Eigen::VectorXf>(y.data() + r0, r1 - r0).noalias() = w.middleRows(r0, r1 - r0) * xv;
    }
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, double(rows) * double(cols) * sizeof(float));
  ib::label_isa(state);
}

constexpr Index kPrefill = 512;

void BM_matmul(benchmark::State& state, GgmlType type, Index rows, Index cols) {
  const int threads = static_cast<int>(state.range(0));
  const auto& w = weights(type, rows, cols);
  const auto x = ib::normal_floats(static_cast<std::size_t>(kPrefill * cols), 1.0f, 2);
  std::vector<float> y(static_cast<std::size_t>(kPrefill * rows));
  for (auto _ : state) {
    inferkit::ggml_matmul(w, {x.data(), kPrefill, cols}, {y.data(), kPrefill, rows}, threads);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, 2.0 * double(kPrefill) * double(rows) * double(cols));
  ib::label_isa(state);
}

void BM_matmul_eigen(benchmark::State& state, Index rows, Index cols) {
  const int threads = static_cast<int>(state.range(0));
  const auto wv = ib::normal_floats(static_cast<std::size_t>(rows * cols), 0.02f, 1);
  const auto x = ib::normal_floats(static_cast<std::size_t>(kPrefill * cols), 1.0f, 2);
  RowMatrix y(kPrefill, rows);
  const Eigen::Map<const RowMatrix> w(wv.data(), rows, cols), xm(x.data(), kPrefill, cols);
  Eigen::setNbThreads(threads);
  for (auto _ : state) {
    y.noalias() = xm * w.transpose();
    benchmark::ClobberMemory();
  }
  Eigen::setNbThreads(0);
  ib::set_gflops(state, 2.0 * double(kPrefill) * double(rows) * double(cols));
  ib::label_isa(state);
}

const std::vector<GgmlType> kTypes = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                                      GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                                      GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                      GgmlType::kQ6_K};

const bool registered = [] {
  for (auto [rows, cols] : std::vector<std::pair<Index, Index>>{{4096, 4096}, {4096, 14336}}) {
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    benchmark::RegisterBenchmark(("ggml/naive/matvec_f32_eigen/" + shape).c_str(), BM_matvec_eigen, rows, cols)
        ->ArgName("threads")
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime();
    for (GgmlType t : kTypes) {
      const std::string name = inferkit::ggml_type_name(t);
      benchmark::RegisterBenchmark(("ggml/memread/" + name + "/" + shape).c_str(), BM_memread, t, rows, cols)
          ->ArgName("threads")
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("ggml/inferkit/matvec_" + name + "/" + shape).c_str(), BM_matvec, t, rows, cols)
          ->ArgName("threads")
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseRealTime();
    }
  }
  // 256 x 4096: the weights stay in L2 (0.6-1.1 MB for these types), so matvec / memread there
  // shows how far the kernel is from bandwidth-bound when memory is fast.
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const std::string name = inferkit::ggml_type_name(t);
    benchmark::RegisterBenchmark(("ggml/memread/" + name + "/256x4096").c_str(), BM_memread, t, 256, 4096)
        ->ArgName("threads")
        ->Arg(1)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("ggml/inferkit/matvec_" + name + "/256x4096").c_str(), BM_matvec, t, 256, 4096)
        ->ArgName("threads")
        ->Arg(1)
        ->UseRealTime();
  }
  const std::string shape = std::to_string(kPrefill) + "x4096x4096";
  benchmark::RegisterBenchmark(("ggml/naive/matmul_f32_eigen/" + shape).c_str(), BM_matmul_eigen, 4096, 4096)
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (GgmlType t : kTypes)
    benchmark::RegisterBenchmark(("ggml/inferkit/matmul_" + inferkit::ggml_type_name(t) + "/" + shape).c_str(),
                                 BM_matmul, t, 4096, 4096)
        ->ArgName("threads")
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
