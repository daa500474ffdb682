// Model-based randomized test of the scheduler: random arrivals, cancels (in every state,
// including while a plan is in flight), speculative drafts (supplied and reserved), stop rules,
// tight pools, several page sizes, both policies. A fake deterministic model (serving_test_util)
// runs every plan. After every iteration the test checks the rules against its own bookkeeping;
// at the end every request's output equals serving it alone and the pool drains to empty.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "inferkit/serving/scheduler.hpp"
#include "serving/serving_test_util.hpp"

using inferkit::Index;
using inferkit::RequestId;
using inferkit::TokenId;

namespace {

struct Scenario {
  Index page, blocks, budget, seqs, chunk;
  bool chunked, trie;
  inferkit::SchedulingPolicy policy;
  Index starvation;
  int iterations;
  unsigned seed;
};

struct Tracked {
  inferkit::RequestParams params;
  test::SoloResult solo;
  bool waiting = true;
  Index enqueued_at = 0;  // schedule() calls made when it last started waiting
};

constexpr int kVocab = 12;

// Blocks of the largest request add_random() makes (prompt <= 5 page + 5, 14 new tokens), plus
// `spare`: a pool that holds one big request and little else.
Index tight_pool(Index page, Index spare) { return (5 * page + 5 + 13 + page - 1) / page + spare; }

// The pool of a scenario: float rows, or quantized KIVI-style (4-bit keys per channel over the
// page, 4-bit values per token; rows stored as 4-bit digits, serving_test_util.hpp).
template <class T>
inferkit::BlockPoolConfig scenario_pool(Index page, Index blocks) {
  inferkit::BlockPoolConfig c{1, 1, test::head_dim_of<T>, page, blocks};
  if constexpr (inferkit::kQuantizedPool<T>)
    c.quant = {inferkit::QuantSpec{4, false, page, inferkit::QuantAxis::kPerChannel, 0},
               inferkit::QuantSpec{4, false, test::kQuantHeadDim, inferkit::QuantAxis::kPerToken, 0}};
  return c;
}

// Returns a fingerprint of every plan (ids, positions, rows, drafts, preemptions).
template <class T = float>
std::uint64_t run_scenario(const Scenario& sc) {
  std::mt19937 rng(sc.seed);
  const auto uni = [&](int lo, int hi) { return static_cast<int>(lo + rng() % static_cast<unsigned>(hi - lo + 1)); };
  inferkit::BlockPool<T> pool(scenario_pool<T>(sc.page, sc.blocks));
  inferkit::PrefixTrie<T> trie(pool);
  inferkit::SchedulerConfig cfg{.max_batched_tokens = sc.budget,
                                .max_sequences = sc.seqs,
                                .max_prefill_chunk = sc.chunk,
                                .chunked_prefill = sc.chunked,
                                .policy = sc.policy,
                                .starvation_iterations = sc.starvation,
                                .lpm_refresh_per_iteration = 4};
  inferkit::Scheduler<T> sched(pool, sc.trie ? &trie : nullptr, cfg);

  const std::vector<inferkit::ContextIdentity> identities{{"model"}, {"model", "lora"}};
  std::vector<std::vector<TokenId>> systems(3);
  for (auto& s : systems)
    for (int i = 0, n = uni(1, 3 * static_cast<int>(sc.page) + 2); i < n; ++i)
      s.push_back(static_cast<TokenId>(uni(0, kVocab - 1)));

  std::map<RequestId, Tracked> live;
  Index finished = 0, cancelled = 0, preempted = 0, drafted = 0, cached_hits = 0;
  Index it = 0;
  std::uint64_t fingerprint = 0;
  const auto identity_of = [&](RequestId id) -> const inferkit::ContextIdentity& {
    return live.at(id).params.identity;
  };

  const auto add_random = [&] {
    inferkit::RequestParams p;
    p.identity = identities[static_cast<std::size_t>(uni(0, 3) == 0)];
    if (uni(0, 3) > 0) p.prompt = systems[static_cast<std::size_t>(uni(0, 2))];
    for (int i = 0, n = uni(p.prompt.empty() ? 1 : 0, 2 * static_cast<int>(sc.page) + 3); i < n; ++i)
      p.prompt.push_back(static_cast<TokenId>(uni(0, kVocab - 1)));
    p.max_new_tokens = uni(1, 14);
    if (uni(0, 1)) p.eos_token_ids = {static_cast<TokenId>(kVocab - 1)};
    if (uni(0, 2) == 0) p.stop_sequences.push_back({static_cast<TokenId>(uni(0, kVocab - 1))});
    if (uni(0, 2) == 0) p.stop_sequences.push_back({static_cast<TokenId>(uni(0, 3)), static_cast<TokenId>(uni(0, 3))});
    p.keep_stop_sequence = uni(0, 1);
    p.seed = rng();
    const Index need = sched.blocks_needed(static_cast<Index>(p.prompt.size()), p.max_new_tokens);
    const bool fits =
        need <= sc.blocks && (sc.chunked || static_cast<Index>(p.prompt.size()) + p.max_new_tokens - 1 <= sc.budget);
    if (!fits) {
      CHECK_THROWS_AS(sched.add_request(p), std::invalid_argument);
      return;
    }
    Tracked t{p, test::serve_alone(p, kVocab), true, it};
    const RequestId id = sched.add_request(p);
    live.emplace(id, std::move(t));
  };

  // Draft tokens for a request about to decode: its true continuation, sometimes corrupted.
  const auto draft_for = [&](RequestId id, Index k) {
    const Tracked& t = live.at(id);
    const auto g = static_cast<std::size_t>(sched.info(id).generated.size());
    std::vector<TokenId> d;
    for (Index i = 0; i < k; ++i) {
      const std::size_t j = g + static_cast<std::size_t>(i);
      d.push_back(j < t.solo.generated.size() ? t.solo.generated[j] : 0);
    }
    if (!d.empty() && uni(0, 2) == 0)
      d[static_cast<std::size_t>(uni(0, static_cast<int>(k) - 1))] = static_cast<TokenId>(uni(0, kVocab - 1));
    return d;
  };

  const int total = sc.iterations;
  for (int step = 0; step < total + 2000; ++step) {
    const bool draining = step >= total;
    if (draining && sched.idle()) break;
    REQUIRE(step < total + 1999);  // the queue drains: no livelock
    if (!draining)
      for (int a = uni(0, 2); a > 0; --a) add_random();
    if (!live.empty() && uni(0, 24) == 0) {  // cancel any request, waiting or running
      auto at = live.begin();
      std::advance(at, uni(0, static_cast<int>(live.size()) - 1));
      CHECK(sched.cancel(at->first));
      CHECK_FALSE(sched.contains(at->first));
      CHECK_FALSE(sched.cancel(at->first));
      live.erase(at);
      ++cancelled;
    }
    for (RequestId id : sched.running_ids())
      if (sched.info(id).state == inferkit::RequestState::kDecoding && uni(0, 3) == 0) {
        const auto d = draft_for(id, uni(1, 4));
        sched.set_draft(id, d);
      }

    // The policy's order, from the test's own bookkeeping before the call.
    const Index call = it + 1;
    std::vector<std::pair<std::pair<Index, RequestId>, RequestId>> starving, by_arrival;
    std::set<RequestId> decoding_before, prefilling_before;
    for (const auto& [id, t] : live) {
      if (t.waiting) {
        by_arrival.push_back({{id, id}, id});
        if (call - 1 - t.enqueued_at > sc.starvation) starving.push_back({{t.enqueued_at, id}, id});
      } else {
        (sched.info(id).state == inferkit::RequestState::kDecoding ? decoding_before : prefilling_before).insert(id);
      }
    }
    std::sort(starving.begin(), starving.end());

    const Index reserve = uni(0, 4) == 0 ? uni(1, 3) : 0;
    auto& plan = sched.schedule({.reserve_draft_tokens = reserve});
    ++it;
    REQUIRE(plan.iteration == it);

    // Budget, caps, order and layout.
    REQUIRE(plan.num_tokens() <= sc.budget);
    REQUIRE(static_cast<Index>(plan.sequences.size()) <= sc.seqs);
    REQUIRE(sched.num_running() <= sc.seqs);
    REQUIRE(plan.cu_q.size() == plan.sequences.size() + 1);
    std::set<RequestId> in_plan, preempted_now(plan.preempted.begin(), plan.preempted.end());
    bool seen_prefill = false;
    for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
      const auto& s = plan.sequences[i];
      in_plan.insert(s.id);
      if (s.prefill) seen_prefill = true;
      REQUIRE((!seen_prefill || s.prefill));  // decode rows first
      REQUIRE(s.offset == plan.cu_q[i]);
      REQUIRE(plan.cu_q[i + 1] - plan.cu_q[i] == s.num_tokens);
      REQUIRE(s.table->num_tokens() == s.position + s.num_tokens);
      for (Index j = 0; j < s.num_tokens; ++j)
        REQUIRE(plan.positions[static_cast<std::size_t>(s.offset + j)] == s.position + j);
      if (s.prefill && sc.chunk > 0) REQUIRE(s.num_tokens <= sc.chunk);
      if (s.prefill && !sc.chunked) REQUIRE(s.sample);
      if (!s.prefill) REQUIRE(s.num_tokens == 1 + s.draft_tokens);
      REQUIRE(s.draw_index == static_cast<Index>(sched.info(s.id).generated.size()));
      REQUIRE(s.seed == live.at(s.id).params.seed);
      REQUIRE(s.position + s.num_tokens - s.draft_tokens <= static_cast<Index>(s.context.size()));
    }
    for (RequestId id : decoding_before)  // decode rows are never starved
      if (!preempted_now.count(id)) REQUIRE(in_plan.count(id));
    bool prefill_left_out = false;
    for (RequestId id : prefilling_before)
      if (!preempted_now.count(id) && !in_plan.count(id)) prefill_left_out = true;
    if (prefill_left_out) REQUIRE(plan.num_tokens() == sc.budget);
    // Admissions follow the policy: FCFS by arrival; LPM starving requests first, oldest wait first.
    std::vector<RequestId> admitted;
    for (std::size_t i = plan.sequences.size() - static_cast<std::size_t>(plan.num_admitted); i < plan.sequences.size();
         ++i)
      admitted.push_back(plan.sequences[i].id);
    if (!plan.preempted.empty()) REQUIRE(admitted.empty());
    if (sc.policy == inferkit::SchedulingPolicy::kFcfs) {
      std::sort(by_arrival.begin(), by_arrival.end());
      for (std::size_t i = 0; i < admitted.size(); ++i) REQUIRE(admitted[i] == by_arrival[i].second);
    } else {
      for (std::size_t i = 0; i < std::min(admitted.size(), starving.size()); ++i)
        REQUIRE(admitted[i] == starving[i].second);
    }
    for (RequestId id : admitted) {
      REQUIRE(live.at(id).waiting);
      live.at(id).waiting = false;
    }
    for (RequestId id : plan.preempted) {
      REQUIRE_FALSE(live.at(id).waiting);
      live.at(id).waiting = true;
      live.at(id).enqueued_at = it;
      ++preempted;
    }

    for (const auto& s : plan.sequences)
      fingerprint = test::splitmix(fingerprint ^ static_cast<std::uint64_t>(s.id * 1000003 + s.position * 1009 +
                                                                            s.num_tokens * 31 + s.draft_tokens));
    for (RequestId id : plan.preempted) fingerprint = test::splitmix(fingerprint ^ static_cast<std::uint64_t>(id));

    // Fill reserved draft slots, run the model, maybe cancel a request in flight, report back.
    for (auto& s : plan.sequences) {
      drafted += s.draft_tokens;
      if (s.draft_tokens > 0 && s.tokens.back() == inferkit::kDraftSlot) {
        const auto d = draft_for(s.id, s.draft_tokens);
        std::copy(d.begin(), d.end(), s.tokens.end() - s.draft_tokens);
      }
    }
    const auto [tokens, counts] = test::run_plan(pool, plan, identity_of, kVocab);
    if (!plan.empty() && uni(0, 30) == 0) {
      const RequestId id =
          plan.sequences[static_cast<std::size_t>(uni(0, static_cast<int>(plan.sequences.size()) - 1))].id;
      CHECK(sched.cancel(id));
      CHECK_FALSE(sched.contains(id));
      live.erase(id);
      ++cancelled;
    }
    std::vector<inferkit::FinishedRequest> done;
    if (!plan.empty()) done = sched.complete(tokens, counts);
    for (const auto& f : done) {
      const Tracked& t = live.at(f.id);
      INFO("request " << f.id << " preemptions " << f.preemptions);
      REQUIRE(f.output == t.solo.output);
      REQUIRE(f.reason == t.solo.reason);
      REQUIRE(f.generated_tokens == static_cast<Index>(t.solo.generated.size()));
      REQUIRE_FALSE(sched.contains(f.id));
      live.erase(f.id);
      ++finished;
    }

    // Every block's reference count equals its holders: running tables plus trie nodes.
    std::vector<Index> holders(static_cast<std::size_t>(sc.blocks), 0);
    for (RequestId id : sched.running_ids())
      for (auto b : sched.info(id).table->blocks()) ++holders[static_cast<std::size_t>(b)];
    for (Index b = 0; b < sc.blocks; ++b) {
      const Index expect =
          holders[static_cast<std::size_t>(b)] + (trie.holds_block(static_cast<inferkit::BlockId>(b)) ? 1 : 0);
      REQUIRE(pool.refcount(static_cast<inferkit::BlockId>(b)) == expect);
    }
    // Running requests: cache contents equal a fresh prefill, pinned prefixes stay cached.
    for (RequestId id : sched.running_ids()) {
      const auto info = sched.info(id);
      const Tracked& t = live.at(id);
      std::vector<TokenId> seq = t.params.prompt;
      seq.insert(seq.end(), info.generated.begin(), info.generated.end());
      REQUIRE(info.cached_tokens < static_cast<Index>(seq.size()));  // the newest token is not cached yet
      const auto h = test::prefix_hashes(t.params.identity, seq);
      for (Index q = 0; q < info.cached_tokens; ++q) {
        const auto row = test::read_row(pool, *info.table, q);
        const auto want = test::make_row(seq[static_cast<std::size_t>(q)], q, h[static_cast<std::size_t>(q)]);
        for (int i = 0; i < 4; ++i) {
          REQUIRE(row.k[i] == want.k[i]);
          REQUIRE(row.v[i] == want.v[i]);
        }
      }
      if (sc.trie) {
        REQUIRE(info.pinned_tokens == info.cached_tokens / sc.page * sc.page);
        REQUIRE(trie.peek(t.params.identity, seq) >= info.pinned_tokens);
      } else {
        REQUIRE(info.pinned_tokens == 0);
      }
    }
    for (const auto& [id, t] : live) REQUIRE(sched.contains(id));
  }
  REQUIRE(live.empty());
  REQUIRE(sched.stats().finished == static_cast<std::uint64_t>(finished));
  cached_hits = static_cast<Index>(sched.stats().cached_tokens);
  trie.evict(sc.blocks);
  CHECK(trie.cached_pages() == 0);
  CHECK(pool.used_blocks() == 0);
  const auto& st = sched.stats();
  UNSCOPED_INFO("iterations " << st.iterations << " finished " << finished << " cancelled " << cancelled
                              << " preempted " << preempted << " drafts " << drafted << " accepted "
                              << st.accepted_draft_tokens << " cached " << cached_hits << " prefill "
                              << st.prefill_tokens << " decode " << st.decode_tokens << " evicted "
                              << st.evicted_pages);
  CHECK(std::getenv("SCHED_STATS") == nullptr);
  // The scenario must exercise what it claims to.
  CHECK(finished > 50);
  CHECK(cancelled > 3);
  CHECK(preempted > 0);
  CHECK(drafted > 0);
  if (sc.trie) CHECK(cached_hits > 0);
  return fingerprint;
}

}  // namespace

TEST_CASE("scheduler model test: FCFS, chunked prefill, prefix cache, tight pool", "[serving][model]") {
  for (Index page : {1, 3, 8}) {
    INFO("page " << page);
    run_scenario({page, tight_pool(page, 3), 12, 5, 0, true, true, inferkit::SchedulingPolicy::kFcfs, 0, 700,
                  11u + static_cast<unsigned>(page)});
  }
}

TEST_CASE("scheduler model test: LPM with a starvation bound, chunk cap", "[serving][model]") {
  for (Index page : {1, 4, 5}) {
    INFO("page " << page);
    run_scenario({page, tight_pool(page, 4), 14, 6, 5, true, true, inferkit::SchedulingPolicy::kLongestPrefixMatch, 6,
                  700, 23u + static_cast<unsigned>(page)});
  }
}

TEST_CASE("scheduler model test: unchunked prefill and no prefix cache", "[serving][model]") {
  run_scenario(
      {4, tight_pool(4, 2), 48, 6, 0, false, true, inferkit::SchedulingPolicy::kLongestPrefixMatch, 3, 700, 7u});
  run_scenario({2, tight_pool(2, 3), 10, 4, 0, true, false, inferkit::SchedulingPolicy::kFcfs, 0, 700, 9u});
}

TEST_CASE("scheduler model test: the same inputs give the same plans", "[serving][model]") {
  const Scenario sc{3,  tight_pool(3, 3), 12, 5, 4, true, true, inferkit::SchedulingPolicy::kLongestPrefixMatch, 4, 500,
                    99u};
  CHECK(run_scenario(sc) == run_scenario(sc));
}

TEST_CASE(
    "scheduler model test over a quantized (KIVI) pool: the cache holds every row, the plans are the float pool's",
    "[serving][model][quantized]") {
  for (Index page : {1, 3, 8}) {
    INFO("page " << page);
    const Scenario sc{page,
                      tight_pool(page, 3),
                      12,
                      5,
                      0,
                      true,
                      true,
                      inferkit::SchedulingPolicy::kFcfs,
                      0,
                      500,
                      41u + static_cast<unsigned>(page)};
    CHECK(run_scenario<inferkit::QuantizedKv>(sc) == run_scenario<float>(sc));
  }
}
