#pragma once
// The mixture-of-experts FFN of the llama2.c runner: in an MoE checkpoint each layer's FFN is E
// expert SwiGLU FFNs plus a router (a [E, dim] matrix); a token's FFN output is the weighted
// sum of its k experts' outputs. The model code owns the weights and matmuls (Eigen, one
// matrix-matrix product per expert and projection); routing, capacity, dispatch and combine
// are inferkit's moe/ calls.
//
// Checkpoint format (header extension of the legacy llama2.c format, version 1). The 7 int32 of
// the legacy header come first, with hidden_dim replaced by the marker kMoeMarker (negative, so
// a dense reader fails on it: Model::load says what the file is instead of misreading it); 5
// int32 follow:
//   version (1), hidden_dim (per expert), n_experts E, experts_per_token k, router mode
//   (0 softmax-topk, 1 topk-softmax, 2 sigmoid with renormalized weights)
// then the float32 tensors in the legacy order with the FFN replaced:
//   token_embedding, rms_att, wq, wk, wv, wo, rms_ffn,
//   router [L][E][dim], w1 [L][E][hidden][dim], w2 [L][E][dim][hidden], w3 [L][E][hidden][dim],
//   rms_final, the two unused RoPE tables, the classifier if unshared.

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <inferkit/core/threading.hpp>
#include <inferkit/moe/dispatch.hpp>

namespace llama2c {

using inferkit::Index;

/// Header field 1 (hidden_dim in a dense checkpoint) of an MoE checkpoint: "MoE" as a negative int.
inline constexpr std::int32_t kMoeMarker = -0x004D6F45;
/// Version of the MoE header extension written and read here.
inline constexpr std::int32_t kMoeVersion = 1;

/// Router mode names (the checkpoint stores the index).
inline const char* router_mode_name(inferkit::RouterScoring s) {
  switch (s) {
    case inferkit::RouterScoring::softmax_topk:
      return "softmax-topk";
    case inferkit::RouterScoring::topk_softmax:
      return "topk-softmax";
    case inferkit::RouterScoring::sigmoid:
      break;
  }
  return "sigmoid";
}

/// Parses a router mode name (--router).
inline inferkit::RouterScoring parse_router_mode(const std::string& s) {
  if (s == "softmax-topk") return inferkit::RouterScoring::softmax_topk;
  if (s == "topk-softmax") return inferkit::RouterScoring::topk_softmax;
  if (s == "sigmoid") return inferkit::RouterScoring::sigmoid;
  throw std::invalid_argument("--router = '" + s + "' is invalid: must be softmax-topk, topk-softmax or sigmoid");
}

/// How the MoE layers route at run time (the checkpoint fixes E, k and the default router mode).
struct MoeOptions {
  inferkit::RouterScoring scoring = inferkit::RouterScoring::topk_softmax;
  double capacity_factor = 0.0;  // <= 0: dropless
  inferkit::OverflowPolicy policy = inferkit::OverflowPolicy::arrival_order;
  bool reroute = false;
  int num_threads = 0;  // threads of routing, dispatch and combine (0 = OpenMP's default)
};

/// One layer's MoE weights (row-major views into the model's buffer).
struct MoeLayerView {
  const float* router = nullptr;  // [E][dim]
  const float* w1 = nullptr;      // [E][hidden][dim]
  const float* w2 = nullptr;      // [E][dim][hidden]
  const float* w3 = nullptr;      // [E][hidden][dim]
  int experts = 0, hidden = 0, dim = 0;
};

/// Routing statistics summed over MoE calls (every layer of every forward).
struct MoeTotals {
  Index calls = 0, routed = 0, dropped = 0, rerouted = 0, tokens = 0, dropped_tokens = 0;
  std::vector<Index> per_expert;  // assignments processed per expert, summed over layers
  double aux_sum = 0, z_sum = 0, max_ratio = 0;
  double drop_rate() const { return routed ? double(dropped) / double(routed) : 0.0; }
  void add(const inferkit::MoeStats& s, Index n) {
    ++calls;
    routed += s.routed_assignments;
    dropped += s.dropped_assignments;
    rerouted += s.rerouted_assignments;
    dropped_tokens += s.dropped_tokens;
    tokens += n;
    per_expert.resize(s.tokens_per_expert.size(), 0);
    for (std::size_t e = 0; e < s.tokens_per_expert.size(); ++e) per_expert[e] += s.tokens_per_expert[e];
    aux_sum += s.aux_loss;
    z_sum += s.z_loss;
    max_ratio = std::max(max_ratio, s.max_mean_load_ratio);
  }
  /// One line for the runner's output.
  std::string describe() const {
    const auto mx = per_expert.empty() ? 0 : *std::max_element(per_expert.begin(), per_expert.end());
    const auto mn = per_expert.empty() ? 0 : *std::min_element(per_expert.begin(), per_expert.end());
    Index total = 0;
    for (Index v : per_expert) total += v;
    const double mean = per_expert.empty() ? 0.0 : double(total) / double(per_expert.size());
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "moe calls %ld drop_rate %.6f dropped %ld rerouted %ld dropped_tokens %ld aux_loss %.6f z_loss %.6f "
                  "max_mean_load %.4f (worst call %.4f) expert_load_min %ld expert_load_max %ld",
                  static_cast<long>(calls), drop_rate(), static_cast<long>(dropped), static_cast<long>(rerouted),
                  static_cast<long>(dropped_tokens), calls ? aux_sum / double(calls) : 0.0,
                  calls ? z_sum / double(calls) : 0.0, mean > 0 ? double(mx) / mean : 0.0, max_ratio,
                  static_cast<long>(mn), static_cast<long>(mx));
    return buf;
  }
};

/// Expert parallelism (expert_parallel.hpp, built with MPI): runs dispatch, the experts and
/// combine across ranks instead of in this process. Every rank calls run() with the same
/// routing, xb and x (the model runs replicated); afterwards x[t] += MoE(xb[t]) on every rank.
class ExpertParallelHook {
 public:
  /// expert(e, in [rows, dim], out [rows, dim]): expert e's FFN over rows.
  using ExpertFn = std::function<void(Index, inferkit::MatrixView<const float>, inferkit::MatrixView<float>)>;
  virtual ~ExpertParallelHook() = default;
  virtual void run(const inferkit::Routing& routing, const float* xb, float* x, Index n, Index dim, int num_threads,
                   const ExpertFn& expert) const = 0;
};

/// The MoE FFN of one layer call, with its reusable workspace (routing, plan, row buffers).
/// Not thread-safe: one instance per model, used by one forward at a time.
class MoeFfn {
 public:
  using Rows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const Rows>;

  MoeOptions options;
  MoeTotals totals;
  inferkit::MoeStats last;                       ///< statistics of the latest call
  const ExpertParallelHook* parallel = nullptr;  ///< experts on other ranks (MPI builds); null = here

  /// x[t] += MoE(xb[t]) for n tokens (rows of dim floats, contiguous), k experts per token.
  void run(const MoeLayerView& w, int k, const float* xb, float* x, Index n) {
    inferkit::require_thread_count("MoeOptions::num_threads", options.num_threads);
    const Index E = w.experts, D = w.dim;
    logits_.resize(n, E);
    logits_.noalias() = ConstMap(xb, n, D) * ConstMap(w.router, E, D).transpose();
    const inferkit::RouterOptions ro{.top_k = k,
                                     .scoring = options.scoring,
                                     .renormalize = options.scoring == inferkit::RouterScoring::sigmoid,
                                     .num_threads = options.num_threads};
    const inferkit::MatrixView<const float> lv(logits_.data(), n, E);
    inferkit::route(lv, ro, routing_);
    inferkit::apply_capacity(
        routing_, {.capacity_factor = options.capacity_factor, .policy = options.policy, .reroute = options.reroute},
        lv, ro, &last);
    totals.add(last, n);
    if (parallel)  // routed (and capacity applied) over the whole chunk, as in one process
      return parallel->run(routing_, xb, x, n, D, options.num_threads,
                           [&](Index e, inferkit::MatrixView<const float> in, inferkit::MatrixView<float> out) {
                             expert_ffn(w, e, in, out);
                           });
    plan_.build(routing_);
    const Index N = plan_.num_rows();
    rows_.resize(N, D);
    out_.resize(N, D);
    inferkit::dispatch(plan_, inferkit::MatrixView<const float>(xb, n, D),
                       inferkit::MatrixView<float>(rows_.data(), N, D), options.num_threads);
    for (Index e = 0; e < E; ++e) {  // one matrix-matrix product per expert and projection
      const Index r0 = plan_.expert_begin(e), ne = plan_.expert_rows(e);
      if (ne == 0) continue;
      expert_ffn(w, e, inferkit::MatrixView<const float>(rows_.data() + r0 * D, ne, D),
                 inferkit::MatrixView<float>(out_.data() + r0 * D, ne, D));
    }
    inferkit::combine(plan_, inferkit::MatrixView<const float>(out_.data(), N, D), inferkit::MatrixView<float>(x, n, D),
                      {.accumulate = true, .num_threads = options.num_threads});
  }

  /// out = expert e's SwiGLU FFN of the rows in (contiguous [rows, dim] views): one matrix-matrix
  /// product per projection.
  void expert_ffn(const MoeLayerView& w, Index e, inferkit::MatrixView<const float> in,
                  inferkit::MatrixView<float> out) {
    const Index D = w.dim, H = w.hidden, ne = in.rows();
    const ConstMap w1(w.w1 + e * H * D, H, D), w3(w.w3 + e * H * D, H, D), w2(w.w2 + e * D * H, D, H);
    const ConstMap rows(in.data(), ne, D);
    h1_.resize(ne, H);
    h3_.resize(ne, H);
    h1_.noalias() = rows * w1.transpose();
    h3_.noalias() = rows * w3.transpose();
    for (Index i = 0; i < ne; ++i)
      for (Index j = 0; j < H; ++j) {
        const float a = h1_(i, j);
        h1_(i, j) = a / (1.0f + std::exp(-a)) * h3_(i, j);  // SwiGLU
      }
    Eigen::Map<Rows>(out.data(), ne, D).noalias() = h1_ * w2.transpose();
  }

  /// The routing of the latest call (after capacity).
  const inferkit::Routing& routing() const { return routing_; }

 private:
  inferkit::Routing routing_;
  inferkit::DispatchPlan plan_;
  Rows logits_, rows_, out_, h1_, h3_;
};

}  // namespace llama2c
