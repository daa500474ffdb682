// Soak test of the serving scheduler: 100,000 iterations against a pool far too small for the
// requests in flight (so preemption and eviction run all the time), with random arrivals and
// cancels (waiting, running, and in the plan in flight) and speculative drafts. The fake model of
// serving_test_util.hpp runs every plan; the next token is a hash of the request's seed and its
// whole token history, so any scheduling bug (a wrong cache row, a lost or repeated token, a
// draw at the wrong index) changes the output. Checks: every finished request equals serving it
// alone; no block leaks (the pool drains to empty); memory stays bounded (live requests, trie
// bookkeeping, and, outside sanitizer builds, the process's resident memory).
//
// Iterations: 100,000 (about 0.4 s of CPU in release, 2 s under AddressSanitizer);
// INFERKIT_SOAK_ITERATIONS=<n> overrides it (e.g. fewer under a slower sanitizer).

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "inferkit/serving/scheduler.hpp"
#include "serving/serving_test_util.hpp"

using inferkit::Index;
using inferkit::RequestId;
using inferkit::TokenId;

namespace {

// Sanitizer builds keep freed memory in quarantine: their RSS says nothing about leaks.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

int soak_iterations() {
  if (const char* e = std::getenv("INFERKIT_SOAK_ITERATIONS")) return std::atoi(e);
  return 100000;
}

// Resident set size in KiB (Linux), or 0 when unknown.
long rss_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

}  // namespace

TEST_CASE("scheduler soak: 100k iterations, a tiny pool, arrivals and cancels; outputs exact, no leaks",
          "[serving][soak]") {
  constexpr int kVocab = 16;
  constexpr Index kPage = 4, kBlocks = 12;  // the largest request needs 8 blocks: at most one fits whole
  constexpr Index kMaxLive = 48;            // arrivals pause above this many live requests
  const int iterations = soak_iterations();
  std::mt19937_64 rng(20261201);
  const auto uni = [&](int lo, int hi) {
    return static_cast<int>(lo + rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  test::ServeHarness h(kPage, kBlocks,
                       {.max_batched_tokens = 24,
                        .max_sequences = 8,
                        .max_prefill_chunk = 8,
                        .policy = inferkit::SchedulingPolicy::kLongestPrefixMatch,
                        .starvation_iterations = 32});
  const std::vector<inferkit::ContextIdentity> ids{{"m"}, {"m", "lora"}};
  std::vector<std::vector<TokenId>> systems(3);
  for (auto& s : systems)
    for (int i = 0, n = uni(3, 9); i < n; ++i) s.push_back(static_cast<TokenId>(uni(0, kVocab - 1)));

  std::map<RequestId, test::SoloResult> expected;
  std::uint64_t finished = 0, cancelled = 0, cancelled_in_flight = 0;
  std::size_t trie_bytes_warm = 0, trie_bytes_max = 0;
  long rss_warm = 0;
  const auto check_finished = [&](const std::vector<inferkit::FinishedRequest>& done) {
    for (const auto& f : done) {
      const auto it = expected.find(f.id);
      REQUIRE(it != expected.end());
      REQUIRE(f.output == it->second.output);
      REQUIRE(f.reason == it->second.reason);
      expected.erase(it);
      h.params.erase(f.id);
      h.done.erase(f.id);
      ++finished;
    }
  };
  const auto cancel = [&](RequestId id) {
    REQUIRE(h.sched.cancel(id));
    expected.erase(id);
    ++cancelled;
  };

  for (int it = 0; it < iterations || !h.sched.idle(); ++it) {
    REQUIRE(it < iterations + 5000);  // drains: no livelock
    if (it < iterations && static_cast<Index>(expected.size()) < kMaxLive) {
      for (int a = uni(0, 3) == 0 ? uni(1, 2) : 0; a > 0; --a) {
        inferkit::RequestParams p;
        p.identity = ids[static_cast<std::size_t>(uni(0, 4) == 0)];
        if (uni(0, 2) > 0) p.prompt = systems[static_cast<std::size_t>(uni(0, 2))];
        for (int i = 0, n = uni(p.prompt.empty() ? 1 : 0, 6); i < n; ++i)
          p.prompt.push_back(static_cast<TokenId>(uni(0, kVocab - 1)));
        p.max_new_tokens = uni(1, 16);
        if (uni(0, 1)) p.eos_token_ids = {static_cast<TokenId>(kVocab - 1)};
        if (uni(0, 3) == 0) p.stop_sequences = {{static_cast<TokenId>(uni(0, 3)), static_cast<TokenId>(uni(0, 3))}};
        p.seed = rng();
        expected.emplace(h.add(p), test::serve_alone(p, kVocab));
      }
    }
    if (!expected.empty() && uni(0, 40) == 0) {  // cancel a waiting or running request
      auto at = expected.begin();
      std::advance(at, uni(0, static_cast<int>(expected.size()) - 1));
      const RequestId id = at->first;
      cancel(id);
      h.params.erase(id);
    }
    for (RequestId id : h.sched.running_ids())  // drafts: the true continuation, sometimes wrong
      if (h.sched.info(id).state == inferkit::RequestState::kDecoding && uni(0, 5) == 0) {
        const auto& want = expected.at(id).generated;
        const std::size_t g = h.sched.info(id).generated.size();
        std::vector<TokenId> d;
        for (std::size_t j = g; j < std::min(want.size(), g + 3); ++j) d.push_back(want[j]);
        if (!d.empty() && uni(0, 2) == 0) d.back() = static_cast<TokenId>(uni(0, kVocab - 1));
        h.sched.set_draft(id, d);
      }
    auto& plan = h.sched.schedule();
    RequestId in_flight = -1;
    if (!plan.empty() && uni(0, 60) == 0) {  // cancel one in the plan in flight (its forward still runs)
      in_flight = plan.sequences[static_cast<std::size_t>(uni(0, static_cast<int>(plan.sequences.size()) - 1))].id;
      expected.erase(in_flight);
      REQUIRE(h.sched.cancel(in_flight));
      ++cancelled;
      ++cancelled_in_flight;
    }
    check_finished(h.finish_step(plan));
    if (in_flight >= 0) h.params.erase(in_flight);

    // Bounded: live requests, and the trie's bookkeeping once warm.
    REQUIRE(h.sched.num_waiting() + h.sched.num_running() == static_cast<Index>(expected.size()));
    REQUIRE(static_cast<Index>(expected.size()) <= kMaxLive + 2);
    REQUIRE(h.pool.used_blocks() <= kBlocks);
    trie_bytes_max = std::max(trie_bytes_max, h.trie.metadata_bytes());
    if (it == iterations / 10) {
      trie_bytes_warm = trie_bytes_max;
      rss_warm = rss_kib();
    }
  }
  CHECK(expected.empty());
  CHECK(h.params.empty());
  // No leaks: only the trie holds blocks once idle, and evicting it empties the pool.
  CHECK(h.pool.used_blocks() == h.trie.cached_pages());
  h.trie.evict(kBlocks);
  CHECK(h.trie.cached_pages() == 0);
  CHECK(h.pool.used_blocks() == 0);
  CHECK(h.pool.bytes_in_use() == 0);
  CHECK(trie_bytes_max <= 2 * trie_bytes_warm + 4096);
  if (!kSanitized && rss_warm > 0) CHECK(rss_kib() - rss_warm < 8 * 1024);  // < 8 MiB growth after warm-up
  const auto& st = h.sched.stats();
  UNSCOPED_INFO("iterations " << st.iterations << " finished " << finished << " cancelled " << cancelled
                              << " (in flight " << cancelled_in_flight << ") preemptions " << st.preemptions
                              << " evicted " << st.evicted_pages << " cached tokens " << st.cached_tokens
                              << " accepted drafts " << st.accepted_draft_tokens << " trie bytes " << trie_bytes_warm
                              << " -> " << trie_bytes_max);
  CHECK(std::getenv("SCHED_STATS") == nullptr);  // SCHED_STATS=1 prints the counters above
  // The run exercises what it claims to (scaled with the iteration count).
  CHECK(finished > static_cast<std::uint64_t>(iterations) / 40);
  CHECK(cancelled > static_cast<std::uint64_t>(iterations) / 400);
  CHECK(cancelled_in_flight > 0);
  CHECK(st.preemptions > static_cast<std::uint64_t>(iterations) / 1000);
  CHECK(st.evicted_pages > 0);
  CHECK(st.cached_tokens > 0);
  CHECK(st.accepted_draft_tokens > 0);
}
