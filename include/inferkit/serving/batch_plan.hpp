#pragma once
// One iteration's work as the scheduler hands it to the caller's batched forward: the scheduled
// requests (decode rows first, then partial prefills, then admissions), the token ids and
// positions of every row packed back to back (varlen layout, `cu_q`), which rows need logits,
// each request's paged KV (a BlockTable already holding room for, and counting, the rows it
// feeds) and the sampling state of each sampled row (seed and draw index).
//
// The caller, for each sequence s: computes every layer for its rows
// `token_ids[cu_q[s] .. cu_q[s+1])` at `positions[...]`, writes each layer's K/V rows into
// `s.table` with `write_at(layer, s.position, k, v)`, attends the rows to `s.table->source(layer)`
// (query i at position s.position + i, causal), and samples the rows listed in `logit_rows`.
// A sequence with token-tree drafts (`tree` set) attends its rows as tree rows instead.

#include <cstdint>
#include <span>
#include <vector>

#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/token_tree.hpp"
#include "inferkit/serving/request.hpp"

namespace inferkit {

/// Placeholder id of a draft slot the caller fills itself (ScheduleOptions::reserve_draft_tokens).
inline constexpr TokenId kDraftSlot = -1;

/// One scheduled request of an iteration.
template <class T = float>
struct ScheduledSequence {
  RequestId id = -1;  ///< the request
  /// Its paged KV: positions [0, position + num_tokens) are committed; [0, position) hold K/V
  /// already, [position, position + num_tokens) are the caller's to write (write_at) this
  /// iteration. The caller must not reserve, commit or truncate it (the scheduler does).
  BlockTable<T>* table = nullptr;
  Index position = 0;      ///< position of the first fed row (= tokens already cached)
  Index num_tokens = 0;    ///< rows fed: a prefill chunk, 1 for a decode row, 1 + draft_tokens for a speculative row
  Index offset = 0;        ///< first row in the packed batch (= cu_q of this sequence)
  Index draft_tokens = 0;  ///< trailing rows that are draft tokens to verify (speculative decoding)
  bool prefill = false;    ///< a prefill chunk (true) or a decode row (false)
  /// Whether its last 1 + draft_tokens rows' logits must be sampled (false for a prefill chunk
  /// that does not reach the end of the request's tokens).
  bool sample = false;
  std::uint64_t seed = 0;  ///< the request's sampling seed
  /// Tokens generated so far: sample the first sampled row with draw `draw_index` of
  /// CounterRng(seed) (speculative rows: draws draw_index .. draw_index + draft_tokens), so a
  /// preempted and resumed request draws exactly the numbers it would have drawn.
  Index draw_index = 0;
  /// The request's tokens so far, prompt then generated (history for penalties); valid until
  /// complete().
  std::span<const TokenId> context{};
  /// Its fed rows inside BatchPlan::token_ids; draft slots reserved for the caller hold
  /// kDraftSlot and must be overwritten before the forward runs.
  std::span<TokenId> tokens{};
  /// Token-tree drafts (Scheduler::set_draft_tree), else null: the draft_tokens rows are this
  /// tree's nodes in depth-first order after the last fed token (the tree's root). Row 1 + i sits
  /// at position + depth(i) (BatchPlan::positions); write every row's K/V at write_at(layer,
  /// position, ...) in row order and attend the rows with tree_attention(q, table->source(layer),
  /// position, tree->parents(), out) (attention/tree_attention.hpp). Valid until complete().
  const TokenTree* tree = nullptr;
};

/// An iteration's plan (valid until the next Scheduler::schedule()).
template <class T = float>
struct BatchPlan {
  Index iteration = 0;                          ///< 1-based count of schedule() calls
  std::vector<ScheduledSequence<T>> sequences;  ///< decode rows, then partial prefills, then admissions
  std::vector<TokenId> token_ids;               ///< every fed row, packed in sequence order
  std::vector<Index> positions;                 ///< position of each packed row
  std::vector<Index> cu_q;                      ///< sequences.size() + 1 offsets into the packed rows
  std::vector<Index> logit_rows;                ///< packed rows whose logits are sampled, in order
  std::vector<RequestId> preempted;             ///< requests preempted (back to waiting) while planning
  Index num_decode = 0;                         ///< decode (and speculative) sequences
  Index num_prefill = 0;                        ///< prefill chunks (partial prefills and admissions)
  Index num_admitted = 0;                       ///< admissions (the last num_admitted sequences)

  /// Rows fed this iteration (the token budget used).
  Index num_tokens() const { return static_cast<Index>(token_ids.size()); }
  /// Whether nothing is scheduled (no forward to run, complete() not needed).
  bool empty() const { return sequences.empty(); }
  /// Sequences whose logits are sampled (the entries complete() expects, in this order).
  Index num_sampled() const {
    Index n = 0;
    for (const auto& s : sequences) n += s.sample ? 1 : 0;
    return n;
  }
};

}  // namespace inferkit
