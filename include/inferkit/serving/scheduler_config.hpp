#pragma once
// What a caller sets on the serving scheduler: its limits and admission policy
// (SchedulerConfig, validated once by the Scheduler constructor) and the options of one
// schedule() call (ScheduleOptions).
//
//   Scheduler<float> sched(pool, &trie, {.max_batched_tokens = 512, .max_sequences = 32,
//                                        .policy = SchedulingPolicy::kLongestPrefixMatch});
//
// Contract: validate_scheduler_config() throws std::invalid_argument naming the first field
// out of range (and the bound), before the scheduler holds anything.

#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/serving/admission_queue.hpp"

namespace inferkit {

/// Scheduler limits and policy (designated initializers; validated by the constructor).
struct SchedulerConfig {
  Index max_batched_tokens = 2048;  ///< token budget: rows fed per iteration (>= max_sequences)
  Index max_sequences = 256;        ///< running requests at most (each gets a decode row every iteration)
  Index max_prefill_chunk = 0;      ///< prefill tokens per request per iteration; 0 = the remaining budget
  /// Prefill tokens per iteration over all requests (SGLang's chunked_prefill_size, the prefill
  /// share of Sarathi-Serve's token budget); 0 = the token budget. Bounds an iteration's prefill
  /// work, hence the time between tokens of the requests decoding beside it. Chunked prefill only.
  Index max_prefill_tokens = 0;
  bool chunked_prefill = true;  ///< false: a prefill runs whole in one iteration (the unchunked baseline)
  /// > 1: a prefill chunk that does not finish its pending tokens ends at a multiple of this
  /// many tokens of the sequence (it may then wait an iteration). Per-channel quantized keys
  /// (KIVI pages) need it = the key group: a chunk's groups are then complete, so quantized,
  /// before the chunk attends, as in a one-shot prefill; without it a query attends float keys
  /// a one-shot prefill would have quantized. Needs max_batched_tokens >= max_sequences +
  /// alignment - 1 and max_prefill_chunk 0 or >= alignment, so a prefill always progresses.
  Index prefill_chunk_alignment = 0;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;  ///< admission order of waiting requests
  /// LPM: a request that has waited more than this many iterations is admitted first (in the
  /// order it started waiting), ahead of longer matches.
  Index starvation_iterations = 64;
  /// LPM: cached-prefix hints refreshed per iteration (round robin over the waiting queue; a
  /// hint is also computed when a request starts waiting). Bounds the per-iteration cost.
  Index lpm_refresh_per_iteration = 16;
};

/// Options of one schedule() call.
struct ScheduleOptions {
  /// Speculative decoding with drafts the caller writes itself: decode rows of requests without
  /// set_draft() tokens get up to this many draft slots (kDraftSlot) after their last token.
  Index reserve_draft_tokens = 0;
};

/// Checks a configuration (file comment). Throws std::invalid_argument naming the field.
inline void validate_scheduler_config(const SchedulerConfig& c) {
  require(c.max_sequences >= 1, "max_sequences", c.max_sequences, "must be >= 1");
  require(
      c.max_batched_tokens >= c.max_sequences, "max_batched_tokens", c.max_batched_tokens,
      "must be >= max_sequences (" + std::to_string(c.max_sequences) + "), so every running request's decode row fits");
  require(c.max_prefill_chunk >= 0, "max_prefill_chunk", c.max_prefill_chunk, "must be >= 0 (0: the remaining budget)");
  require(c.max_prefill_tokens >= 0, "max_prefill_tokens", c.max_prefill_tokens, "must be >= 0 (0: the token budget)");
  require(c.max_prefill_tokens == 0 || c.chunked_prefill, "max_prefill_tokens", c.max_prefill_tokens,
          "needs chunked_prefill (an unchunked prefill runs whole)");
  require(c.prefill_chunk_alignment >= 0, "prefill_chunk_alignment", c.prefill_chunk_alignment,
          "must be >= 0 (0 or 1: none)");
  if (c.prefill_chunk_alignment > 1 && c.chunked_prefill) {
    const Index a = c.prefill_chunk_alignment;
    require(c.max_batched_tokens >= c.max_sequences + a - 1, "max_batched_tokens", c.max_batched_tokens,
            "must be >= max_sequences + prefill_chunk_alignment - 1 (" + std::to_string(c.max_sequences + a - 1) +
                "), so a prefilling request always has room for an aligned chunk");
    require(c.max_prefill_chunk == 0 || c.max_prefill_chunk >= a, "max_prefill_chunk", c.max_prefill_chunk,
            "must be 0 or >= prefill_chunk_alignment (" + std::to_string(a) + ")");
    require(c.max_prefill_tokens == 0 || c.max_prefill_tokens >= a, "max_prefill_tokens", c.max_prefill_tokens,
            "must be 0 or >= prefill_chunk_alignment (" + std::to_string(a) + ")");
  }
  require(c.starvation_iterations >= 0, "starvation_iterations", c.starvation_iterations, "must be >= 0");
  require(c.lpm_refresh_per_iteration >= 0, "lpm_refresh_per_iteration", c.lpm_refresh_per_iteration, "must be >= 0");
}

}  // namespace inferkit
