// Batched attention over paged KV (attention_batch) against its baseline, in one binary.
//   attention_batch/inferkit/chunk2000+decode63_Hq32_Hkv8_D128_page16/threads:N
//       one call: a 2,000-token prefill chunk (after 1,024 cached tokens) and 63 decode
//       sequences (contexts 256..2,048; every 8th verifies k + 1 = 2..5 speculative rows), K/V in
//       one f32 block pool with 16-token pages. Counters: us per call, GFLOPS of the real
//       (visible) query-key pairs, 4 * pairs * d * Hq.
//   attention_batch/naive/...: the same work as one attention() call per sequence.
//   attention_batch/inferkit_invariant/...: the same call in batch-invariant mode.
//   attention_batch/{inferkit,naive}/decode64_...: 64 decode sequences alone (contexts as above).
//   attention_invariant/{default,invariant}/{prefill_T2048,decode_Tk<N>}_Hq32_Hkv8_D128: the
//       cost of the batch-invariant mode on plain shapes (dense f32 K/V, causal), counter us.
//   attention_tree/{tree,chain}/rows32_prefix8192_Hq32_Hkv8_D128/invariant:{0,1}/threads:N:
//       32 token-tree rows (a fixed random depth-first tree of 31 nodes + root, tree_attention)
//       against 32 chain rows (one causal sequence, attention_batch) over an 8,192-token dense
//       f32 prefix; invariant:1 is the batch-invariant mode (each tree row alone over its path).
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/tree_attention.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"

namespace {

using inferkit::Index;
namespace ib = inferkit::bench;
constexpr Index kHq = 32, kHkv = 8, kD = 128, kPage = 16;

/// The mixed batch: sequence 0 is the chunk, 1..63 decode rows.
struct MixedBatch {
  std::unique_ptr<inferkit::BlockPool<float>> pool;
  std::vector<inferkit::BlockTable<float>> tables;
  std::vector<inferkit::BlockTable<float>::Source> sources;
  std::vector<std::int32_t> cu{0};
  std::vector<float> q, out;
  double pairs = 0;  // visible (query, key) pairs per query head

  /// With a chunk: sequence 0 is a 2,000-token chunk after 1,024 cached tokens; then `decodes`
  /// decode sequences.
  MixedBatch(bool chunk, int decodes) {
    std::mt19937 rng(5);
    std::vector<Index> context, rows;
    if (chunk) {
      context.push_back(1024 + 2000);
      rows.push_back(2000);
    }
    for (int s = 1; s <= decodes; ++s) {
      rows.push_back(s % 8 == 0 ? 2 + (s / 8) % 4 : 1);
      context.push_back(256 + static_cast<Index>(rng() % (2048 - 256)));
    }
    Index blocks = 0;
    for (Index c : context) blocks += (c + kPage - 1) / kPage;
    pool = std::make_unique<inferkit::BlockPool<float>>(inferkit::BlockPoolConfig{1, kHkv, kD, kPage, blocks});
    const auto kv = ib::normal_floats(static_cast<std::size_t>((4096 * kHkv + 8) * kD), 1.0f, 11);
    for (std::size_t s = 0; s < context.size(); ++s) {
      tables.emplace_back(*pool);
      const Index n = context[s];
      if (!tables.back().reserve(n)) throw std::runtime_error("pool too small");
      for (Index t = 0; t < n; t += 4096) {  // K/V rows reused from one random 4,096-token block
        const Index m = std::min<Index>(4096, n - t);
        tables.back().write(0, {kv.data(), m, kHkv, kD}, {kv.data() + (s % 7) * kD, m, kHkv, kD});
        tables.back().commit(m);
      }
      cu.push_back(cu.back() + static_cast<std::int32_t>(rows[s]));
      for (Index i = 0; i < rows[s]; ++i) pairs += static_cast<double>(n - rows[s] + i + 1);
    }
    for (const auto& t : tables) sources.push_back(t.source(0));
    q = ib::normal_floats(static_cast<std::size_t>(cu.back() * kHq * kD), 1.0f, 12);
    out.resize(q.size());
  }
  Index total() const { return cu.back(); }
};
MixedBatch& mixed() {
  static MixedBatch b(true, 63);
  return b;
}
MixedBatch& decodes() {
  static MixedBatch b(false, 64);
  return b;
}

void finish(benchmark::State& state, double seconds, double pairs) {
  ib::set_us(state, seconds);
  ib::set_gflops(state, 4.0 * pairs * kD * kHq);
  ib::label_isa(state);
}

void run_batch(benchmark::State& state, MixedBatch& b, bool invariant) {
  inferkit::AttentionOptions opt;
  opt.num_threads = static_cast<int>(state.range(0));
  opt.batch_invariant = invariant;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    inferkit::attention_batch({b.q.data(), b.total(), kHq, kD}, b.cu, b.sources, {b.out.data(), b.total(), kHq, kD}, {},
                              opt);
    benchmark::ClobberMemory();
  }
  finish(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), b.pairs);
}

void BM_batch_inferkit(benchmark::State& state) { run_batch(state, mixed(), false); }
void BM_batch_invariant(benchmark::State& state) { run_batch(state, mixed(), true); }
void BM_decodes_inferkit(benchmark::State& state) { run_batch(state, decodes(), false); }

// The straightforward way: one attention() call (one parallel pass) per sequence.
void run_naive(benchmark::State& state, MixedBatch& b) {
  inferkit::AttentionOptions opt;
  opt.num_threads = static_cast<int>(state.range(0));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (std::size_t s = 0; s < b.sources.size(); ++s) {
      const Index q0 = b.cu[s], n = b.cu[s + 1] - b.cu[s];
      inferkit::attention(inferkit::Tensor3View<const float>(b.q.data() + q0 * kHq * kD, n, kHq, kD), b.sources[s],
                          {b.out.data() + q0 * kHq * kD, n, kHq, kD}, {}, opt);
    }
    benchmark::ClobberMemory();
  }
  finish(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), b.pairs);
}

void BM_batch_naive(benchmark::State& state) { run_naive(state, mixed()); }
void BM_decodes_naive(benchmark::State& state) { run_naive(state, decodes()); }

// ---- batch-invariant mode on plain shapes ------------------------------------------------------

struct Plain {
  Index tk;
  std::vector<float> k, v, q, out;
  explicit Plain(Index tokens)
      : tk(tokens),
        k(ib::normal_floats(static_cast<std::size_t>(tk * kHkv * kD), 1.0f, 21)),
        v(ib::normal_floats(k.size(), 1.0f, 22)),
        q(ib::normal_floats(static_cast<std::size_t>(2048 * kHq * kD), 1.0f, 23)),
        out(q.size()) {}
};
const Plain& plain(Index tokens) {
  static const Plain p2k(2048), p4k(4096), p32k(32768);
  return tokens == 2048 ? p2k : tokens == 4096 ? p4k : p32k;
}

// Prefill (Tq = Tk = 2048) or decode (Tq = 1) at Tk = range(0), 2 threads.
void run_plain(benchmark::State& state, Index tq, bool invariant) {
  const Plain& p = plain(state.range(0));
  const Index tk = p.tk;
  inferkit::AttentionOptions opt;
  opt.num_threads = 2;
  opt.batch_invariant = invariant;
  const inferkit::DenseKv<float> kv({p.k.data(), tk, kHkv, kD}, {p.v.data(), tk, kHkv, kD});
  std::vector<float> out(static_cast<std::size_t>(tq * kHq * kD));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    inferkit::attention({p.q.data(), tq, kHq, kD}, kv, {out.data(), tq, kHq, kD}, {}, opt);
    benchmark::ClobberMemory();
  }
  double pairs = 0;
  for (Index i = 0; i < tq; ++i) pairs += static_cast<double>(tk - tq + i + 1);
  finish(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), pairs);
}
void BM_prefill_default(benchmark::State& state) { run_plain(state, 2048, false); }
void BM_prefill_invariant(benchmark::State& state) { run_plain(state, 2048, true); }
void BM_decode_default(benchmark::State& state) { run_plain(state, 1, false); }
void BM_decode_invariant(benchmark::State& state) { run_plain(state, 1, true); }

/// An 8,192-token prefix followed by 32 rows (tree rows or chain rows: the same K/V).
struct TreeBench {
  static constexpr Index kPrefix = 8192, kRows = 32;
  std::vector<float> k, v, q, out;
  std::vector<Index> parents;
  TreeBench() {
    const Index total = kPrefix + kRows;
    k = ib::normal_floats(static_cast<std::size_t>(total * kHkv * kD), 1.0f, 21);
    v = ib::normal_floats(k.size(), 1.0f, 22);
    q = ib::normal_floats(static_cast<std::size_t>(kRows * kHq * kD), 1.0f, 23);
    out.resize(q.size());
    std::mt19937 gen(5);
    std::vector<Index> path;
    for (Index i = 0; i + 1 < kRows; ++i) {  // a random depth-first tree
      path.resize(gen() % (path.size() + 1));
      parents.push_back(path.empty() ? -1 : path.back());
      path.push_back(i);
    }
  }
  inferkit::DenseKv<float> source() const {
    const Index total = kPrefix + kRows;
    return inferkit::DenseKv<float>({k.data(), total, kHkv, kD}, {v.data(), total, kHkv, kD});
  }
};

template <bool kTree>
void BM_tree_rows(benchmark::State& state) {
  static const TreeBench b;
  std::vector<float> out(b.out.size());
  const inferkit::AttentionOptions opt{.num_threads = static_cast<int>(state.range(1)),
                                       .batch_invariant = state.range(0) == 1};
  const inferkit::Tensor3View<const float> q(b.q.data(), TreeBench::kRows, kHq, kD);
  const inferkit::Tensor3View<float> o(out.data(), TreeBench::kRows, kHq, kD);
  const std::vector<inferkit::DenseKv<float>> src{b.source()};
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(TreeBench::kRows)};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if constexpr (kTree)
      inferkit::tree_attention(q, src[0], TreeBench::kPrefix, b.parents, o, opt);
    else
      inferkit::attention_batch(q, cu, src, o, opt);
    benchmark::ClobberMemory();
  }
  ib::set_us(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

BENCHMARK(BM_tree_rows<true>)
    ->Name("attention_tree/tree/rows32_prefix8192_Hq32_Hkv8_D128")
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"invariant", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_tree_rows<false>)
    ->Name("attention_tree/chain/rows32_prefix8192_Hq32_Hkv8_D128")
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"invariant", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_batch_inferkit)
    ->Name("attention_batch/inferkit/chunk2000+decode63_Hq32_Hkv8_D128_page16")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_batch_naive)
    ->Name("attention_batch/naive/chunk2000+decode63_Hq32_Hkv8_D128_page16")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_batch_invariant)
    ->Name("attention_batch/inferkit_invariant/chunk2000+decode63_Hq32_Hkv8_D128_page16")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decodes_inferkit)
    ->Name("attention_batch/inferkit/decode64_Hq32_Hkv8_D128_page16")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decodes_naive)
    ->Name("attention_batch/naive/decode64_Hq32_Hkv8_D128_page16")
    ->ArgsProduct({{1, 2}})
    ->ArgNames({"threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_prefill_default)
    ->Name("attention_invariant/default/prefill_T2048_Hq32_Hkv8_D128_causal")
    ->Arg(2048)
    ->ArgName("Tk")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prefill_invariant)
    ->Name("attention_invariant/invariant/prefill_T2048_Hq32_Hkv8_D128_causal")
    ->Arg(2048)
    ->ArgName("Tk")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_default)
    ->Name("attention_invariant/default/decode_Hq32_Hkv8_D128_f32")
    ->Arg(4096)
    ->Arg(32768)
    ->ArgName("Tk")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_invariant)
    ->Name("attention_invariant/invariant/decode_Hq32_Hkv8_D128_f32")
    ->Arg(4096)
    ->Arg(32768)
    ->ArgName("Tk")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
