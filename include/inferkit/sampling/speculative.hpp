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

namespace inferkit {

/// Checks of the verification inputs.
struct VerifyOptions {
  double tolerance = 1e-3;      ///< |sum(row) - 1| allowed for a probability row
  bool check_all_rows = false;  ///< also check rows the rule does not read whole (O(k V))
};

/// The outcome of verifying one draft.
struct VerifyResult {
  Index accepted = 0;           ///< draft tokens accepted (the caller keeps that many drafts)
  std::vector<TokenId> tokens;  ///< accepted drafts, then the correction or bonus token
  bool bonus = false;           ///< true when every draft was accepted and the last token is the bonus
};

namespace detail {

/// Sums of 1024-element blocks of a row of weights, in double, and their total; one SIMD pass
/// that also flags negative, NaN or infinite entries. The blocks make a draw O(V / 1024 + 1024).
struct BlockedRow {
  static constexpr std::size_t kBlock = 1024;
  std::span<const float> w;
  std::vector<double> block;
  double total = 0.0;
  bool valid = true;

  explicit BlockedRow(std::span<const float> row) : w(row) {
    block.resize((row.size() + kBlock - 1) / kBlock);
    const simd::VecF zero = simd::broadcast(0.0f), inf = simd::broadcast(std::numeric_limits<float>::infinity());
    simd::VecF bad = zero;
    for (std::size_t b = 0; b < block.size(); ++b) {
      const std::size_t lo = b * kBlock, len = std::min(kBlock, row.size() - lo);
      std::size_t i = 0;
      for (; i + simd::kWidth <= len; i += simd::kWidth) {
        const simd::VecF v = simd::load(row.data() + lo + i);
        bad = bad + simd::select(v >= zero, simd::select(v == inf, inf, zero), inf);  // NaN fails v >= 0
      }
      for (; i < len; ++i) valid = valid && row[lo + i] >= 0.0f && std::isfinite(row[lo + i]);
      block[b] = simd::sum_as_double(row.data() + lo, len);
      total += block[b];
    }
    valid = valid && simd::hsum(bad) == 0.0f;
  }

  /// The first index whose running sum exceeds u * total.
  TokenId draw(double u) const {
    const double target = u * total;
    double cum = 0.0;
    std::size_t b = 0;
    while (b + 1 < block.size() && cum + block[b] <= target) cum += block[b++];
    const std::size_t lo = b * kBlock, len = std::min(kBlock, w.size() - lo);
    const std::size_t j = walk_to(w.data() + lo, len, cum, target);
    if (j < len) return static_cast<TokenId>(lo + j);
    for (std::size_t i = w.size(); i-- > 0;)  // rounding ran past the end: last positive weight
      if (w[i] > 0.0f) return static_cast<TokenId>(i);
    return static_cast<TokenId>(w.size() - 1);
  }
};

/// Checks a probability row (finite, >= 0, sums to 1 within tolerance) and returns its blocks.
inline BlockedRow checked_prob_row(std::span<const float> row, double tolerance, const std::string& name) {
  BlockedRow r(row);
  if (!r.valid) {
    for (std::size_t i = 0; i < row.size(); ++i)
      if (!(row[i] >= 0.0f) || !std::isfinite(row[i]))
        throw_invalid_argument(name + "[" + std::to_string(i) + "]", row[i], "probabilities must be finite and >= 0");
  }
  require(std::abs(r.total - 1.0) <= tolerance, name + " sum", r.total,
          "a probability row must sum to 1 within tolerance " + std::to_string(tolerance));
  // A tolerance >= 1 admits a row without mass: nothing could be drawn from it.
  require(r.total > 0.0, name + " sum", r.total, "a probability row needs positive mass");
  return r;
}

inline void check_prob_row(std::span<const float> row, double tolerance, const std::string& name) {
  (void)checked_prob_row(row, tolerance, name);
}

/// All k drafts accepted: the bonus token from p_{k+1}, with the uniform of block first + k.
template <class Options, class Result>
inline void draw_bonus(MatrixView<const float> p, Index k, const CounterRng& rng, std::uint64_t first_draw,
                       const Options& opt, Result& res) {
  const auto blk = rng.block(first_draw + static_cast<std::uint64_t>(k));
  const BlockedRow row = checked_prob_row(p.row(k), opt.tolerance, "p[" + std::to_string(k) + "]");
  res.tokens.push_back(row.draw(CounterRng::to_unit_double(blk[2], blk[3])));
  res.bonus = true;
}

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
  if (opt.check_all_rows) {
    for (Index i = 0; i < k; ++i) detail::check_prob_row(q.row(i), opt.tolerance, "q[" + std::to_string(i) + "]");
    for (Index i = 0; i <= k; ++i) detail::check_prob_row(p.row(i), opt.tolerance, "p[" + std::to_string(i) + "]");
  }
  VerifyResult res;
  for (Index i = 0; i < k; ++i) {
    const auto blk = rng.block(first_draw + static_cast<std::uint64_t>(i));
    const TokenId x = draft[i];
    const double qx = q(i, x), px = p(i, x);
    if (!(qx > 0.0) || !std::isfinite(qx))
      throw_invalid_argument("q[" + std::to_string(i) + "][" + std::to_string(x) + "]", qx,
                             "the draft distribution must give its own token x_i a positive probability");
    require(px >= 0.0 && std::isfinite(px), "p[" + std::to_string(i) + "][" + std::to_string(x) + "]", px,
            "must be finite and >= 0");
    const double u = CounterRng::to_unit_double(blk[0], blk[1]);
    if (u * qx < px) {  // accept with probability min(1, p / q)
      res.tokens.push_back(x);
      ++res.accepted;
      continue;
    }
    // Rejected: draw from normalize(max(0, p_i - q_i)), built only now.
    const detail::BlockedRow p_row = detail::checked_prob_row(p.row(i), opt.tolerance, "p[" + std::to_string(i) + "]");
    detail::check_prob_row(q.row(i), opt.tolerance, "q[" + std::to_string(i) + "]");
    std::vector<float> residual(static_cast<std::size_t>(vocab));
    const float* pr = p.row_ptr(i);
    const float* qr = q.row_ptr(i);
    std::size_t v = 0;
    for (; v + simd::kWidth <= residual.size(); v += simd::kWidth)
      simd::store(residual.data() + v, simd::max(simd::load(pr + v) - simd::load(qr + v), simd::broadcast(0.0f)));
    for (; v < residual.size(); ++v) residual[v] = std::max(0.0f, pr[v] - qr[v]);
    const detail::BlockedRow r_row(residual);
    const double u2 = CounterRng::to_unit_double(blk[2], blk[3]);
    // A rejection with an empty residual can only come from rounding (p == q up to float):
    // then p itself is the right distribution.
    res.tokens.push_back(r_row.total > 0.0 ? r_row.draw(u2) : p_row.draw(u2));
    return res;
  }
  detail::draw_bonus(p, k, rng, first_draw, opt, res);
  return res;
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
  if (opt.check_all_rows)
    for (Index i = 0; i <= k; ++i) detail::check_prob_row(p.row(i), opt.tolerance, "p[" + std::to_string(i) + "]");
  VerifyResult res;
  for (Index i = 0; i < k; ++i) {
    const auto blk = rng.block(first_draw + static_cast<std::uint64_t>(i));
    const TokenId x = draft[i];
    const double px = p(i, x);
    require(px >= 0.0 && std::isfinite(px), "p[" + std::to_string(i) + "][" + std::to_string(x) + "]", px,
            "must be finite and >= 0");
    if (CounterRng::to_unit_double(blk[0], blk[1]) < px) {
      res.tokens.push_back(x);
      ++res.accepted;
      continue;
    }
    detail::check_prob_row(p.row(i), opt.tolerance, "p[" + std::to_string(i) + "]");
    std::vector<float> residual(p.row(i).begin(), p.row(i).end());
    residual[static_cast<std::size_t>(x)] = 0.0f;
    const detail::BlockedRow r_row(residual);
    require(r_row.total > 0.0, "p[" + std::to_string(i) + "]", r_row.total,
            "rejecting the draft token needs mass on another token (p was a point mass on it)");
    res.tokens.push_back(r_row.draw(CounterRng::to_unit_double(blk[2], blk[3])));
    return res;
  }
  detail::draw_bonus(p, k, rng, first_draw, opt, res);
  return res;
}

/// Greedy verification: the target's argmax at each position (rows of logits or
/// probabilities, ties to the lowest id); accept drafts while they match, then emit the
/// target's token (the correction, or the bonus after k matches).
inline VerifyResult verify_greedy(std::span<const TokenId> draft, MatrixView<const float> target) {
  const Index k = static_cast<Index>(draft.size());
  require(target.rows() == k + 1, "target.rows()", target.rows(),
          "must equal draft tokens + 1 (" + std::to_string(k + 1) + ")");
  detail::check_draft(draft, target.cols());
  VerifyResult res;
  for (Index i = 0; i <= k; ++i) {
    const TokenId best = argmax_token(target.row(i));
    if (i < k && draft[i] == best) {
      res.tokens.push_back(best);
      ++res.accepted;
      continue;
    }
    res.tokens.push_back(best);
    res.bonus = i == k;
    return res;
  }
  return res;
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
