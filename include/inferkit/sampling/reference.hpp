#pragma once
// Sort-based reference definitions of the decoding rules: every truncation ranks the whole
// vocabulary with std::sort and walks it, literally as the rule is stated; the history rules
// (DRY, sequence bias) scan the history naively (DRY in O(L^2) instead of a Z-function). Tests
// use them as the oracle and the benchmarks as the `naive` baseline. They share the weight
// function w = simd::exp(l - max) with the fast paths (candidates.hpp), so both decide on the
// same numbers; sums are plain sequential double loops.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "inferkit/sampling/bad_words.hpp"
#include "inferkit/sampling/begin_suppress_tokens.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/dry.hpp"
#include "inferkit/sampling/dynamic_temperature.hpp"
#include "inferkit/sampling/epsilon_cutoff.hpp"
#include "inferkit/sampling/eta_cutoff.hpp"
#include "inferkit/sampling/exponential_decay_length_penalty.hpp"
#include "inferkit/sampling/min_new_tokens.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/sequence_bias.hpp"
#include "inferkit/sampling/xtc.hpp"

namespace inferkit::reference {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Finite token ids in decoding order (logit descending, id ascending), by a full sort.
inline std::vector<TokenId> ranked(std::span<const float> x) {
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] > kNegInf) ids.push_back(static_cast<TokenId>(i));
  std::sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  return ids;
}

/// Sets every token not in keep to -inf.
inline void keep_only(std::span<float> x, const std::vector<TokenId>& keep) {
  std::vector<char> mark(x.size(), 0);
  for (TokenId id : keep) mark[static_cast<std::size_t>(id)] = 1;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!mark[i]) x[i] = kNegInf;
}

inline void temperature(std::span<float> x, float t) {
  if (t == 0.0f) {
    keep_only(x, {ranked(x).front()});
    return;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : x) mx = std::max(mx, v);
  const float shift = std::isfinite(mx / t) ? 0.0f : mx;  // a tiny T: (x - max) / T, same softmax
  for (float& v : x) v = (v - shift) / t;
}

inline void top_k(std::span<float> x, Index k) {
  if (k <= 0 || k >= static_cast<Index>(x.size())) return;
  auto ids = ranked(x);
  if (static_cast<Index>(ids.size()) > k) ids.resize(static_cast<std::size_t>(k));
  keep_only(x, ids);
}

inline void top_p(std::span<float> x, float p, Index min_keep = 1) {
  if (p >= 1.0f) return;
  auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  double z = 0.0;
  for (TokenId id : ids) z += exp_weight(x[id], max);
  double cum = 0.0;
  std::size_t keep = 0;
  while (keep < ids.size() && cum < double(p) * z) cum += exp_weight(x[ids[keep++]], max);
  keep = std::max(keep, std::min(ids.size(), static_cast<std::size_t>(min_keep)));
  ids.resize(keep);
  keep_only(x, ids);
}

inline void min_p(std::span<float> x, float p, Index min_keep = 1) {
  if (p == 0.0f) return;
  auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  std::size_t keep = 0;
  while (keep < ids.size() && exp_weight(x[ids[keep]], max) >= p) ++keep;
  keep = std::max(keep, std::min(ids.size(), static_cast<std::size_t>(min_keep)));
  ids.resize(keep);
  keep_only(x, ids);
}

/// Sum of the weights of ids (sequential double loop).
inline double mass(std::span<const float> x, const std::vector<TokenId>& ids, float max) {
  double z = 0.0;
  for (TokenId id : ids) z += exp_weight(x[static_cast<std::size_t>(id)], max);
  return z;
}

/// XTC for coin u: over the ranking, the prefix with w >= float(threshold * Z) loses all but its
/// last token, if it holds two or more and min_keep tokens would remain.
inline void xtc(std::span<float> x, const Xtc& q, double u) {
  if (!(u < double(q.probability))) return;
  const auto ids = ranked(x);
  if (ids.size() < 2) return;
  const float max = x[static_cast<std::size_t>(ids.front())];
  const auto t = static_cast<float>(double(q.threshold) * mass(x, ids, max));
  std::size_t top = 0;
  while (top < ids.size() && exp_weight(x[static_cast<std::size_t>(ids[top])], max) >= t) ++top;
  if (top < 2 || static_cast<Index>(ids.size() - top + 1) < q.min_keep) return;
  for (std::size_t j = 0; j + 1 < top; ++j) x[static_cast<std::size_t>(ids[j])] = kNegInf;
}

/// DRY by direct comparison: for every position j the common suffix of h[0..j] and the window
/// is measured token by token (O(L^2) worst case), breakers by a direct scan.
inline void dry(std::span<float> x, std::span<const TokenId> history, const Dry& q) {
  if (q.multiplier == 0.0f || q.penalty_last_n == 0) return;
  std::vector<TokenId> w(history.begin(), history.end());
  if (q.penalty_last_n > 0 && w.size() > static_cast<std::size_t>(q.penalty_last_n))
    w.erase(w.begin(), w.end() - q.penalty_last_n);
  const Index L = static_cast<Index>(w.size());
  if (L <= q.allowed_length) return;
  Index limit = L;
  for (Index i = 0; i < L && limit == L; ++i) {
    Index longest = -1;
    for (const auto& b : q.sequence_breakers) {
      const Index tail = static_cast<Index>(b.size()) - 1;
      if (tail > i || b[0] != w[static_cast<std::size_t>(L - 1 - i)]) continue;
      bool ok = true;
      for (Index o = 0; o < tail; ++o)
        ok = ok && w[static_cast<std::size_t>(L - i + o)] == b[static_cast<std::size_t>(o + 1)];
      if (ok) longest = std::max(longest, tail);
    }
    if (longest >= 0) limit = i - longest;
  }
  if (limit < q.allowed_length) return;
  std::map<TokenId, Index> best;
  for (Index j = 0; j + 1 < L; ++j) {
    Index n = 0;
    while (n <= j && w[static_cast<std::size_t>(j - n)] == w[static_cast<std::size_t>(L - 1 - n)]) ++n;
    n = std::min(n, limit);
    if (n < q.allowed_length) continue;
    Index& b = best[w[static_cast<std::size_t>(j + 1)]];
    b = std::max(b, n);
  }
  for (const auto& [t, n] : best) {
    bool breaker = false;
    for (const auto& b : q.sequence_breakers) breaker = breaker || (b.size() == 1 && b[0] == t);
    if (breaker) continue;
    Index e = n - q.allowed_length;
    if (q.base > 1.000001f) e = std::min<Index>(e, static_cast<Index>(88.7228391f / std::log(q.base)));
    const double p =
        std::min(double(q.multiplier) * std::pow(double(q.base), double(e)), double(std::numeric_limits<float>::max()));
    x[static_cast<std::size_t>(t)] -= static_cast<float>(p);
  }
}

/// Top-n-sigma: keep l >= max - n * sigma (population sigma of the finite logits).
inline void top_n_sigma(std::span<float> x, float n) {
  if (n <= 0.0f) return;
  const auto ids = ranked(x);
  if (ids.size() <= 1) return;
  double sum = 0.0;
  for (TokenId id : ids) sum += x[static_cast<std::size_t>(id)];
  const double mean = sum / double(ids.size());
  double sq = 0.0;
  for (TokenId id : ids) sq += (x[static_cast<std::size_t>(id)] - mean) * (x[static_cast<std::size_t>(id)] - mean);
  const double cut = double(x[static_cast<std::size_t>(ids.front())]) - double(n) * std::sqrt(sq / double(ids.size()));
  for (float& v : x)
    if (double(v) < cut) v = kNegInf;
}

/// Entropy (nats) of the finite logits' softmax, directly as -sum p log p.
inline double entropy(std::span<const float> x) {
  const auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  const double z = mass(x, ids, max);
  double h = 0.0;
  for (TokenId id : ids) {
    const double p = exp_weight(x[static_cast<std::size_t>(id)], max) / z;
    if (p > 0.0) h -= p * std::log(p);
  }
  return h;
}

/// Dynamic temperature with the entropy computed directly (-sum p log p).
inline void dynamic_temperature(std::span<float> x, const DynamicTemperature& q) {
  if (q.range == 0.0f) {
    temperature(x, q.temperature);
    return;
  }
  const auto n = ranked(x).size();
  if (n <= 1) return;
  const double h = std::clamp(entropy(x) / std::log(double(n)), 0.0, 1.0);
  const double lo = std::max(0.0, double(q.temperature) - double(q.range)),
               hi = double(q.temperature) + double(q.range);
  temperature(x, static_cast<float>(lo + (hi - lo) * std::pow(h, double(q.exponent))));
}

/// HF's probability floor with HF's min_keep: a token stays when w >= float(floor * Z) or its
/// logit is at least the min_keep-th largest.
inline void probability_floor(std::span<float> x, double floor_p, Index min_keep) {
  const auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  const auto t = static_cast<float>(floor_p * mass(x, ids, max));
  const float kth = x[static_cast<std::size_t>(ids[std::min(ids.size(), static_cast<std::size_t>(min_keep)) - 1])];
  for (TokenId id : ids) {
    float& v = x[static_cast<std::size_t>(id)];
    if (!(exp_weight(v, max) >= t || v >= kth)) v = kNegInf;
  }
}

/// Epsilon sampling (HF).
inline void epsilon_cutoff(std::span<float> x, const EpsilonCutoff& q) { probability_floor(x, q.epsilon, q.min_keep); }

/// Eta sampling (HF); the entropy as log Z - sum w (l - max) / Z, the form the fast path uses
/// (tests check it against entropy() separately).
inline void eta_cutoff(std::span<float> x, const EtaCutoff& q) {
  const auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  double z = 0.0, wl = 0.0;
  for (TokenId id : ids) {
    const float l = x[static_cast<std::size_t>(id)];
    const double w = exp_weight(l, max);
    z += w;
    if (w > 0.0) wl += w * double(l - max);
  }
  const double h = std::log(z) - wl / z;
  probability_floor(x, std::min(double(q.epsilon), std::sqrt(double(q.epsilon)) * std::exp(-h)), q.min_keep);
}

/// Mirostat's truncation for mu over the full ranking.
inline void mirostat(std::span<float> x, const Mirostat& q, float mu) {
  auto ids = ranked(x);
  const float max = x[static_cast<std::size_t>(ids.front())];
  std::size_t keep = 0;
  if (q.version == 2) {
    const auto t = static_cast<float>(mass(x, ids, max) * std::exp2(-double(mu)));
    while (keep < ids.size() && exp_weight(x[static_cast<std::size_t>(ids[keep])], max) >= t) ++keep;
    keep = std::max<std::size_t>(keep, 1);
  } else {
    const std::size_t m = std::min(ids.size(), static_cast<std::size_t>(q.m));
    if (m <= 1) return;
    double tb = 0.0, tt = 0.0;
    for (std::size_t i = 0; i + 1 < m; ++i) {
      const double t = std::log(double(i + 2) / double(i + 1));
      tb += t * (double(x[static_cast<std::size_t>(ids[i])]) - double(x[static_cast<std::size_t>(ids[i + 1])]));
      tt += t * t;
    }
    const double s = tb / tt, eps = s - 1.0, v = double(x.size());
    const double base = std::abs(eps) < 1e-12 ? std::exp2(double(mu)) / std::log(v)
                                              : eps * std::exp2(double(mu)) / (1.0 - std::pow(v, -eps));
    const double k = std::pow(base, 1.0 / s);
    keep = !(k >= 1.0) ? 1 : !(k < double(ids.size())) ? ids.size() : static_cast<std::size_t>(k);
  }
  ids.resize(keep);
  keep_only(x, ids);
}

/// HF's min_new_tokens.
inline void min_new_tokens(std::span<float> x, const MinNewTokens& q, Index generated) {
  if (generated < q.min_new_tokens)
    for (TokenId id : q.eos_token_ids) x[static_cast<std::size_t>(id)] = kNegInf;
}
/// HF's exponential decay length penalty, one EOS id at a time.
inline void exponential_decay_length_penalty(std::span<float> x, const ExponentialDecayLengthPenalty& q,
                                             Index generated) {
  if (generated <= q.start_index) return;
  std::vector<char> done(x.size(), 0);
  for (TokenId id : q.eos_token_ids) {
    float& v = x[static_cast<std::size_t>(id)];
    if (done[static_cast<std::size_t>(id)] || v == kNegInf) continue;
    done[static_cast<std::size_t>(id)] = 1;
    const double r =
        double(v) + std::abs(double(v)) * (std::pow(double(q.decay_factor), double(generated - q.start_index)) - 1.0);
    v = static_cast<float>(
        std::clamp(r, -double(std::numeric_limits<float>::max()), double(std::numeric_limits<float>::max())));
  }
}
/// HF's begin-suppress tokens.
inline void begin_suppress_tokens(std::span<float> x, const BeginSuppressTokens& q, Index generated) {
  if (generated == 0)
    for (TokenId id : q.tokens) x[static_cast<std::size_t>(id)] = kNegInf;
}

/// HF's sequence bias: for every entry, compare its prefix with the history tail.
inline void sequence_bias(std::span<float> x, std::span<const TokenId> history, const SequenceBias& q) {
  std::vector<float> bias(x.size(), 0.0f);
  for (const auto& e : q.entries) {
    const auto& s = e.sequence;
    bool match = s.size() == 1 || history.size() >= s.size();
    for (std::size_t j = 0; match && j + 1 < s.size(); ++j)
      match = history[history.size() - (s.size() - 1) + j] == s[j];
    if (match) bias[static_cast<std::size_t>(s.back())] += e.bias;
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    if (bias[i] != 0.0f) x[i] = std::min(x[i] + bias[i], std::numeric_limits<float>::max());
}
/// HF's bad words as -inf sequence biases (one-token EOS bad words dropped).
inline void bad_words(std::span<float> x, std::span<const TokenId> history, const BadWords& q) {
  SequenceBias as_bias;
  for (const auto& s : q.sequences)
    if (!(s.size() == 1 && std::find(q.eos_token_ids.begin(), q.eos_token_ids.end(), s[0]) != q.eos_token_ids.end()))
      as_bias.entries.push_back({s, kNegInf});
  sequence_bias(x, history, as_bias);
}

/// The categorical draw for a uniform u in [0, 1): first id (ascending) whose cumulative weight
/// exceeds u * Z.
inline TokenId draw(std::span<const float> x, double u) {
  float max = kNegInf;
  for (float v : x) max = std::max(max, v);
  std::vector<double> w(x.size(), 0.0);
  double z = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] > kNegInf) z += (w[i] = exp_weight(x[i], max));
  double cum = 0.0;
  TokenId last = -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (w[i] <= 0.0) continue;
    last = static_cast<TokenId>(i);
    cum += w[i];
    if (cum > u * z) return last;
  }
  return last;
}

}  // namespace inferkit::reference
