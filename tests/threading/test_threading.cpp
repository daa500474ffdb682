// Concurrency tests, written for the tsan preset (ThreadSanitizer; OpenMP's synchronization is
// made visible to it by libomp's Archer tool) and run in every preset. Each test runs the same
// work from several std::threads at once, each of them using an OpenMP team inside the call, on
// shared read-only inputs (one cache, one sampler chain, one set of distributions) and distinct
// outputs, and checks every result bit for bit against a sequential single-threaded run.
// The contract they test (docs/design.md, "Thread safety"): const reads of caches, pools,
// tables and chains may run concurrently; batched kernels' results do not depend on threads.

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "inferkit/attention/attention.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/quantized_cache.hpp"
#include "inferkit/sampling/presets.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/sampling/speculative.hpp"

using inferkit::Index;
using inferkit::TokenId;

namespace {

constexpr int kThreads = 3;  // std::threads running at once, each with an OpenMP team of 2

std::vector<float> normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs body(t) on kThreads std::threads at once.
template <class F>
void concurrently(F body) {
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) ts.emplace_back(body, t);
  for (auto& t : ts) t.join();
}

}  // namespace

TEST_CASE("one cache read by several threads while attention runs on each", "[threading][attention][kv]") {
  constexpr Index kTokens = 700, kHkv = 2, kHq = 4, kD = 32, kPage = 16;
  const auto k = normal(static_cast<std::size_t>(kTokens * kHkv * kD), 1), v = normal(k.size(), 2);
  const inferkit::Tensor3View<const float> kv(k.data(), kTokens, kHkv, kD), vv(v.data(), kTokens, kHkv, kD);
  inferkit::DenseKvCache<float> dense(1, kHkv, kD, kTokens);
  dense.append(0, kv, vv);
  inferkit::QuantizedKvCache quant(1, kHkv, kD, inferkit::kv_quant_preset("kivi4", kD));
  quant.append(0, kv, vv);
  inferkit::BlockPool<float> pool({1, kHkv, kD, kPage, 64});
  inferkit::BlockTable<float> table(pool);
  REQUIRE(table.reserve(kTokens));
  table.write(0, kv, vv);
  table.commit(kTokens);

  // A decode row and a prefill chunk; the chunk's queries sit at the last positions.
  for (const Index tq : {Index{1}, Index{24}}) {
    INFO("Tq " << tq);
    const auto q = normal(static_cast<std::size_t>(tq * kHq * kD), 3);
    const inferkit::Tensor3View<const float> qv(q.data(), tq, kHq, kD);
    const auto run = [&](int source, int threads) {
      std::vector<float> out(q.size()), lse(static_cast<std::size_t>(tq * kHq));
      inferkit::AttentionOptions opt;
      opt.num_threads = threads;
      const inferkit::Tensor3View<float> ov(out.data(), tq, kHq, kD);
      const inferkit::MatrixView<float> lv(lse.data(), tq, kHq);
      if (source == 0)
        inferkit::attention(qv, dense.source(0), ov, lv, opt);
      else if (source == 1)
        inferkit::attention(qv, quant.source(0), ov, lv, opt);
      else
        inferkit::attention(qv, table.source(0), ov, lv, opt);
      out.insert(out.end(), lse.begin(), lse.end());
      return out;
    };
    std::vector<std::vector<float>> want;
    for (int s = 0; s < 3; ++s) want.push_back(run(s, 1));
    std::vector<std::vector<std::vector<float>>> got(kThreads);
    concurrently([&](int t) {
      for (int rep = 0; rep < 2; ++rep)
        for (int s = 0; s < 3; ++s) got[static_cast<std::size_t>(t)].push_back(run((s + t) % 3, 2));
    });
    for (int t = 0; t < kThreads; ++t)
      for (std::size_t i = 0; i < got[static_cast<std::size_t>(t)].size(); ++i)
        CHECK(same_bits(got[static_cast<std::size_t>(t)][i], want[(i % 3 + static_cast<std::size_t>(t)) % 3]));
  }

  // attention_batch over two tables that share the pool's blocks (a fork), from several threads.
  const inferkit::BlockTable<float> fork(table);
  const std::vector<inferkit::BlockTable<float>::Source> sources{table.source(0), fork.source(0)};
  const std::vector<std::int32_t> cu{0, 1, 9};
  const auto q = normal(static_cast<std::size_t>(9 * kHq * kD), 4);
  const auto batch = [&](int threads) {
    std::vector<float> out(q.size());
    inferkit::AttentionOptions opt;
    opt.num_threads = threads;
    inferkit::attention_batch(inferkit::Tensor3View<const float>(q.data(), 9, kHq, kD),
                              std::span<const std::int32_t>(cu), sources,
                              inferkit::Tensor3View<float>(out.data(), 9, kHq, kD), {}, opt);
    return out;
  };
  const auto want = batch(1);
  std::vector<std::vector<float>> got(kThreads);
  concurrently([&](int t) { got[static_cast<std::size_t>(t)] = batch(2); });
  for (const auto& g : got) CHECK(same_bits(g, want));
}

TEST_CASE("batched sampling from several threads equals sampling each row alone", "[threading][sampling]") {
  constexpr Index kRows = 6, kVocab = 3000;
  const auto logits = normal(static_cast<std::size_t>(kRows * kVocab), 5);
  std::vector<std::vector<TokenId>> history(kRows);
  for (Index r = 0; r < kRows; ++r)
    for (Index i = 0; i < 20; ++i)
      history[static_cast<std::size_t>(r)].push_back(static_cast<TokenId>((r * 131 + i * 17) % kVocab));
  const std::vector<std::span<const TokenId>> hs(history.begin(), history.end());
  std::vector<std::uint64_t> streams(kRows);
  for (Index r = 0; r < kRows; ++r) streams[static_cast<std::size_t>(r)] = static_cast<std::uint64_t>(100 + r);
  inferkit::SamplingParams p;
  p.temperature = 0.8f, p.top_k = 50, p.top_p = 0.9f, p.repetition_penalty = 1.1f, p.dry_multiplier = 0.8f;
  inferkit::SamplingParams pm = p;
  pm.mirostat = 2;  // a stateful chain: one state per row
  for (const auto& chain : {inferkit::presets::huggingface(p), inferkit::presets::llama_cpp(pm)}) {
    INFO(chain.describe());
    std::vector<TokenId> want(kRows);
    std::vector<inferkit::SamplerState> want_states;
    for (Index r = 0; r < kRows; ++r) {
      std::vector<float> row(logits.begin() + r * kVocab, logits.begin() + (r + 1) * kVocab);
      inferkit::SamplerState st = chain.make_state();
      want[static_cast<std::size_t>(r)] = chain.sample(
          row, hs[static_cast<std::size_t>(r)], st, inferkit::CounterRng(7, streams[static_cast<std::size_t>(r)]), 3);
      want_states.push_back(st);
    }
    std::vector<std::vector<TokenId>> got(kThreads, std::vector<TokenId>(kRows));
    std::vector<std::vector<inferkit::SamplerState>> states(
        kThreads, std::vector<inferkit::SamplerState>(kRows, chain.make_state()));
    concurrently([&](int t) {
      std::vector<float> mine = logits;  // the batch filters its logits in place
      chain.sample_batch(inferkit::MatrixView<float>(mine.data(), kRows, kVocab), hs,
                         states[static_cast<std::size_t>(t)], 7, streams, 3, got[static_cast<std::size_t>(t)], 2);
    });
    for (int t = 0; t < kThreads; ++t) {
      CHECK(got[static_cast<std::size_t>(t)] == want);
      CHECK(states[static_cast<std::size_t>(t)] == want_states);
    }
  }
}

TEST_CASE("batched speculative verification from several threads equals verifying each alone",
          "[threading][speculative]") {
  constexpr Index kVocab = 500, kItems = 6;
  std::vector<std::vector<float>> q(kItems), p(kItems);
  std::vector<std::vector<TokenId>> drafts(kItems);
  std::mt19937 rng(9);
  const auto dist = [&](std::vector<float>& rows, Index n) {
    for (Index r = 0; r < n; ++r) {
      std::vector<float> row(kVocab);
      double sum = 0;
      for (float& x : row) sum += x = static_cast<float>(rng() % 1000) + 1.0f;
      for (float& x : row) x = static_cast<float>(x / sum);
      rows.insert(rows.end(), row.begin(), row.end());
    }
  };
  std::vector<inferkit::DraftToVerify> items;
  for (Index j = 0; j < kItems; ++j) {
    const Index k = j % 4;  // k = 0 (bonus only) .. 3
    auto& qj = q[static_cast<std::size_t>(j)];
    auto& pj = p[static_cast<std::size_t>(j)];
    dist(qj, k);
    dist(pj, k + 1);
    for (Index i = 0; i < k; ++i) drafts[static_cast<std::size_t>(j)].push_back(static_cast<TokenId>(rng() % kVocab));
    const bool point_mass = j % 3 == 2 && k > 0;
    items.push_back(
        {drafts[static_cast<std::size_t>(j)],
         point_mass ? inferkit::MatrixView<const float>{} : inferkit::MatrixView<const float>(qj.data(), k, kVocab),
         {pj.data(), k + 1, kVocab},
         inferkit::CounterRng(11, static_cast<std::uint64_t>(j)),
         5});
  }
  std::vector<inferkit::VerifyResult> want;
  for (const auto& it : items)
    want.push_back(it.q.rows() == 0 && !it.draft.empty()
                       ? inferkit::verify_point_mass_draft(it.draft, it.p, it.rng, it.first_draw)
                       : inferkit::verify_draft(it.draft, it.q, it.p, it.rng, it.first_draw));
  std::vector<std::vector<inferkit::VerifyResult>> got(kThreads);
  concurrently([&](int t) { got[static_cast<std::size_t>(t)] = inferkit::verify_batch(items, {}, 2); });
  for (const auto& g : got) {
    REQUIRE(g.size() == want.size());
    for (std::size_t j = 0; j < g.size(); ++j) {
      CHECK(g[j].tokens == want[j].tokens);
      CHECK(g[j].accepted == want[j].accepted);
      CHECK(g[j].bonus == want[j].bonus);
    }
  }
}
