// MoE routing + dispatch + combine for T = 4096 tokens of D = 4096 floats (16 KiB rows):
//   deepseek  E = 64, k = 8  (N = 32,768 expert rows: 512 MiB moved each way)
//   mixtral   E = 8,  k = 2  (N = 8,192 expert rows: 128 MiB each way)
// Router logits are random normal (sigma 1.5), routing dropless, softmax then top-k with
// renormalization; the "expert" is the identity (combine reads the dispatched buffer), so the
// benchmark measures data movement only.
//   moe/inferkit/route_dispatch_combine_<shape>   route + statistics + plan + dispatch + combine
//   moe/inferkit/dispatch_combine_<shape>         dispatch + combine on a prebuilt plan
//   moe/inferkit/route_<shape>                    route + apply_capacity (statistics) + plan build
//   moe/naive/route_dispatch_combine_<shape>      the per-token loop a user would write: a full
//       sort per token, rows appended to per-expert vectors, scalar weighted sums (1 thread)
//   moe/memcpy/rows_<shape>                       memcpy of the same bytes (N rows there and
//       N rows back), split into one contiguous piece per thread
// Counter GBps: rows moved = 2 * N * D * 4 bytes per iteration (dispatch writes N rows, combine
// reads N rows), the same bytes for every implementation. Argument threads: OpenMP threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/moe/dispatch.hpp"

namespace {

namespace ib = inferkit::bench;
using inferkit::Index;
using inferkit::MatrixView;

constexpr Index kT = 4096, kD = 4096;

struct Shape {
  Index experts, k;
};
constexpr Shape kDeepSeek{64, 8}, kMixtral{8, 2};

// Inputs shared by all benchmarks of a shape (built once, untimed).
struct Inputs {
  std::vector<float> logits;
  inferkit::AlignedBuffer<float> x;
  explicit Inputs(Shape s)
      : logits(ib::normal_floats(static_cast<std::size_t>(kT * s.experts), 1.5f, 7)),
        x(static_cast<std::size_t>(kT * kD)) {
    std::uint32_t st = 12345;
    for (std::size_t i = 0; i < x.size(); ++i) {
      st = st * 1664525u + 1013904223u;
      x[i] = static_cast<float>(st >> 8) * 0x1p-24f - 0.5f;
    }
  }
};

const Inputs& inputs(Shape s) {
  static const Inputs deepseek(kDeepSeek), mixtral(kMixtral);
  return s.experts == kDeepSeek.experts ? deepseek : mixtral;
}

inferkit::RouterOptions router(Shape s, int threads) {
  return {.top_k = s.k, .scoring = inferkit::RouterScoring::softmax_topk, .renormalize = true, .num_threads = threads};
}

double moved_bytes(Shape s) { return 2.0 * static_cast<double>(kT * s.k) * kD * sizeof(float); }

void touch(inferkit::AlignedBuffer<float>& b) { std::memset(b.data(), 0, b.size() * sizeof(float)); }

// Dispatch of the tokens into rows, then combine of rows (the identity expert) into out.
void move_rows(const inferkit::DispatchPlan& plan, const Inputs& in, inferkit::AlignedBuffer<float>& rows,
               inferkit::AlignedBuffer<float>& out, int threads) {
  inferkit::dispatch(plan, MatrixView<const float>(in.x.data(), kT, kD),
                     MatrixView<float>(rows.data(), plan.num_rows(), kD), threads);
  inferkit::combine(plan, MatrixView<const float>(rows.data(), plan.num_rows(), kD),
                    MatrixView<float>(out.data(), kT, kD), {.num_threads = threads});
  benchmark::DoNotOptimize(out.data());
  benchmark::ClobberMemory();
}

void BM_pipeline(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  const Inputs& in = inputs(s);
  inferkit::Routing routing;
  inferkit::DispatchPlan plan;
  inferkit::MoeStats stats;
  inferkit::AlignedBuffer<float> rows(static_cast<std::size_t>(kT * s.k * kD)), out(static_cast<std::size_t>(kT * kD));
  touch(rows);
  touch(out);
  for (auto _ : state) {
    inferkit::route(MatrixView<const float>(in.logits.data(), kT, s.experts), router(s, threads), routing);
    inferkit::apply_capacity(routing, {}, &stats);
    plan.build(routing);
    move_rows(plan, in, rows, out, threads);
  }
  ib::set_gbps(state, moved_bytes(s));
  ib::label_isa(state);
}

void BM_dispatch_combine(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  const Inputs& in = inputs(s);
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(in.logits.data(), kT, s.experts), router(s, threads), routing);
  const inferkit::DispatchPlan plan(routing);
  inferkit::AlignedBuffer<float> rows(static_cast<std::size_t>(plan.num_rows() * kD)),
      out(static_cast<std::size_t>(kT * kD));
  touch(rows);
  touch(out);
  for (auto _ : state) {
    move_rows(plan, in, rows, out, threads);
  }
  ib::set_gbps(state, moved_bytes(s));
  ib::label_isa(state);
}

void BM_route(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  const Inputs& in = inputs(s);
  inferkit::Routing routing;
  inferkit::DispatchPlan plan;
  inferkit::MoeStats stats;
  for (auto _ : state) {
    inferkit::route(MatrixView<const float>(in.logits.data(), kT, s.experts), router(s, threads), routing);
    inferkit::apply_capacity(routing, {}, &stats);
    plan.build(routing);
    benchmark::DoNotOptimize(plan.row_tokens().data());
  }
  ib::label_isa(state);
}

// The straightforward loop: per token a softmax in double and a full sort of the experts, rows
// appended to per-expert vectors (capacity kept between iterations), then per token a scalar
// weighted sum over its k expert rows.
void BM_naive(benchmark::State& state, Shape s) {
  const Inputs& in = inputs(s);
  const Index E = s.experts, k = s.k;
  std::vector<std::vector<float>> expert_rows(static_cast<std::size_t>(E));
  std::vector<std::int32_t> choice(static_cast<std::size_t>(kT * k));
  std::vector<Index> index(static_cast<std::size_t>(kT * k));
  std::vector<float> weight(static_cast<std::size_t>(kT * k));
  inferkit::AlignedBuffer<float> out(static_cast<std::size_t>(kT * kD));
  touch(out);
  std::vector<double> p(static_cast<std::size_t>(E));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (auto _ : state) {
    for (auto& v : expert_rows) v.clear();
    for (Index t = 0; t < kT; ++t) {
      const float* l = in.logits.data() + t * E;
      const double m = *std::max_element(l, l + E);
      double z = 0;
      for (Index e = 0; e < E; ++e) z += (p[e] = std::exp(double(l[e]) - m));
      for (Index e = 0; e < E; ++e) p[e] /= z;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
      double sum = 0;
      for (Index j = 0; j < k; ++j) sum += p[order[j]];
      for (Index j = 0; j < k; ++j) {
        const std::int32_t e = order[j];
        auto& v = expert_rows[static_cast<std::size_t>(e)];
        choice[t * k + j] = e;
        index[t * k + j] = static_cast<Index>(v.size()) / kD;
        weight[t * k + j] = static_cast<float>(p[e] / sum);
        v.insert(v.end(), in.x.data() + t * kD, in.x.data() + (t + 1) * kD);
      }
    }
    for (Index t = 0; t < kT; ++t) {
      float* o = out.data() + t * kD;
      for (Index i = 0; i < kD; ++i) o[i] = 0.0f;
      for (Index j = 0; j < k; ++j) {
        const float* y = expert_rows[static_cast<std::size_t>(choice[t * k + j])].data() + index[t * k + j] * kD;
        const float w = weight[t * k + j];
        for (Index i = 0; i < kD; ++i) o[i] += w * y[i];
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, moved_bytes(s));
}

void BM_memcpy(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  const std::size_t n = static_cast<std::size_t>(kT * s.k * kD);
  inferkit::AlignedBuffer<float> a(n), b(n);
  touch(a);
  touch(b);
  const auto copy = [&](float* dst, const float* src) {
#pragma omp parallel num_threads(threads)
    {
#if defined(_OPENMP)
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads()),
                        id = static_cast<std::size_t>(omp_get_thread_num());
#else
      const std::size_t nt = 1, id = 0;
#endif
      const std::size_t lo = n * id / nt, hi = n * (id + 1) / nt;
      std::memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
    }
  };
  for (auto _ : state) {
    copy(b.data(), a.data());
    copy(a.data(), b.data());
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, moved_bytes(s));
}

#define MOE_BENCH(fn, impl, shape, value, ...) \
  BENCHMARK_CAPTURE(fn, shape, value)          \
      ->Name("moe/" impl "_" #shape)           \
      ->ArgsProduct({{__VA_ARGS__}})           \
      ->ArgNames({"threads"})                  \
      ->UseRealTime()                          \
      ->Unit(benchmark::kMillisecond)

MOE_BENCH(BM_pipeline, "inferkit/route_dispatch_combine", deepseek, kDeepSeek, 1, 2);
MOE_BENCH(BM_dispatch_combine, "inferkit/dispatch_combine", deepseek, kDeepSeek, 1, 2);
MOE_BENCH(BM_route, "inferkit/route", deepseek, kDeepSeek, 1, 2);
MOE_BENCH(BM_naive, "naive/route_dispatch_combine", deepseek, kDeepSeek, 1);
MOE_BENCH(BM_memcpy, "memcpy/rows", deepseek, kDeepSeek, 1, 2);
MOE_BENCH(BM_pipeline, "inferkit/route_dispatch_combine", mixtral, kMixtral, 1, 2);
MOE_BENCH(BM_dispatch_combine, "inferkit/dispatch_combine", mixtral, kMixtral, 1, 2);
MOE_BENCH(BM_route, "inferkit/route", mixtral, kMixtral, 1, 2);
MOE_BENCH(BM_naive, "naive/route_dispatch_combine", mixtral, kMixtral, 1);
MOE_BENCH(BM_memcpy, "memcpy/rows", mixtral, kMixtral, 1, 2);

}  // namespace
