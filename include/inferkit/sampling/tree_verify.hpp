#pragma once
// Exact verification of a token tree of drafts against the target distributions at its positions
// (sampling/token_tree.hpp: position 0 = root, i + 1 = node i). Walking down from the root, the
// children of a position are tried in order against p' (the target at that position, p to begin with):
//
//   sampled children (each drawn independently from the position's draft row q; SpecInfer,
//   Miao et al. 2024, Algorithm 2, multi-step speculative sampling): accept child x with
//   probability min(1, p'(x) / q(x)); on rejection p' <- normalize(max(p' - q, 0)) and try the
//   next child. All rejected: emit a token drawn from p'.
//
//   deterministic children (top-k of the draft, n-gram lookup: no sampling, so no q): the same
//   rule with q a point mass on each child: accept x with probability p'(x); on rejection remove
//   x from p' (p' <- normalize(p' with x zeroed)). All rejected: emit a token drawn from p'.
//
// An accepted child becomes the next position; a position without children (a leaf, or the root
// of an empty tree) emits a bonus token drawn from its p. Each step is a one-draft speculative
// sampling step whose target is the residual of the steps before it, so the emitted tokens are
// distributed exactly as sampling from p alone (the chain's argument applied child by child).
// A chain (sampling/speculative.hpp) is the one-branch tree and runs through this code.
//
// After r rejections at a sampled position p' = max(p - c_r q, 0) / S_r, where c_1 = 1,
// c_{r+1} = c_r + S_r and S_r is the mass left (max(max(p - a q, 0) - b q, 0) = max(p - (a + b) q, 0)),
// so each rejection is one pass over p and q and no state but (c, S) and the residual row.
//
// Greedy verification (temperature 0): the longest path whose tokens equal the target's argmax
// (ties to the lowest id), then the argmax at the position where it stops.
//
// Randomness: the rank-th child tried at depth d (0 = the root's children) takes its acceptance
// uniform from words 0-1 of Philox block first_draw + rank * (max_depth + 1) + d; the emitted
// draw at depth d takes words 2-3 of block first_draw + d. TokenTree::draw_blocks() is the count.
//
//   inferkit::TokenTree tree;  // ... drafts added ...
//   const auto r = inferkit::verify_tree(tree, q, p, inferkit::CounterRng(seed, request), first_draw);
//   // r.path: accepted nodes; r.tokens: their tokens, then the correction or bonus token
//
// Checks as in sampling/speculative.hpp: tokens outside the vocabulary are std::out_of_range;
// q(x) == 0 for a sampled child, mismatched shapes, and rows that are negative, non-finite or do
// not sum to 1 within `tolerance` are std::invalid_argument. Rows are checked where the rule reads
// them whole (a position with a rejection, the bonus row), all of them with `check_all_rows`.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/row_argmax.hpp"
#include "inferkit/sampling/token_tree.hpp"

namespace inferkit {

/// Checks of the verification inputs.
struct VerifyOptions {
  double tolerance = 1e-3;      ///< |sum(row) - 1| allowed for a probability row
  bool check_all_rows = false;  ///< also check rows the rule does not read whole (O(rows V))
};

/// The outcome of verifying one draft (a chain or a tree).
struct VerifyResult {
  Index accepted = 0;           ///< draft tokens accepted (the length of `path`)
  std::vector<TokenId> tokens;  ///< accepted drafts, then the correction or bonus token
  bool bonus = false;           ///< true when the path ended at a leaf and the last token is the bonus
  std::vector<Index> path;      ///< accepted tree nodes, root to leaf (a chain: 0 .. accepted - 1)
};

namespace detail {

/// simd::sum_as_double of four arrays of n floats at once, each result bit for bit that of
/// sum_as_double(xs[k], n): the same per-lane chains in the same order and the same final
/// reduction, but the four arrays' chains interleave, so their adds overlap instead of each
/// waiting on one chain's latency (a 1,024-float block is 64 dependent adds per chain; a row pass
/// summing its blocks one by one is bound by that latency, not by memory).
inline void sum4_as_double(const float* const* xs, std::size_t n, double* out) {
  std::size_t i = 0;
  double t[4];
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  __m512d a0[4], a1[4];
  for (int k = 0; k < 4; ++k) a0[k] = a1[k] = _mm512_setzero_pd();
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_loadu_ps(xs[k] + i);
      a0[k] = _mm512_add_pd(a0[k], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
      a1[k] = _mm512_add_pd(a1[k], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
  for (int k = 0; k < 4; ++k) t[k] = _mm512_reduce_add_pd(_mm512_add_pd(a0[k], a1[k]));
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX__)
  __m256d a0[4], a1[4];
  for (int k = 0; k < 4; ++k) a0[k] = a1[k] = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; ++k) {
      a0[k] = _mm256_add_pd(a0[k], _mm256_cvtps_pd(_mm_loadu_ps(xs[k] + i)));
      a1[k] = _mm256_add_pd(a1[k], _mm256_cvtps_pd(_mm_loadu_ps(xs[k] + i + 4)));
    }
  for (int k = 0; k < 4; ++k) {
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(a0[k], a1[k]));
    t[k] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
#else
  for (int k = 0; k < 4; ++k) t[k] = 0.0;
#endif
  for (int k = 0; k < 4; ++k) {
    for (const float* x = xs[k] + i; x != xs[k] + n; ++x) t[k] += static_cast<double>(*x);
    out[k] = t[k];
  }
}

/// Sums of 1024-element blocks of a row of weights, in double, and their total; one SIMD pass
/// that also flags negative, NaN or infinite entries. The blocks make a draw O(V / 1024 + 1024).
/// Blocks can also be scanned one at a time (reset, then scan_block in increasing order), so a
/// pass that produces or reads several rows block by block keeps each block in L1.
struct BlockedRow {
  static constexpr std::size_t kBlock = 1024;
  std::span<const float> w;
  std::vector<double> block;
  double total = 0.0;
  bool valid = true;

  BlockedRow() = default;
  explicit BlockedRow(std::span<const float> row) {
    reset(row);
    for (std::size_t b = 0; b < block.size(); b += 4) scan_blocks(b);
  }

  /// Starts a block-by-block scan of `row`.
  void reset(std::span<const float> row) {
    w = row;
    block.assign((row.size() + kBlock - 1) / kBlock, 0.0);
    total = 0.0;
    valid = true;
  }

  /// Sums block b (and flags bad entries when `check`); blocks must come in increasing order.
  void scan_block(std::size_t b, bool check = true) {
    if (check) check_block(b);
    const std::size_t lo = b * kBlock, len = std::min(kBlock, w.size() - lo);
    block[b] = simd::sum_as_double(w.data() + lo, len);
    total += block[b];
  }

  /// scan_block(b0), ..., scan_block(b0 + 3) (those that exist) with the same sums and total:
  /// four full blocks are summed at once (sum4_as_double).
  void scan_blocks(std::size_t b0, bool check = true) {
    if (b0 + 4 > block.size() || (b0 + 4) * kBlock > w.size()) {
      for (std::size_t b = b0; b < std::min(block.size(), b0 + 4); ++b) scan_block(b, check);
      return;
    }
    if (check)
      for (std::size_t b = b0; b < b0 + 4; ++b) check_block(b);
    const float* xs[4] = {w.data() + b0 * kBlock, w.data() + (b0 + 1) * kBlock, w.data() + (b0 + 2) * kBlock,
                          w.data() + (b0 + 3) * kBlock};
    sum4_as_double(xs, kBlock, block.data() + b0);
    for (std::size_t b = b0; b < b0 + 4; ++b) total += block[b];  // in block order, as scan_block
  }

  /// Flags negative, NaN or infinite entries of block b (valid = false).
  void check_block(std::size_t b) {
    const std::size_t lo = b * kBlock, len = std::min(kBlock, w.size() - lo);
    const simd::VecF zero = simd::broadcast(0.0f), inf = simd::broadcast(std::numeric_limits<float>::infinity());
    auto ok = zero == zero;  // all lanes true; a mask chain, not a chain of float adds
    std::size_t i = 0;
    for (; i + simd::kWidth <= len; i += simd::kWidth) {
      const simd::VecF v = simd::load(w.data() + lo + i);
      ok = simd::both(ok, simd::both(v >= zero, v < inf));  // NaN fails both, +inf the second
    }
    for (; i < len; ++i) valid = valid && w[lo + i] >= 0.0f && std::isfinite(w[lo + i]);
    valid = valid && simd::all(ok);
  }

  /// The first index whose running sum exceeds u * total.
  TokenId draw(double u) const {
    return draw_from_blocks(u, total, block, w.size(), [&](std::size_t b) { return w.data() + b * kBlock; });
  }

  /// draw() over blocks whose weights `data(b)` returns (the block sums must match them).
  template <class BlockData>
  static TokenId draw_from_blocks(double u, double total, const std::vector<double>& block, std::size_t n,
                                  BlockData data) {
    const double target = u * total;
    double cum = 0.0;
    std::size_t b = 0;
    while (b + 1 < block.size() && cum + block[b] <= target) cum += block[b++];
    const std::size_t len = std::min(kBlock, n - b * kBlock);
    const std::size_t j = walk_to(data(b), len, cum, target);
    if (j < len) return static_cast<TokenId>(b * kBlock + j);
    for (std::size_t i = n; i-- > 0;)  // rounding ran past the end: last positive weight
      if (data(i / kBlock)[i % kBlock] > 0.0f) return static_cast<TokenId>(i);
    return static_cast<TokenId>(n - 1);
  }
};

/// "matrix[row]", or "matrix" when row < 0 (built only for error messages).
inline std::string row_name(std::string_view matrix, Index row) {
  return row < 0 ? std::string(matrix) : std::string(matrix) + "[" + std::to_string(row) + "]";
}

/// Throws unless the scanned row r is finite, >= 0 and sums to 1 within tolerance (with positive
/// mass); errors name the row matrix[index].
inline void check_scanned_row(const BlockedRow& r, double tolerance, std::string_view matrix, Index index) {
  if (!r.valid) {
    for (std::size_t i = 0; i < r.w.size(); ++i)
      if (!(r.w[i] >= 0.0f) || !std::isfinite(r.w[i]))
        throw_invalid_argument(row_name(matrix, index) + "[" + std::to_string(i) + "]", r.w[i],
                               "probabilities must be finite and >= 0");
  }
  if (!(std::abs(r.total - 1.0) <= tolerance))
    throw_invalid_argument(row_name(matrix, index) + " sum", r.total,
                           "a probability row must sum to 1 within tolerance " + std::to_string(tolerance));
  // A tolerance >= 1 admits a row without mass: nothing could be drawn from it.
  if (!(r.total > 0.0))
    throw_invalid_argument(row_name(matrix, index) + " sum", r.total, "a probability row needs positive mass");
}

/// Checks a probability row (finite, >= 0, sums to 1 within tolerance) and returns its blocks.
/// Errors name the row matrix[row]; the hot path builds no strings.
inline BlockedRow checked_prob_row(std::span<const float> row, double tolerance, std::string_view matrix,
                                   Index index = -1) {
  BlockedRow r(row);
  check_scanned_row(r, tolerance, matrix, index);
  return r;
}

/// checked_prob_row without the result.
inline void check_prob_row(std::span<const float> row, double tolerance, std::string_view matrix, Index index = -1) {
  (void)checked_prob_row(row, tolerance, matrix, index);
}

/// The sampled residual max(p - c q, 0), never stored as a row: a rejection pass computes it four
/// blocks at a time into an L1 buffer and keeps only the block sums; a lookup or the final draw
/// recomputes the values it reads. Every value comes from the same two expressions (vector lanes
/// below the row's last whole vector, the scalar form for the rest), so a value is the same
/// float wherever it is computed.
struct Residual {
  const float* p = nullptr;
  const float* q = nullptr;
  std::size_t n = 0;
  float c = 0.0f;

  static simd::VecF chunk(const float* p, const float* q, simd::VecF cv) {
    return simd::max(simd::load(p) - cv * simd::load(q), simd::broadcast(0.0f));
  }
  static float one(float p, float q, float c) { return std::max(0.0f, p - c * q); }

  /// Values [lo, hi) into out (lo a multiple of the vector width).
  void fill(std::size_t lo, std::size_t hi, float* out) const {
    const simd::VecF cv = simd::broadcast(c);
    std::size_t v = lo;
    for (; v + simd::kWidth <= hi; v += simd::kWidth) simd::store(out + (v - lo), chunk(p + v, q + v, cv));
    for (; v < hi; ++v) out[v - lo] = one(p[v], q[v], c);
  }

  /// The value at x.
  float at(std::size_t x) const {
    if (x < n / simd::kWidth * simd::kWidth) {
      const std::size_t v = x / simd::kWidth * simd::kWidth;
      alignas(64) float lanes[simd::kWidth];
      simd::store(lanes, chunk(p + v, q + v, simd::broadcast(c)));
      return lanes[x - v];
    }
    return one(p[x], q[x], c);
  }
};

/// The rule of the file header; q == nullptr means deterministic children.
inline VerifyResult verify_tree_rule(const TokenTree& tree, const MatrixView<const float>* q, MatrixView<const float> p,
                                     const CounterRng& rng, std::uint64_t first_draw, const VerifyOptions& opt) {
  const Index n = tree.size(), vocab = p.cols();
  if (p.rows() != n + 1)
    throw_invalid_argument("p.rows()", p.rows(), "must equal tree nodes + 1 (" + std::to_string(n + 1) + ")");
  require(vocab > 0, "p.cols()", vocab, "must be > 0 (vocabulary size)");
  require(opt.tolerance >= 0.0, "tolerance", opt.tolerance, "must be >= 0");
  if (q) {
    if (q->rows() != tree.expanded_count())
      throw_invalid_argument(
          "q.rows()", q->rows(),
          "must equal the tree's expanded positions (" + std::to_string(tree.expanded_count()) + ")");
    if (q->rows() != 0 && q->cols() != vocab)
      throw_invalid_argument("q.cols()", q->cols(), "must equal p.cols() (" + std::to_string(vocab) + ")");
  }
  for (Index i = 0; i < n; ++i)
    if (tree.token(i) >= vocab)
      throw_out_of_range("tree.token(" + std::to_string(i) + ")", tree.token(i),
                         "must be in [0, " + std::to_string(vocab) + ")");
  if (opt.check_all_rows) {
    if (q)
      for (Index i = 0; i < q->rows(); ++i) check_prob_row(q->row(i), opt.tolerance, "q", i);
    for (Index i = 0; i <= n; ++i) check_prob_row(p.row(i), opt.tolerance, "p", i);
  }
  const std::uint64_t rank_stride = static_cast<std::uint64_t>(tree.max_depth() + 1);
  VerifyResult res;
  std::vector<float> residual;   // deterministic: copies of p's blocks holding removed tokens
  std::vector<float> group;      // sampled: four blocks of a residual (stays in L1)
  Residual res_now;              // sampled: the residual p' is after the last rejection
  std::vector<TokenId> removed;  // deterministic: children rejected at this position
  BlockedRow q_scan;             // sampled: the check of q at a position's first rejection
  Index pos = 0;
  for (std::uint64_t depth = 0;; ++depth) {
    const Index q_row = q ? tree.draft_row(pos) : -1;
    const float* pr = p.row_ptr(pos);
    const float* qr = q_row >= 0 ? q->row_ptr(q_row) : nullptr;
    // p' = weights / mass: p with mass 1 (the row is a distribution) until a rejection.
    std::optional<BlockedRow> p_row, r_row;
    double mass = 1.0, c = 0.0;
    removed.clear();
    std::uint64_t rank = 0;
    Index next = -1;
    for (Index child = tree.first_child(pos); child >= 0; child = tree.next_sibling(child), ++rank) {
      const auto blk = rng.block(first_draw + rank * rank_stride + depth);
      const double u = CounterRng::to_unit_double(blk[0], blk[1]);
      const TokenId x = tree.token(child);
      double qx = 1.0;
      if (qr) {
        qx = qr[x];
        if (!(qx > 0.0) || !std::isfinite(qx))
          throw_invalid_argument("q[" + std::to_string(q_row) + "][" + std::to_string(x) + "]", qx,
                                 "the draft distribution must give its own token x_i a positive probability");
      }
      const double px = pr[x];
      if (!(px >= 0.0) || !std::isfinite(px))
        throw_invalid_argument("p[" + std::to_string(pos) + "][" + std::to_string(x) + "]", px,
                               "must be finite and >= 0");
      const double weight = qr ? (r_row ? static_cast<double>(res_now.at(static_cast<std::size_t>(x))) : px)
                               : (std::find(removed.begin(), removed.end(), x) != removed.end() ? 0.0 : px);
      if (u * qx * mass < weight) {  // accept with probability min(1, p'(x) / q(x))
        next = child;
        break;
      }
      const bool first_rejection = !p_row;
      if (first_rejection) p_row.emplace();
      if (qr) {  // p' <- normalize(max(p' - q, 0)) = max(p - (c + S) q, 0) / its mass
        // One pass by blocks: the first rejection also scans (checks) p and q while each block is in L1.
        const float c_next = static_cast<float>(c + mass);
        const Residual next{pr, qr, static_cast<std::size_t>(vocab), c_next};
        BlockedRow next_row;
        next_row.reset(p.row(pos));  // only its block sums and total are the residual's
        if (first_rejection) {
          p_row->reset(p.row(pos));
          q_scan.reset(q->row(q_row));
        }
        group.resize(4 * BlockedRow::kBlock);
        for (std::size_t g = 0; g < next_row.block.size(); g += 4) {  // four blocks at a time (scan_blocks)
          if (first_rejection) {
            p_row->scan_blocks(g);
            q_scan.scan_blocks(g);
          }
          const std::size_t lo = g * BlockedRow::kBlock, hi = std::min(next.n, lo + 4 * BlockedRow::kBlock);
          next.fill(lo, hi, group.data());
          // The group's block sums, as scan_blocks would sum the residual stored as a row.
          constexpr std::size_t B = BlockedRow::kBlock;
          const std::size_t blocks = (hi - lo + B - 1) / B;
          if (hi - lo == 4 * B) {
            const float* xs[4] = {group.data(), group.data() + B, group.data() + 2 * B, group.data() + 3 * B};
            sum4_as_double(xs, B, next_row.block.data() + g);
          } else {
            for (std::size_t b = 0; b < blocks; ++b)
              next_row.block[g + b] = simd::sum_as_double(group.data() + b * B, std::min(B, hi - lo - b * B));
          }
          for (std::size_t b = 0; b < blocks; ++b) next_row.total += next_row.block[g + b];  // in block order
        }
        if (first_rejection) {
          check_scanned_row(*p_row, opt.tolerance, "p", pos);
          check_scanned_row(q_scan, opt.tolerance, "q", q_row);
        }
        // An empty residual only comes from rounding (p' == q up to float): p' stays as it was.
        if (next_row.total > 0.0) {
          res_now = next;
          r_row.emplace(std::move(next_row));
          c = c_next;
          mass = r_row->total;
        }
      } else {
        if (first_rejection) p_row.emplace(checked_prob_row(p.row(pos), opt.tolerance, "p", pos));
        mass = (removed.empty() ? p_row->total : mass) - weight;
        removed.push_back(x);
      }
    }
    if (next >= 0) {
      res.tokens.push_back(tree.token(next));
      res.path.push_back(next);
      ++res.accepted;
      pos = next + 1;
      continue;
    }
    const auto blk = rng.block(first_draw + depth);
    const double u = CounterRng::to_unit_double(blk[2], blk[3]);
    if (rank == 0) {  // a leaf: the bonus token from p
      res.tokens.push_back(checked_prob_row(p.row(pos), opt.tolerance, "p", pos).draw(u));
      res.bonus = true;
    } else if (qr) {
      if (r_row) {  // the residual's blocks are recomputed where the walk reads them
        std::size_t held = SIZE_MAX;
        res.tokens.push_back(BlockedRow::draw_from_blocks(u, r_row->total, r_row->block, res_now.n, [&](std::size_t b) {
          if (b != held) {
            res_now.fill(b * BlockedRow::kBlock, std::min(res_now.n, (b + 1) * BlockedRow::kBlock), group.data());
            held = b;
          }
          return static_cast<const float*>(group.data());
        }));
      } else {
        res.tokens.push_back(p_row->draw(u));
      }
    } else {
      // p without the removed tokens: the blocks holding one are copied with it zeroed and
      // re-summed, the others keep p's sums, so the draw costs O(V / 1024 + removed * 1024).
      std::vector<double> block = p_row->block;
      std::vector<std::size_t> copied;  // block indices with a copy in residual
      residual.clear();
      for (TokenId x : removed) {
        const std::size_t b = static_cast<std::size_t>(x) / BlockedRow::kBlock;
        auto at = std::find(copied.begin(), copied.end(), b);
        if (at == copied.end()) {
          const std::size_t lo = b * BlockedRow::kBlock, len = std::min(BlockedRow::kBlock, p_row->w.size() - lo);
          copied.push_back(b);
          residual.insert(residual.end(), pr + lo, pr + lo + len);
          residual.resize(copied.size() * BlockedRow::kBlock, 0.0f);
          at = copied.end() - 1;
        }
        residual[static_cast<std::size_t>(at - copied.begin()) * BlockedRow::kBlock +
                 static_cast<std::size_t>(x) % BlockedRow::kBlock] = 0.0f;
      }
      for (std::size_t j = 0; j < copied.size(); ++j)
        block[copied[j]] =
            simd::sum_as_double(residual.data() + j * BlockedRow::kBlock,
                                std::min(BlockedRow::kBlock, p_row->w.size() - copied[j] * BlockedRow::kBlock));
      double total = 0.0;
      for (double s : block) total += s;
      if (!(total > 0.0))
        throw_invalid_argument(row_name("p", pos), total,
                               "rejecting the draft token needs mass on another token (p was a point mass on it)");
      res.tokens.push_back(BlockedRow::draw_from_blocks(u, total, block, p_row->w.size(), [&](std::size_t b) {
        const auto at = std::find(copied.begin(), copied.end(), b);
        return at == copied.end()
                   ? pr + b * BlockedRow::kBlock
                   : residual.data() + static_cast<std::size_t>(at - copied.begin()) * BlockedRow::kBlock;
      }));
    }
    return res;
  }
}

}  // namespace detail

/// Verifies a tree whose children were drawn independently from the draft rows q
/// [tree.expanded_count(), V] (row tree.draft_row(u) for position u) against p [tree.size() + 1, V].
inline VerifyResult verify_tree(const TokenTree& tree, MatrixView<const float> q, MatrixView<const float> p,
                                const CounterRng& rng, std::uint64_t first_draw, const VerifyOptions& opt = {}) {
  return detail::verify_tree_rule(tree, &q, p, rng, first_draw, opt);
}

/// Verifies a tree whose children were chosen without sampling (distinct top-k tokens, n-gram
/// continuations) against p [tree.size() + 1, V]: tried children are removed from the target.
inline VerifyResult verify_tree_deterministic(const TokenTree& tree, MatrixView<const float> p, const CounterRng& rng,
                                              std::uint64_t first_draw, const VerifyOptions& opt = {}) {
  return detail::verify_tree_rule(tree, nullptr, p, rng, first_draw, opt);
}

/// Greedy verification: the longest root path whose every token is the target's argmax at its
/// parent's position (rows of logits or probabilities [tree.size() + 1, V], ties to the lowest id;
/// between equally long paths the first in depth-first order), then the argmax at the path's end
/// (the bonus when that is a leaf). Rows are read lazily down the tree: the root's argmax picks
/// the children to follow, and only the rows of matching children are read (one row per accepted
/// draft plus the last; siblings with the same token are each followed), by row_argmax.
inline VerifyResult verify_tree_greedy(const TokenTree& tree, MatrixView<const float> target) {
  const Index n = tree.size();
  if (target.rows() != n + 1)
    throw_invalid_argument("target.rows()", target.rows(), "must equal tree nodes + 1 (" + std::to_string(n + 1) + ")");
  for (Index i = 0; i < n; ++i)
    if (tree.token(i) >= target.cols())
      throw_out_of_range("tree.token(" + std::to_string(i) + ")", tree.token(i),
                         "must be in [0, " + std::to_string(target.cols()) + ")");
  // best[u]: the argmax at position u, read for the root and the matching nodes only.
  std::array<TokenId, TokenTree::kMaxNodes + 1> best;
  std::array<Index, TokenTree::kMaxNodes + 1> todo;  // matching positions whose children are unvisited
  std::size_t pending = 0;
  best[0] = row_argmax(target.row(0)).argmax;
  todo[pending++] = 0;
  Index end = -1;  // the deepest matching node, the lowest index (first depth-first) among equals
  while (pending > 0) {
    const Index u = todo[--pending];
    for (Index c = tree.first_child(u); c >= 0; c = tree.next_sibling(c)) {
      if (tree.token(c) != best[static_cast<std::size_t>(u)]) continue;
      best[static_cast<std::size_t>(c + 1)] = row_argmax(target.row(c + 1)).argmax;
      todo[pending++] = c + 1;
      if (end < 0 || tree.depth(c) > tree.depth(end) || (tree.depth(c) == tree.depth(end) && c < end)) end = c;
    }
  }
  VerifyResult res;
  for (Index a = end; a >= 0; a = tree.parent(a)) res.path.push_back(a);
  std::reverse(res.path.begin(), res.path.end());
  for (Index a : res.path) res.tokens.push_back(tree.token(a));
  res.accepted = static_cast<Index>(res.path.size());
  res.tokens.push_back(best[static_cast<std::size_t>(end + 1)]);
  res.bonus = tree.first_child(end + 1) < 0;
  return res;
}

}  // namespace inferkit
