#pragma once
// The waiting queue of the serving scheduler: which waiting request is admitted next.
//
//   AdmissionQueue<RequestId> q(SchedulingPolicy::kLongestPrefixMatch, 64);
//   q.push(id, arrival, cached_prefix_tokens, iteration);  // a request starts waiting
//   if (auto next = q.next(iteration)) ...                  // admit *next, then q.erase(*next)
//
// Contract. Every entry has an arrival rank (unique, kept across preemptions, so a preempted
// request resumes ahead of later arrivals), the iteration it started waiting at (its stamp) and,
// under LPM, a hint: the cached prefix tokens it had when last looked up.
//   kFcfs: entries leave in arrival order.
//   kLongestPrefixMatch (SGLang's `lpm`): by hint, longest first, ties by arrival; but an entry
//     that has been passed over by more than `starvation_iterations` iterations leaves first,
//     starving entries in the order they started waiting (ties by arrival). At iteration `it`
//     (1-based count of schedule() calls, the one deciding) an entry stamped `s` has been passed
//     over by max(0, it - 1 - s) iterations: an entry stamped during iteration it (a preemption)
//     has waited 0.
// Hints change only through push() and refresh(), which looks up a bounded number of entries
// per call, round robin in waiting order, so an iteration's cost never grows with the queue:
// O(log n) per push / erase / refresh step, O(1) for next().
//
// Key is the caller's handle of a request (hashable, copyable; the scheduler uses its record
// pointers). Single-threaded.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Order in which waiting requests are admitted.
enum class SchedulingPolicy {
  kFcfs,                ///< arrival order (a preempted request keeps its arrival rank, so it resumes first)
  kLongestPrefixMatch,  ///< most cached prefix tokens first (SGLang `lpm`), ties by arrival; anti-starvation bound
};

/// The admission order of waiting requests (file comment).
template <class Key>
class AdmissionQueue {
 public:
  /// Throws std::invalid_argument naming `starvation_iterations` when it is negative.
  AdmissionQueue(SchedulingPolicy policy, Index starvation_iterations)
      : policy_(policy), starvation_(starvation_iterations) {
    require(starvation_iterations >= 0, "starvation_iterations", starvation_iterations, "must be >= 0");
  }
  AdmissionQueue(const AdmissionQueue&) = delete;  // the ordered maps point into entries_
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  SchedulingPolicy policy() const { return policy_; }                       ///< as given to the constructor
  Index size() const { return static_cast<Index>(entries_.size()); }        ///< number of waiting entries
  bool empty() const { return entries_.empty(); }                           ///< true when nothing waits
  bool contains(const Key& key) const { return entries_.count(key) != 0; }  ///< true when `key` is waiting

  /// Adds `key` (not already waiting) with its arrival rank (unique among waiting entries), its
  /// hint (ignored under FCFS) and the iteration count at which it starts waiting.
  void push(const Key& key, std::uint64_t arrival, Index hint, Index stamp) {
    const auto [it, fresh] = entries_.try_emplace(key, Entry{key, arrival, stamp, lpm() ? hint : 0});
    require(fresh, "arrival", arrival, "belongs to a key that is already waiting");
    Entry* e = &it->second;
    order_.emplace(order_key(*e), e);
    if (lpm()) aging_.emplace(aging_key(*e), e);
  }

  /// Removes `key`; false if it was not waiting.
  bool erase(const Key& key) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    Entry& e = it->second;
    order_.erase(order_key(e));
    // The refresh cursor may keep its key: upper_bound() of a departed key is still the next one.
    if (lpm()) aging_.erase(aging_key(e));
    entries_.erase(it);
    return true;
  }

  /// The entry admitted first at iteration `it`, or nullopt when empty.
  std::optional<Key> next(Index it) const {
    if (entries_.empty()) return std::nullopt;
    if (lpm()) {
      const Entry* oldest = aging_.begin()->second;
      if (passed_over(*oldest, it) > starvation_) return oldest->key;
    }
    return order_.begin()->second->key;
  }

  /// Every entry in the order next() would admit them at iteration `it` if none arrived or
  /// changed: starving entries first (LPM), then by policy. O(n log n); for inspection.
  std::vector<Key> order(Index it) const {
    std::vector<Key> out;
    out.reserve(entries_.size());
    std::size_t starving = 0;
    if (lpm())
      for (const auto& [k, e] : aging_) {
        if (passed_over(*e, it) <= starvation_) break;
        out.push_back(e->key);
        ++starving;
      }
    for (const auto& [k, e] : order_) {
      if (starving > 0 && passed_over(*e, it) > starvation_) continue;  // listed already
      out.push_back(e->key);
    }
    return out;
  }

  /// Iterations `key` (waiting) has been passed over as of iteration `it`.
  Index passed_over(const Key& key, Index it) const { return passed_over(entries_.at(key), it); }
  /// The hint `key` (waiting) is ordered by (0 under FCFS).
  Index hint(const Key& key) const { return entries_.at(key).hint; }

  /// LPM: looks up min(n, size()) hints with `lookup(key) -> Index`, round robin in waiting order
  /// (continuing after the entry the previous call looked up last), and reorders the entries
  /// whose hint changed. Does nothing under FCFS.
  template <class Lookup>
  void refresh(Index n, Lookup&& lookup) {
    if (!lpm() || aging_.empty()) return;
    Index left = std::min<Index>(n, static_cast<Index>(aging_.size()));
    auto it = cursor_ ? aging_.upper_bound(*cursor_) : aging_.begin();
    for (; left > 0; --left) {
      if (it == aging_.end()) it = aging_.begin();
      Entry& e = *it->second;
      const Index h = lookup(static_cast<const Key&>(e.key));
      if (h != e.hint) {
        order_.erase(order_key(e));
        e.hint = h;
        order_.emplace(order_key(e), &e);
      }
      cursor_ = it->first;
      ++it;
    }
  }

 private:
  struct Entry {
    Key key;
    std::uint64_t arrival = 0;
    Index stamp = 0;  // iteration count when it started waiting
    Index hint = 0;   // LPM: cached prefix tokens when last looked up
  };
  // (policy rank, arrival) and (stamp, arrival): arrival is unique among waiting entries.
  using OrderKey = std::pair<Index, std::uint64_t>;

  bool lpm() const { return policy_ == SchedulingPolicy::kLongestPrefixMatch; }
  static Index passed_over(const Entry& e, Index it) { return std::max<Index>(0, it - 1 - e.stamp); }
  OrderKey order_key(const Entry& e) const { return {lpm() ? -e.hint : 0, e.arrival}; }
  static OrderKey aging_key(const Entry& e) { return {e.stamp, e.arrival}; }

  SchedulingPolicy policy_;
  Index starvation_;
  std::unordered_map<Key, Entry> entries_;  // node-based: entry addresses are stable
  std::map<OrderKey, Entry*> order_;        // by policy
  std::map<OrderKey, Entry*> aging_;        // LPM: by (stamp, arrival)
  std::optional<OrderKey> cursor_;          // LPM: the aging key refresh() looked up last
};

}  // namespace inferkit
