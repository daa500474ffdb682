// Issue 32 benchmarks: learned sink logits and multi-head latent attention, baselines in the
// same binary.
//   attention_sink/Hq32_Hkv8_D128/Tq/Tk/threads   the same attention() call without and with
//     AttentionOptions::sink_logits, alternating in one loop (decode: Tq 1, Tk 8192; prefill:
//     T 1024 causal); counter sink_over_plain is the sinks' cost in wall time,
//     cpu_sink_over_plain in process CPU time.
//   mla_decode/{inferkit,materialized}/V2Lite/Tk/threads   one layer's decode step, DeepSeek-V2-Lite
//     geometry (16 heads, rank 512, rope 64, nope 128, v 128), bf16 cache: mla_attention over a
//     LatentCache<BFloat16> (W_UK / W_UV absorption included) against attention() over the
//     materialized per-head K [Tk, 16, 192] and V (128 values padded to the keys' 192: attention()
//     takes one head_dim). Counters us and kv_bytes_per_token (latent: 1,152; materialized as
//     stored: 12,288; unpadded it would be 10,240).
//   mla_prefill/{inferkit,materialized}/V2Lite_Tk4096/threads:2/Tq   prefill chunks of Tq queries
//     over 4096 + Tq cached tokens: absorbed mla_attention against attention() over K/V that
//     are already materialized (their materialization is not counted).
//   wide_group_decode/Tk8192_bf16/threads:1/rows/d/invariant   one KV head with many query rows:
//     the default dispatch (0: the decode kernel below kLanesDecodeRows rows, the lanes kernel
//     from it) against the batch-invariant mode (1: the lanes kernel always, fixed 1024-token
//     splits). Before the switch (commit bba2e1a) 0 was the decode kernel at every row count,
//     which is where kLanesDecodeRows = 32 comes from.
//   mla_decode/{inferkit,attention_core}/V3/Tk/threads   128 heads: the whole mla_attention step
//     (projections and its own decode kernel, attention/detail/mla_decode.hpp) and, as the
//     baseline, attention() over the latent stream alone (the generic lanes decode, which also
//     sums the 64 k_pe columns); counter GFLOPS counts 2 x H x Tk x (576 + 512) (scores and the
//     weighted sum of c), against fma_peak/threads (a same-run loop of independent vector FMAs,
//     counter GFLOPS). GFLOPS is per wall second: on a loaded machine compare CPU times.
//   mla_decode/inferkit_bf16w/V3/Tk/threads   the whole step with bf16 W_UK / W_UV
//     (MlaWeightsBf16): half the step's 67 MB of f32 up-projection reads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/mla.hpp"
#include "inferkit/core/convert.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/kv/latent_cache.hpp"

namespace {

using inferkit::Index;
namespace ib = inferkit::bench;

// ---- sink logits -----------------------------------------------------------------------------

constexpr Index kSinkHq = 32, kSinkHkv = 8, kSinkD = 128;

// range(0): query tokens, range(1): key tokens, range(2): threads. Each iteration runs the call
// without and then with sinks (alternating, so load drift on the shared machine hits both
// alike); counters plain_us, sink_us and sink_over_plain (the cost ratio).
void BM_attention_sink(benchmark::State& state) {
  const Index tq = state.range(0), tk = state.range(1);
  const auto q = ib::normal_floats(static_cast<std::size_t>(tq * kSinkHq * kSinkD), 1.0f, 1);
  const auto k = ib::normal_floats(static_cast<std::size_t>(tk * kSinkHkv * kSinkD), 1.0f, 2);
  const auto v = ib::normal_floats(static_cast<std::size_t>(tk * kSinkHkv * kSinkD), 1.0f, 3);
  const auto sinks = ib::normal_floats(static_cast<std::size_t>(kSinkHq), 1.0f, 4);
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(tq * kSinkHq));
  inferkit::DenseKv<float> kv({k.data(), tk, kSinkHkv, kSinkD}, {v.data(), tk, kSinkHkv, kSinkD});
  inferkit::AttentionOptions plain{.num_threads = static_cast<int>(state.range(2))};
  inferkit::AttentionOptions sunk = plain;
  sunk.sink_logits = sinks;
  double t_plain = 0, t_sink = 0, c_plain = 0, c_sink = 0;
  for (auto _ : state) {
    for (int pass = 0; pass < 2; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      inferkit::attention({q.data(), tq, kSinkHq, kSinkD}, kv, {out.data(), tq, kSinkHq, kSinkD},
                          {lse.data(), tq, kSinkHq}, pass == 0 ? plain : sunk);
      benchmark::ClobberMemory();
      (pass == 0 ? c_plain : c_sink) += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      (pass == 0 ? t_plain : t_sink) += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["plain_us"] = t_plain * 1e6 / n;
  state.counters["sink_us"] = t_sink * 1e6 / n;
  state.counters["sink_over_plain"] = t_sink / t_plain;
  // The same ratio in process CPU time (all threads; std::clock), which a loaded machine's
  // time-sharing does not inflate as it does wall time.
  state.counters["cpu_sink_over_plain"] = c_sink / c_plain;
  ib::label_isa(state);
}

void sink_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) b->Args({1, 8192, threads})->Args({1024, 1024, threads});
  b->ArgNames({"Tq", "Tk", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_attention_sink)->Name("attention_sink/Hq32_Hkv8_D128")->Apply(sink_args);

// ---- multi-head latent attention -----------------------------------------------------------

constexpr inferkit::MlaShape kV2Lite{
    .num_heads = 16, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128};
constexpr inferkit::MlaShape kV3{
    .num_heads = 128, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128};

struct MlaData {
  inferkit::MlaShape s;
  Index tk;
  std::vector<float> q, wuk, wuv, out;
  std::vector<inferkit::BFloat16> wuk16, wuv16;  // the same weights in bf16
  inferkit::LatentCache<inferkit::BFloat16> cache;
  MlaData(const inferkit::MlaShape& shape, Index tokens)
      : s(shape),
        tk(tokens),
        q(ib::normal_floats(static_cast<std::size_t>(s.num_heads * s.query_dim()), 1.0f, 11)),
        wuk(ib::normal_floats(static_cast<std::size_t>(s.num_heads * s.qk_nope_dim * s.kv_lora_rank), 0.044f, 12)),
        wuv(ib::normal_floats(static_cast<std::size_t>(s.num_heads * s.v_head_dim * s.kv_lora_rank), 0.044f, 13)),
        out(static_cast<std::size_t>(s.num_heads * s.v_head_dim)),
        cache({.layers = 1, .kv_lora_rank = s.kv_lora_rank, .rope_dim = s.qk_rope_dim, .capacity = tokens}) {
    for (Index t0 = 0; t0 < tk; t0 += 4096) {  // appended in pieces: the random rows stay small
      const Index n = std::min<Index>(4096, tk - t0);
      const auto c =
          ib::normal_floats(static_cast<std::size_t>(n * s.kv_lora_rank), 1.0f, 14 + static_cast<unsigned>(t0));
      const auto k =
          ib::normal_floats(static_cast<std::size_t>(n * s.qk_rope_dim), 1.0f, 15 + static_cast<unsigned>(t0));
      cache.append(0, {c.data(), n, s.kv_lora_rank}, {k.data(), n, s.qk_rope_dim});
    }
    for (float w : wuk) wuk16.push_back(inferkit::to_bfloat16(w));
    for (float w : wuv) wuv16.push_back(inferkit::to_bfloat16(w));
  }
  inferkit::MlaWeights weights() const {
    return {{wuk.data(), s.num_heads, s.qk_nope_dim, s.kv_lora_rank},
            {wuv.data(), s.num_heads, s.v_head_dim, s.kv_lora_rank}};
  }
  void step(int threads, bool bf16_weights = false) {
    const inferkit::Tensor3View<const float> qv{q.data(), 1, s.num_heads, s.query_dim()};
    const inferkit::Tensor3View<float> ov{out.data(), 1, s.num_heads, s.v_head_dim};
    if (bf16_weights) {
      const inferkit::MlaWeightsBf16 w{{wuk16.data(), s.num_heads, s.qk_nope_dim, s.kv_lora_rank},
                                       {wuv16.data(), s.num_heads, s.v_head_dim, s.kv_lora_rank}};
      inferkit::mla_attention(s, qv, cache.source(0), w, ov, {.num_threads = threads});
    } else {
      inferkit::mla_attention(s, qv, cache.source(0), weights(), ov, {.num_threads = threads});
    }
  }
};

void BM_mla_decode_v2lite(benchmark::State& state) {
  MlaData data(kV2Lite, state.range(0));
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    data.step(threads);
    benchmark::ClobberMemory();
  }
  state.counters["kv_bytes_per_token"] = static_cast<double>(data.cache.row_bytes());
  ib::label_isa(state);
}

// The GQA-equivalent baseline: materialized per-head keys [c W_UK^T; k_pe] and values (padded).
void BM_materialized_decode_v2lite(benchmark::State& state) {
  const Index tk = state.range(0), H = kV2Lite.num_heads, D = kV2Lite.query_dim();
  const int threads = static_cast<int>(state.range(1));
  const auto kf = ib::normal_floats(static_cast<std::size_t>(tk * H * D), 1.0f, 21);
  auto vf = ib::normal_floats(static_cast<std::size_t>(tk * H * D), 1.0f, 22);
  for (Index i = 0; i < tk * H; ++i)
    std::fill(vf.begin() + i * D + kV2Lite.v_head_dim, vf.begin() + (i + 1) * D, 0.0f);  // the padding
  std::vector<inferkit::BFloat16> k(kf.size()), v(vf.size());
  inferkit::convert(kf.data(), k.data(), kf.size());
  inferkit::convert(vf.data(), v.data(), vf.size());
  const auto q = ib::normal_floats(static_cast<std::size_t>(H * D), 1.0f, 23);
  std::vector<float> out(q.size());
  inferkit::DenseKv<inferkit::BFloat16> kv({k.data(), tk, H, D}, {v.data(), tk, H, D});
  for (auto _ : state) {
    inferkit::attention({q.data(), 1, H, D}, kv, {out.data(), 1, H, D}, {.num_threads = threads});
    benchmark::ClobberMemory();
  }
  state.counters["kv_bytes_per_token"] = static_cast<double>(2 * H * D * 2);
  ib::label_isa(state);
}

double v3_flops(Index tk) {
  return 2.0 * double(kV3.num_heads) * double(tk) * double(kV3.latent_dim() + kV3.kv_lora_rank);
}

template <bool kBf16Weights>
void BM_mla_decode_v3(benchmark::State& state) {
  MlaData data(kV3, state.range(0));
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    data.step(threads, kBf16Weights);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, v3_flops(data.tk));
  ib::label_isa(state);
}

// The attention over the latent stream alone (absorbed queries given), without the projections.
void BM_mla_attention_core_v3(benchmark::State& state) {
  MlaData data(kV3, state.range(0));
  const Index H = kV3.num_heads, L = kV3.latent_dim();
  const auto qa = ib::normal_floats(static_cast<std::size_t>(H * L), 1.0f, 31);
  std::vector<float> ctx(qa.size());
  const auto src = data.cache.source(0);
  const inferkit::AttentionOptions opt{.scale = kV3.default_scale(),
                                       .num_threads = static_cast<int>(state.range(1)),
                                       .batch_invariant = state.range(2) == 1};
  for (auto _ : state) {
    inferkit::attention({qa.data(), 1, H, L}, src, {ctx.data(), 1, H, L}, opt);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, v3_flops(data.tk));
  ib::label_isa(state);
}

// FMA peak: 12 independent accumulator chains per thread (more than the FMA latency x ports).
void BM_fma_peak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr int kChains = 12;
  constexpr std::int64_t kSteps = 1 << 20;
  std::vector<float> sink(static_cast<std::size_t>(threads) * inferkit::simd::kWidth);
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      using inferkit::simd::VecF;
      VecF acc[kChains];
      for (int i = 0; i < kChains; ++i) acc[i] = inferkit::simd::broadcast(0.001f * static_cast<float>(i));
      const VecF a = inferkit::simd::broadcast(0.9999f), b = inferkit::simd::broadcast(1e-6f);
      for (std::int64_t s = 0; s < kSteps; ++s)
        for (int i = 0; i < kChains; ++i) acc[i] = inferkit::simd::fma(acc[i], a, b);
      VecF total = acc[0];
      for (int i = 1; i < kChains; ++i) total = total + acc[i];
#ifdef _OPENMP
      const int me = omp_get_thread_num();
#else
      const int me = 0;
#endif
      inferkit::simd::store(sink.data() + me * inferkit::simd::kWidth, total);
    }
    benchmark::DoNotOptimize(sink.data());
  }
  ib::set_gflops(state, 2.0 * double(threads) * kChains * double(kSteps) * double(inferkit::simd::kWidth));
  ib::label_isa(state);
}

void mla_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) b->Args({8192, threads})->Args({32768, threads});
  b->ArgNames({"Tk", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_mla_decode_v2lite)->Name("mla_decode/inferkit/V2Lite")->Apply(mla_args);
BENCHMARK(BM_materialized_decode_v2lite)->Name("mla_decode/materialized/V2Lite")->Apply(mla_args);
BENCHMARK(BM_mla_decode_v3<false>)->Name("mla_decode/inferkit/V3")->Apply(mla_args);
BENCHMARK(BM_mla_decode_v3<true>)->Name("mla_decode/inferkit_bf16w/V3")->Apply(mla_args);
BENCHMARK(BM_mla_attention_core_v3)
    ->Name("mla_decode/attention_core/V3")
    ->ArgNames({"Tk", "threads", "invariant"})
    ->Args({8192, 1, 0})
    ->Args({8192, 1, 1})
    ->Args({8192, 2, 0})
    ->Args({8192, 2, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_fma_peak)->Name("fma_peak")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// Wide query groups: one KV head, range(0) query heads of head_dim range(1) over 8192 bf16
// tokens, Tq 1, by the default dispatch (invariant 0) or the batch-invariant mode's lanes kernel
// (invariant 1); counter GFLOPS = 4 x rows x Tk x d.
void BM_wide_group_decode(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1), tk = 8192;
  const auto q = ib::normal_floats(static_cast<std::size_t>(rows * d), 1.0f, 41);
  const auto kf = ib::normal_floats(static_cast<std::size_t>(tk * d), 1.0f, 42);
  std::vector<inferkit::BFloat16> k(kf.size());
  inferkit::convert(kf.data(), k.data(), kf.size());
  std::vector<float> out(q.size());
  inferkit::DenseKv<inferkit::BFloat16> kv({k.data(), tk, 1, d}, {k.data(), tk, 1, d});
  const inferkit::AttentionOptions opt{.num_threads = 1, .batch_invariant = state.range(2) == 1};
  for (auto _ : state) {
    inferkit::attention({q.data(), 1, rows, d}, kv, {out.data(), 1, rows, d}, opt);
    benchmark::ClobberMemory();
  }
  ib::set_gflops(state, 4.0 * double(rows) * double(tk) * double(d));
  ib::label_isa(state);
}
BENCHMARK(BM_wide_group_decode)
    ->Name("wide_group_decode/Tk8192_bf16/threads:1")
    ->ArgNames({"rows", "d", "invariant"})
    ->ArgsProduct({{16, 32, 64, 128}, {128, 576}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Prefill chunks, V2-Lite, Tk 4096 cached + the chunk: mla_attention (absorbed) against
// attention() over K/V already materialized (padded V as above; the materialization itself,
// Tk x H x 256 x 512 multiply-adds per chunk if not cached, is not counted). range(0) = chunk.
void BM_mla_prefill_v2lite(benchmark::State& state) {
  const Index tq = state.range(0), tk = 4096 + tq;
  MlaData data(kV2Lite, tk);
  const auto q = ib::normal_floats(static_cast<std::size_t>(tq * kV2Lite.num_heads * kV2Lite.query_dim()), 1.0f, 51);
  std::vector<float> out(static_cast<std::size_t>(tq * kV2Lite.num_heads * kV2Lite.v_head_dim));
  for (auto _ : state) {
    inferkit::mla_attention(kV2Lite, {q.data(), tq, kV2Lite.num_heads, kV2Lite.query_dim()}, data.cache.source(0),
                            data.weights(), {out.data(), tq, kV2Lite.num_heads, kV2Lite.v_head_dim},
                            {.num_threads = 2});
    benchmark::ClobberMemory();
  }
  ib::label_isa(state);
}

void BM_materialized_prefill_v2lite(benchmark::State& state) {
  const Index tq = state.range(0), tk = 4096 + tq, H = kV2Lite.num_heads, D = kV2Lite.query_dim();
  const auto kf = ib::normal_floats(static_cast<std::size_t>(tk * H * D), 1.0f, 52);
  const auto vf = ib::normal_floats(static_cast<std::size_t>(tk * H * D), 1.0f, 53);
  std::vector<inferkit::BFloat16> k(kf.size()), v(vf.size());
  inferkit::convert(kf.data(), k.data(), kf.size());
  inferkit::convert(vf.data(), v.data(), vf.size());
  const auto q = ib::normal_floats(static_cast<std::size_t>(tq * H * D), 1.0f, 54);
  std::vector<float> out(q.size());
  inferkit::DenseKv<inferkit::BFloat16> kv({k.data(), tk, H, D}, {v.data(), tk, H, D});
  for (auto _ : state) {
    inferkit::attention({q.data(), tq, H, D}, kv, {out.data(), tq, H, D}, {.num_threads = 2});
    benchmark::ClobberMemory();
  }
  ib::label_isa(state);
}

BENCHMARK(BM_mla_prefill_v2lite)
    ->Name("mla_prefill/inferkit/V2Lite_Tk4096/threads:2")
    ->ArgName("Tq")
    ->Arg(16)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_materialized_prefill_v2lite)
    ->Name("mla_prefill/materialized/V2Lite_Tk4096/threads:2")
    ->ArgName("Tq")
    ->Arg(16)
    ->Arg(128)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
