#pragma once
// What the serving scheduler reports: a request's state and snapshot (RequestInfo, from
// Scheduler::info()) and the counters since construction (SchedulerStats, Scheduler::stats()).
//
//   const RequestInfo<float> i = sched.info(id);
//   if (i.state == RequestState::kDecoding) ... i.generated ... i.cached_tokens ...
//
// Contract: a snapshot's spans and table pointer are valid until the scheduler's next call.

#include <cstdint>
#include <span>

#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_table.hpp"

namespace inferkit {

/// A request's current state.
enum class RequestState {
  kWaiting,     ///< queued (new or preempted); holds no KV
  kPrefilling,  ///< running, still feeding prompt (or prompt + generated after a preemption)
  kDecoding,    ///< running, one token per iteration (plus drafts)
};

/// Counters since construction.
struct SchedulerStats {
  std::uint64_t iterations = 0;             ///< schedule() calls
  std::uint64_t admissions = 0;             ///< admissions (first and after preemption)
  std::uint64_t preemptions = 0;            ///< running requests preempted (recomputed later)
  std::uint64_t finished = 0;               ///< requests that met a stop rule
  std::uint64_t cancelled = 0;              ///< cancel() calls that found a request
  std::uint64_t prefill_tokens = 0;         ///< prefill rows scheduled (computed)
  std::uint64_t cached_tokens = 0;          ///< prefill tokens skipped at admission thanks to the prefix trie
  std::uint64_t decode_tokens = 0;          ///< decode rows scheduled (without drafts)
  std::uint64_t draft_tokens = 0;           ///< draft rows scheduled
  std::uint64_t accepted_draft_tokens = 0;  ///< draft tokens accepted in complete()
  std::uint64_t evicted_pages = 0;          ///< trie pages evicted for room
};

/// A snapshot of one request.
template <class T = float>
struct RequestInfo {
  RequestState state = RequestState::kWaiting;  ///< waiting, prefilling or decoding
  Index prompt_tokens = 0;                      ///< prompt length
  std::span<const TokenId> generated{};         ///< generated tokens so far (valid until the next call)
  /// Leading tokens whose K/V its table holds as of the last complete() (0 while waiting); a
  /// plan in flight has committed room for its rows beyond these.
  Index cached_tokens = 0;
  Index pinned_tokens = 0;               ///< tokens of its trie path it pins (matched prefix plus pages it fed)
  Index preemptions = 0;                 ///< times it was preempted so far
  Index waited_iterations = 0;           ///< iterations it has been passed over since it last started waiting
  const BlockTable<T>* table = nullptr;  ///< its KV while running, else nullptr
};

}  // namespace inferkit
