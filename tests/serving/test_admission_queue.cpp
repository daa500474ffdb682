// The admission queue (serving/admission_queue.hpp) against an independent model of the policy
// written here: a plain list of waiting entries, searched in full at every decision (FCFS: the
// lowest arrival; LPM: the starving entry that started waiting first, else the longest hint, ties
// by arrival), and a round-robin refresh that re-sorts the list by (stamp, arrival) each time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "inferkit/serving/admission_queue.hpp"

using inferkit::AdmissionQueue;
using inferkit::Index;
using inferkit::SchedulingPolicy;

namespace {

struct ModelEntry {
  int key;
  std::uint64_t arrival;
  Index stamp, hint;
};

// The policy as the header comment states it, by exhaustive search.
struct Model {
  SchedulingPolicy policy;
  Index bound;
  std::vector<ModelEntry> entries;
  std::optional<std::pair<Index, std::uint64_t>> last;  // (stamp, arrival) refreshed last

  bool lpm() const { return policy == SchedulingPolicy::kLongestPrefixMatch; }
  static Index waited(const ModelEntry& e, Index it) { return std::max<Index>(0, it - 1 - e.stamp); }

  std::vector<int> order(Index it) const {
    std::vector<ModelEntry> starving, rest;
    for (const auto& e : entries) (lpm() && waited(e, it) > bound ? starving : rest).push_back(e);
    std::sort(starving.begin(), starving.end(), [](const ModelEntry& a, const ModelEntry& b) {
      return std::tie(a.stamp, a.arrival) < std::tie(b.stamp, b.arrival);
    });
    std::sort(rest.begin(), rest.end(), [&](const ModelEntry& a, const ModelEntry& b) {
      if (lpm() && a.hint != b.hint) return a.hint > b.hint;
      return a.arrival < b.arrival;
    });
    std::vector<int> out;
    for (const auto& e : starving) out.push_back(e.key);
    for (const auto& e : rest) out.push_back(e.key);
    return out;
  }
  std::optional<int> next(Index it) const {
    const auto o = order(it);
    if (o.empty()) return std::nullopt;
    return o.front();
  }
  void push(int key, std::uint64_t arrival, Index hint, Index stamp) {
    entries.push_back({key, arrival, stamp, lpm() ? hint : 0});
  }
  bool erase(int key) {
    const auto it = std::find_if(entries.begin(), entries.end(), [&](const ModelEntry& e) { return e.key == key; });
    if (it == entries.end()) return false;
    entries.erase(it);
    return true;
  }
  template <class Lookup>
  void refresh(Index n, Lookup lookup) {
    if (!lpm() || entries.empty()) return;
    std::vector<ModelEntry*> aging;
    for (auto& e : entries) aging.push_back(&e);
    std::sort(aging.begin(), aging.end(), [](const ModelEntry* a, const ModelEntry* b) {
      return std::tie(a->stamp, a->arrival) < std::tie(b->stamp, b->arrival);
    });
    std::size_t start = 0;  // the first entry after the one looked up last, cyclically
    if (last) {
      while (start < aging.size() && std::make_pair(aging[start]->stamp, aging[start]->arrival) <= *last) ++start;
    }
    const Index m = std::min<Index>(n, static_cast<Index>(aging.size()));
    for (Index i = 0; i < m; ++i) {
      ModelEntry* e = aging[(start + static_cast<std::size_t>(i)) % aging.size()];
      e->hint = lookup(e->key);
      last = std::make_pair(e->stamp, e->arrival);
    }
  }
};

}  // namespace

TEST_CASE("admission queue: FCFS admits by arrival; a re-queued entry keeps its rank", "[serving][admission]") {
  AdmissionQueue<int> q(SchedulingPolicy::kFcfs, 0);
  CHECK(q.empty());
  CHECK(!q.next(1));
  q.push(10, 0, 99, 0);  // hints mean nothing under FCFS
  q.push(11, 1, 0, 0);
  q.push(12, 2, 5, 0);
  CHECK(q.size() == 3);
  CHECK(q.next(1) == 10);
  CHECK(q.hint(10) == 0);
  REQUIRE(q.erase(10));
  CHECK(!q.erase(10));
  CHECK(q.next(1) == 11);
  REQUIRE(q.erase(11));
  q.push(10, 0, 0, 7);  // preempted at iteration 7: its arrival rank puts it first again
  CHECK(q.order(100) == std::vector<int>{10, 12});
  CHECK(q.passed_over(10, 8) == 0);   // waiting since iteration 7: not passed over yet at 8
  CHECK(q.passed_over(10, 10) == 2);  // iterations 8 and 9
  CHECK(q.passed_over(12, 1) == 0);
  CHECK_THROWS_WITH(q.push(12, 3, 0, 0), Catch::Contains("already waiting"));
  CHECK_THROWS_WITH(AdmissionQueue<int>(SchedulingPolicy::kFcfs, -1), Catch::Contains("starvation_iterations = -1"));
}

TEST_CASE("admission queue: LPM by longest hint, ties by arrival; starving entries first, oldest first",
          "[serving][admission]") {
  AdmissionQueue<int> q(SchedulingPolicy::kLongestPrefixMatch, 2);
  q.push(1, 0, 0, 0);
  q.push(2, 1, 8, 0);
  q.push(3, 2, 8, 1);
  q.push(4, 3, 16, 1);
  CHECK(q.order(1) == std::vector<int>{4, 2, 3, 1});
  // At iteration 4, entries stamped 0 have been passed over 3 > 2 times: they go first, in the
  // order they started waiting (ties by arrival); entries stamped 1 have waited 2, not more.
  CHECK(q.order(4) == std::vector<int>{1, 2, 4, 3});
  CHECK(q.next(3) == 4);
  CHECK(q.next(4) == 1);
  // Refresh looks up hints round robin in (stamp, arrival) order and reorders.
  std::map<int, Index> truth{{1, 40}, {2, 8}, {3, 24}, {4, 16}};
  int calls = 0;
  const auto lookup = [&](int k) {
    ++calls;
    return truth.at(k);
  };
  q.refresh(1, lookup);  // entry 1
  CHECK(q.hint(1) == 40);
  CHECK(q.next(1) == 1);
  q.refresh(2, lookup);  // entries 2, 3
  CHECK(q.hint(3) == 24);
  CHECK(q.order(1) == std::vector<int>{1, 3, 4, 2});
  q.refresh(10, lookup);  // at most size() lookups: 4, 1, 2, 3
  CHECK(calls == 7);
  q.refresh(0, lookup);
  CHECK(calls == 7);
}

TEST_CASE("admission queue against the model: random pushes, erases, re-queues and refreshes", "[serving][admission]") {
  for (const SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kLongestPrefixMatch})
    for (const Index bound : {Index{0}, Index{3}, Index{50}}) {
      INFO("policy " << static_cast<int>(policy) << " bound " << bound);
      std::mt19937 rng(static_cast<std::uint32_t>(17 + bound * 3 + static_cast<int>(policy)));
      AdmissionQueue<int> q(policy, bound);
      Model m{policy, bound, {}, std::nullopt};
      std::map<int, Index> truth;               // hints refresh() would find
      std::vector<int> gone;                    // keys that left (may come back: preemption)
      std::map<int, std::uint64_t> arrival_of;  // a key's arrival rank, kept when it comes back
      int next_key = 0;
      Index it = 0;
      for (int step = 0; step < 4000; ++step) {
        const int op = static_cast<int>(rng() % 10);
        if (op < 3) {  // arrival
          const int k = next_key++;
          arrival_of[k] = static_cast<std::uint64_t>(k);
          truth[k] = static_cast<Index>(rng() % 5) * 4;
          q.push(k, arrival_of[k], truth[k], it);
          m.push(k, arrival_of[k], truth[k], it);
        } else if (op == 3 && !gone.empty()) {  // a preempted request waits again, same arrival
          const std::size_t i = rng() % gone.size();
          const int k = gone[i];
          gone.erase(gone.begin() + static_cast<std::ptrdiff_t>(i));
          q.push(k, arrival_of[k], truth[k], it);
          m.push(k, arrival_of[k], truth[k], it);
        } else if (op == 4 && !m.entries.empty()) {  // a cancel anywhere in the queue
          const int k = m.entries[rng() % m.entries.size()].key;
          REQUIRE(q.erase(k));
          REQUIRE(m.erase(k));
        } else if (op == 5) {  // the trie changed
          if (!truth.empty()) {
            auto t = truth.begin();
            std::advance(t, static_cast<std::ptrdiff_t>(rng() % truth.size()));
            t->second = static_cast<Index>(rng() % 7) * 4;
          }
        } else if (op == 6) {
          const Index n = static_cast<Index>(rng() % 4);
          q.refresh(n, [&](int k) { return truth.at(k); });
          m.refresh(n, [&](int k) { return truth.at(k); });
        } else {  // an iteration: admit up to two
          ++it;
          for (int a = 0; a < static_cast<int>(rng() % 3); ++a) {
            const auto want = m.next(it);
            REQUIRE(q.next(it) == want);
            if (!want) break;
            REQUIRE(q.erase(*want));
            m.erase(*want);
            if (rng() % 2) gone.push_back(*want);
          }
        }
        REQUIRE(q.size() == static_cast<Index>(m.entries.size()));
        REQUIRE(q.order(it + 1) == m.order(it + 1));
        for (const auto& e : m.entries) {
          REQUIRE(q.contains(e.key));
          REQUIRE(q.hint(e.key) == e.hint);
          REQUIRE(q.passed_over(e.key, it + 1) == Model::waited(e, it + 1));
        }
      }
    }
}
