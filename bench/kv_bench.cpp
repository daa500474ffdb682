// Decode attention over quantized KV caches, beside the dense f32 and bf16 rows, 2 threads.
//   attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_<scheme>   counters us, GBps (cache bytes
//   read per second) and, for quantized schemes, err_max / err_rms of the attention output
//   relative to the f32 result on the same data (random normal K/V with outlier key channels).
//   attention_decode/memread/...: a SIMD sum over the same number of bytes.
//   attention_decode/inferkit_fast/...: the same caches with AttentionArithmetic::kReduced
//   (issue 17): err_rel_rms is still against the f32 result on the original data, and
//   err_rel_rms_vs_exact against the exact arithmetic on the same cache (the rounding the mode
//   adds). Tk4096 rows: the first 4,096 tokens of the same data.
//   attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_<scheme>: the same decode over a
//   block table of 16-token pages (BlockPool<QuantizedKv> for int8 / int4, BlockPool<float> for
//   f32), against the dense caches above; counter tokens_per_gib (pool tokens per GiB of pages)
//   and tokens_per_gib_vs_f32 (against the float pool); paged16_scattered_*: the pool's free list
//   shuffled first, so no two pages are adjacent (every page its own 16-token block).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/quantized_cache.hpp"

namespace {

using inferkit::Index;
namespace ib = inferkit::bench;
constexpr Index kHq = 32, kHkv = 8, kD = 128, kTk = 32768;

struct Data {
  std::vector<float> k, v, q, exact, exact4k;
  Data()
      : k(ib::normal_floats(kTk * kHkv * kD, 1.0f, 21)),
        v(ib::normal_floats(kTk * kHkv * kD, 1.0f, 22)),
        q(ib::normal_floats(kHq * kD, 1.0f, 23)),
        exact(kHq * kD),
        exact4k(kHq * kD) {
    for (Index t = 0; t < kTk; ++t)
      for (Index h = 0; h < kHkv; ++h)
        for (Index c : {3, 77}) k[static_cast<std::size_t>((t * kHkv + h) * kD + c)] *= 15.0f;  // outlier channels
    for (Index tk : {kTk, Index{4096}}) {
      inferkit::DenseKvCache<float> f32(1, kHkv, kD, tk, inferkit::CacheGrowth::kFixed);
      f32.append(0, {k.data(), tk, kHkv, kD}, {v.data(), tk, kHkv, kD});
      inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, kHq, kD), f32.source(0),
                          {(tk == kTk ? exact : exact4k).data(), 1, kHq, kD});
    }
  }
  const std::vector<float>& exact_for(Index tk) const { return tk == kTk ? exact : exact4k; }
};
const Data& data() {
  static const Data d;
  return d;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
  double sq = 0, r = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    sq += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(sq / r);
}

using inferkit::AttentionArithmetic;

template <class Source>
void run_decode(benchmark::State& state, const Source& src, double bytes, const std::vector<float>* exact,
                AttentionArithmetic arith = AttentionArithmetic::kExact) {
  const Data& d = data();
  std::vector<float> out(kHq * kD);
  inferkit::AttentionOptions opt;
  opt.num_threads = 2;
  opt.arithmetic = arith;
  if (arith != AttentionArithmetic::kExact) {  // the rounding the mode adds, on the same cache
    std::vector<float> same(kHq * kD);
    inferkit::AttentionOptions eo = opt;
    eo.arithmetic = AttentionArithmetic::kExact;
    inferkit::attention(inferkit::Tensor3View<const float>(d.q.data(), 1, kHq, kD), src, {same.data(), 1, kHq, kD}, {},
                        eo);
    inferkit::attention(inferkit::Tensor3View<const float>(d.q.data(), 1, kHq, kD), src, {out.data(), 1, kHq, kD}, {},
                        opt);
    state.counters["err_rel_rms_vs_exact"] = rel_rms(out, same);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    inferkit::attention(inferkit::Tensor3View<const float>(d.q.data(), 1, kHq, kD), src, {out.data(), 1, kHq, kD}, {},
                        opt);
    benchmark::ClobberMemory();
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ib::set_gbps(state, bytes);
  if (exact) {
    double mx = 0, sq = 0, ref = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double e = double(out[i]) - double((*exact)[i]);
      mx = std::max(mx, std::abs(e));
      sq += e * e;
      ref += double((*exact)[i]) * double((*exact)[i]);
    }
    state.counters["err_max"] = mx;
    state.counters["err_rms"] = std::sqrt(sq / double(out.size()));
    state.counters["err_rel_rms"] = std::sqrt(sq / ref);
  }
  ib::label_isa(state);
}

template <class T>
void dense_decode(benchmark::State& state, Index tk, AttentionArithmetic arith) {
  const Data& d = data();
  inferkit::DenseKvCache<T> cache(1, kHkv, kD, tk, inferkit::CacheGrowth::kFixed);
  cache.append(0, {d.k.data(), tk, kHkv, kD}, {d.v.data(), tk, kHkv, kD});
  run_decode(state, cache.source(0), cache.bytes_per_token() * double(tk),
             std::is_same_v<T, float> ? nullptr : &d.exact_for(tk), arith);
}
template <class T>
void BM_dense(benchmark::State& state) {
  dense_decode<T>(state, kTk, AttentionArithmetic::kExact);
}
void bf16_decode(benchmark::State& state, Index tk, AttentionArithmetic a) {
  dense_decode<inferkit::BFloat16>(state, tk, a);
}
void f32_decode(benchmark::State& state, Index tk, AttentionArithmetic a) { dense_decode<float>(state, tk, a); }

void quantized_decode(benchmark::State& state, const std::string& preset, Index tk, AttentionArithmetic arith) {
  const Data& d = data();
  inferkit::QuantizedKvCache cache(1, kHkv, kD, inferkit::kv_quant_preset(preset));
  cache.append(0, {d.k.data(), tk, kHkv, kD}, {d.v.data(), tk, kHkv, kD});
  run_decode(state, cache.source(0), static_cast<double>(cache.bytes_in_use()), &d.exact_for(tk), arith);
  state.counters["bits_per_element"] = cache.quantized_bytes_per_token() * 8.0 / (2.0 * kHkv * kD);
}
void BM_quantized(benchmark::State& state, const std::string& preset) {
  quantized_decode(state, preset, kTk, AttentionArithmetic::kExact);
}

// Decode over one sequence's 16-token pages (layer 0 of a one-layer pool). A fresh pool hands
// out consecutive blocks, which the table presents as one long block; `scattered` shuffles the
// free list first (a long-running server's pool), so every page is its own 16-token block.
template <class T>
void BM_paged(benchmark::State& state, const std::string& preset, bool scattered) {
  const Data& d = data();
  constexpr Index kPage = 16;
  inferkit::BlockPoolConfig c{1, kHkv, kD, kPage, kTk / kPage};
  if constexpr (inferkit::kQuantizedPool<T>) c.quant = inferkit::kv_quant_preset(preset);
  inferkit::BlockPool<T> pool(c);
  if (scattered) {
    std::vector<inferkit::BlockId> all;
    while (const auto b = pool.allocate()) all.push_back(*b);
    std::mt19937 rng(3);
    std::shuffle(all.begin(), all.end(), rng);
    for (inferkit::BlockId b : all) pool.release(b);
  }
  inferkit::BlockTable<T> table(pool);
  if (!table.reserve(kTk)) throw std::runtime_error("pool too small");
  table.write(0, {d.k.data(), kTk, kHkv, kD}, {d.v.data(), kTk, kHkv, kD});
  table.commit(kTk);
  run_decode(state, table.source(0), static_cast<double>(pool.bytes_in_use()), &d.exact_for(kTk),
             AttentionArithmetic::kExact);
  const inferkit::BlockPool<float> f32({1, kHkv, kD, kPage, 1});
  const double gib = 1024.0 * 1024.0 * 1024.0;
  state.counters["tokens_per_gib"] = gib / (double(pool.block_bytes()) / double(kPage));
  state.counters["tokens_per_gib_vs_f32"] = double(f32.block_bytes()) / double(pool.block_bytes());
  state.counters["blocks"] = double(table.source(0).num_blocks());
}

void BM_memread(benchmark::State& state, double bytes) {
  std::vector<float> buf(static_cast<std::size_t>(bytes / 4), 1.0f);
  const auto n = static_cast<std::int64_t>(buf.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    float total = 0;
#pragma omp parallel for num_threads(2) reduction(+ : total) schedule(static)
    for (std::int64_t c = 0; c < n; c += 65536)
      total += inferkit::simd::sum_of(buf.data() + c, static_cast<std::size_t>(std::min<std::int64_t>(65536, n - c)));
    benchmark::DoNotOptimize(total);
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ib::set_gbps(state, bytes);
}

BENCHMARK(BM_dense<float>)
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_f32")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_dense<inferkit::BFloat16>)
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_quantized, int8, "int8")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_int8")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_quantized, int4, "int4")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_int4")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_quantized, kivi4, "kivi4")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_kivi4")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_quantized, kivi2, "kivi2")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_kivi2")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
void BM_paged_f32(benchmark::State& state) { BM_paged<float>(state, "", false); }
void BM_paged_quantized(benchmark::State& state, const std::string& preset) {
  BM_paged<inferkit::QuantizedKv>(state, preset, false);
}
void BM_paged_scattered_f32(benchmark::State& state) { BM_paged<float>(state, "", true); }
void BM_paged_scattered_quantized(benchmark::State& state, const std::string& preset) {
  BM_paged<inferkit::QuantizedKv>(state, preset, true);
}
BENCHMARK(BM_paged_f32)
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_f32")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_paged_quantized, int8, "int8")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_int8")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_paged_quantized, int4, "int4")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_int4")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_paged_scattered_f32)
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_scattered_f32")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_paged_scattered_quantized, int8, "int8")
    ->Name("attention_decode/inferkit/Tk32768_Hq32_Hkv8_D128_paged16_scattered_int8")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_memread, int8, 2.0 * kTk * kHkv * kD * 8.5 / 8)
    ->Name("attention_decode/memread/Tk32768_Hq32_Hkv8_D128_int8")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_memread, int4, 2.0 * kTk * kHkv * kD * 5.0 / 8)
    ->Name("attention_decode/memread/Tk32768_Hq32_Hkv8_D128_int4")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_memread, bf16, 2.0 * kTk * kHkv * kD * 2)
    ->Name("attention_decode/memread/Tk32768_Hq32_Hkv8_D128_bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Issue 17: the reduced arithmetic beside the exact rows, at 32k and 4k, in the same binary.
void fast_args(benchmark::internal::Benchmark* b) { b->UseRealTime()->Unit(benchmark::kMillisecond); }
#define INFERKIT_FAST_DECODE(tk, tname)                                                            \
  BENCHMARK_CAPTURE(bf16_decode, fast_bf16_##tk, tk, AttentionArithmetic::kReduced)                \
      ->Name("attention_decode/inferkit_fast/Tk" tname "_Hq32_Hkv8_D128_bf16")                     \
      ->Apply(fast_args);                                                                          \
  BENCHMARK_CAPTURE(quantized_decode, fast_int8_##tk, "int8", tk, AttentionArithmetic::kReduced)   \
      ->Name("attention_decode/inferkit_fast/Tk" tname "_Hq32_Hkv8_D128_int8")                     \
      ->Apply(fast_args);                                                                          \
  BENCHMARK_CAPTURE(quantized_decode, fast_int4_##tk, "int4", tk, AttentionArithmetic::kReduced)   \
      ->Name("attention_decode/inferkit_fast/Tk" tname "_Hq32_Hkv8_D128_int4")                     \
      ->Apply(fast_args);                                                                          \
  BENCHMARK_CAPTURE(quantized_decode, fast_kivi4_##tk, "kivi4", tk, AttentionArithmetic::kReduced) \
      ->Name("attention_decode/inferkit_fast/Tk" tname "_Hq32_Hkv8_D128_kivi4")                    \
      ->Apply(fast_args);
INFERKIT_FAST_DECODE(32768, "32768")
INFERKIT_FAST_DECODE(4096, "4096")
BENCHMARK_CAPTURE(quantized_decode, fast_kivi2, "kivi2", kTk, AttentionArithmetic::kReduced)
    ->Name("attention_decode/inferkit_fast/Tk32768_Hq32_Hkv8_D128_kivi2")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(f32_decode, f32_4k, 4096, AttentionArithmetic::kExact)
    ->Name("attention_decode/inferkit/Tk4096_Hq32_Hkv8_D128_f32")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(bf16_decode, bf16_4k, 4096, AttentionArithmetic::kExact)
    ->Name("attention_decode/inferkit/Tk4096_Hq32_Hkv8_D128_bf16")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(quantized_decode, int8_4k, "int8", 4096, AttentionArithmetic::kExact)
    ->Name("attention_decode/inferkit/Tk4096_Hq32_Hkv8_D128_int8")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(quantized_decode, int4_4k, "int4", 4096, AttentionArithmetic::kExact)
    ->Name("attention_decode/inferkit/Tk4096_Hq32_Hkv8_D128_int4")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(quantized_decode, kivi4_4k, "kivi4", 4096, AttentionArithmetic::kExact)
    ->Name("attention_decode/inferkit/Tk4096_Hq32_Hkv8_D128_kivi4")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(BM_memread, int8_4k, 2.0 * 4096 * kHkv * kD * 8.5 / 8)
    ->Name("attention_decode/memread/Tk4096_Hq32_Hkv8_D128_int8")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(BM_memread, int4_4k, 2.0 * 4096 * kHkv * kD * 5.0 / 8)
    ->Name("attention_decode/memread/Tk4096_Hq32_Hkv8_D128_int4")
    ->Apply(fast_args);
BENCHMARK_CAPTURE(BM_memread, bf16_4k, 2.0 * 4096 * kHkv * kD * 2)
    ->Name("attention_decode/memread/Tk4096_Hq32_Hkv8_D128_bf16")
    ->Apply(fast_args);

}  // namespace

// ---- in L2, one thread: time per (key, KV head) -------------------------------------------
// attention_decode_l2/{inferkit,inferkit_fast}/Tk2048_Hq4_Hkv1_D128_<enc>: one KV head of 2,048
// tokens (int8: 278 KB, bf16: 1 MiB, within the 2 MiB L2), four query heads, one thread:
// counter ns_per_pair = time / 2,048 (the kernel's compute cost per (key, KV head), no DRAM).
namespace {

void l2_decode(benchmark::State& state, const std::string& enc, AttentionArithmetic arith) {
  constexpr Index tk = 2048, hq = 4;
  const Data& d = data();
  std::vector<float> k(static_cast<std::size_t>(tk * kD)), v(k.size());
  for (Index t = 0; t < tk; ++t)  // head 0 of the shared data, [t][1][d]
    for (Index i = 0; i < kD; ++i) {
      k[static_cast<std::size_t>(t * kD + i)] = d.k[static_cast<std::size_t>((t * kHkv) * kD + i)];
      v[static_cast<std::size_t>(t * kD + i)] = d.v[static_cast<std::size_t>((t * kHkv) * kD + i)];
    }
  std::vector<float> out(hq * kD);
  inferkit::AttentionOptions opt;
  opt.num_threads = 1;
  opt.arithmetic = arith;
  auto go = [&](const auto& src) {
    for (auto _ : state) {
      inferkit::attention(inferkit::Tensor3View<const float>(d.q.data(), 1, hq, kD), src, {out.data(), 1, hq, kD}, {},
                          opt);
      benchmark::ClobberMemory();
    }
  };
  if (enc == "bf16") {
    inferkit::DenseKvCache<inferkit::BFloat16> c(1, 1, kD, tk, inferkit::CacheGrowth::kFixed);
    c.append(0, {k.data(), tk, 1, kD}, {v.data(), tk, 1, kD});
    go(c.source(0));
  } else {
    inferkit::QuantizedKvCache c(1, 1, kD, inferkit::kv_quant_preset(enc));
    c.append(0, {k.data(), tk, 1, kD}, {v.data(), tk, 1, kD});
    go(c.source(0));
  }
  state.counters["ns_per_pair"] = benchmark::Counter(
      double(tk) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

#define INFERKIT_L2_DECODE(enc)                                                 \
  BENCHMARK_CAPTURE(l2_decode, exact_##enc, #enc, AttentionArithmetic::kExact)  \
      ->Name("attention_decode_l2/inferkit/Tk2048_Hq4_Hkv1_D128_" #enc)         \
      ->Unit(benchmark::kMicrosecond);                                          \
  BENCHMARK_CAPTURE(l2_decode, fast_##enc, #enc, AttentionArithmetic::kReduced) \
      ->Name("attention_decode_l2/inferkit_fast/Tk2048_Hq4_Hkv1_D128_" #enc)    \
      ->Unit(benchmark::kMicrosecond);
INFERKIT_L2_DECODE(int8)
INFERKIT_L2_DECODE(int4)
INFERKIT_L2_DECODE(bf16)

}  // namespace

// ---- sweep over the context length (for the report's decode-time plot) ---------------------
// attention_decode_sweep/inferkit/<encoding>/Tk:N, 2 threads, real time per call.
namespace {

template <class MakeCache>
void sweep(benchmark::State& state, MakeCache make) {
  const Data& d = data();
  const Index tk = state.range(0);
  const auto cache = make(tk, d);
  std::vector<float> out(kHq * kD);
  inferkit::AttentionOptions opt;
  opt.num_threads = 2;
  for (auto _ : state) {
    inferkit::attention(inferkit::Tensor3View<const float>(d.q.data(), 1, kHq, kD), cache->source(0),
                        {out.data(), 1, kHq, kD}, {}, opt);
    benchmark::ClobberMemory();
  }
}

template <class T>
void BM_sweep_dense(benchmark::State& state) {
  sweep(state, [](Index tk, const Data& d) {
    auto c = std::make_unique<inferkit::DenseKvCache<T>>(1, kHkv, kD, tk, inferkit::CacheGrowth::kFixed);
    c->append(0, {d.k.data(), tk, kHkv, kD}, {d.v.data(), tk, kHkv, kD});
    return c;
  });
}

void BM_sweep_quantized(benchmark::State& state, const std::string& preset) {
  sweep(state, [&](Index tk, const Data& d) {
    auto c = std::make_unique<inferkit::QuantizedKvCache>(1, kHkv, kD, inferkit::kv_quant_preset(preset));
    c->append(0, {d.k.data(), tk, kHkv, kD}, {d.v.data(), tk, kHkv, kD});
    return c;
  });
}

void sweep_args(benchmark::internal::Benchmark* b) {
  b->ArgName("Tk")->Arg(1024)->Arg(4096)->Arg(16384)->Arg(32768)->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_sweep_dense<float>)->Name("attention_decode_sweep/inferkit/f32")->Apply(sweep_args);
BENCHMARK(BM_sweep_dense<inferkit::BFloat16>)->Name("attention_decode_sweep/inferkit/bf16")->Apply(sweep_args);
BENCHMARK_CAPTURE(BM_sweep_quantized, int8, "int8")->Name("attention_decode_sweep/inferkit/int8")->Apply(sweep_args);
BENCHMARK_CAPTURE(BM_sweep_quantized, int4, "int4")->Name("attention_decode_sweep/inferkit/int4")->Apply(sweep_args);
BENCHMARK_CAPTURE(BM_sweep_quantized, kivi4, "kivi4")->Name("attention_decode_sweep/inferkit/kivi4")->Apply(sweep_args);

}  // namespace
