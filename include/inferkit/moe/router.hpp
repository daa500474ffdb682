#pragma once
// Router: logits [T, E] -> each token's k experts and combine weights.
//
// Per token t with logits l_e (all computed in double):
//   gate g_e    softmax modes: exp(l_e - max) / sum_e' exp(l_e' - max);  sigmoid: 1 / (1 + exp(-l_e))
//   selection   s_e = g_e + b_e, b = selection_bias (zero when empty); picks experts, never weights
//               (DeepSeek-V3's auxiliary-loss-free balancing, Wang et al. 2024)
//   groups      with num_groups G > 1 the E experts form G contiguous groups of E / G; a group
//               scores the sum of its group_score_experts best s_e (DeepSeek-V3: the top 2 with the
//               bias, the max without: deepseek-ai/DeepSeek-V3 inference/model.py, Gate.forward);
//               the topk_groups best groups stay, the others are excluded
//   top-k       the k allowed experts with the largest s_e, in that order (rank order)
//   weights     softmax_topk: g_e (Switch / GShard order; Mixtral with renormalize)
//               topk_softmax: softmax over the k chosen logits (Mixtral's renormalized weights)
//               sigmoid:      g_e (DeepSeek-V3 renormalizes: set renormalize)
//               renormalize divides by the sum of the k raw weights (a zero sum leaves zeros);
//               then everything is multiplied by routed_scaling_factor.
// Ties (equal s_e, equal group scores, equal expert-choice scores) go to the lowest expert id,
// then, for expert choice, the lowest token index. Each token is routed on its own, so the
// result is independent of the thread count; P_e and the z-loss are summed in double over fixed
// 64-token chunks in order, so they are too.
//
// Logits: NaN and +inf are errors naming the token and the expert; -inf is allowed (an expert
// that can never be preferred, gate 0), but a token whose logits are all -inf is an error.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/moe/routing.hpp"

namespace inferkit {

/// How router logits become scores and weights (file comment for the formulas).
enum class RouterScoring {
  softmax_topk,  ///< softmax over all E, then top-k; weights are the k probabilities (Switch, GShard)
  topk_softmax,  ///< top-k, then softmax over the k chosen logits (Mixtral)
  sigmoid,       ///< sigmoid per expert, then top-k (DeepSeek-V3, with renormalize and a selection bias)
};

/// Parameters of token-choice routing. Validated by route().
struct RouterOptions {
  Index top_k = 2;                                      ///< experts per token, in [1, E]
  RouterScoring scoring = RouterScoring::softmax_topk;  ///< scoring mode
  bool renormalize = false;                             ///< divide the k weights by their sum
  float routed_scaling_factor = 1.0f;                   ///< multiplies every weight; finite
  /// Optional [E] additive bias on the selection score only (empty = none); finite entries.
  std::span<const float> selection_bias = {};
  Index num_groups = 1;           ///< expert groups G (1 = no group limit); E % G == 0
  Index topk_groups = 1;          ///< groups kept per token when G > 1, in [1, G]
  Index group_score_experts = 2;  ///< a group's score sums its best this many s_e; in [1, E / G]
  int num_threads = 0;            ///< OpenMP threads (0 = OpenMP's default)
};

/// Parameters of expert-choice routing (Zhou et al. 2022): each expert takes its top-C tokens.
struct ExpertChoiceOptions {
  /// C = min(T, ceil(capacity_factor * T / E)) when capacity < 0; must then be > 0.
  double capacity_factor = 2.0;
  Index capacity = -1;                 ///< explicit C per expert (>= 0; clipped to T); overrides capacity_factor
  float routed_scaling_factor = 1.0f;  ///< multiplies every weight; finite
  int num_threads = 0;                 ///< OpenMP threads (0 = OpenMP's default)
};

namespace detail {

inline constexpr Index kRouterChunk = 64;  // tokens per statistics chunk (fixed: thread-count independent)
inline constexpr Index kRouterParallelMin = Index(1) << 14;  // logits below which routing stays serial

/// Per-token routing scratch: E doubles of gates, E of selection scores, E ints of order.
struct RouterTokenScratch {
  std::vector<double> gate, score, group_score;
  std::vector<std::int32_t> order;
  std::vector<std::int32_t> allowed;  // 1 = expert in a kept group
  void resize(Index experts, Index groups) {
    gate.resize(static_cast<std::size_t>(experts));
    score.resize(static_cast<std::size_t>(experts));
    order.resize(static_cast<std::size_t>(std::max(experts, groups)));
    allowed.resize(static_cast<std::size_t>(experts));
    group_score.resize(static_cast<std::size_t>(groups));
  }
};

[[noreturn]] inline void throw_bad_logit(Index t, Index e, float value, const char* rule) {
  throw_invalid_argument("logits[" + std::to_string(t) + "][" + std::to_string(e) + "]", value, rule);
}

/// Checks row t of the logits (NaN, +inf, all -inf) and returns its max.
inline float checked_row_max(const float* l, Index experts, Index t) {
  float m = -std::numeric_limits<float>::infinity();
  for (Index e = 0; e < experts; ++e) {
    const float x = l[e];
    if (std::isnan(x)) throw_bad_logit(t, e, x, "router logits must not be NaN");
    if (x == std::numeric_limits<float>::infinity()) throw_bad_logit(t, e, x, "router logits must not be +inf");
    m = std::max(m, x);
  }
  if (m == -std::numeric_limits<float>::infinity())
    throw_bad_logit(t, 0, m, "a token's router logits must not all be -inf");
  return m;
}

/// Softmax over the row in double: fills gate, returns log(sum exp(l - m)).
inline double softmax_row(const float* l, Index experts, float m, double* gate) {
  double z = 0.0;
  for (Index e = 0; e < experts; ++e) {
    gate[e] = std::exp(static_cast<double>(l[e]) - static_cast<double>(m));
    z += gate[e];
  }
  const double inv = 1.0 / z;
  for (Index e = 0; e < experts; ++e) gate[e] *= inv;
  return std::log(z);
}

/// Strict "better" order on experts: larger score, then lower id.
struct BetterExpert {
  const double* score;
  bool operator()(std::int32_t a, std::int32_t b) const {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  }
};

/// What route_token computes for one token.
struct TokenRoute {
  double lse = 0.0;        // logsumexp of the logits
  double prob_norm = 1.0;  // P_e contribution of expert e is gate[e] * prob_norm
  double factor = 1.0;     // weight = raw(e) * factor
  float top_logit = 0.0f;  // topk_softmax: max logit among the chosen (raw = exp(l - top_logit))
};

/// Gates, selection scores and the allowed-expert mask of one token (no top-k yet).
inline TokenRoute score_token(const float* l, Index t, Index experts, const RouterOptions& opt, RouterTokenScratch& s) {
  TokenRoute r;
  const float m = checked_row_max(l, experts, t);
  double* gate = s.gate.data();
  const double log_z = softmax_row(l, experts, m, gate);  // softmax probabilities (also P_e, z-loss)
  r.lse = static_cast<double>(m) + log_z;
  if (opt.scoring == RouterScoring::sigmoid) {
    double sum = 0.0;
    for (Index e = 0; e < experts; ++e) {
      gate[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
      sum += gate[e];
    }
    r.prob_norm = sum > 0.0 ? 1.0 / sum : 0.0;
  }
  double* score = s.score.data();
  const bool biased = !opt.selection_bias.empty();
  for (Index e = 0; e < experts; ++e)
    score[e] = gate[e] + (biased ? static_cast<double>(opt.selection_bias[static_cast<std::size_t>(e)]) : 0.0);

  std::int32_t* allowed = s.allowed.data();
  if (opt.num_groups <= 1) {
    std::fill(allowed, allowed + experts, 1);
  } else {
    const Index g_size = experts / opt.num_groups;
    std::int32_t* order = s.order.data();
    for (Index g = 0; g < opt.num_groups; ++g) {
      // Sum of the group's group_score_experts best selection scores, best first.
      std::iota(order, order + g_size, static_cast<std::int32_t>(g * g_size));
      std::partial_sort(order, order + opt.group_score_experts, order + g_size, BetterExpert{score});
      double sum = 0.0;
      for (Index j = 0; j < opt.group_score_experts; ++j) sum += score[order[j]];
      s.group_score[static_cast<std::size_t>(g)] = sum;
    }
    std::iota(order, order + opt.num_groups, 0);
    std::partial_sort(order, order + opt.topk_groups, order + opt.num_groups, BetterExpert{s.group_score.data()});
    std::fill(allowed, allowed + experts, 0);
    for (Index j = 0; j < opt.topk_groups; ++j)
      std::fill(allowed + order[j] * g_size, allowed + (order[j] + 1) * g_size, 1);
  }
  return r;
}

/// Allowed experts of the scored token, best first, into s.order; returns how many.
inline Index rank_allowed(Index experts, Index keep, RouterTokenScratch& s) {
  std::int32_t* order = s.order.data();
  Index n = 0;
  for (Index e = 0; e < experts; ++e)
    if (s.allowed[static_cast<std::size_t>(e)]) order[n++] = static_cast<std::int32_t>(e);
  keep = std::min(keep, n);
  std::partial_sort(order, order + keep, order + n, BetterExpert{s.score.data()});
  return n;
}

/// Unscaled weight of expert e for a scored token (see the file comment).
inline double raw_weight(const float* l, Index e, const RouterOptions& opt, const RouterTokenScratch& s,
                         const TokenRoute& r) {
  if (opt.scoring == RouterScoring::topk_softmax)
    return std::exp(static_cast<double>(l[e]) - static_cast<double>(r.top_logit));
  return s.gate[static_cast<std::size_t>(e)];
}

/// Sets r.top_logit and r.factor from the token's k best experts s.order[0..k) (ranked).
inline void set_token_factor(const float* l, const RouterOptions& opt, const RouterTokenScratch& s, TokenRoute& r) {
  const Index k = opt.top_k;
  const std::int32_t* order = s.order.data();
  if (opt.scoring == RouterScoring::topk_softmax) {
    float top = l[order[0]];
    for (Index j = 1; j < k; ++j) top = std::max(top, l[order[j]]);
    r.top_logit = top;
  }
  double sum = 0.0;
  for (Index j = 0; j < k; ++j) sum += raw_weight(l, order[j], opt, s, r);
  const bool divide = opt.renormalize || opt.scoring == RouterScoring::topk_softmax;
  const double scale = static_cast<double>(opt.routed_scaling_factor);
  r.factor = divide ? (sum > 0.0 ? scale / sum : 0.0) : scale;
}

/// Routes one token: writes k expert ids (rank order) and weights; returns the token's
/// statistics and weight factor. s must be resized for (E, G).
inline TokenRoute route_token(const float* l, Index t, Index experts, const RouterOptions& opt, RouterTokenScratch& s,
                              std::int32_t* ids, float* weights) {
  TokenRoute r = score_token(l, t, experts, opt, s);
  rank_allowed(experts, opt.top_k, s);
  set_token_factor(l, opt, s, r);
  for (Index j = 0; j < opt.top_k; ++j) {
    ids[j] = s.order[static_cast<std::size_t>(j)];
    weights[j] = static_cast<float>(raw_weight(l, ids[j], opt, s, r) * r.factor);
  }
  return r;
}

inline void validate_logits_view(MatrixView<const float> logits) {
  require(logits.cols() > 0, "logits.cols()", logits.cols(), "must be > 0 (the number of experts)");
  require(logits.cols() <= std::numeric_limits<std::int32_t>::max(), "logits.cols()", logits.cols(),
          "must fit in int32");
}

inline void validate_router_options(const RouterOptions& opt, Index experts) {
  require_thread_count("num_threads", opt.num_threads);
  require(opt.top_k >= 1 && opt.top_k <= experts, "top_k", opt.top_k,
          "must be in [1, E = " + std::to_string(experts) + "]");
  require_finite(opt.routed_scaling_factor, "routed_scaling_factor");
  if (!opt.selection_bias.empty()) {
    require(static_cast<Index>(opt.selection_bias.size()) == experts, "selection_bias.size()",
            opt.selection_bias.size(), "must be 0 or E = " + std::to_string(experts));
    for (std::size_t e = 0; e < opt.selection_bias.size(); ++e)
      require_finite(opt.selection_bias[e], "selection_bias[" + std::to_string(e) + "]");
  }
  require(opt.num_groups >= 1 && experts % opt.num_groups == 0, "num_groups", opt.num_groups,
          "must be >= 1 and divide E = " + std::to_string(experts));
  if (opt.num_groups > 1) {
    const Index g_size = experts / opt.num_groups;
    require(opt.topk_groups >= 1 && opt.topk_groups <= opt.num_groups, "topk_groups", opt.topk_groups,
            "must be in [1, num_groups = " + std::to_string(opt.num_groups) + "]");
    require(opt.group_score_experts >= 1 && opt.group_score_experts <= g_size, "group_score_experts",
            opt.group_score_experts, "must be in [1, E / num_groups = " + std::to_string(g_size) + "]");
    require(opt.topk_groups * g_size >= opt.top_k, "topk_groups", opt.topk_groups,
            "must keep at least top_k = " + std::to_string(opt.top_k) + " experts (topk_groups * E / num_groups)");
  }
}

/// Sums per-chunk partials (prob [chunks][E], z [chunks]) in chunk order into the routing.
inline void fold_router_stats(Routing& out, const std::vector<double>& prob, const std::vector<double>& z,
                              Index chunks) {
  const Index experts = out.num_experts;
  out.mean_probability.assign(static_cast<std::size_t>(experts), 0.0);
  double zsum = 0.0;
  for (Index c = 0; c < chunks; ++c) {
    for (Index e = 0; e < experts; ++e)
      out.mean_probability[static_cast<std::size_t>(e)] += prob[static_cast<std::size_t>(c * experts + e)];
    zsum += z[static_cast<std::size_t>(c)];
  }
  const double inv_t = out.num_tokens > 0 ? 1.0 / static_cast<double>(out.num_tokens) : 0.0;
  for (auto& p : out.mean_probability) p *= inv_t;
  out.z_loss = zsum * inv_t;
}

/// Reusable buffers of route() and route_expert_choice(), kept per thread across calls.
struct RouterBuffers {
  std::vector<double> chunk_prob, chunk_z, probs;
  std::vector<std::int32_t> chosen;
  std::vector<Index> next;
};

inline RouterBuffers& router_buffers() {
  thread_local RouterBuffers buffers;
  return buffers;
}

}  // namespace detail

/// Token-choice routing of T tokens over E experts.
/// @param logits  router logits [T, E] (any row stride); T may be 0
/// @param opt     scoring mode, k, renormalization, scaling, selection bias, group limit, threads
/// @param out     filled: num_tokens = T, num_experts = E, top_k = k, token_offsets = t * k, expert
///                ids in rank order, weights, mean_probability (P_e) and z_loss; its vectors are reused
/// @throws std::invalid_argument for bad options (naming the field) or a NaN / +inf logit or a
///         row of all -inf (naming logits[t][e])
/// Thread-safety: reentrant; scratch lives in thread_local buffers of the calling threads.
inline void route(MatrixView<const float> logits, const RouterOptions& opt, Routing& out) {
  detail::validate_logits_view(logits);
  const Index tokens = logits.rows(), experts = logits.cols(), k = opt.top_k;
  detail::validate_router_options(opt, experts);
  out.num_tokens = tokens;
  out.num_experts = experts;
  out.top_k = k;
  out.token_offsets.resize(static_cast<std::size_t>(tokens + 1));
  for (Index t = 0; t <= tokens; ++t) out.token_offsets[static_cast<std::size_t>(t)] = t * k;
  out.expert_ids.resize(static_cast<std::size_t>(tokens * k));
  out.weights.resize(static_cast<std::size_t>(tokens * k));

  const Index chunks = ceil_div(tokens, detail::kRouterChunk);
  auto& buf = detail::router_buffers();
  buf.chunk_prob.resize(static_cast<std::size_t>(chunks * experts));
  buf.chunk_z.resize(static_cast<std::size_t>(chunks));
  const int threads = resolve_threads(opt.num_threads);
  // Each chunk is routed by one thread with that thread's scratch; chunks write disjoint outputs.
  bool failed = false;
  auto run_chunk = [&](Index c, detail::RouterTokenScratch& s) {
    double* prob = buf.chunk_prob.data() + c * experts;
    std::fill(prob, prob + experts, 0.0);
    double z = 0.0;
    const Index t_end = std::min(tokens, (c + 1) * detail::kRouterChunk);
    for (Index t = c * detail::kRouterChunk; t < t_end; ++t) {
      const detail::TokenRoute r = detail::route_token(logits.row_ptr(t), t, experts, opt, s,
                                                       out.expert_ids.data() + t * k, out.weights.data() + t * k);
      if (opt.scoring == RouterScoring::sigmoid) {
        for (Index e = 0; e < experts; ++e) prob[e] += s.gate[static_cast<std::size_t>(e)] * r.prob_norm;
      } else {
        for (Index e = 0; e < experts; ++e) prob[e] += s.gate[static_cast<std::size_t>(e)];
      }
      z += r.lse * r.lse;
    }
    buf.chunk_z[static_cast<std::size_t>(c)] = z;
  };
  if (threads <= 1 || chunks <= 1 || tokens * experts < detail::kRouterParallelMin) {
    detail::RouterTokenScratch s;
    s.resize(experts, opt.num_groups);
    for (Index c = 0; c < chunks; ++c) run_chunk(c, s);
  } else {
#pragma omp parallel num_threads(threads)
    {
      detail::RouterTokenScratch s;
      s.resize(experts, opt.num_groups);
#pragma omp for schedule(static)
      for (Index c = 0; c < chunks; ++c) {
        try {
          run_chunk(c, s);
        } catch (...) {
#pragma omp atomic write
          failed = true;
        }
      }
    }
    // Only bad logits throw inside; report the first one in token order, whatever the threads.
    if (failed)
      for (Index t = 0; t < tokens; ++t) detail::checked_row_max(logits.row_ptr(t), experts, t);
  }
  detail::fold_router_stats(out, buf.chunk_prob, buf.chunk_z, chunks);
}

/// Expert capacity C for expert-choice routing: min(T, ceil(capacity_factor * T / E)), or the
/// explicit capacity clipped to T.
inline Index expert_choice_capacity(const ExpertChoiceOptions& opt, Index tokens, Index experts) {
  if (opt.capacity >= 0) return std::min(opt.capacity, tokens);
  require(std::isfinite(opt.capacity_factor) && opt.capacity_factor > 0.0, "capacity_factor", opt.capacity_factor,
          "must be finite and > 0 for expert-choice routing (or set capacity)");
  const double c = std::ceil(opt.capacity_factor * static_cast<double>(tokens) / static_cast<double>(experts));
  return c >= static_cast<double>(tokens) ? tokens : static_cast<Index>(c);
}

/// Expert-choice routing (Zhou et al. 2022): scores S = softmax over experts per token; each
/// expert takes the C tokens with the largest S[t][e] (ties: lowest token index), weight
/// S[t][e] * routed_scaling_factor. A token may be taken by 0 to E experts; its slots are in
/// expert-id order. out.top_k is 0.
/// @param logits  router logits [T, E]
/// @param opt     capacity (factor or explicit C), scaling, threads
/// @param out     filled as by route() (token_offsets from the per-token counts)
/// @throws std::invalid_argument for bad options or logits (as route())
inline void route_expert_choice(MatrixView<const float> logits, const ExpertChoiceOptions& opt, Routing& out) {
  detail::validate_logits_view(logits);
  require_finite(opt.routed_scaling_factor, "routed_scaling_factor");
  require_thread_count("num_threads", opt.num_threads);
  const Index tokens = logits.rows(), experts = logits.cols();
  const Index cap = expert_choice_capacity(opt, tokens, experts);
  out.num_tokens = tokens;
  out.num_experts = experts;
  out.top_k = 0;
  // Probabilities [T, E] in double (row checks as route()), statistics by fixed chunks.
  const Index chunks = ceil_div(tokens, detail::kRouterChunk);
  auto& buf = detail::router_buffers();
  std::vector<double>& probs = buf.probs;
  probs.resize(static_cast<std::size_t>(tokens * experts));
  buf.chunk_prob.assign(static_cast<std::size_t>(chunks * experts), 0.0);
  buf.chunk_z.assign(static_cast<std::size_t>(chunks), 0.0);
  for (Index t = 0; t < tokens; ++t) {
    const float* l = logits.row_ptr(t);
    const float m = detail::checked_row_max(l, experts, t);
    double* p = probs.data() + t * experts;
    const double lse = static_cast<double>(m) + detail::softmax_row(l, experts, m, p);
    const Index c = t / detail::kRouterChunk;
    for (Index e = 0; e < experts; ++e) buf.chunk_prob[static_cast<std::size_t>(c * experts + e)] += p[e];
    buf.chunk_z[static_cast<std::size_t>(c)] += lse * lse;
  }
  detail::fold_router_stats(out, buf.chunk_prob, buf.chunk_z, chunks);

  // Each expert's top-C tokens: chosen[e * C + j] (unordered within an expert).
  std::vector<std::int32_t>& chosen = buf.chosen;
  chosen.resize(static_cast<std::size_t>(experts * cap));
  const int threads = resolve_threads(opt.num_threads);
#pragma omp parallel num_threads(threads) if (threads > 1 && experts > 1 && \
                                              tokens * experts >= detail::kRouterParallelMin)
  {
    std::vector<std::int32_t> order(static_cast<std::size_t>(tokens));
#pragma omp for schedule(static)
    for (Index e = 0; e < experts; ++e) {
      std::iota(order.begin(), order.end(), 0);
      const auto better = [&](std::int32_t a, std::int32_t b) {
        const double pa = probs[static_cast<std::size_t>(a * experts + e)];
        const double pb = probs[static_cast<std::size_t>(b * experts + e)];
        return pa > pb || (pa == pb && a < b);
      };
      if (cap < tokens) std::nth_element(order.begin(), order.begin() + cap, order.end(), better);
      std::copy(order.begin(), order.begin() + cap, chosen.begin() + e * cap);
    }
  }
  // CSR by token, slots in expert order.
  out.token_offsets.assign(static_cast<std::size_t>(tokens + 1), 0);
  for (const std::int32_t t : chosen) ++out.token_offsets[static_cast<std::size_t>(t) + 1];
  for (Index t = 0; t < tokens; ++t)
    out.token_offsets[static_cast<std::size_t>(t + 1)] += out.token_offsets[static_cast<std::size_t>(t)];
  const Index slots = experts * cap;
  out.expert_ids.resize(static_cast<std::size_t>(slots));
  out.weights.resize(static_cast<std::size_t>(slots));
  std::vector<Index>& next = buf.next;
  next.assign(out.token_offsets.begin(), out.token_offsets.end() - 1);
  for (Index e = 0; e < experts; ++e) {
    for (Index j = 0; j < cap; ++j) {
      const std::int32_t t = chosen[static_cast<std::size_t>(e * cap + j)];
      const Index slot = next[static_cast<std::size_t>(t)]++;
      out.expert_ids[static_cast<std::size_t>(slot)] = static_cast<std::int32_t>(e);
      out.weights[static_cast<std::size_t>(slot)] = static_cast<float>(
          probs[static_cast<std::size_t>(t * experts + e)] * static_cast<double>(opt.routed_scaling_factor));
    }
  }
}

}  // namespace inferkit
