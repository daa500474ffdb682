// Attention kernels against their baselines, in one binary.
//   attention_prefill/{inferkit,naive}/T2048_Hq32_Hkv8_D128_causal/threads:N   counter GFLOPS
//     (4 * Tq * Tk * d * Hq / 2 for causal); naive = one score row at a time with SIMD dot
//     products, softmax, SIMD axpy (the llama2.c shape), parallel over heads.
//   attention_decode/{inferkit,memread}/Tk<N>_Hq32_Hkv8_D128_<kv type>/threads:2   counter GBps
//     (K + V bytes per second); memread = a plain SIMD sum over the same bytes.
//   attention_decode/inferkit_fast/Hq32_Hkv8_D128_bf16/Tk<N>/threads:2: the same with
//     AttentionArithmetic::kReduced; counter err_rel_rms against the exact arithmetic.
//   attention_varlen/{inferkit,padded}/B8_len64-2048_Hq32_Hkv8_D128_causal     counter GFLOPS
//     of the real (unpadded) tokens; padded = every sequence computed at the longest length.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/simd.hpp"

namespace {

using inferkit::Index;
namespace ib = inferkit::bench;

constexpr Index kHq = 32, kHkv = 8, kD = 128;

double causal_flops(double tq, double tk) {
  // Bottom-right aligned causal: query i sees tk - tq + i + 1 keys.
  const double pairs = tq * (tk - tq) + tq * (tq + 1) / 2;
  return 4.0 * pairs * kD * kHq;
}

// ---- prefill ---------------------------------------------------------------------------------

struct PrefillData {
  Index t;
  std::vector<float> q, k, v, out;
  explicit PrefillData(Index tokens)
      : t(tokens),
        q(ib::normal_floats(static_cast<std::size_t>(t * kHq * kD), 1.0f, 1)),
        k(ib::normal_floats(static_cast<std::size_t>(t * kHkv * kD), 1.0f, 2)),
        v(ib::normal_floats(static_cast<std::size_t>(t * kHkv * kD), 1.0f, 3)),
        out(q.size()) {}
};

void BM_prefill_inferkit(benchmark::State& state) {
  const Index t = state.range(0);
  PrefillData data(t);
  inferkit::AttentionOptions opt;
  opt.num_threads = static_cast<int>(state.range(1));
  inferkit::DenseKv<float> kv({data.k.data(), t, kHkv, kD}, {data.v.data(), t, kHkv, kD});
  for (auto _ : state) {
    inferkit::attention(inferkit::Tensor3View<const float>(data.q.data(), t, kHq, kD), kv,
                        inferkit::Tensor3View<float>(data.out.data(), t, kHq, kD), {}, opt);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, causal_flops(double(t), double(t)));
  ib::label_isa(state);
}

// The straightforward way: for each (head, query) a full score row, softmax, weighted sum.
void naive_causal_attention(const PrefillData& data, std::vector<float>& out, int threads) {
  const Index t = data.t, group = kHq / kHkv;
  const float scale = 1.0f / std::sqrt(float(kD));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores(static_cast<std::size_t>(t));
#pragma omp for schedule(dynamic)
    for (Index h = 0; h < kHq; ++h) {
      const Index g = h / group;
      for (Index i = 0; i < t; ++i) {
        const float* q = data.q.data() + (i * kHq + h) * kD;
        float mx = -INFINITY;
        for (Index j = 0; j <= i; ++j) {
          scores[j] = inferkit::simd::dot(q, data.k.data() + (j * kHkv + g) * kD, kD) * scale;
          mx = std::max(mx, scores[j]);
        }
        float* o = out.data() + (i * kHq + h) * kD;
        std::fill(o, o + kD, 0.0f);
        float z = 0;
        for (Index j = 0; j <= i; ++j) {
          const float w = std::exp(scores[j] - mx);
          z += w;
          inferkit::simd::axpy(o, w, data.v.data() + (j * kHkv + g) * kD, kD);
        }
        inferkit::simd::scale(o, kD, 1.0f / z);
      }
    }
  }
}

void BM_prefill_naive(benchmark::State& state) {
  const Index t = state.range(0);
  PrefillData data(t);
  for (auto _ : state) {
    naive_causal_attention(data, data.out, static_cast<int>(state.range(1)));
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, causal_flops(double(t), double(t)));
  ib::label_isa(state);
}

// The FP32 FMA peak of this build's vector width: 12 independent accumulator chains (enough to
// cover the FMA latency times the two FMA ports), each step one simd::fma per chain, per thread.
void BM_prefill_fmapeak(benchmark::State& state) {
  using inferkit::simd::VecF;
  const int threads = static_cast<int>(state.range(1));
  constexpr int kChains = 12;
  constexpr long kSteps = 1L << 24;
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      VecF acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = inferkit::simd::broadcast(float(c));
      const VecF a = inferkit::simd::broadcast(0.999999f), b = inferkit::simd::broadcast(1e-7f);
      for (long i = 0; i < kSteps; ++i)  // no fast-math: every FMA stays (the sum is used)
        for (int c = 0; c < kChains; ++c) acc[c] = inferkit::simd::fma(acc[c], a, b);
      float sum = 0;
      for (int c = 0; c < kChains; ++c) sum += inferkit::simd::hsum(acc[c]);
      benchmark::DoNotOptimize(sum);
    }
  }
  ib::set_gflops(state, 2.0 * kChains * kSteps * double(inferkit::simd::kWidth) * threads);
  ib::label_isa(state);
}

// ---- decode ----------------------------------------------------------------------------------

using inferkit::BFloat16;
using inferkit::Float16;

template <class T>
struct DecodeData {
  Index tk;
  std::vector<float> q, out;
  std::vector<T> k, v;  // per-head cache layout [Hkv, Tk, d]
  explicit DecodeData(Index tokens)
      : tk(tokens),
        q(ib::normal_floats(kHq * kD, 1.0f, 4)),
        out(q.size()),
        k(static_cast<std::size_t>(kHkv * tokens * kD)),
        v(k.size()) {
    const auto kf = ib::normal_floats(k.size(), 1.0f, 5), vf = ib::normal_floats(v.size(), 1.0f, 6);
    inferkit::convert(kf.data(), k.data(), k.size());
    inferkit::convert(vf.data(), v.data(), v.size());
  }
  inferkit::DenseKv<T> kv() const {
    return {{k.data(), tk, kHkv, kD, kD, tk * kD}, {v.data(), tk, kHkv, kD, kD, tk * kD}};
  }
  double bytes() const { return 2.0 * static_cast<double>(k.size()) * sizeof(T); }
};

template <class T, inferkit::AttentionArithmetic A = inferkit::AttentionArithmetic::kExact>
void BM_decode_inferkit(benchmark::State& state) {
  DecodeData<T> data(state.range(0));
  inferkit::AttentionOptions opt;
  opt.num_threads = static_cast<int>(state.range(1));
  opt.arithmetic = A;
  const auto kv = data.kv();
  if constexpr (A != inferkit::AttentionArithmetic::kExact) {  // the rounding the mode adds
    inferkit::AttentionOptions eo = opt;
    eo.arithmetic = inferkit::AttentionArithmetic::kExact;
    std::vector<float> exact(data.out.size());
    inferkit::attention(inferkit::Tensor3View<const float>(data.q.data(), 1, kHq, kD), kv,
                        inferkit::Tensor3View<float>(exact.data(), 1, kHq, kD), {}, eo);
    inferkit::attention(inferkit::Tensor3View<const float>(data.q.data(), 1, kHq, kD), kv,
                        inferkit::Tensor3View<float>(data.out.data(), 1, kHq, kD), {}, opt);
    double sq = 0, ref = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      sq += (double(data.out[i]) - exact[i]) * (double(data.out[i]) - exact[i]);
      ref += double(exact[i]) * exact[i];
    }
    state.counters["err_rel_rms"] = std::sqrt(sq / ref);
  }
  for (auto _ : state) {
    inferkit::attention(inferkit::Tensor3View<const float>(data.q.data(), 1, kHq, kD), kv,
                        inferkit::Tensor3View<float>(data.out.data(), 1, kHq, kD), {}, opt);
    benchmark::ClobberMemory();
  }
  ib::set_gbps(state, data.bytes());
  ib::label_isa(state);
}

// Reads the same K and V bytes with a plain SIMD sum, split across the same threads.
template <class T>
void BM_decode_memread(benchmark::State& state) {
  DecodeData<T> data(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto* kf = reinterpret_cast<const float*>(data.k.data());
  const auto* vf = reinterpret_cast<const float*>(data.v.data());
  const auto n = static_cast<std::int64_t>(data.k.size() * sizeof(T) / sizeof(float));
  constexpr std::int64_t kChunk = 1 << 16;
  for (auto _ : state) {
    float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (std::int64_t c = 0; c < n; c += kChunk) {
      const auto len = static_cast<std::size_t>(std::min(kChunk, n - c));
      total += inferkit::simd::sum_of(kf + c, len) + inferkit::simd::sum_of(vf + c, len);
    }
    benchmark::DoNotOptimize(total);
  }
  ib::set_gbps(state, data.bytes());
  ib::label_isa(state);
}

// ---- varlen ----------------------------------------------------------------------------------

const std::vector<std::int32_t> kVarlenLengths{64, 2048, 300, 1024, 128, 1536, 700, 512};

void run_varlen(const std::vector<std::int32_t>& lens, int threads, benchmark::State& state) {
  std::vector<std::int32_t> cu{0};
  for (auto l : lens) cu.push_back(cu.back() + l);
  const Index total = cu.back();
  const auto q = ib::normal_floats(static_cast<std::size_t>(total * kHq * kD), 1.0f, 7);
  const auto k = ib::normal_floats(static_cast<std::size_t>(total * kHkv * kD), 1.0f, 8);
  const auto v = ib::normal_floats(static_cast<std::size_t>(total * kHkv * kD), 1.0f, 9);
  std::vector<float> out(q.size());
  inferkit::AttentionOptions opt;
  opt.num_threads = threads;
  for (auto _ : state) {
    inferkit::attention_varlen<float>({q.data(), total, kHq, kD}, cu, {k.data(), total, kHkv, kD},
                                      {v.data(), total, kHkv, kD}, cu, {out.data(), total, kHq, kD}, {}, opt);
    benchmark::ClobberMemory();
  }
  double flops = 0;
  for (auto l : kVarlenLengths) flops += causal_flops(l, l);  // real tokens only
  ib::set_gflops(state, flops);
  state.counters["tokens"] = static_cast<double>(total);
  ib::label_isa(state);
}

void BM_varlen_inferkit(benchmark::State& state) {
  run_varlen(kVarlenLengths, static_cast<int>(state.range(0)), state);
}

void BM_varlen_padded(benchmark::State& state) {
  const std::int32_t longest = *std::max_element(kVarlenLengths.begin(), kVarlenLengths.end());
  run_varlen(std::vector<std::int32_t>(kVarlenLengths.size(), longest), static_cast<int>(state.range(0)), state);
}

BENCHMARK(BM_prefill_inferkit)
    ->Name("attention_prefill/inferkit/T2048_Hq32_Hkv8_D128_causal")
    ->ArgsProduct({{2048}, {1, 2}})
    ->ArgNames({"", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prefill_naive)
    ->Name("attention_prefill/naive/T2048_Hq32_Hkv8_D128_causal")
    ->ArgsProduct({{2048}, {1, 2}})
    ->ArgNames({"", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_prefill_fmapeak)
    ->Name("attention_prefill/fmapeak/T2048_Hq32_Hkv8_D128_causal")
    ->ArgsProduct({{2048}, {1, 2}})
    ->ArgNames({"", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#define INFERKIT_DECODE_BENCH(T, tname)                         \
  BENCHMARK(BM_decode_inferkit<T>)                              \
      ->Name("attention_decode/inferkit/Hq32_Hkv8_D128_" tname) \
      ->ArgsProduct({{4096, 32768}, {2}})                       \
      ->ArgNames({"Tk", "threads"})                             \
      ->UseRealTime()                                           \
      ->Unit(benchmark::kMillisecond);                          \
  BENCHMARK(BM_decode_memread<T>)                               \
      ->Name("attention_decode/memread/Hq32_Hkv8_D128_" tname)  \
      ->ArgsProduct({{4096, 32768}, {2}})                       \
      ->ArgNames({"Tk", "threads"})                             \
      ->UseRealTime()                                           \
      ->Unit(benchmark::kMillisecond);
// Issue 17: AttentionArithmetic::kReduced over bf16 (err_rel_rms: against the exact arithmetic
// on the same cache).
BENCHMARK(BM_decode_inferkit<BFloat16, inferkit::AttentionArithmetic::kReduced>)
    ->Name("attention_decode/inferkit_fast/Hq32_Hkv8_D128_bf16")
    ->ArgsProduct({{4096, 32768}, {2}})
    ->ArgNames({"Tk", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
INFERKIT_DECODE_BENCH(float, "f32")
INFERKIT_DECODE_BENCH(BFloat16, "bf16")
INFERKIT_DECODE_BENCH(Float16, "f16")

BENCHMARK(BM_varlen_inferkit)
    ->Name("attention_varlen/inferkit/B8_len64-2048_Hq32_Hkv8_D128_causal")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_varlen_padded)
    ->Name("attention_varlen/padded/B8_len64-2048_Hq32_Hkv8_D128_causal")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
