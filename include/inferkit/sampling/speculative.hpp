#pragma once
// Speculative decoding acceptance (Leviathan et al. 2023, "Fast Inference from Transformers via
// Speculative Decoding"; Chen et al. 2023, "Accelerating LLM Decoding with Speculative
// Sampling"). Given k draft tokens x_1..x_k, the draft distributions q_1..q_k they were drawn
// from (after the draft's own processors: anything else biases the output) and the target
// distributions p_1..p_{k+1} (after the target's processors):
//   accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), i.e. when u_i * q_i(x_i) < p_i(x_i);
//   at the first rejection emit a token drawn from normalize(max(0, p_i - q_i)) and stop;
//   if all k are accepted emit a bonus token drawn from p_{k+1}.
// The emitted tokens are distributed exactly as sampling from p alone. Variants: greedy
// verification (target argmax, ties to the lowest id), and point-mass drafts (n-gram or
// prompt-lookup drafting, no q: accept with probability p_i(x_i), residual p_i without x_i).
//
// Randomness: verification consumes Philox blocks first_draw .. first_draw + k of the given
// CounterRng; block i gives the acceptance uniform of position i (words 0-1) and the uniform of
// the correction or bonus draw (words 2-3). Same (seed, stream, first_draw): same result.
//
// Checks: draft tokens outside the vocabulary are std::out_of_range; q_i(x_i) == 0 (a token the
// draft could not have drawn), mismatched shapes, and rows that are negative, non-finite or do
// not sum to 1 within `tolerance` (or have no mass at all) are std::invalid_argument. Rows are checked where the rule
// reads them whole (the rejected position's p and q, the bonus row); accepted positions only
// read p_i(x_i) and q_i(x_i), so the hot path does no full-vocabulary work unless
// `check_all_rows` asks for it.
//
// A chain is the one-branch tree of sampling/tree_verify.hpp and runs through its code (same
// blocks, same results as before trees existed); that caps k at TokenTree::kMaxNodes = 64.
//
//   const auto r = inferkit::verify_draft(draft, q, p, inferkit::CounterRng(seed, request), first_draw);
//   // keep r.accepted drafts, then append r.tokens.back()

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/token_tree.hpp"
#include "inferkit/sampling/tree_verify.hpp"

namespace inferkit {

namespace detail {

inline void check_draft(std::span<const TokenId> draft, Index vocab) {
  for (std::size_t i = 0; i < draft.size(); ++i)
    if (draft[i] < 0 || draft[i] >= vocab)
      throw_out_of_range("draft[" + std::to_string(i) + "]", draft[i], "must be in [0, " + std::to_string(vocab) + ")");
}

}  // namespace detail

/// Chain verification with draft distributions q [k, V] and target distributions p [k+1, V].
inline VerifyResult verify_draft(std::span<const TokenId> draft, MatrixView<const float> q, MatrixView<const float> p,
                                 const CounterRng& rng, std::uint64_t first_draw, const VerifyOptions& opt = {}) {
  const Index k = static_cast<Index>(draft.size()), vocab = p.cols();
  require(q.rows() == k, "q.rows()", q.rows(), "must equal the number of draft tokens (" + std::to_string(k) + ")");
  require(p.rows() == k + 1, "p.rows()", p.rows(), "must equal draft tokens + 1 (" + std::to_string(k + 1) + ")");
  require(vocab > 0, "p.cols()", vocab, "must be > 0 (vocabulary size)");
  require(k == 0 || q.cols() == vocab, "q.cols()", q.cols(), "must equal p.cols() (" + std::to_string(vocab) + ")");
  require(opt.tolerance >= 0.0, "tolerance", opt.tolerance, "must be >= 0");
  detail::check_draft(draft, vocab);
  return verify_tree(TokenTree::chain(draft), q, p, rng, first_draw, opt);
}

/// Point-mass drafts (no q): accept x_i with probability p_i(x_i); at the first rejection draw
/// from p_i with x_i removed; if all are accepted draw the bonus from p_{k+1}.
inline VerifyResult verify_point_mass_draft(std::span<const TokenId> draft, MatrixView<const float> p,
                                            const CounterRng& rng, std::uint64_t first_draw,
                                            const VerifyOptions& opt = {}) {
  const Index k = static_cast<Index>(draft.size()), vocab = p.cols();
  require(p.rows() == k + 1, "p.rows()", p.rows(), "must equal draft tokens + 1 (" + std::to_string(k + 1) + ")");
  require(vocab > 0, "p.cols()", vocab, "must be > 0 (vocabulary size)");
  detail::check_draft(draft, vocab);
  return verify_tree_deterministic(TokenTree::chain(draft), p, rng, first_draw, opt);
}

/// Greedy verification: the target's argmax at each position (rows of logits or
/// probabilities, ties to the lowest id); accept drafts while they match, then emit the
/// target's token (the correction, or the bonus after k matches).
inline VerifyResult verify_greedy(std::span<const TokenId> draft, MatrixView<const float> target) {
  const Index k = static_cast<Index>(draft.size());
  require(target.rows() == k + 1, "target.rows()", target.rows(),
          "must equal draft tokens + 1 (" + std::to_string(k + 1) + ")");
  detail::check_draft(draft, target.cols());
  return verify_tree_greedy(TokenTree::chain(draft), target);
}

/// One sequence of a batched verification.
struct DraftToVerify {
  std::span<const TokenId> draft;  ///< draft tokens
  MatrixView<const float> q;       ///< [k, V]; no rows for point-mass drafts
  MatrixView<const float> p;       ///< [k + 1, V]
  CounterRng rng{0};               ///< the sequence's random source
  std::uint64_t first_draw = 0;    ///< draw index of the first draft position
};

/// Verifies several sequences (each with its own k) in parallel; results in input order and
/// independent of num_threads (0 = OpenMP's default, at most kMaxThreads). Point-mass
/// verification is used where q has no rows and the draft is non-empty.
inline std::vector<VerifyResult> verify_batch(std::span<const DraftToVerify> items, const VerifyOptions& opt = {},
                                              int num_threads = 0) {
  require_thread_count("num_threads", num_threads);
  std::vector<VerifyResult> out(items.size());
  std::vector<std::exception_ptr> errors(items.size());
  const auto n = static_cast<std::int64_t>(items.size());
#pragma omp parallel for num_threads(resolve_threads(num_threads)) schedule(dynamic) if (n > 1)
  for (std::int64_t j = 0; j < n; ++j) {
    const DraftToVerify& it = items[static_cast<std::size_t>(j)];
    try {
      out[static_cast<std::size_t>(j)] = (it.q.rows() == 0 && !it.draft.empty())
                                             ? verify_point_mass_draft(it.draft, it.p, it.rng, it.first_draw, opt)
                                             : verify_draft(it.draft, it.q, it.p, it.rng, it.first_draw, opt);
    } catch (...) {
      errors[static_cast<std::size_t>(j)] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

// ---- choosing k ------------------------------------------------------------------------------

/// Expected tokens emitted per target pass with per-token acceptance rate a and draft length k
/// (Leviathan et al., eq. 1): (1 - a^(k+1)) / (1 - a); k + 1 when a == 1.
inline double expected_tokens_per_pass(double a, Index k) {
  require(a >= 0.0 && a <= 1.0, "acceptance_rate", a, "must be in [0, 1]");
  require(k >= 0, "k", k, "must be >= 0");
  if (a == 1.0) return static_cast<double>(k + 1);
  return (1.0 - std::pow(a, static_cast<double>(k + 1))) / (1.0 - a);
}

/// Expected wall-time speedup over plain decoding when one draft step costs `cost_ratio` of a
/// target step (Leviathan et al., Theorem 3.8): tokens per pass / (k * cost_ratio + 1).
inline double expected_speedup(double a, Index k, double cost_ratio) {
  require(cost_ratio >= 0.0 && std::isfinite(cost_ratio), "cost_ratio", cost_ratio, "must be finite and >= 0");
  return expected_tokens_per_pass(a, k) / (static_cast<double>(k) * cost_ratio + 1.0);
}

/// The draft length in [0, max_k] with the best expected speedup.
inline Index best_draft_length(double a, double cost_ratio, Index max_k) {
  require(max_k >= 0, "max_k", max_k, "must be >= 0");
  Index best = 0;
  for (Index k = 1; k <= max_k; ++k)
    if (expected_speedup(a, k, cost_ratio) > expected_speedup(a, best, cost_ratio)) best = k;
  return best;
}

/// Online estimate of the per-token acceptance rate from verification results: each call
/// contributes its accepted drafts as successes and, when it stopped early, one failure (the
/// maximum-likelihood estimate for i.i.d. acceptances). `decay` < 1 weights recent calls more.
class AcceptanceRateEstimator {
 public:
  /// @param decay weight of past calls per new call, in (0, 1] (1 = plain average)
  /// @throws std::invalid_argument for decay outside (0, 1].
  explicit AcceptanceRateEstimator(double decay = 1.0) : decay_(decay) {
    require(decay > 0.0 && decay <= 1.0, "decay", decay, "must be in (0, 1]");
  }
  /// Adds one verification of k drafts that accepted `accepted`. @throws std::invalid_argument unless 0 <= accepted <=
  /// k.
  void observe(Index accepted, Index k) {
    require(k >= 0 && accepted >= 0 && accepted <= k, "accepted", accepted,
            "must be in [0, k = " + std::to_string(k) + "]");
    successes_ = successes_ * decay_ + static_cast<double>(accepted);
    trials_ = trials_ * decay_ + static_cast<double>(accepted) + (accepted < k ? 1.0 : 0.0);
  }
  void observe(const VerifyResult& r, Index k) {
    observe(r.accepted, k);
  }  ///< Adds one verification result of k drafts.
  /// The estimate; `prior` until anything was observed.
  double rate(double prior = 0.5) const { return trials_ > 0.0 ? successes_ / trials_ : prior; }

 private:
  double decay_;
  double successes_ = 0.0;
  double trials_ = 0.0;
};

}  // namespace inferkit
