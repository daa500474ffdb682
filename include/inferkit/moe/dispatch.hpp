#pragma once
// Dispatch and combine: token rows [T, D] -> one expert-contiguous buffer [N, D] (N = kept
// assignments) so the caller runs one matrix-matrix product per expert, and the expert outputs
// [N, D'] back to token rows, weighted.
//
// Layout (DispatchPlan::build, a counting sort by expert, stable by token): expert e's rows are
// buffer rows [expert_offsets[e], expert_offsets[e + 1]), holding its tokens in increasing token
// index (a token reaches an expert through at most one slot under token choice; should a routing
// list one token twice for an expert, slot order breaks the tie). Row r came from token
// row_tokens[r] through slot row_slots[r]; slot s went to row slot_rows[s] (-1 if dropped).
// Experts [a, b) therefore occupy the single range [expert_offsets[a], expert_offsets[b]): with
// experts sharded contiguously over ranks, each rank's rows are one contiguous block.
//
// Combine: out[t] = init + sum over token t's kept slots, in slot order, of weight[s] *
// expert_out[slot_rows[s]], each term one fused multiply-add per element into the running sum
// (init = 0, or out[t] itself with accumulate). A token's result depends only on its own slots,
// weights and expert rows, never on other tokens, the thread count, or how the buffer rows were
// produced (one process or rows returned from other ranks): bitwise the same. Tokens with no
// kept slot get 0 (or keep out[t] with accumulate).
//
// Rows move with SIMD copies, OpenMP over rows; nothing is allocated per call once the plan has
// seen a routing of the same size (the plan is the reusable workspace).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/moe/capacity.hpp"
#include "inferkit/moe/routing.hpp"

namespace inferkit {

/// Where every kept assignment of a routing goes in the expert-contiguous buffer (file comment).
/// Reusable: build() resizes its arrays only when a routing is larger than any before.
class DispatchPlan {
 public:
  DispatchPlan() = default;
  /// Builds the plan of `routing` (see build()).
  explicit DispatchPlan(const Routing& routing) { build(routing); }

  /// Counting sort of the routing's kept slots by expert, stable by token. Copies the token
  /// offsets and slot weights it needs, so the routing may change afterwards.
  /// @throws std::invalid_argument / std::out_of_range for a malformed routing
  void build(const Routing& routing) {
    detail::validate_routing(routing);
    num_tokens_ = routing.num_tokens;
    num_experts_ = routing.num_experts;
    const Index slots = routing.num_slots();
    token_offsets_.assign(routing.token_offsets.begin(), routing.token_offsets.end());
    weights_.assign(routing.weights.begin(), routing.weights.end());
    expert_offsets_.assign(static_cast<std::size_t>(num_experts_ + 1), 0);
    for (const std::int32_t e : routing.expert_ids)
      if (e != kDroppedExpert) ++expert_offsets_[static_cast<std::size_t>(e) + 1];
    for (Index e = 0; e < num_experts_; ++e)
      expert_offsets_[static_cast<std::size_t>(e + 1)] += expert_offsets_[static_cast<std::size_t>(e)];
    const Index rows = expert_offsets_.back();
    row_tokens_.resize(static_cast<std::size_t>(rows));
    row_slots_.resize(static_cast<std::size_t>(rows));
    slot_rows_.resize(static_cast<std::size_t>(slots));
    cursor_.assign(expert_offsets_.begin(), expert_offsets_.end() - 1);
    for (Index t = 0; t < num_tokens_; ++t) {
      for (Index s = token_offsets_[static_cast<std::size_t>(t)]; s < token_offsets_[static_cast<std::size_t>(t + 1)];
           ++s) {
        const std::int32_t e = routing.expert_ids[static_cast<std::size_t>(s)];
        if (e == kDroppedExpert) {
          slot_rows_[static_cast<std::size_t>(s)] = -1;
          continue;
        }
        const Index r = cursor_[static_cast<std::size_t>(e)]++;
        row_tokens_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(t);
        row_slots_[static_cast<std::size_t>(r)] = s;
        slot_rows_[static_cast<std::size_t>(s)] = r;
      }
    }
  }

  Index num_tokens() const { return num_tokens_; }                                         ///< T of the routing
  Index num_experts() const { return num_experts_; }                                       ///< E of the routing
  Index num_rows() const { return expert_offsets_.empty() ? 0 : expert_offsets_.back(); }  ///< N = kept assignments
  Index num_slots() const { return static_cast<Index>(slot_rows_.size()); }                ///< slots of the routing
  /// [E + 1]: expert e's rows are [expert_offsets()[e], expert_offsets()[e + 1]).
  std::span<const Index> expert_offsets() const { return expert_offsets_; }
  /// First buffer row of expert e.
  Index expert_begin(Index e) const { return expert_offsets_[static_cast<std::size_t>(e)]; }
  /// Number of rows (tokens) expert e processes.
  Index expert_rows(Index e) const {
    return expert_offsets_[static_cast<std::size_t>(e + 1)] - expert_offsets_[static_cast<std::size_t>(e)];
  }
  /// [N]: token of each buffer row.
  std::span<const std::int32_t> row_tokens() const { return row_tokens_; }
  /// [N]: routing slot of each buffer row.
  std::span<const Index> row_slots() const { return row_slots_; }
  /// [slots]: buffer row of each slot, -1 for a dropped slot.
  std::span<const Index> slot_rows() const { return slot_rows_; }
  /// [T + 1]: the routing's token offsets (token t's slots are [t_o[t], t_o[t + 1])).
  std::span<const Index> token_offsets() const { return token_offsets_; }
  /// [slots]: the routing's slot weights (combine's weights).
  std::span<const float> slot_weights() const { return weights_; }
  /// Mutable slot weights, for callers that rescale weights after building the plan.
  std::span<float> slot_weights_mutable() { return weights_; }

 private:
  Index num_tokens_ = 0, num_experts_ = 0;
  std::vector<Index> token_offsets_, expert_offsets_, row_slots_, slot_rows_, cursor_;
  std::vector<std::int32_t> row_tokens_;
  std::vector<float> weights_;
};

/// Options of combine().
struct CombineOptions {
  bool accumulate = false;  ///< add into out (e.g. the residual stream) instead of overwriting it
  int num_threads = 0;      ///< OpenMP threads (0 = OpenMP's default)
};

namespace detail {

/// Copies n trivially copyable elements with SIMD loads and stores (float lanes).
template <class T>
inline void copy_row(T* dst, const T* src, std::size_t n) {
  const std::size_t bytes = n * sizeof(T);
  if constexpr (sizeof(T) % sizeof(float) == 0 && alignof(T) >= alignof(float)) {
    const auto* s = reinterpret_cast<const float*>(src);
    auto* d = reinterpret_cast<float*>(dst);
    const std::size_t m = bytes / sizeof(float);
    constexpr std::size_t W = simd::kWidth;
    std::size_t i = 0;
    for (; i + 4 * W <= m; i += 4 * W) {
      const simd::VecF a = simd::load(s + i), b = simd::load(s + i + W), c = simd::load(s + i + 2 * W),
                       e = simd::load(s + i + 3 * W);
      simd::store(d + i, a);
      simd::store(d + i + W, b);
      simd::store(d + i + 2 * W, c);
      simd::store(d + i + 3 * W, e);
    }
    for (; i + W <= m; i += W) simd::store(d + i, simd::load(s + i));
    if (i < m) simd::store_partial(d + i, simd::load_partial(s + i, m - i, 0.0f), m - i);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

/// Buffers at least this large are written with non-temporal stores on the AVX2 path: far past
/// any last-level cache, a regular store first reads its line (read for ownership), so a
/// 32-byte-store copy moves 3 bytes per byte copied where memcpy (non-temporal above its own
/// threshold) moves 2. The AVX-512 path keeps regular stores (measured no faster streamed).
inline constexpr std::size_t kStreamMinBytes = std::size_t{64} << 20;

/// Whether a copy of `bytes` into a fresh buffer streams (see kStreamMinBytes).
inline bool stream_copies(std::size_t bytes) {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__) && !defined(__AVX512F__)
  return bytes >= kStreamMinBytes;
#else
  (void)bytes;
  return false;
#endif
}

/// copy_row with non-temporal stores where dst is 32-byte aligned (else copy_row), then an
/// sfence: the streamed lines are visible to other threads once the copying thread moves on.
template <class T>
inline void stream_row(T* dst, const T* src, std::size_t n) {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (sizeof(T) % sizeof(float) == 0 && alignof(T) >= alignof(float)) {
    if (reinterpret_cast<std::uintptr_t>(dst) % 32 == 0) {
      const auto* s = reinterpret_cast<const float*>(src);
      auto* d = reinterpret_cast<float*>(dst);
      const std::size_t m = n * sizeof(T) / sizeof(float);
      std::size_t i = 0;
      for (; i + 32 <= m; i += 32) {  // two cache lines per step
        const __m256 a = _mm256_loadu_ps(s + i), b = _mm256_loadu_ps(s + i + 8), c = _mm256_loadu_ps(s + i + 16),
                     e = _mm256_loadu_ps(s + i + 24);
        _mm256_stream_ps(d + i, a);
        _mm256_stream_ps(d + i + 8, b);
        _mm256_stream_ps(d + i + 16, c);
        _mm256_stream_ps(d + i + 24, e);
      }
      copy_row(d + i, s + i, m - i);
      _mm_sfence();
      return;
    }
  }
#endif
  copy_row(dst, src, n);
}

/// Below this many elements moved, dispatch and combine stay on one thread (a parallel region
/// costs microseconds: more than copying 128 KiB).
inline constexpr Index kParallelMinElements = Index(1) << 15;

inline void require_cols(Index got, Index want, const char* parameter, const char* what) {
  require(got == want, parameter, got, std::string("must equal ") + what + " (" + std::to_string(want) + ")");
}

}  // namespace detail

/// Gathers token rows into the expert-contiguous buffer: rows[r] = tokens[plan.row_tokens()[r]].
/// @param plan    built from the routing of these tokens
/// @param tokens  token rows [T, D] (any row stride), T = plan.num_tokens()
/// @param rows    output [N, D], N = plan.num_rows() (any row stride)
/// @param num_threads OpenMP threads (0 = OpenMP's default); the result does not depend on it
/// @throws std::invalid_argument when the shapes do not match the plan
/// Thread-safety: reads plan and tokens, writes rows only.
template <class T>
void dispatch(const DispatchPlan& plan, MatrixView<const T> tokens, MatrixView<T> rows, int num_threads = 0) {
  static_assert(std::is_trivially_copyable_v<T>);
  require_thread_count("num_threads", num_threads);
  detail::require_cols(tokens.rows(), plan.num_tokens(), "tokens.rows()", "the plan's num_tokens");
  detail::require_cols(rows.rows(), plan.num_rows(), "rows.rows()", "the plan's num_rows");
  detail::require_cols(rows.cols(), tokens.cols(), "rows.cols()", "tokens.cols()");
  const Index n = plan.num_rows();
  const auto d = static_cast<std::size_t>(tokens.cols());
  const std::int32_t* src = plan.row_tokens().data();
  const int nt = resolve_threads(num_threads);
  const bool stream = detail::stream_copies(static_cast<std::size_t>(n) * d * sizeof(T));
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (nt > 1 && n > 1 && n * tokens.cols() >= detail::kParallelMinElements)
  for (Index r = 0; r < n; ++r) {
    if (stream)
      detail::stream_row(rows.row_ptr(r), tokens.row_ptr(src[r]), d);
    else
      detail::copy_row(rows.row_ptr(r), tokens.row_ptr(src[r]), d);
  }
}

/// Overload for mutable token views.
template <class T>
void dispatch(const DispatchPlan& plan, MatrixView<T> tokens, MatrixView<T> rows,
              int num_threads = 0) requires(!std::is_const_v<T>) {
  dispatch(plan, MatrixView<const T>(tokens), rows, num_threads);
}

/// Scatters expert outputs back to tokens, weighted, in a fixed order (file comment):
/// out[t] = (accumulate ? out[t] : 0) + sum over t's kept slots in slot order of w_s * expert_out[row(s)].
/// @param plan        the plan the expert input buffer was dispatched with
/// @param expert_out  expert outputs [N, D'] in the plan's row order (row r = the expert's output
///                    for buffer row r)
/// @param out         token outputs [T, D'] (any row stride; must not overlap expert_out)
/// @param opt         accumulate, threads (the result does not depend on the thread count)
/// @throws std::invalid_argument when the shapes do not match the plan
inline void combine(const DispatchPlan& plan, MatrixView<const float> expert_out, MatrixView<float> out,
                    CombineOptions opt = {}) {
  require_thread_count("num_threads", opt.num_threads);
  detail::require_cols(expert_out.rows(), plan.num_rows(), "expert_out.rows()", "the plan's num_rows");
  detail::require_cols(out.rows(), plan.num_tokens(), "out.rows()", "the plan's num_tokens");
  detail::require_cols(out.cols(), expert_out.cols(), "out.cols()", "expert_out.cols()");
  const Index tokens = plan.num_tokens();
  const auto d = static_cast<std::size_t>(out.cols());
  const Index* offsets = plan.token_offsets().data();
  const Index* slot_rows = plan.slot_rows().data();
  const float* weights = plan.slot_weights().data();
  const int nt = resolve_threads(opt.num_threads);
  constexpr std::size_t W = simd::kWidth;
  constexpr std::size_t kBlock = 4 * W;  // four accumulators per slot pass
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (nt > 1 && tokens > 1 && plan.num_rows() * out.cols() >= detail::kParallelMinElements)
  for (Index t = 0; t < tokens; ++t) {
    float* o = out.row_ptr(t);
    const Index s0 = offsets[t], s1 = offsets[t + 1];
    std::size_t i = 0;
    for (; i + kBlock <= d; i += kBlock) {
      simd::VecF a0 = opt.accumulate ? simd::load(o + i) : simd::broadcast(0.0f);
      simd::VecF a1 = opt.accumulate ? simd::load(o + i + W) : simd::broadcast(0.0f);
      simd::VecF a2 = opt.accumulate ? simd::load(o + i + 2 * W) : simd::broadcast(0.0f);
      simd::VecF a3 = opt.accumulate ? simd::load(o + i + 3 * W) : simd::broadcast(0.0f);
      for (Index s = s0; s < s1; ++s) {
        const Index r = slot_rows[s];
        if (r < 0) continue;
        const float* y = expert_out.row_ptr(r) + i;
        const simd::VecF w = simd::broadcast(weights[s]);
        a0 = simd::fma(w, simd::load(y), a0);
        a1 = simd::fma(w, simd::load(y + W), a1);
        a2 = simd::fma(w, simd::load(y + 2 * W), a2);
        a3 = simd::fma(w, simd::load(y + 3 * W), a3);
      }
      simd::store(o + i, a0);
      simd::store(o + i + W, a1);
      simd::store(o + i + 2 * W, a2);
      simd::store(o + i + 3 * W, a3);
    }
    for (; i < d; i += W) {
      const std::size_t n = std::min(W, d - i);
      simd::VecF a = opt.accumulate ? simd::load_partial(o + i, n, 0.0f) : simd::broadcast(0.0f);
      for (Index s = s0; s < s1; ++s) {
        const Index r = slot_rows[s];
        if (r < 0) continue;
        a = simd::fma(simd::broadcast(weights[s]), simd::load_partial(expert_out.row_ptr(r) + i, n, 0.0f), a);
      }
      simd::store_partial(o + i, a, n);
    }
  }
}

}  // namespace inferkit
