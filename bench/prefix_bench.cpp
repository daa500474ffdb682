// Prefix trie costs, single thread (the pool's blocks are tiny: this measures the trie).
//   prefix_trie/inferkit/match_insert/page:P  a trie caching 10,000 prompts of 2,048 tokens that
//     share 20 system prompts of 1,024 tokens; each iteration serves a new prompt (match the
//     system prefix, insert the new suffix). Counters: Mtokens_per_s (prompt tokens matched +
//     inserted per second), meta_bytes_per_token (trie bookkeeping per cached token).
//   prefix_trie/inferkit/evict/blocks:N  cost per freed block under pressure (evict(1) on a trie
//     holding N pages, refilled outside the timing), counter ns_per_block.
//   prefix_trie/inferkit/saved_prefill: 1,000 requests drawn from 20 system prompts with random
//     suffixes, counter saved_fraction (prefill tokens served from the cache / all tokens).
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/prefix_trie.hpp"

namespace {

using inferkit::BlockId;
using inferkit::Index;
using inferkit::TokenId;

struct Workload {
  std::vector<std::vector<TokenId>> systems;
  std::mt19937 rng{7};
  explicit Workload(Index system_len, int count = 20) {
    for (int s = 0; s < count; ++s) {
      std::vector<TokenId> p;
      for (Index i = 0; i < system_len; ++i) p.push_back(static_cast<TokenId>(rng() % 32000));
      systems.push_back(std::move(p));
    }
  }
  std::vector<TokenId> prompt(Index suffix_len) {
    std::vector<TokenId> p = systems[rng() % systems.size()];
    for (Index i = 0; i < suffix_len; ++i) p.push_back(static_cast<TokenId>(rng() % 32000));
    return p;
  }
};

// Serves one prompt: match, give the unmatched pages fresh blocks, insert, drop our references.
Index serve(inferkit::PrefixTrie<float>& trie, inferkit::BlockPool<float>& pool, const inferkit::ContextIdentity& id,
            const std::vector<TokenId>& prompt) {
  auto m = trie.match(id, prompt);
  std::vector<BlockId> blocks = m.blocks;
  const Index page = trie.page_size(), pages = static_cast<Index>(prompt.size()) / page;
  for (Index p = static_cast<Index>(blocks.size()); p < pages; ++p) {
    auto b = trie.allocate_evicting();
    if (!b) break;
    blocks.push_back(*b);
  }
  const Index usable = static_cast<Index>(blocks.size()) * page;
  trie.insert(id, std::span<const TokenId>(prompt.data(), static_cast<std::size_t>(usable)), blocks);
  for (std::size_t i = m.blocks.size(); i < blocks.size(); ++i) pool.release(blocks[i]);
  trie.release(m.handle);
  return m.tokens;
}

void BM_match_insert(benchmark::State& state) {
  const Index page = state.range(0), cached = 10000;
  inferkit::BlockPool<float> pool({1, 1, 1, page, (cached + 20 + 2000) * 1024 / page + 64});
  inferkit::PrefixTrie<float> trie(pool);
  const inferkit::ContextIdentity id{"bench-model"};
  Workload w(1024);
  for (Index i = 0; i < cached; ++i) serve(trie, pool, id, w.prompt(1024));
  const double meta = double(trie.metadata_bytes()) / double(trie.cached_pages() * page);
  double tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    serve(trie, pool, id, w.prompt(1024));
    tokens += 2048;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["Mtokens_per_s"] = tokens / s * 1e-6;
  state.counters["meta_bytes_per_token"] = meta;
  state.counters["cached_pages"] = double(trie.cached_pages());
}

void BM_evict(benchmark::State& state) {
  const Index blocks = state.range(0);
  inferkit::BlockPool<float> pool({1, 1, 1, 16, blocks + 64});
  inferkit::PrefixTrie<float> trie(pool);
  const inferkit::ContextIdentity id{"bench-model"};
  Workload w(256, 64);
  while (trie.cached_pages() < blocks) serve(trie, pool, id, w.prompt(256));  // fill to N pages
  double total = 0;
  Index freed = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    freed += trie.evict(1);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    if (trie.cached_pages() < blocks - 32) serve(trie, pool, id, w.prompt(256));  // keep it full
    state.ResumeTiming();
  }
  state.counters["ns_per_block"] = freed ? total / double(freed) * 1e9 : 0.0;
}

void BM_saved_prefill(benchmark::State& state) {
  for (auto _ : state) {
    inferkit::BlockPool<float> pool({1, 1, 1, 16, 200000});
    inferkit::PrefixTrie<float> trie(pool);
    const inferkit::ContextIdentity id{"bench-model"};
    Workload w(1024);
    std::mt19937 rng(3);
    double matched = 0, total = 0;
    for (int r = 0; r < 1000; ++r) {
      const auto p = w.prompt(64 + static_cast<Index>(rng() % 512));
      matched += double(serve(trie, pool, id, p));
      total += double(p.size());
    }
    state.counters["saved_fraction"] = matched / total;
  }
}

BENCHMARK(BM_match_insert)
    ->Name("prefix_trie/inferkit/match_insert")
    ->ArgNames({"page"})
    ->Arg(1)
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_evict)
    ->Name("prefix_trie/inferkit/evict")
    ->ArgNames({"blocks"})
    ->Arg(1000)
    ->Arg(100000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_saved_prefill)->Name("prefix_trie/inferkit/saved_prefill")->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
