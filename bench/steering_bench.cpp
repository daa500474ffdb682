// Steering edits per token at d = 4096 against a model step, single thread.
//   steering/{inferkit,naive}/<op>_d4096   one edit of each of 64 token rows (1 MiB of hidden
//       states, L2-resident, restored untimed between iterations), timed in thread CPU time;
//       counters:
//         ns_per_token   time of one edit of one row
//         x_layer        ns_per_token divided by the time of one Llama-7B-shaped layer's
//                        matrix-vector products for one token (below), measured in this process
//       ops: add (h += s v), add_norm (the same, norm preserved), ablate (h -= (h.u)/(u.u) u),
//       ablate_norm, plan2 (a SteeringPlan: ablate u, then add s v, at one layer)
//       naive: the literal loops a user would write (dot products and norms summed in double,
//       one element at a time)
//   steering/model/layer_d4096_f32   the seven fp32 matrix-vector products of one layer with
//       d = 4096, FFN 11008 (wq, wk, wv, wo, w1, w3, w2: 808 MB streamed from DRAM), one token,
//       one thread: what a steered layer costs anyway (x_layer uses the median of 7 steps in
//       thread CPU time).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/steering/residual_ops.hpp"
#include "inferkit/steering/steering_plan.hpp"

namespace {

namespace ib = inferkit::bench;
using inferkit::Index;

constexpr Index kD = 4096, kFfn = 11008, kRows = 64;

// One Llama-7B-shaped layer's matrix-vector products, fp32, weights filled with a cheap
// deterministic pattern (their values do not change the time).
class Layer {
 public:
  Layer()
      : w_(static_cast<std::size_t>(4 * kD * kD + 3 * kFfn * kD)),
        x_(ib::normal_floats(kD, 1.0f, 3)),
        y_(static_cast<std::size_t>(kFfn)),
        out_(static_cast<std::size_t>(kD)) {
    std::uint32_t s = 12345;
    for (auto& w : w_) {
      s = s * 1664525u + 1013904223u;
      w = static_cast<float>(s >> 8) * 0x1p-24f - 0.5f;
    }
  }
  // y = W x for each of the seven matrices, rows as SIMD dot products (memory-bound); the FFN's
  // hidden vector feeds w2.
  float step() {
    const float* w = w_.data();
    const auto matvec = [&](Index rows, Index cols, const float* in, float* out) {
      for (Index r = 0; r < rows; ++r) out[r] = inferkit::simd::dot(w + r * cols, in, static_cast<std::size_t>(cols));
      w += rows * cols;
    };
    for (int m = 0; m < 4; ++m) matvec(kD, kD, x_.data(), y_.data());  // wq, wk, wv, wo
    matvec(kFfn, kD, x_.data(), y_.data());                            // w1
    matvec(kFfn, kD, x_.data(), y_.data());                            // w3
    matvec(kD, kFfn, y_.data(), out_.data());                          // w2
    return out_[0];
  }

 private:
  std::vector<float> w_, x_, y_, out_;
};

// Thread CPU time in seconds: the machines these run on are shared, and time spent descheduled
// is not the edit's cost (on a quiet machine this equals wall time).
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds of one layer step for one token: the median of 7 runs, measured once per process.
double layer_seconds() {
  static const double seconds = [] {
    Layer layer;
    std::vector<double> t;
    for (int i = 0; i < 7; ++i) {
      const double t0 = thread_seconds();
      benchmark::DoNotOptimize(layer.step());
      t.push_back(thread_seconds() - t0);
    }
    std::nth_element(t.begin(), t.begin() + 3, t.end());
    return t[3];
  }();
  return seconds;
}

void BM_layer(benchmark::State& state) {
  Layer layer;
  for (auto _ : state) benchmark::DoNotOptimize(layer.step());
  ib::set_gbps(state, (4.0 * kD * kD + 3.0 * kFfn * kD) * sizeof(float));
  ib::label_isa(state);
}

// Times op(row pointer) over kRows rows per iteration; the rows are restored untimed.
template <class Op>
void run(benchmark::State& state, Op op) {
  const auto pristine = ib::normal_floats(static_cast<std::size_t>(kRows * kD), 2.0f, 5);
  std::vector<float> h(pristine.size());
  double total = 0.0;
  for (auto _ : state) {
    std::copy(pristine.begin(), pristine.end(), h.begin());
    benchmark::ClobberMemory();
    const double t0 = thread_seconds();
    for (Index r = 0; r < kRows; ++r) op(h.data() + r * kD);
    benchmark::ClobberMemory();
    const double s = thread_seconds() - t0;
    state.SetIterationTime(s);
    total += s;
  }
  const double per_token = total / static_cast<double>(state.iterations()) / kRows;
  state.counters["ns_per_token"] = per_token * 1e9;
  state.counters["x_layer"] = per_token / layer_seconds();
  ib::label_isa(state);
}

const std::vector<float>& vec_v() {
  static const auto v = ib::normal_floats(kD, 0.5f, 7);
  return v;
}
const std::vector<float>& vec_u() {
  static const auto u = ib::normal_floats(kD, 1.0f, 8);
  return u;
}
double uu() {
  static const double s = [] {
    double t = 0;
    for (float x : vec_u()) t += double(x) * x;
    return t;
  }();
  return s;
}
constexpr float kScale = 4.0f;
constexpr std::size_t kN = static_cast<std::size_t>(kD);

// ---- inferkit ----
void BM_add(benchmark::State& state) {
  run(state, [](float* h) { inferkit::detail::add_direction_unchecked(h, vec_v().data(), kN, {.scale = kScale}); });
}
void BM_add_norm(benchmark::State& state) {
  run(state, [](float* h) {
    inferkit::detail::add_direction_unchecked(h, vec_v().data(), kN, {.scale = kScale, .preserve_norm = true});
  });
}
void BM_ablate(benchmark::State& state) {
  run(state, [](float* h) { inferkit::detail::ablate_direction_unchecked(h, vec_u().data(), uu(), kN, {}); });
}
void BM_ablate_norm(benchmark::State& state) {
  run(state, [](float* h) {
    inferkit::detail::ablate_direction_unchecked(h, vec_u().data(), uu(), kN, {.preserve_norm = true});
  });
}
void BM_plan2(benchmark::State& state) {
  inferkit::SteeringPlan plan(1, kD);
  plan.add({.kind = inferkit::EditKind::kAblate, .vector = vec_u(), .layers = {0}});
  plan.add({.kind = inferkit::EditKind::kAdd, .vector = vec_v(), .scale = kScale, .layers = {0}});
  run(state, [&](float* h) { plan.apply(0, std::span<float>(h, kN), 100, 10); });
}

// ---- naive: the loops as written from the formulas ----
double naive_dot(const float* a, const float* b) {
  double s = 0;
  for (std::size_t i = 0; i < kN; ++i) s += double(a[i]) * double(b[i]);
  return s;
}
void naive_rescale(float* h, double before) {
  const double after = naive_dot(h, h);
  if (after == 0) return;
  const double f = std::sqrt(before / after);
  for (std::size_t i = 0; i < kN; ++i) h[i] = static_cast<float>(h[i] * f);
}
void naive_add(float* h) {
  const float* v = vec_v().data();
  for (std::size_t i = 0; i < kN; ++i) h[i] += kScale * v[i];
}
void naive_ablate(float* h) {
  const float* u = vec_u().data();
  const double c = naive_dot(h, u) / uu();
  for (std::size_t i = 0; i < kN; ++i) h[i] = static_cast<float>(h[i] - c * u[i]);
}
void BM_naive_add(benchmark::State& state) { run(state, naive_add); }
void BM_naive_add_norm(benchmark::State& state) {
  run(state, [](float* h) {
    const double before = naive_dot(h, h);
    naive_add(h);
    naive_rescale(h, before);
  });
}
void BM_naive_ablate(benchmark::State& state) { run(state, naive_ablate); }
void BM_naive_ablate_norm(benchmark::State& state) {
  run(state, [](float* h) {
    const double before = naive_dot(h, h);
    naive_ablate(h);
    naive_rescale(h, before);
  });
}
void BM_naive_plan2(benchmark::State& state) {
  run(state, [](float* h) {
    naive_ablate(h);
    naive_add(h);
  });
}

}  // namespace

BENCHMARK(BM_layer)->Name("steering/model/layer_d4096_f32")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_add)->Name("steering/inferkit/add_d4096")->UseManualTime();
BENCHMARK(BM_naive_add)->Name("steering/naive/add_d4096")->UseManualTime();
BENCHMARK(BM_add_norm)->Name("steering/inferkit/add_norm_d4096")->UseManualTime();
BENCHMARK(BM_naive_add_norm)->Name("steering/naive/add_norm_d4096")->UseManualTime();
BENCHMARK(BM_ablate)->Name("steering/inferkit/ablate_d4096")->UseManualTime();
BENCHMARK(BM_naive_ablate)->Name("steering/naive/ablate_d4096")->UseManualTime();
BENCHMARK(BM_ablate_norm)->Name("steering/inferkit/ablate_norm_d4096")->UseManualTime();
BENCHMARK(BM_naive_ablate_norm)->Name("steering/naive/ablate_norm_d4096")->UseManualTime();
BENCHMARK(BM_plan2)->Name("steering/inferkit/plan2_d4096")->UseManualTime();
BENCHMARK(BM_naive_plan2)->Name("steering/naive/plan2_d4096")->UseManualTime();
