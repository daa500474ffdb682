// Quantized matmuls (quant/) beside their float baselines, in one binary.
//   quant/{naive,inferkit}/matvec_<fmt>/4096x4096/threads:N      decode: y = W x, counter GBps
//       naive = Eigen f32 (rows split across threads by OpenMP; Eigen's GEMV is serial);
//       fmt: int8 (float x), int8_a8 (int8 x, W8A8), int4 (g32 sym, float x), int4_q8 (int8 x
//       per 32-block, llama.cpp's road)
//   quant/{naive,inferkit}/matmul_<fmt>/512x4096x4096/threads:N  prefill: Y = X W^T, GFLOPS
//       naive = Eigen f32 GEMM (Eigen's own OpenMP threads); w8a8 (per-token scales), and
//       w8a8 with the LLM.int8 decomposition on X with 6 outlier channels
//   quant/inferkit/error/<data>/<method>      the error table (one evaluation; counters rel_err =
//       ||Y - Y_64|| / ||Y_64||, weight_bytes, outlier_cols), methods of quant/error_report.hpp:
//       data outliers6x50: X [256 x 4096] normal with 6 channels scaled by 50, W [1024 x 4096];
//       data stories260K: the real activations at every projection input of stories260K
//       (INFERKIT_TEST_MODEL) over its 256-token greedy text, errors pooled over all products
//   quant/{naive,inferkit}/runner_<weights>/stories15M_random/threads:N   tokens_per_s of the
//       llama2c runner (128 tokens, the sampling of runner_bench) on f32 / int8 / int4 weights,
//       with float or int8 (_a8) activations
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <chrono>
#include <cmath>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/quant/error_report.hpp"
#include "inferkit/quant/matmul.hpp"
#include "inferkit/quant/matvec.hpp"

#if defined(INFERKIT_BENCH_WITH_EXAMPLES)
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>

#include "llama2c/quant_weights.hpp"
#include "llama2c/runner.hpp"
#endif

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
  const inferkit::MatvecOptions o{.activations = act, .num_threads = static_cast<int>(state.range(0))};
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
  inferkit::MatmulOptions o{.num_threads = static_cast<int>(state.range(0))};
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

// ---- error tables -------------------------------------------------------------------------

void report_error(benchmark::State& state, const inferkit::MethodError& e) {
  for (auto _ : state) benchmark::DoNotOptimize(e.relative_error);
  state.counters["rel_err"] = e.relative_error;
  state.counters["weight_bytes"] = static_cast<double>(e.weight_bytes);
  state.counters["outlier_cols"] = static_cast<double>(e.outlier_columns);
}

const std::vector<inferkit::MethodError>& synthetic_errors() {
  static const std::vector<inferkit::MethodError> r = [] {
    constexpr Index M = 256, N = 1024, K = 4096;
    auto x = ib::normal_floats(static_cast<std::size_t>(M * K), 1.0f, 11);
    for (Index m = 0; m < M; ++m)
      for (Index c : {7, 300, 1111, 2048, 3000, 4001}) x[static_cast<std::size_t>(m * K + c)] *= 50.0f;
    const auto w = ib::normal_floats(static_cast<std::size_t>(N * K), 0.02f, 12);
    return inferkit::quantization_error_report({x.data(), M, K}, {w.data(), N, K});
  }();
  return r;
}

void BM_error_synthetic(benchmark::State& state, std::size_t method) {
  report_error(state, synthetic_errors()[method]);
}

#if defined(INFERKIT_BENCH_WITH_EXAMPLES)
// Inputs of every projection of a real model, recorded while it reads its own greedy text.
class Recorder final : public llama2c::ProjectionHook {
 public:
  explicit Recorder(const llama2c::Model& m) : m_(m) {}
  void project(llama2c::Proj p, int layer, const float* x, float* y) const override {
    const auto w = m_.matrix(p, layer);
    auto& rows = inputs_[{static_cast<int>(p), layer}];
    rows.insert(rows.end(), x, x + w.cols());
    Eigen::Map<Eigen::VectorXf>(y, w.rows()).noalias() = w * llama2c::VectorMap(x, w.cols());
  }
  mutable std::map<std::pair<int, int>, std::vector<float>> inputs_;  // serial recording run

 private:
  const llama2c::Model& m_;
};

const std::vector<inferkit::MethodError>* model_errors() {
  static const std::unique_ptr<std::vector<inferkit::MethodError>> r =
      []() -> std::unique_ptr<std::vector<inferkit::MethodError>> {
    const char* path = std::getenv("INFERKIT_TEST_MODEL");
    if (!path) return nullptr;
    auto m = llama2c::Model::load(path);
    const std::string model(path);
    std::ifstream f(model.substr(0, model.find_last_of('/') + 1) + "stories260K_greedy256.txt");
    std::vector<llama2c::TokenId> ids{llama2c::kBos};
    for (llama2c::TokenId t; f >> t;) ids.push_back(t);
    auto rec = std::make_shared<Recorder>(m);
    m.set_projections(rec);
    llama2c::evaluate(m, ids, {}, 1, static_cast<Index>(ids.size()));
    m.set_projections(nullptr);
    // Pool over every product: sum of squared errors over sum of squared references.
    std::vector<double> num(std::size(inferkit::kAllQuantMethods)), outl(num.size()), bytes(num.size());
    double den = 0;
    for (const auto& [key, rows] : rec->inputs_) {
      const auto w = m.matrix(static_cast<llama2c::Proj>(key.first), key.second);
      const Index K = w.cols(), T = static_cast<Index>(rows.size()) / K;
      const auto rep = inferkit::quantization_error_report({rows.data(), T, K}, {w.data(), w.rows(), K});
      for (std::size_t i = 0; i < rep.size(); ++i) {
        num[i] += rep[i].relative_error * rep[i].relative_error * rep[i].reference_norm * rep[i].reference_norm;
        outl[i] += static_cast<double>(rep[i].outlier_columns);
        bytes[i] += static_cast<double>(rep[i].weight_bytes);
      }
      den += rep[0].reference_norm * rep[0].reference_norm;
    }
    auto out = std::make_unique<std::vector<inferkit::MethodError>>();
    for (std::size_t i = 0; i < num.size(); ++i) {
      inferkit::MethodError e;
      e.method = inferkit::kAllQuantMethods[i];
      e.relative_error = std::sqrt(num[i] / den);
      e.outlier_columns = static_cast<Index>(outl[i]);
      e.weight_bytes = static_cast<std::size_t>(bytes[i]);
      out->push_back(e);
    }
    return out;
  }();
  return r.get();
}

void BM_error_model(benchmark::State& state, std::size_t method) {
  const auto* r = model_errors();
  if (!r) {
    state.SkipWithError("INFERKIT_TEST_MODEL is not set");
    return;
  }
  report_error(state, (*r)[method]);
}

// ---- the llama2c runner on quantized weights -----------------------------------------------

const llama2c::Model& runner_model(llama2c::WeightFormat f, bool act_int8) {
  static std::map<std::pair<int, bool>, std::unique_ptr<llama2c::Model>> models;
  auto& slot = models[{static_cast<int>(f), act_int8}];
  if (!slot) {
    slot = std::make_unique<llama2c::Model>(llama2c::Model::random(llama2c::stories15M_shape(), 1));
    llama2c::quantize_model(*slot, {.weights = f, .act_int8 = act_int8});
  }
  return *slot;
}

void run_runner(benchmark::State& state, llama2c::WeightFormat f, bool act_int8) {
#if defined(_OPENMP)
  omp_set_num_threads(static_cast<int>(state.range(0)));
#endif
  const auto& m = runner_model(f, act_int8);
  llama2c::SamplingConfig s;
  s.params.temperature = 0.8f;
  s.params.top_k = 40;
  s.params.top_p = 0.95f;
  s.params.repetition_penalty = 1.1f;
  double tokens = 0, seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens += static_cast<double>(llama2c::generate(m, {}, 128, s).size());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["tokens_per_s"] = tokens / seconds;
}
void BM_runner_f32(benchmark::State& s) { run_runner(s, llama2c::WeightFormat::kF32, false); }
void BM_runner_int8(benchmark::State& s) { run_runner(s, llama2c::WeightFormat::kInt8, false); }
void BM_runner_int8_a8(benchmark::State& s) { run_runner(s, llama2c::WeightFormat::kInt8, true); }
void BM_runner_int4(benchmark::State& s) { run_runner(s, llama2c::WeightFormat::kInt4, false); }
void BM_runner_int4_a8(benchmark::State& s) { run_runner(s, llama2c::WeightFormat::kInt4, true); }
#endif

#define QUANT_BENCH(fn, name) \
  BENCHMARK(fn)->Name(name)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond)

QUANT_BENCH(BM_matvec_eigen, "quant/naive/matvec_f32_eigen/4096x4096");
QUANT_BENCH(BM_matvec_int8, "quant/inferkit/matvec_int8/4096x4096");
QUANT_BENCH(BM_matvec_int8_a8, "quant/inferkit/matvec_int8_a8/4096x4096");
QUANT_BENCH(BM_matvec_int4, "quant/inferkit/matvec_int4/4096x4096");
QUANT_BENCH(BM_matvec_int4_q8, "quant/inferkit/matvec_int4_q8/4096x4096");
QUANT_BENCH(BM_matmul_eigen, "quant/naive/matmul_f32_eigen/512x4096x4096")->Unit(benchmark::kMillisecond);
QUANT_BENCH(BM_matmul_w8a8, "quant/inferkit/matmul_w8a8/512x4096x4096")->Unit(benchmark::kMillisecond);
QUANT_BENCH(BM_matmul_w8a8_llm_int8, "quant/inferkit/matmul_w8a8_llm_int8/512x4096x4096")
    ->Unit(benchmark::kMillisecond);

const int kErrorTableRegistered = [] {
  for (std::size_t i = 0; i < std::size(inferkit::kAllQuantMethods); ++i) {
    const std::string method = inferkit::quant_method_name(inferkit::kAllQuantMethods[i]);
    benchmark::RegisterBenchmark(("quant/inferkit/error/outliers6x50/" + method).c_str(), [i](benchmark::State& st) {
      BM_error_synthetic(st, i);
    })->Iterations(1);
#if defined(INFERKIT_BENCH_WITH_EXAMPLES)
    benchmark::RegisterBenchmark(("quant/inferkit/error/stories260K/" + method).c_str(), [i](benchmark::State& st) {
      BM_error_model(st, i);
    })->Iterations(1);
#endif
  }
  return 0;
}();

#if defined(INFERKIT_BENCH_WITH_EXAMPLES)
#define RUNNER_BENCH(fn, name) \
  BENCHMARK(fn)->Name(name)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
RUNNER_BENCH(BM_runner_f32, "quant/naive/runner_f32/stories15M_random");
RUNNER_BENCH(BM_runner_int8, "quant/inferkit/runner_int8/stories15M_random");
RUNNER_BENCH(BM_runner_int8_a8, "quant/inferkit/runner_int8_a8/stories15M_random");
RUNNER_BENCH(BM_runner_int4, "quant/inferkit/runner_int4/stories15M_random");
RUNNER_BENCH(BM_runner_int4_a8, "quant/inferkit/runner_int4_a8/stories15M_random");
#endif

}  // namespace
