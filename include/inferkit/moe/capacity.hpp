#pragma once
// Expert capacity and overflow (Switch Transformer, Fedus et al. 2021; GShard, Lepikhin et al.
// 2020; V-MoE batch-prioritized routing, Riquelme et al. 2021), and the load statistics an
// operator watches.
//
// Capacity per expert: C = ceil(capacity_factor * A / E) with A the routed assignments
// (A = T * k for token-choice routing, so C = ceil(capacity_factor * T * k / E)), computed in
// double as written; an explicit capacity >= 0 overrides it; capacity_factor <= 0 without an
// override means dropless (no limit).
//
// Overflow: assignments are admitted in rounds by slot rank (every token's first choice, then
// every token's second choice, ... as GShard admits its second expert only after all first
// ones), and within a round in token order:
//   arrival_order  tokens by index (Switch: earlier tokens win)
//   priority       tokens by their largest slot weight, descending, ties by index (V-MoE's
//                  batch-prioritized routing, priority = the top-1 router weight)
// An expert with C admitted assignments drops the rest (expert id kDroppedExpert: the assignment
// contributes nothing, the residual carries the token). With reroute, after the pass each dropped
// slot, in the same order, moves to the token's next best allowed expert (by the router's
// selection score, group limit included, skipping experts the token already uses) that still
// has room; its weight is the one that expert would have had with the token's own
// normalization (raw weight times the token's factor: see moe/router.hpp). Rerouting needs the
// logits and router options again (it re-scores only the tokens it moves).
//
// Statistics (MoeStats), all from this call:
//   f_e  = (assignments routed to e before capacity) / A  (Switch's "fraction of tokens
//          dispatched to expert e", eq. 5, with k choices per token counted k times and
//          divided by k, so sum_e f_e = 1; Switch's own f uses the pre-capacity argmax too)
//   P_e  = Routing::mean_probability: the mean router probability of e over tokens (eq. 6)
//   aux_loss = E * sum_e f_e P_e: 1 under uniform routing (Switch); Hugging Face's Mixtral
//          load_balancing_loss_func gives k times this value (it does not divide f by k)
//   z_loss = Routing::z_loss (ST-MoE: mean over tokens of logsumexp(logits)^2)
//   max_mean_load_ratio = max_e kept_e / mean_e kept_e (0 when nothing is kept)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/moe/router.hpp"
#include "inferkit/moe/routing.hpp"

namespace inferkit {

/// Capacity value meaning "no limit" (dropless).
inline constexpr Index kDropless = -1;

/// Which assignments an expert keeps when more than C arrive (file comment).
enum class OverflowPolicy {
  arrival_order,  ///< by token index within each slot round (Switch)
  priority,       ///< by the token's largest router weight, descending, within each round (V-MoE BPR)
};

/// Capacity parameters of apply_capacity().
struct CapacityOptions {
  double capacity_factor = 0.0;  ///< C = ceil(capacity_factor * A / E); <= 0 means dropless; finite
  Index capacity = -1;           ///< explicit C (>= 0) overriding capacity_factor; -1 = use the factor
  OverflowPolicy policy = OverflowPolicy::arrival_order;  ///< overflow policy
  bool reroute = false;                                   ///< move dropped slots to the next best expert with room
};

/// Per-call routing and load statistics (file comment for the definitions).
struct MoeStats {
  Index capacity = kDropless;            ///< C used (kDropless = no limit)
  std::vector<Index> routed_per_expert;  ///< [E] assignments routed to each expert before capacity
  std::vector<Index> tokens_per_expert;  ///< [E] assignments each expert processes (after drops and reroutes)
  Index routed_assignments = 0;          ///< A
  Index kept_assignments = 0;            ///< assignments processed (sum of tokens_per_expert)
  Index dropped_assignments = 0;         ///< assignments finally dropped
  Index rerouted_assignments = 0;        ///< dropped assignments that found another expert
  Index dropped_tokens = 0;              ///< tokens that had assignments and lost all of them
  Index tokens_with_drops = 0;           ///< tokens that lost at least one assignment
  double aux_loss = 0.0;                 ///< E * sum_e f_e P_e (Switch / GShard)
  double z_loss = 0.0;                   ///< ST-MoE router z-loss
  double max_mean_load_ratio = 0.0;      ///< max_e tokens_per_expert / mean_e tokens_per_expert
  /// dropped_assignments / routed_assignments (0 when nothing was routed).
  double drop_rate() const {
    return routed_assignments > 0 ? static_cast<double>(dropped_assignments) / static_cast<double>(routed_assignments)
                                  : 0.0;
  }
};

/// C for the given factor: ceil(capacity_factor * num_assignments / num_experts), or kDropless
/// for capacity_factor <= 0.
/// @throws std::invalid_argument if capacity_factor is not finite, num_experts <= 0 or
///         num_assignments < 0
inline Index expert_capacity(double capacity_factor, Index num_assignments, Index num_experts) {
  require(std::isfinite(capacity_factor), "capacity_factor", capacity_factor, "must be finite");
  require_positive(num_experts, "num_experts");
  require(num_assignments >= 0, "num_assignments", num_assignments, "must be >= 0");
  if (capacity_factor <= 0.0) return kDropless;
  return static_cast<Index>(
      std::ceil(capacity_factor * static_cast<double>(num_assignments) / static_cast<double>(num_experts)));
}

namespace detail {

inline void validate_routing(const Routing& r) {
  require(r.num_tokens >= 0, "routing.num_tokens", r.num_tokens, "must be >= 0");
  require_positive(r.num_experts, "routing.num_experts");
  require(static_cast<Index>(r.token_offsets.size()) == r.num_tokens + 1, "routing.token_offsets.size()",
          r.token_offsets.size(), "must be num_tokens + 1 = " + std::to_string(r.num_tokens + 1));
  require(r.token_offsets[0] == 0, "routing.token_offsets[0]", r.token_offsets[0], "must be 0");
  for (Index t = 0; t < r.num_tokens; ++t)
    if (r.token_offsets[static_cast<std::size_t>(t + 1)] < r.token_offsets[static_cast<std::size_t>(t)])
      throw_invalid_argument("routing.token_offsets[" + std::to_string(t + 1) + "]",
                             r.token_offsets[static_cast<std::size_t>(t + 1)], "must be non-decreasing");
  require(static_cast<Index>(r.expert_ids.size()) == r.token_offsets.back(), "routing.expert_ids.size()",
          r.expert_ids.size(), "must equal token_offsets.back() = " + std::to_string(r.token_offsets.back()));
  require(r.weights.size() == r.expert_ids.size(), "routing.weights.size()", r.weights.size(),
          "must equal expert_ids.size() = " + std::to_string(r.expert_ids.size()));
  for (std::size_t s = 0; s < r.expert_ids.size(); ++s) {
    const std::int32_t e = r.expert_ids[s];
    if (e != kDroppedExpert && (e < 0 || e >= r.num_experts))
      throw_out_of_range("routing.expert_ids[" + std::to_string(s) + "]", e,
                         "must be kDroppedExpert or in [0, " + std::to_string(r.num_experts) + ")");
  }
}

/// Reusable buffers of apply_capacity (thread_local: apply_capacity is serial).
struct CapacityBuffers {
  std::vector<std::int32_t> token_order;
  std::vector<float> priority;
  std::vector<Index> dropped_slots;
  RouterTokenScratch scratch;
};

inline CapacityBuffers& capacity_buffers() {
  thread_local CapacityBuffers buffers;
  return buffers;
}

inline void apply_capacity_impl(Routing& r, const CapacityOptions& opt, const MatrixView<const float>* logits,
                                const RouterOptions* ropt, MoeStats* stats) {
  validate_routing(r);
  require(std::isfinite(opt.capacity_factor), "capacity_factor", opt.capacity_factor, "must be finite");
  require(opt.capacity >= -1, "capacity", opt.capacity, "must be -1 (use capacity_factor) or >= 0");
  const Index tokens = r.num_tokens, experts = r.num_experts;
  Index routed = 0;
  std::vector<Index> routed_per(static_cast<std::size_t>(experts), 0);
  for (const std::int32_t e : r.expert_ids)
    if (e != kDroppedExpert) ++routed_per[static_cast<std::size_t>(e)], ++routed;
  const Index cap = opt.capacity >= 0 ? opt.capacity : expert_capacity(opt.capacity_factor, routed, experts);
  if (opt.reroute && cap != kDropless) {
    require(r.top_k > 0, "reroute", true, "needs token-choice routing (routing.top_k > 0)");
    require(logits != nullptr && ropt != nullptr, "reroute", true,
            "needs the router logits and options (the apply_capacity overload taking them)");
    require(logits->rows() == tokens && logits->cols() == experts, "logits.rows()", logits->rows(),
            "must match the routing's T = " + std::to_string(tokens) + " and E = " + std::to_string(experts) +
                " (cols = " + std::to_string(logits->cols()) + ")");
    validate_router_options(*ropt, experts);
  }

  std::vector<Index> kept(static_cast<std::size_t>(experts), 0);
  Index dropped = 0, rerouted = 0;
  auto& buf = capacity_buffers();
  buf.dropped_slots.clear();
  if (cap == kDropless) {
    kept = routed_per;
  } else {
    // Token order within a round.
    buf.token_order.resize(static_cast<std::size_t>(tokens));
    std::iota(buf.token_order.begin(), buf.token_order.end(), 0);
    if (opt.policy == OverflowPolicy::priority) {
      buf.priority.resize(static_cast<std::size_t>(tokens));
      for (Index t = 0; t < tokens; ++t) {
        float best = -std::numeric_limits<float>::infinity();
        for (Index s = r.token_offsets[static_cast<std::size_t>(t)];
             s < r.token_offsets[static_cast<std::size_t>(t + 1)]; ++s)
          if (r.expert_ids[static_cast<std::size_t>(s)] != kDroppedExpert)
            best = std::max(best, r.weights[static_cast<std::size_t>(s)]);
        buf.priority[static_cast<std::size_t>(t)] = best;
      }
      const float* pr = buf.priority.data();
      std::sort(buf.token_order.begin(), buf.token_order.end(),
                [pr](std::int32_t a, std::int32_t b) { return pr[a] > pr[b] || (pr[a] == pr[b] && a < b); });
    }
    Index max_slots = 0;
    for (Index t = 0; t < tokens; ++t)
      max_slots = std::max(
          max_slots, r.token_offsets[static_cast<std::size_t>(t + 1)] - r.token_offsets[static_cast<std::size_t>(t)]);
    for (Index round = 0; round < max_slots; ++round) {
      for (const std::int32_t t : buf.token_order) {
        const Index s = r.token_offsets[static_cast<std::size_t>(t)] + round;
        if (s >= r.token_offsets[static_cast<std::size_t>(t) + 1]) continue;
        const std::int32_t e = r.expert_ids[static_cast<std::size_t>(s)];
        if (e == kDroppedExpert) continue;
        Index& n = kept[static_cast<std::size_t>(e)];
        if (n < cap) {
          ++n;
        } else {
          r.expert_ids[static_cast<std::size_t>(s)] = kDroppedExpert;
          buf.dropped_slots.push_back(s);
        }
      }
    }
    if (opt.reroute && !buf.dropped_slots.empty()) {
      RouterTokenScratch& sc = buf.scratch;
      sc.resize(experts, ropt->num_groups);
      for (const Index s : buf.dropped_slots) {
        const auto t = static_cast<Index>(std::upper_bound(r.token_offsets.begin(), r.token_offsets.end(), s) -
                                          r.token_offsets.begin()) -
                       1;
        const float* l = logits->row_ptr(t);
        // Re-score the token as the router did (same gates, groups and ranking).
        TokenRoute full = score_token(l, t, experts, *ropt, sc);
        const Index n_allowed = rank_allowed(experts, experts, sc);
        set_token_factor(l, *ropt, sc, full);
        const Index k = ropt->top_k;
        // Next best allowed expert with room that the token does not use yet: candidates after
        // its original k choices (those are in use or full).
        const Index s0 = r.token_offsets[static_cast<std::size_t>(t)],
                    s1 = r.token_offsets[static_cast<std::size_t>(t + 1)];
        for (Index j = k; j < n_allowed; ++j) {
          const std::int32_t e = sc.order[static_cast<std::size_t>(j)];
          if (kept[static_cast<std::size_t>(e)] >= cap) continue;
          bool used = false;
          for (Index q = s0; q < s1; ++q) used |= r.expert_ids[static_cast<std::size_t>(q)] == e;
          if (used) continue;
          r.expert_ids[static_cast<std::size_t>(s)] = e;
          r.weights[static_cast<std::size_t>(s)] = static_cast<float>(raw_weight(l, e, *ropt, sc, full) * full.factor);
          ++kept[static_cast<std::size_t>(e)];
          ++rerouted;
          break;
        }
      }
    }
    for (const Index s : buf.dropped_slots) dropped += r.expert_ids[static_cast<std::size_t>(s)] == kDroppedExpert;
  }
  if (stats == nullptr) return;

  MoeStats& st = *stats;
  st.capacity = cap;
  st.routed_per_expert = routed_per;
  st.tokens_per_expert = kept;
  st.routed_assignments = routed;
  st.kept_assignments = routed - dropped;
  st.dropped_assignments = dropped;
  st.rerouted_assignments = rerouted;
  // Tokens that lost assignments: a dropped slot marks its token.
  st.dropped_tokens = 0;
  st.tokens_with_drops = 0;
  if (!buf.dropped_slots.empty()) {
    for (Index t = 0; t < tokens; ++t) {
      Index had = 0, lost = 0;
      for (Index s = r.token_offsets[static_cast<std::size_t>(t)]; s < r.token_offsets[static_cast<std::size_t>(t + 1)];
           ++s)
        ++had, lost += r.expert_ids[static_cast<std::size_t>(s)] == kDroppedExpert;
      st.tokens_with_drops += lost > 0;
      st.dropped_tokens += had > 0 && lost == had;
    }
  }
  double aux = 0.0;
  if (routed > 0 && static_cast<Index>(r.mean_probability.size()) == experts)
    for (Index e = 0; e < experts; ++e)
      aux += static_cast<double>(routed_per[static_cast<std::size_t>(e)]) / static_cast<double>(routed) *
             r.mean_probability[static_cast<std::size_t>(e)];
  st.aux_loss = static_cast<double>(experts) * aux;
  st.z_loss = r.z_loss;
  const Index kept_total = routed - dropped;
  const Index kept_max = experts > 0 ? *std::max_element(kept.begin(), kept.end()) : 0;
  st.max_mean_load_ratio =
      kept_total > 0 ? static_cast<double>(kept_max) * static_cast<double>(experts) / static_cast<double>(kept_total)
                     : 0.0;
}

}  // namespace detail

/// Applies expert capacity to a routing in place (dropped slots get kDroppedExpert) and fills
/// the statistics. With capacity_factor <= 0 and no explicit capacity it only computes the
/// statistics. Slots already kDroppedExpert on entry count as not routed.
/// @param routing  from route() / route_expert_choice() or built by the caller (validated)
/// @param opt      capacity factor or explicit capacity, overflow policy; reroute is an error
///                 here when a drop can happen (use the overload with logits)
/// @param stats    optional statistics of this call (its vectors are reused)
/// @throws std::invalid_argument for bad options or a malformed routing; std::out_of_range for
///         an expert id outside [0, E)
/// Thread-safety: reentrant (thread_local scratch); serial (O(slots), negligible beside dispatch).
inline void apply_capacity(Routing& routing, const CapacityOptions& opt, MoeStats* stats = nullptr) {
  detail::apply_capacity_impl(routing, opt, nullptr, nullptr, stats);
}

/// apply_capacity() with rerouting: logits and router options must be those route() used.
/// @param routing  a token-choice routing (top_k > 0)
/// @param opt      as above; reroute allowed
/// @param logits   the router logits [T, E] the routing came from
/// @param router   the router options it came from (scoring, bias, groups, scaling)
/// @param stats    optional statistics
/// @throws std::invalid_argument as above, or when the logits' shape does not match
inline void apply_capacity(Routing& routing, const CapacityOptions& opt, MatrixView<const float> logits,
                           const RouterOptions& router, MoeStats* stats = nullptr) {
  detail::apply_capacity_impl(routing, opt, &logits, &router, stats);
}

}  // namespace inferkit
