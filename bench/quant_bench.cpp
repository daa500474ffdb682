// Quantized matmuls (quant/) beside their float baselines, in one binary.
//   quant/{naive,inferkit}/matvec_<fmt>/4096x4096/threads:N      decode: y = W x, counter GBps
//       naive = Eigen f32 (rows split across threads by OpenMP; Eigen's GEMV is serial);
//       fmt: int8 (float x), int8_a8 (int8 x, W8A8), int4 (g32 sym, float x), int4_q8 (int8 x
//       per 32-block, llama.cpp's road)
//   quant/{naive,inferkit}/matmul_<fmt>/512x4096x4096/threads:N  prefill: Y = X W^T, GFLOPS
//       naive = Eigen f32 GEMM (Eigen's own OpenMP threads); w8a8 (per-token scales), and
//       w8a8 with the LLM.int8 decomposition on X with 6 outlier channels
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <chrono>
#include <cmath>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/quant/matmul.hpp"
#include "inferkit/quant/matvec.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using inferkit::Index;
namespace ib = inferkit::bench;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr Index kN = 4096, kK = 4096, kM = 512;

struct Weights {
  std::vector<float> w = ib::normal_floats(static_cast<std::size_t>(kN * kK), 0.02f, 1);
  inferkit::MatrixView<const float> view() const { return {w.data(), kN, kK}; }
  inferkit::Int8Weights q8{view()};
  inferkit::Int4Weights q4{view(), {32, true}};
};
const Weights& weights() {
  static const Weights w;
  return w;
}

// ---- matvec -------------------------------------------------------------------------------

void BM_matvec_eigen(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto& W = weights();
  const auto x = ib::normal_floats(kK, 1.0f, 2);
  std::vector<float> y(kN);
  const Eigen::Map<const RowMatrix> w(W.w.data(), kN, kK);
  const Eigen::Map<const Eigen::VectorXf> xv(x.data(), kK);
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const Index r0 = kN * t / threads, r1 = kN * (t + 1) / threads;
      Eigen::Map<Eigen::VectorXf>(y.data() + r0, r1 - r0).noalias() = w.middleRows(r0, r1 - r0) * xv;
    }
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, double(kN) * kK * sizeof(float));
  ib::label_isa(state);
}

template <class Q>
void run_matvec(benchmark::State& state, const Q& q, inferkit::ActivationFormat act) {
  const auto x = ib::normal_floats(kK, 1.0f, 2);
  std::vector<float> y(kN);
  const inferkit::MatvecOptions o{.activations = act, .threads = static_cast<int>(state.range(0))};
  for (auto _ : state) {
    inferkit::matvec(q, x, y, o);
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, static_cast<double>(q.bytes()));
  state.SetLabel(inferkit::quant_kernel_name(inferkit::resolve_quant_kernel(inferkit::QuantKernel::kAuto)));
}
void BM_matvec_int8(benchmark::State& s) { run_matvec(s, weights().q8, inferkit::ActivationFormat::kFloat); }
void BM_matvec_int8_a8(benchmark::State& s) { run_matvec(s, weights().q8, inferkit::ActivationFormat::kInt8); }
void BM_matvec_int4(benchmark::State& s) { run_matvec(s, weights().q4, inferkit::ActivationFormat::kFloat); }
void BM_matvec_int4_q8(benchmark::State& s) { run_matvec(s, weights().q4, inferkit::ActivationFormat::kInt8); }

// ---- matmul (prefill) ---------------------------------------------------------------------

std::vector<float> prefill_activations(bool outliers) {
  auto x = ib::normal_floats(static_cast<std::size_t>(kM * kK), 1.0f, 3);
  if (outliers)
    for (Index m = 0; m < kM; ++m)
      for (Index c : {7, 300, 1111, 2048, 3000, 4001}) x[static_cast<std::size_t>(m * kK + c)] *= 50.0f;
  return x;
}

void BM_matmul_eigen(benchmark::State& state) {
  const auto& W = weights();
  const auto x = prefill_activations(false);
  RowMatrix y(kM, kN);
  const Eigen::Map<const RowMatrix> w(W.w.data(), kN, kK), xm(x.data(), kM, kK);
  Eigen::setNbThreads(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    y.noalias() = xm * w.transpose();
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, 2.0 * kM * kN * kK);
  ib::label_isa(state);
}

void run_w8a8(benchmark::State& state, bool outliers) {
  const auto& W = weights();
  const auto x = prefill_activations(outliers);
  std::vector<float> y(static_cast<std::size_t>(kM * kN));
  inferkit::MatmulOptions o{.threads = static_cast<int>(state.range(0))};
  if (outliers) o.outliers = inferkit::OutlierOptions{6.0f, W.view()};
  inferkit::MatmulStats st;
  for (auto _ : state) {
    st = inferkit::matmul({x.data(), kM, kK}, W.q8, {y.data(), kM, kN}, o);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, 2.0 * kM * kN * kK);
  state.counters["outlier_cols"] = static_cast<double>(st.outlier_columns);
  state.SetLabel(inferkit::quant_kernel_name(inferkit::resolve_quant_kernel(inferkit::QuantKernel::kAuto)));
}
void BM_matmul_w8a8(benchmark::State& s) { run_w8a8(s, false); }
void BM_matmul_w8a8_llm_int8(benchmark::State& s) { run_w8a8(s, true); }

#define QUANT_BENCH(fn, name) \
  BENCHMARK(fn)->Name(name)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond)

QUANT_BENCH(BM_matvec_eigen, "quant/naive/matvec_f32_eigen/4096x4096");
QUANT_BENCH(BM_matvec_int8, "quant/inferkit/matvec_int8/4096x4096");
QUANT_BENCH(BM_matvec_int8_a8, "quant/inferkit/matvec_int8_a8/4096x4096");
QUANT_BENCH(BM_matvec_int4, "quant/inferkit/matvec_int4/4096x4096");
QUANT_BENCH(BM_matvec_int4_q8, "quant/inferkit/matvec_int4_q8/4096x4096");
QUANT_BENCH(BM_matmul_eigen, "quant/naive/matmul_f32_eigen/512x4096x4096")->Unit(benchmark::kMillisecond);
QUANT_BENCH(BM_matmul_w8a8, "quant/inferkit/matmul_w8a8/512x4096x4096")->Unit(benchmark::kMillisecond);
QUANT_BENCH(BM_matmul_w8a8_llm_int8, "quant/inferkit/matmul_w8a8_llm_int8/512x4096x4096")->Unit(benchmark::kMillisecond);

}  // namespace
