#pragma once
// DRY, "don't repeat yourself" (p-e-w, text-generation-webui PR 5677; llama.cpp's dry sampler):
// a token that would extend a repeat of a sequence already in the history is penalized by
//   multiplier * base^(n - allowed_length)   (subtracted from its logit), n >= allowed_length,
// where n is the longest repeat it would extend. Exactly, over the window w = the last
// penalty_last_n tokens of the history (length L; -1 = all, 0 = off):
//   - n_j, for j < L - 1, is the length of the longest common suffix of w[0..j] and w[0..L-1]:
//     the sequence ending at j that the history ends with (a suffix match may overlap itself);
//   - the token w[j + 1] would extend that repeat; its n is the largest n_j over such j;
//   - sequence breakers (token sequences) reset matching: scanning back from the end, the first
//     position where a breaker starts and is complete inside the window limits every n_j to the
//     number of tokens after that breaker (the longest breaker wins when several start there;
//     llama.cpp's restart-sequence rule), and a token that is itself a one-token breaker is
//     never penalized;
//   - the exponent is clamped to 88.72 / ln(base) (llama.cpp's overflow guard, base > 1.000001)
//     and the penalty to the largest float, so a penalized logit stays finite.
// Nothing happens when multiplier == 0, penalty_last_n == 0 or L <= allowed_length.
//
// Cost: O(L) per call, independent of the vocabulary. The n_j are a Z-function of the reversed
// window (Z[k] = longest common prefix of the reversed window and its suffix from k), computed
// in linear time; the penalized tokens' largest n are kept in a per-thread table indexed by
// token and reset after use, so no map and no sort.
// The rule (a chain stage): Dry{0.8f}; alone on a row: apply_dry(logits, history, Dry{0.8f}).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/token_checks.hpp"

namespace inferkit {

/// DRY's parameters (llama.cpp's defaults, multiplier 0 = off). Sequence breakers are token
/// sequences (llama.cpp takes strings and tokenizes them; here the caller tokenizes).
struct Dry {
  float multiplier = 0.0f;    ///< penalty scale, >= 0 (0 = off)
  float base = 1.75f;         ///< growth per token beyond allowed_length, >= 1
  Index allowed_length = 2;   ///< repeats this long are free, >= 0
  Index penalty_last_n = -1;  ///< window of the history scanned: -1 = all of it, 0 = off, n > 0 = last n
  std::vector<std::vector<TokenId>> sequence_breakers{};  ///< each non-empty; matching restarts after one

  /// The registered name, "dry": describe() starts with it.
  static constexpr std::string_view kName = "dry";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "dry(multiplier, base, allowed_length, penalty_last_n)".
  std::string describe() const {
    return describe_rule(kName, {multiplier, base, double(allowed_length), double(penalty_last_n)});
  }
  /// apply_dry() over the step's history (its penalty_last_n window).
  void apply(Candidates& c, const StepInputs& in) const;
};

/// Checks DRY's parameters; throws std::invalid_argument naming the bad one (token ids are
/// checked against the vocabulary when the rule is applied).
inline void validate_dry(const Dry& q) {
  require(std::isfinite(q.multiplier) && q.multiplier >= 0.0f, "dry_multiplier", q.multiplier,
          "must be finite and >= 0 (0 = off)");
  require(std::isfinite(q.base) && q.base >= 1.0f, "dry_base", q.base, "must be finite and >= 1");
  require(q.allowed_length >= 0, "dry_allowed_length", q.allowed_length, "must be >= 0");
  require(q.penalty_last_n >= -1, "dry_penalty_last_n", q.penalty_last_n, "must be >= -1 (-1 = all, 0 = off)");
  for (std::size_t i = 0; i < q.sequence_breakers.size(); ++i) {  // names built on failure only
    const auto& b = q.sequence_breakers[i];
    if (b.empty()) throw_invalid_argument("dry_sequence_breakers[" + std::to_string(i) + "].size()", 0, "must be > 0");
    for (std::size_t j = 0; j < b.size(); ++j)
      if (b[j] < 0)
        throw_invalid_argument("dry_sequence_breakers[" + std::to_string(i) + "][" + std::to_string(j) + "]", b[j],
                               "must be >= 0");
  }
}

/// DRY's penalty for a repeat of length n >= allowed_length: multiplier * base^(n -
/// allowed_length), the exponent clamped as llama.cpp does and the result to the largest float.
inline float dry_penalty(const Dry& q, Index n) {
  Index e = n - q.allowed_length;
  if (q.base > 1.000001f) {
    const auto max_exponent = static_cast<Index>(88.7228391f / std::log(q.base));
    e = std::min(e, max_exponent);
  }
  const double p = double(q.multiplier) * std::pow(double(q.base), double(e));
  return static_cast<float>(std::min(p, double(std::numeric_limits<float>::max())));
}

namespace detail {

/// The window DRY scans: the last penalty_last_n tokens of the history (-1 = all).
inline std::span<const TokenId> dry_window(std::span<const TokenId> history, Index penalty_last_n) {
  if (penalty_last_n < 0 || static_cast<std::size_t>(penalty_last_n) >= history.size()) return history;
  return history.subspan(history.size() - static_cast<std::size_t>(penalty_last_n));
}

/// How many tokens at the end of w follow the last complete sequence breaker (w.size() when
/// none): scanning back from the end, the first position where some breaker starts and is
/// complete, with the longest breaker starting there.
inline Index dry_repeat_limit(std::span<const TokenId> w, const std::vector<std::vector<TokenId>>& breakers) {
  const Index L = static_cast<Index>(w.size());
  if (breakers.empty()) return L;
  std::uint64_t heads = 0;  // a 64-bit filter on breaker heads: most positions are skipped at once
  for (const auto& b : breakers) heads |= std::uint64_t{1} << (static_cast<std::uint32_t>(b[0]) & 63u);
  for (Index i = 0; i < L; ++i) {  // i = distance of the head from the end
    const TokenId head = w[static_cast<std::size_t>(L - 1 - i)];
    if (!((heads >> (static_cast<std::uint32_t>(head) & 63u)) & 1u)) continue;
    Index longest = -1;
    for (const auto& b : breakers) {
      const Index tail = static_cast<Index>(b.size()) - 1;
      if (b[0] != head || tail <= longest || tail > i) continue;
      bool match = true;
      for (Index o = 0; o < tail && match; ++o)
        match = w[static_cast<std::size_t>(L - i + o)] == b[static_cast<std::size_t>(1 + o)];
      if (match) longest = tail;
    }
    if (longest >= 0) return i - longest;
  }
  return L;
}

/// Per-thread scratch of DRY: the reversed window, its Z-function, and a token-indexed table of
/// the largest repeat (-1 = none) with the list of entries set, so it is reset in O(touched).
struct DryScratch {
  std::vector<TokenId> rev;
  std::vector<Index> z;
  std::vector<std::int32_t> best;
  std::vector<TokenId> touched;
};
inline DryScratch& dry_scratch() {
  thread_local DryScratch s;
  return s;
}

}  // namespace detail

/// Calls f(token, n) for every token DRY penalizes, with n its repeat length (>= allowed_length),
/// in order of first discovery; checks the window's ids against the vocabulary (out_of_range).
/// Exposed for tests and for callers that want the repeat lengths without a logits row.
template <class F>
void for_each_dry_repeat(std::span<const TokenId> history, const Dry& q, Index vocab, F&& f) {
  validate_dry(q);
  if (q.multiplier == 0.0f || q.penalty_last_n == 0) return;
  const std::span<const TokenId> w = detail::dry_window(history, q.penalty_last_n);
  const Index L = static_cast<Index>(w.size());
  const std::size_t offset = history.size() - w.size();
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i] < 0 || w[i] >= vocab)
      throw_out_of_range("history[" + std::to_string(offset + i) + "]", w[i],
                         "must be in [0, " + std::to_string(vocab) + ")");
  for (std::size_t i = 0; i < q.sequence_breakers.size(); ++i)
    for (std::size_t j = 0; j < q.sequence_breakers[i].size(); ++j)
      if (const TokenId t = q.sequence_breakers[i][j]; t >= vocab)  // the name is built on failure only
        detail::check_token(t, vocab, "dry_sequence_breakers[" + std::to_string(i) + "][" + std::to_string(j) + "]");
  if (L <= q.allowed_length) return;
  const Index limit = detail::dry_repeat_limit(w, q.sequence_breakers);
  if (limit < q.allowed_length) return;
  detail::DryScratch& s = detail::dry_scratch();
  // Z-function of r = reversed window: z[k] = lcp(r, r[k..]) = the common suffix of w[0..L-1-k]
  // and w, i.e. n_j for j = L - 1 - k; the token extending it is w[j + 1] = r[k - 1].
  s.rev.assign(w.rbegin(), w.rend());
  s.z.assign(static_cast<std::size_t>(L), 0);
  const TokenId* r = s.rev.data();
  Index* z = s.z.data();
  if (s.best.size() < static_cast<std::size_t>(vocab)) s.best.assign(static_cast<std::size_t>(vocab), -1);
  s.touched.clear();
  Index lo = 0, hi = 0;  // the rightmost match window [lo, hi) found so far
  for (Index k = 1; k < L; ++k) {
    Index n = 0;
    if (k < hi) n = std::min(hi - k, z[k - lo]);
    while (k + n < L && r[n] == r[k + n]) ++n;
    if (k + n > hi) {
      lo = k;
      hi = k + n;
    }
    z[k] = n;
    const Index capped = std::min(n, limit);
    if (capped < q.allowed_length) continue;
    const TokenId t = r[k - 1];
    std::int32_t& b = s.best[static_cast<std::size_t>(t)];
    if (b < 0) s.touched.push_back(t);
    b = std::max<std::int32_t>(b, static_cast<std::int32_t>(capped));
  }
  // Read and reset the table before calling f, so the scratch is clean whatever f does.
  std::vector<std::pair<TokenId, Index>> found;
  found.reserve(s.touched.size());
  for (TokenId t : s.touched) {
    found.emplace_back(t, s.best[static_cast<std::size_t>(t)]);
    s.best[static_cast<std::size_t>(t)] = -1;
  }
  for (const auto& [t, n] : found) {
    bool breaker = false;
    for (const auto& b : q.sequence_breakers) breaker = breaker || (b.size() == 1 && b[0] == t);
    if (!breaker) f(t, n);
  }
}

/// Applies DRY to the candidates: each penalized token's logit drops by dry_penalty(q, n).
/// `history` is the request's tokens (the rule windows it by penalty_last_n).
inline void apply_dry(Candidates& c, std::span<const TokenId> history, const Dry& q) {
  const auto x = c.logits();
  bool changed = false;
  for_each_dry_repeat(history, q, c.vocab_size(), [&](TokenId t, Index n) {
    x[static_cast<std::size_t>(t)] -= dry_penalty(q, n);
    changed = true;
  });
  if (changed) c.logits_changed();
}

/// In place on one row.
inline void apply_dry(std::span<float> logits, std::span<const TokenId> history, const Dry& q) {
  Candidates c(logits);
  apply_dry(c, history, q);
  c.materialize();
}

inline void Dry::validate() const { validate_dry(*this); }
inline void Dry::apply(Candidates& c, const StepInputs& in) const { apply_dry(c, in.history, *this); }

}  // namespace inferkit
