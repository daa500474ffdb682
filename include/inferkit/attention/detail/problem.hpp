#pragma once
// One sequence's attention problem after validation (what every kernel unit reads), and the one
// builder and validator behind every public entry point: attention(), attention_varlen() and
// attention_batch() all check their arguments through ProblemBuilder and validate_offsets and
// get each sequence's SequenceProblem from ProblemBuilder::sequence.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/attention/alibi.hpp"
#include "inferkit/attention/detail/score_rule.hpp"
#include "inferkit/attention/gqa.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

struct SequenceProblem {
  Tensor3View<const float> q;    // [Tq, Hq, d]
  Tensor3View<float> out;        // [Tq, Hq, d]
  MatrixView<float> lse;         // [Tq, Hq], or no rows when not requested
  TokenPositions q_pos;          // position of each query token
  Index group = 1;               // query heads per KV head
  ScoreRule score;               // scale, soft-cap, ALiBi slopes, mask
  bool reduced = false;          // AttentionArithmetic::kReduced (decode only)
  const float* sinks = nullptr;  // sink logit per query head (options.sink_logits), or none

  Index num_queries() const { return q.dim0(); }
  Index head_dim() const { return q.dim2(); }
};

/// Smallest and largest position among n positions.
inline void position_range(TokenPositions pos, Index n, std::int64_t& lo, std::int64_t& hi) {
  if (!pos.explicit_positions) {
    lo = pos.first;
    hi = std::int64_t{pos.first} + n - 1;
    return;
  }
  lo = hi = pos[0];
  for (Index i = 1; i < n; ++i) {
    lo = std::min<std::int64_t>(lo, pos[i]);
    hi = std::max<std::int64_t>(hi, pos[i]);
  }
}

/// Checks batch offsets: cu[0] == 0, non-decreasing, cu.back() == total (`total_name` says
/// what total is, e.g. "q.dim0()"). Messages name the offending entry.
template <std::integral I>
void validate_offsets(std::span<const I> cu, std::string_view name, Index total, std::string_view total_name) {
  const std::string n(name);
  require(!cu.empty(), n + ".size()", cu.size(), "must be >= 1 (batch + 1 offsets)");
  require(cu[0] == 0, n + "[0]", cu[0], "must be 0");
  for (std::size_t b = 1; b < cu.size(); ++b)
    require(cu[b] >= cu[b - 1], n + "[" + std::to_string(b) + "]", cu[b],
            "must be >= " + n + "[" + std::to_string(b - 1) + "] (" + std::to_string(cu[b - 1]) + ")");
  require(cu.back() == total, n + ".back()", cu.back(),
          "must equal " + std::string(total_name) + " (" + std::to_string(total) + ")");
}

/// Validates what every entry point shares (options, head grouping, the shapes of q, out and lse,
/// the size of query_positions) once per call and builds each sequence's SequenceProblem. The
/// problems point into the builder (ALiBi slopes), so it must outlive them; it is not copyable.
class ProblemBuilder {
 public:
  ProblemBuilder(Tensor3View<const float> q, Tensor3View<float> out, MatrixView<float> lse, Index num_kv_heads,
                 Index head_dim, const AttentionOptions& opt)
      : q_(q), out_(out), lse_(lse), opt_(opt), groups_(q.dim1(), num_kv_heads) {
    validate_options(opt, q.dim1());
    require(q.dim2() == head_dim, "q.dim2()", q.dim2(),
            "must equal the KV head_dim (" + std::to_string(head_dim) + ")");
    require(out.dim0() == q.dim0(), "out.dim0()", out.dim0(), "must equal q.dim0() (" + std::to_string(q.dim0()) + ")");
    require(out.dim1() == q.dim1(), "out.dim1()", out.dim1(), "must equal q.dim1() (" + std::to_string(q.dim1()) + ")");
    require(out.dim2() == q.dim2(), "out.dim2()", out.dim2(), "must equal q.dim2() (" + std::to_string(q.dim2()) + ")");
    if (lse.rows() > 0 || lse.cols() > 0) {
      require(lse.rows() == q.dim0(), "lse.rows()", lse.rows(),
              "must equal q.dim0() (" + std::to_string(q.dim0()) + ")");
      require(lse.cols() == q.dim1(), "lse.cols()", lse.cols(),
              "must equal q.dim1() (" + std::to_string(q.dim1()) + ")");
    }
    if (!opt.query_positions.empty())
      require(static_cast<Index>(opt.query_positions.size()) == q.dim0(), "query_positions.size()",
              opt.query_positions.size(), "must equal q.dim0() (" + std::to_string(q.dim0()) + ")");
    if (!opt.alibi_slopes.empty())
      slopes_.assign(opt.alibi_slopes.begin(), opt.alibi_slopes.end());
    else if (opt.alibi)
      slopes_ = alibi_slopes(q.dim1());
    scale_ = opt.scale ? *opt.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  }
  ProblemBuilder(const ProblemBuilder&) = delete;
  ProblemBuilder& operator=(const ProblemBuilder&) = delete;

  const AttentionOptions& options() const { return opt_; }
  Index num_kv_heads() const { return groups_.num_kv_heads(); }

  /// The problem of query rows [q0, q0 + nq) against keys whose last position is
  /// `last_key_position` (-1 for no keys): queries at options().query_positions[q0 ..] when
  /// given, else bottom-right aligned, the last one at last_key_position.
  SequenceProblem sequence(Index q0, Index nq, std::int32_t last_key_position) const {
    if (opt_.query_positions.empty())  // bottom-right aligned: the first query sits nq - 1 before the last key
      require(std::int64_t{last_key_position} - (nq - 1) >= std::numeric_limits<std::int32_t>::min(), "q.dim0()", nq,
              "places the first query (bottom-right aligned to the last key position " +
                  std::to_string(last_key_position) + ") below the int32 position range");
    SequenceProblem p;
    p.q = q_.slice0(q0, nq);
    p.out = out_.slice0(q0, nq);
    p.lse = lse_.rows() > 0 ? lse_.rows_slice(q0, nq) : MatrixView<float>{};
    p.q_pos =
        opt_.query_positions.empty()
            ? TokenPositions{nullptr, nq > 0 ? static_cast<std::int32_t>(std::int64_t{last_key_position} - (nq - 1))
                                             : last_key_position}  // no rows: nothing reads it
            : TokenPositions{opt_.query_positions.data() + q0, 0};
    p.group = groups_.group_size();
    p.score = {scale_, {opt_.causal, opt_.window}, opt_.softcap, slopes_.empty() ? nullptr : slopes_.data()};
    p.reduced = opt_.arithmetic == AttentionArithmetic::kReduced && !opt_.batch_invariant;
    p.sinks = opt_.sink_logits.empty() ? nullptr : opt_.sink_logits.data();
    return p;
  }

 private:
  Tensor3View<const float> q_;
  Tensor3View<float> out_;
  MatrixView<float> lse_;
  const AttentionOptions& opt_;
  HeadGroups groups_;
  std::vector<float> slopes_;
  float scale_ = 1.0f;
};

}  // namespace inferkit::detail
