#pragma once
// Iteration-level scheduler with continuous batching (Orca, Yu et al. 2022), paged KV memory
// (vLLM, Kwon et al. 2023), chunked prefill under a token budget (Sarathi-Serve, Agrawal et al.
// 2024) and prefix-aware admission (SGLang, Zheng et al. 2024). Pure logic: no threads, no
// clocks; time is the iteration count the caller drives, so runs are exactly reproducible.
//
// Loop: add_request() whenever requests arrive; plan = schedule(); run the batched forward the
// plan describes; complete(sampled tokens); repeat. complete() returns the requests that
// finished.
//
// Lifecycle: waiting -> prefilling (one or more chunks) -> decoding -> finished; a running
// request may be preempted back to waiting (by recompute: its KV is dropped, its generated
// tokens kept) and later resumes by prefilling prompt + generated. cancel() at any time.
//
// Each schedule() fills the token budget in this order:
//   1. decode rows: one token for every running request that has generated and has exactly one
//      uncached token, in admission order (never starved: the budget is >= max_sequences);
//      then speculative draft rows from what is left (ScheduleOptions, set_draft(), or a token
//      tree of drafts, set_draft_tree(): its rows' blocks are reserved with the row, and
//      complete() compacts the accepted path's rows, kv/tree_compaction.hpp, so the blocks of
//      rejected rows return to the pool and the trie only ever sees accepted rows);
//   2. partial prefills: running requests still prefilling, in admission order, each chunk
//      min(remaining prompt, remaining budget, prefill tokens left of max_prefill_tokens,
//      max_prefill_chunk), cut back to end at a multiple of prefill_chunk_alignment when it
//      does not finish the prompt;
//   3. admissions from the waiting queue by policy while budget, max_sequences and memory
//      allow; an admission matches and pins the longest cached prefix (whole pages, the
//      request's ContextIdentity) and schedules its first chunk after it.
// Memory: a chunk is scheduled only with its blocks reserved. When the pool runs out, unpinned
// trie leaves are evicted first (LRU); then, for running requests only, the most recently
// admitted running request is preempted (its rows leave the plan) until the blocks fit. An
// admission never preempts: when its chunk does not fit it waits, and admission stops for the
// iteration (head-of-line, so the oldest / starving request is not overtaken).
//
// Per iteration the work is O(running + admitted) (plus log(waiting) per queue update and a
// bounded number of LPM hint refreshes), never a scan of the cache or of all waiting requests.
// Single-threaded: no method may run concurrently with another.
//
// Example (one engine iteration; `forward` runs the model on the plan and samples its rows):
//   Scheduler<float> sched(pool, &trie, {.max_batched_tokens = 512, .max_sequences = 32});
//   const RequestId id = sched.add_request({.prompt = prompt, .max_new_tokens = 64});
//   while (!sched.idle()) {
//     BatchPlan<float>& plan = sched.schedule();
//     const std::vector<TokenId> sampled = forward(plan);  // one token per plan.logit_rows entry
//     for (const FinishedRequest& f : sched.complete(sampled)) ...
//   }
//
// Pieces: the limits and policy (serving/scheduler_config.hpp), what it reports
// (serving/scheduler_info.hpp), the waiting queue (serving/admission_queue.hpp), a request and
// its stop rules (serving/request.hpp), the plan (serving/batch_plan.hpp).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/prefix_trie.hpp"
#include "inferkit/kv/tree_compaction.hpp"
#include "inferkit/sampling/token_tree.hpp"
#include "inferkit/serving/admission_queue.hpp"
#include "inferkit/serving/batch_plan.hpp"
#include "inferkit/serving/request.hpp"
#include "inferkit/serving/scheduler_config.hpp"
#include "inferkit/serving/scheduler_info.hpp"

namespace inferkit {

/// The scheduler over a block pool and, optionally, a prefix trie on the same pool (both owned
/// by the caller and outliving the scheduler; the scheduler is their only writer while it
/// runs). T is the pool's element / storage parameter.
template <class T = float>
class Scheduler {
 public:
  using Pool = BlockPool<T>;    ///< the KV block pool type
  using Table = BlockTable<T>;  ///< a request's paged KV
  using Trie = PrefixTrie<T>;   ///< the prefix cache type
  using Plan = BatchPlan<T>;    ///< an iteration's plan

  /// `trie` may be nullptr (no prefix caching). Throws std::invalid_argument for a bad config
  /// or a trie whose page size differs from the pool's.
  Scheduler(Pool& pool, Trie* trie, SchedulerConfig config)
      : pool_(&pool), trie_(trie), c_(validated(config)), queue_(c_.policy, c_.starvation_iterations) {
    if (trie_)
      require(trie_->page_size() == pool.page_size(), "trie page_size", trie_->page_size(),
              "must equal the pool's page_size (" + std::to_string(pool.page_size()) + ")");
    page_ = pool.page_size();
  }
  /// Releases every request's blocks and trie pins (the pool and trie must still exist).
  ~Scheduler() {
    for (auto& [id, r] : records_) release_memory(*r);
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// The configuration it was built with.
  const SchedulerConfig& config() const { return c_; }
  /// Counters since construction.
  const SchedulerStats& stats() const { return stats_; }
  /// schedule() calls so far.
  Index iteration() const { return iteration_; }
  /// Requests waiting (new or preempted).
  Index num_waiting() const { return queue_.size(); }
  /// Requests running (prefilling or decoding; they hold KV).
  Index num_running() const { return static_cast<Index>(running_.size()); }
  /// No request waiting or running.
  bool idle() const { return queue_.empty() && running_.empty(); }

  /// Blocks a request may hold at once: its table at the longest, prompt + max_new_tokens - 1
  /// tokens (the last generated token is never fed; trie pages it pins are pages of its table).
  /// add_request() rejects a request needing more than the pool's blocks.
  Index blocks_needed(Index prompt_tokens, Index max_new_tokens) const {
    return (prompt_tokens + max_new_tokens - 1 + page_ - 1) / page_;
  }

  /// Queues a request; returns its id. Throws std::invalid_argument for a bad request (naming
  /// the field) or one that could never run: more blocks than the pool holds
  /// (blocks_needed()), or, without chunked prefill, more prefill tokens than the budget.
  RequestId add_request(RequestParams params) {
    validate_request(params);
    const Index p = static_cast<Index>(params.prompt.size()), n = params.max_new_tokens;
    const Index need = blocks_needed(p, n);
    if (need > pool_->config().max_blocks)
      throw_invalid_argument("prompt.size() + max_new_tokens", p + n,
                             "needs up to " + std::to_string(need) + " KV blocks of " + std::to_string(page_) +
                                 " tokens, more than the pool's " + std::to_string(pool_->config().max_blocks) +
                                 ": the request could never run");
    if (!c_.chunked_prefill && p + n - 1 > c_.max_batched_tokens)
      throw_invalid_argument(
          "prompt.size() + max_new_tokens", p + n,
          "a resumed prefill may feed prompt + max_new_tokens - 1 tokens, more than max_batched_tokens = " +
              std::to_string(c_.max_batched_tokens) + " allows without chunked prefill");
    auto rec = std::make_unique<Record>(*pool_);
    Record& r = *rec;
    r.id = next_id_++;
    r.tokens = std::move(params.prompt);
    params.prompt.clear();
    r.prompt_len = p;
    r.params = std::move(params);
    r.arrival = r.id;
    records_.emplace(r.id, std::move(rec));
    enqueue(r);
    return r.id;
  }

  /// Supplies draft tokens (e.g. n-gram / prompt lookup, or a draft model's) for the request's
  /// next decode row: the row feeds its last token and up to draft.size() drafts (clipped to the
  /// budget and to max_new_tokens). Used once; replaced by a later call. Throws
  /// std::out_of_range for an unknown id, std::invalid_argument for a negative token.
  void set_draft(RequestId id, std::span<const TokenId> draft) {
    Record& r = find(id, "set_draft id");
    for (std::size_t i = 0; i < draft.size(); ++i)
      if (draft[i] < 0) throw_invalid_argument("draft[" + std::to_string(i) + "]", draft[i], "token ids must be >= 0");
    r.draft.assign(draft.begin(), draft.end());
    r.tree.reset();
  }

  /// Supplies a token tree of drafts (sampling/token_tree.hpp: n-gram lookup, a draft model's
  /// tree) for the request's next decode row: the row feeds its last token (the tree's root) and
  /// the tree's nodes as tree rows (ScheduledSequence::tree), the nodes clipped, in depth-first
  /// order, to the budget and to depths max_new_tokens allows. complete() then takes the accepted
  /// root path's tokens and the correction / bonus token; siblings must hold distinct tokens so
  /// those tokens name the path. Used once; replaced by a later call (or set_draft()). Float,
  /// Float16 and BFloat16 pools only (a quantized page never holds an unverified row).
  /// Throws std::out_of_range for an unknown id, std::invalid_argument for siblings sharing a token.
  void set_draft_tree(RequestId id, const TokenTree& tree) requires(!kQuantizedPool<T>) {
    Record& r = find(id, "set_draft_tree id");
    for (Index u = 0; u <= tree.size(); ++u)
      for (Index a = tree.first_child(u); a >= 0; a = tree.next_sibling(a))
        for (Index b = tree.next_sibling(a); b >= 0; b = tree.next_sibling(b))
          if (tree.token(a) == tree.token(b))
            throw_invalid_argument("tree.token(" + std::to_string(b) + ")", tree.token(b),
                                   "repeats its sibling node " + std::to_string(a) +
                                       "'s token: siblings must be distinct (the accepted tokens name the path)");
    r.tree = tree;
    r.draft.clear();
  }

  /// Plans the next iteration (see the header comment for the order and the memory rules).
  /// Throws std::logic_error if the previous non-empty plan was not complete()d.
  Plan& schedule(const ScheduleOptions& options = {}) {
    if (in_flight_) throw std::logic_error("inferkit: schedule() called before complete() of the previous plan");
    require(options.reserve_draft_tokens >= 0, "reserve_draft_tokens", options.reserve_draft_tokens, "must be >= 0");
    ++iteration_;
    ++stats_.iterations;
    rows_.clear();
    plan_.preempted.clear();
    budget_ = c_.max_batched_tokens;
    prefill_left_ = c_.max_prefill_tokens > 0 ? c_.max_prefill_tokens : c_.max_batched_tokens;

    // 1. Decode rows, admission order. A running request that cannot get its block evicts trie
    // leaves, then preempts from the most recently admitted (possibly itself).
    for (std::size_t i = 0; i < running_.size(); ++i) {
      Record& r = *running_[i];
      if (!is_decode(r)) continue;
      if (!make_room(r, 1)) continue;  // r itself was preempted
      add_row(r, 1, false);
    }
    // 1b. Speculative drafts from what the decode rows left; never at the price of a preemption.
    for (std::size_t i = 0; i < rows_.size() && budget_ > 0; ++i) {
      Row& row = rows_[i];
      if (row.removed) continue;
      Record& r = *row.r;
      const Index room = r.params.max_new_tokens - generated(r) - 1;
      Index k = r.draft.empty() ? options.reserve_draft_tokens : static_cast<Index>(r.draft.size());
      k = std::min({k, room, budget_});
      if (r.tree) {  // the first nodes (depth-first) within the budget and max_new_tokens
        r.planned_tree = TokenTree();
        std::vector<Index> kept(static_cast<std::size_t>(r.tree->size()), -1);
        for (Index i = 0; i < r.tree->size() && r.planned_tree.size() < budget_; ++i) {
          const Index up = r.tree->parent(i);
          if (r.tree->depth(i) > room || (up != TokenTree::kRoot && kept[static_cast<std::size_t>(up)] < 0)) continue;
          kept[static_cast<std::size_t>(i)] =
              r.planned_tree.add(up == TokenTree::kRoot ? up : kept[static_cast<std::size_t>(up)], r.tree->token(i));
        }
        k = r.planned_tree.size();
      }
      if (k <= 0 || !evict_for(blocks_to_add(r, k))) continue;
      grow(r, k);
      row.n += k;
      row.drafts = k;
      budget_ -= k;
    }
    // 2. Partial prefills, admission order.
    for (std::size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
      Record& r = *running_[i];
      if (r.row >= 0 || is_decode(r)) continue;
      const Index n = chunk(r.computed, pending(r));
      if (n <= 0 || !make_room(r, n)) continue;  // n = 0: no aligned chunk fits this iteration
      add_row(r, n, true);
    }
    // 3. Admissions, unless memory was so short that a running request was preempted (as vLLM:
    // admitting now would only be preempted again).
    const Index first_admission = static_cast<Index>(rows_.size());
    if (trie_) queue_.refresh(c_.lpm_refresh_per_iteration, [&](Record* r) { return cached_prefix(*r); });
    while (plan_.preempted.empty() && budget_ > 0 && static_cast<Index>(running_.size()) < c_.max_sequences) {
      const std::optional<Record*> r = queue_.next(iteration_);
      if (!r || !admit(**r)) break;
    }
    build_plan(first_admission);
    in_flight_ = !plan_.sequences.empty();
    return plan_;
  }

  /// Reports the sampled tokens of the last plan: for each sequence with `sample` set, in plan
  /// order, `counts[i]` tokens (all 1 when `counts` is empty) packed in `tokens`. For a
  /// speculative row the tokens are the accepted drafts then the correction / bonus token
  /// (1 .. 1 + draft_tokens); its table is rolled back to the accepted tokens. Appends the
  /// tokens, applies the stop rules, feeds newly completed full pages to the prefix trie and
  /// releases finished requests. Returns the requests that finished. Throws
  /// std::invalid_argument (changing nothing) for a count or token that does not fit the plan;
  /// std::logic_error without a plan in flight.
  std::vector<FinishedRequest> complete(std::span<const TokenId> tokens, std::span<const Index> counts = {}) {
    if (!in_flight_) throw std::logic_error("inferkit: complete() called without a scheduled plan in flight");
    check_report(tokens, counts);  // const: a rejected report changes nothing
    return apply_report(tokens, counts);
  }

  /// Cancels a request in any state and releases what it holds (KV blocks, trie pins); a
  /// request in the plan in flight is released by complete() (the forward may still write its
  /// K/V), and is gone for every query at once. Returns false for an unknown or finished id.
  bool cancel(RequestId id) {
    const auto it = records_.find(id);
    if (it == records_.end() || it->second->cancelled) return false;
    Record& r = *it->second;
    ++stats_.cancelled;
    if (in_flight_ && r.row >= 0) {
      r.cancelled = true;
      cancelled_in_flight_.push_back(id);
      return true;
    }
    if (r.running) {
      running_.erase(std::find(running_.begin(), running_.end(), &r));
      release_memory(r);
    } else {
      dequeue(r);
    }
    records_.erase(it);
    return true;
  }

  /// Whether `id` is waiting or running (not finished, not cancelled).
  bool contains(RequestId id) const {
    const auto it = records_.find(id);
    return it != records_.end() && !it->second->cancelled;
  }

  /// A snapshot of a waiting or running request. Throws std::out_of_range for another id.
  RequestInfo<T> info(RequestId id) const {
    const Record& r = find(id, "info id");
    RequestInfo<T> i;
    i.state = !r.running ? RequestState::kWaiting : is_decode(r) ? RequestState::kDecoding : RequestState::kPrefilling;
    i.prompt_tokens = r.prompt_len;
    i.generated = std::span<const TokenId>(r.tokens).subspan(static_cast<std::size_t>(r.prompt_len));
    i.cached_tokens = r.running ? r.computed : 0;
    i.pinned_tokens = r.trie_pages * page_;
    i.preemptions = r.preemptions;
    i.waited_iterations = r.running ? 0 : queue_.passed_over(const_cast<Record*>(&r), iteration_ + 1);
    i.table = r.running ? &r.table : nullptr;
    return i;
  }

  /// Ids of the running requests in admission order (oldest first).
  std::vector<RequestId> running_ids() const {
    std::vector<RequestId> ids;
    ids.reserve(running_.size());
    for (const Record* r : running_) ids.push_back(r->id);
    return ids;
  }

  /// Ids of the waiting requests in the order the policy would admit them now (starving
  /// requests first under LPM). O(waiting); for inspection.
  std::vector<RequestId> waiting_ids() const {
    std::vector<RequestId> ids;
    for (const Record* r : queue_.order(iteration_ + 1)) ids.push_back(r->id);  // as the next schedule() sees it
    return ids;
  }

 private:
  struct Record {
    explicit Record(Pool& pool) : table(pool) {}
    RequestId id = -1;
    RequestParams params;
    std::vector<TokenId> tokens;  // prompt then generated
    Index prompt_len = 0;
    Index computed = 0;  // leading tokens whose K/V the table holds (after complete())
    Table table;
    typename Trie::Handle handle;
    Index trie_pages = 0;  // pages of tokens on the pinned trie path
    bool running = false, cancelled = false, gone = false;
    std::uint64_t arrival = 0, admitted = 0;
    std::vector<TokenId> draft;
    std::optional<TokenTree> tree;  // set_draft_tree()
    TokenTree planned_tree;         // this iteration's rows of `tree` (clipped)
    Index row = -1;                 // its row in this iteration's plan
    Index preemptions = 0;
  };
  struct Row {
    Record* r;
    Index position, n, drafts;
    bool prefill, removed;
  };
  // complete(), step 1: every check of a report against the plan in flight, changing nothing
  // (const), so a rejected report leaves the scheduler exactly as it was.
  void check_report(std::span<const TokenId> tokens, std::span<const Index> counts) const {
    const Index sampled = plan_.num_sampled();
    if (!counts.empty() && static_cast<Index>(counts.size()) != sampled)
      throw_invalid_argument("counts.size()", counts.size(),
                             "must be the plan's sampled sequences (" + std::to_string(sampled) + ")");
    Index at = 0, k = 0;
    for (const auto& s : plan_.sequences) {
      if (!s.sample) continue;
      const Index c = counts.empty() ? 1 : counts[static_cast<std::size_t>(k)];
      if (c < 1 || c > 1 + s.draft_tokens)
        throw_invalid_argument(
            "counts[" + std::to_string(k) + "]", c,
            "request " + std::to_string(s.id) + " takes 1 to " + std::to_string(1 + s.draft_tokens) + " tokens");
      if (at + c > static_cast<Index>(tokens.size()))
        throw_invalid_argument("tokens.size()", tokens.size(), "is shorter than the counts of the sampled sequences");
      if (s.tree) {  // accepted tokens: a root path of the tree
        Index node = TokenTree::kRoot;
        for (Index j = 0; j + 1 < c; ++j) {
          const TokenId t = tokens[static_cast<std::size_t>(at + j)];
          node = tree_child(*s.tree, node, t);
          if (node < 0)
            throw_invalid_argument("tokens[" + std::to_string(at + j) + "]", t,
                                   "request " + std::to_string(s.id) +
                                       ": an accepted token must be a child, in the draft tree, of the one before");
        }
        const TokenId last = tokens[static_cast<std::size_t>(at + c - 1)];
        if (last < 0)
          throw_invalid_argument("tokens[" + std::to_string(at + c - 1) + "]", last, "token ids must be >= 0");
        at += c;
        ++k;
        continue;
      }
      for (Index j = 0; j < c; ++j) {
        const TokenId t = tokens[static_cast<std::size_t>(at + j)];
        if (t < 0) throw_invalid_argument("tokens[" + std::to_string(at + j) + "]", t, "token ids must be >= 0");
        // Accepted drafts must be the drafts whose K/V the forward wrote.
        if (j + 1 < c && t != s.tokens[static_cast<std::size_t>(s.num_tokens - s.draft_tokens + j)])
          throw_invalid_argument(
              "tokens[" + std::to_string(at + j) + "]", t,
              "request " + std::to_string(s.id) + " fed draft " +
                  std::to_string(s.tokens[static_cast<std::size_t>(s.num_tokens - s.draft_tokens + j)]) +
                  " there: an accepted token must equal its draft");
      }
      at += c;
      ++k;
    }
    if (at != static_cast<Index>(tokens.size()))
      throw_invalid_argument("tokens.size()", tokens.size(),
                             "must equal the sum of the counts (" + std::to_string(at) + ")");
  }

  // complete(), step 2: applies a report check_report() accepted (appends, stop rules, trie
  // feeding, releases); no check left that could throw on the caller's input.
  std::vector<FinishedRequest> apply_report(std::span<const TokenId> tokens, std::span<const Index> counts) {
    std::vector<FinishedRequest> finished;
    Index at = 0, k = 0;
    for (auto& s : plan_.sequences) {
      Record& r = *plan_records_[static_cast<std::size_t>(&s - plan_.sequences.data())];
      const Index c = !s.sample ? 0 : counts.empty() ? 1 : counts[static_cast<std::size_t>(k++)];
      const std::span<const TokenId> got = tokens.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(c));
      at += c;
      r.row = -1;
      r.draft.clear();
      r.tree.reset();
      if (r.cancelled) {
        drop(r);
        continue;
      }
      if (!s.sample) {
        r.computed = s.position + s.num_tokens;
        feed_trie(r);
        continue;
      }
      // The fed rows without drafts, plus the accepted drafts, hold valid K/V.
      r.computed = s.position + s.num_tokens - s.draft_tokens + (c - 1);
      stats_.accepted_draft_tokens += static_cast<std::uint64_t>(c - 1);
      if (s.tree && !keep_tree_path(r, s, got.first(static_cast<std::size_t>(c - 1))))
        r.computed = s.position + 1;  // no block for the compaction: the accepted drafts are recomputed
      std::optional<StopMatch> stop;
      for (TokenId t : got) {
        r.tokens.push_back(t);
        stop = check_stop(r.params, std::span<const TokenId>(r.tokens).subspan(static_cast<std::size_t>(r.prompt_len)));
        if (stop) break;
      }
      r.computed = std::min(r.computed, static_cast<Index>(r.tokens.size()));
      if (r.table.num_tokens() > r.computed) r.table.truncate(r.computed);
      feed_trie(r);
      if (stop) finished.push_back(finish(r, *stop));
    }
    // Finished and cancelled requests leave the running list in one pass.
    std::erase_if(running_, [](const Record* r) { return r->gone; });
    for (const auto& f : finished) records_.erase(f.id);
    for (RequestId id : cancelled_in_flight_) records_.erase(id);
    cancelled_in_flight_.clear();
    in_flight_ = false;
    return finished;
  }

  static const SchedulerConfig& validated(const SchedulerConfig& c) {
    validate_scheduler_config(c);
    return c;
  }
  // The child of `node` (kRoot or a node) holding token t, -1 if none.
  static Index tree_child(const TokenTree& tree, Index node, TokenId t) {
    for (Index c = tree.first_child(node + 1); c >= 0; c = tree.next_sibling(c))
      if (tree.token(c) == t) return c;
    return -1;
  }

  // After a tree row: keeps the root's and the accepted nodes' rows at consecutive positions and
  // returns the rejected rows' blocks to the pool. A path that is the tree's first branch is in
  // place already (a truncation); any other is moved by compact_tree_path, which needs a block
  // for the copy of the shared last page and returns false (table unchanged) without one: the
  // table then keeps the root alone.
  bool keep_tree_path(Record& r, const ScheduledSequence<T>& s, std::span<const TokenId> accepted) {
    std::vector<Index> path;
    Index node = TokenTree::kRoot;
    bool in_place = true;
    for (TokenId t : accepted) {
      node = tree_child(*s.tree, node, t);
      in_place = in_place && node == static_cast<Index>(path.size());
      path.push_back(node);
    }
    const Index keep = s.position + 1 + static_cast<Index>(path.size());
    if (!in_place) {
      if constexpr (!kQuantizedPool<T>)  // set_draft_tree() takes no quantized pool
        if (compact_tree_path(r.table, s.position, path)) return true;
      r.table.truncate(s.position + 1);
      return false;
    }
    r.table.truncate(keep);
    return true;
  }

  static Index generated(const Record& r) { return static_cast<Index>(r.tokens.size()) - r.prompt_len; }
  static Index pending(const Record& r) { return static_cast<Index>(r.tokens.size()) - r.computed; }
  static bool is_decode(const Record& r) { return r.running && generated(r) > 0 && pending(r) == 1; }

  Record& find(RequestId id, const char* what) const {
    const auto it = records_.find(id);
    if (it == records_.end() || it->second->cancelled)
      throw_out_of_range(what, id, "no waiting or running request has this id");
    return *it->second;
  }

  // LPM: the cached prefix tokens of a waiting request (its admission hint).
  Index cached_prefix(const Record& r) const { return trie_ ? trie_->peek(r.params.identity, r.tokens) : 0; }

  void enqueue(Record& r) {
    const bool lpm = c_.policy == SchedulingPolicy::kLongestPrefixMatch;
    queue_.push(&r, r.arrival, lpm ? cached_prefix(r) : 0, iteration_);
  }
  void dequeue(Record& r) { queue_.erase(&r); }

  // The next prefill chunk of a sequence with `start` tokens computed (aligned, see
  // prefill_chunk_alignment; may be 0).
  Index chunk(Index start, Index pending_tokens) const {
    Index n = std::min({pending_tokens, budget_, prefill_left_});
    if (c_.max_prefill_chunk > 0) n = std::min(n, c_.max_prefill_chunk);
    const Index a = c_.prefill_chunk_alignment;
    if (a > 1 && n < pending_tokens) n = std::max<Index>(0, (start + n) / a * a - start);
    return n;
  }

  // Blocks the pool must supply for `n` more tokens of r. A scheduler-owned table never has a
  // shared, partially filled last page (matches and shared pages are whole pages), so reserve()
  // never copies on write here.
  Index blocks_to_add(const Record& r, Index n) const {
    const Table& t = r.table;
    return std::max<Index>((t.num_tokens() + n + page_ - 1) / page_ - static_cast<Index>(t.blocks().size()), 0);
  }

  // Evicts unpinned trie leaves (each frees one block: every block a running table holds is
  // on a pinned path or outside the trie) until `blocks` are free.
  bool evict_for(Index blocks) {
    while (pool_->free_blocks() < blocks) {
      if (!trie_ || trie_->evict(1) == 0) return false;
      ++stats_.evicted_pages;
    }
    return true;
  }

  // Room for `n` more tokens of running request r: evict, then preempt the most recently
  // admitted running request until it fits. False when r itself was preempted.
  bool make_room(Record& r, Index n) {
    while (!evict_for(blocks_to_add(r, n))) {
      Record* victim = running_.back();
      preempt(*victim);
      if (victim == &r) return false;
    }
    grow(r, n);
    return true;
  }

  void grow(Record& r, Index n) {
    if (blocks_to_add(r, n) > 0) {  // reserve() only when blocks are needed (most decode rows fit)
      const bool ok = r.table.reserve(n);
      require(ok, "reserve", n, "failed after room was made (pool used outside the scheduler?)");
    }
    r.table.commit(n);
  }

  void add_row(Record& r, Index n, bool prefill) {
    r.row = static_cast<Index>(rows_.size());
    rows_.push_back(Row{&r, r.computed, n, 0, prefill, false});
    budget_ -= n;
    if (prefill) prefill_left_ -= n;
  }

  // Drops what a running request holds: trie pins and KV blocks.
  void release_memory(Record& r) {
    if (trie_ && r.handle.deepest >= 0) trie_->release(r.handle);
    r.handle = {};
    r.trie_pages = 0;
    r.table.clear();
    r.computed = 0;
    r.running = false;
  }

  // Preemption by recompute (vLLM): the victim is the back of running_; its planned row (if
  // any) leaves the plan and gives its budget back; its generated tokens stay, and it resumes
  // by prefilling prompt + generated (its full pages remain cached in the trie until evicted).
  void preempt(Record& r) {
    if (r.row >= 0) {
      Row& row = rows_[static_cast<std::size_t>(r.row)];
      row.removed = true;
      budget_ += row.n;
      if (row.prefill) prefill_left_ += row.n;
      r.row = -1;
    }
    running_.pop_back();
    release_memory(r);
    r.draft.clear();
    r.tree.reset();
    ++r.preemptions;
    ++stats_.preemptions;
    plan_.preempted.push_back(r.id);
    enqueue(r);
  }

  // Admission: match and pin the cached prefix, reserve the first chunk after it. The last
  // token is always computed (its logits give the next token), so only whole pages of the
  // tokens before it are matched (as vLLM): a sequence cached whole recomputes its last page,
  // which happens only when its length is a multiple of the page. The alternative, cutting the
  // table one token short and copying the shared last page on write, saves at most a page of
  // compute and needs a truncation inside a cached page, which per-channel quantized pages
  // cannot do.
  bool admit(Record& r) {
    typename Trie::Match m;
    const Index len = static_cast<Index>(r.tokens.size());
    if (trie_)
      m = trie_->match(r.params.identity, std::span<const TokenId>(r.tokens).first(static_cast<std::size_t>(len - 1)));
    const Index cached = m.tokens;
    const Index n = c_.chunked_prefill ? chunk(cached, len - cached) : len - cached;
    const auto undo = [&] {
      r.table.clear();
      if (trie_ && m.handle.deepest >= 0) trie_->release(m.handle);
      return false;
    };
    if (n > budget_ || n <= 0) return undo();
    r.table.assign_prefix(m.blocks, m.tokens);
    if (!evict_for(blocks_to_add(r, n))) return undo();
    dequeue(r);
    r.handle = m.handle;
    r.trie_pages = m.tokens / page_;
    r.computed = cached;
    r.running = true;
    r.admitted = ++admission_seq_;
    running_.push_back(&r);
    grow(r, n);
    add_row(r, n, true);
    ++stats_.admissions;
    stats_.cached_tokens += static_cast<std::uint64_t>(cached);
    return true;
  }

  // Feeds the request's newly completed full pages to the trie and pins them (O(page) each).
  // A page the trie already holds under another block (another request computed it at the same
  // time, or a cached last page this request recomputed) is shared and the request's copy freed
  // (SGLang does the same), so a running request never holds more than its table's pages.
  void feed_trie(Record& r) {
    if (!trie_) return;
    while ((r.trie_pages + 1) * page_ <= r.computed) {
      const auto page = std::span<const TokenId>(r.tokens).subspan(static_cast<std::size_t>(r.trie_pages * page_),
                                                                   static_cast<std::size_t>(page_));
      const BlockId mine = r.table.blocks()[static_cast<std::size_t>(r.trie_pages)];
      const BlockId cached = trie_->extend(r.params.identity, r.handle, page, mine);
      if (cached != mine) r.table.share_page(r.trie_pages, cached);
      ++r.trie_pages;
    }
  }

  FinishedRequest finish(Record& r, const StopMatch& stop) {
    FinishedRequest f;
    f.id = r.id;
    f.reason = stop.reason;
    f.stop_sequence = stop.stop_sequence;
    f.generated_tokens = generated(r);
    f.prompt_tokens = r.prompt_len;
    f.preemptions = r.preemptions;
    f.output.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(r.prompt_len),
                    r.tokens.end() - static_cast<std::ptrdiff_t>(stop.trim));
    release_memory(r);
    r.gone = true;
    ++stats_.finished;
    return f;
  }

  void drop(Record& r) {  // a request cancelled while its plan was in flight
    release_memory(r);
    r.gone = true;
  }

  void build_plan(Index first_admission) {
    Plan& p = plan_;
    p.iteration = iteration_;
    p.sequences.clear();
    p.token_ids.clear();
    p.positions.clear();
    p.cu_q.assign(1, 0);
    p.logit_rows.clear();
    p.num_decode = p.num_prefill = p.num_admitted = 0;
    plan_records_.clear();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      Row& row = rows_[i];
      if (row.removed) continue;
      Record& r = *row.r;
      r.row = static_cast<Index>(p.sequences.size());
      ScheduledSequence<T> s;
      s.id = r.id;
      s.table = &r.table;
      s.position = row.position;
      s.num_tokens = row.n;
      s.offset = static_cast<Index>(p.token_ids.size());
      s.draft_tokens = row.drafts;
      s.prefill = row.prefill;
      const Index fed = row.n - row.drafts;
      s.sample = row.position + fed == static_cast<Index>(r.tokens.size());
      s.seed = r.params.seed;
      s.draw_index = generated(r);
      s.context = std::span<const TokenId>(r.tokens);
      for (Index j = 0; j < fed; ++j) {
        p.token_ids.push_back(r.tokens[static_cast<std::size_t>(row.position + j)]);
        p.positions.push_back(row.position + j);
      }
      const bool tree_rows = r.tree && row.drafts > 0;
      if (tree_rows) {  // node j at the root's position + depth
        s.tree = &r.planned_tree;
        for (Index j = 0; j < row.drafts; ++j) {
          p.token_ids.push_back(r.planned_tree.token(j));
          p.positions.push_back(row.position + fed - 1 + r.planned_tree.depth(j));
        }
      }
      for (Index j = 0; j < row.drafts && !tree_rows; ++j) {
        p.token_ids.push_back(r.draft.empty() ? kDraftSlot : r.draft[static_cast<std::size_t>(j)]);
        p.positions.push_back(row.position + fed + j);
      }
      if (s.sample)
        for (Index j = fed - 1; j < row.n; ++j) p.logit_rows.push_back(s.offset + j);
      p.cu_q.push_back(static_cast<Index>(p.token_ids.size()));
      if (row.prefill) {
        ++p.num_prefill;
        stats_.prefill_tokens += static_cast<std::uint64_t>(row.n);
      } else {
        ++p.num_decode;
        stats_.decode_tokens += 1;
        stats_.draft_tokens += static_cast<std::uint64_t>(row.drafts);
      }
      if (static_cast<Index>(i) >= first_admission) ++p.num_admitted;
      p.sequences.push_back(s);
      plan_records_.push_back(&r);
    }
    for (auto& s : p.sequences)  // spans once token_ids no longer grows
      s.tokens = std::span<TokenId>(p.token_ids)
                     .subspan(static_cast<std::size_t>(s.offset), static_cast<std::size_t>(s.num_tokens));
  }

  Pool* pool_;
  Trie* trie_;
  SchedulerConfig c_;
  Index page_ = 1;
  Index iteration_ = 0, budget_ = 0, prefill_left_ = 0;  // this iteration's rows and prefill tokens left
  RequestId next_id_ = 0;
  std::uint64_t admission_seq_ = 0;
  bool in_flight_ = false;
  std::unordered_map<RequestId, std::unique_ptr<Record>> records_;
  std::vector<Record*> running_;   // admission order
  AdmissionQueue<Record*> queue_;  // waiting
  std::vector<Row> rows_;
  std::vector<Record*> plan_records_;  // the record of each plan sequence
  std::vector<RequestId> cancelled_in_flight_;
  Plan plan_;
  SchedulerStats stats_;
};

}  // namespace inferkit
