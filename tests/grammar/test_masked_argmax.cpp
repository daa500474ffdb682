// grammar/masked_argmax.hpp: every path the build has gives the id a naive loop over all ids finds
// (the largest allowed logit, in double, the lowest id among equal ones; NaN and -inf never), for
// random masks of every density, vocabulary sizes that are not multiples of 64, ties and
// non-finite logits.

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "inferkit/grammar/masked_argmax.hpp"

using inferkit::MaskedArgmaxPath;
using inferkit::TokenId;

namespace {

TokenId naive_argmax(const std::vector<float>& logits, const inferkit::TokenBitset& mask) {
  TokenId best = -1;
  double best_v = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double v = logits[i];
    if (!mask.test(static_cast<TokenId>(i)) || std::isnan(v) || v == -INFINITY) continue;
    if (best < 0 || v > best_v) {
      best = static_cast<TokenId>(i);
      best_v = v;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("masked_argmax: every path equals a naive loop over all ids", "[grammar][masked_argmax]") {
  std::mt19937 rng(30);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<double> u;
  const std::vector<MaskedArgmaxPath> paths = {MaskedArgmaxPath::kAuto, MaskedArgmaxPath::kScalar,
                                               MaskedArgmaxPath::kAvx2, MaskedArgmaxPath::kAvx512};
  int checked = 0;
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{17}, std::size_t{64}, std::size_t{1000}, std::size_t{32000}, std::size_t{102407}})
    for (const double density : {0.0, 0.0001, 0.01, 1.0 / 7, 0.5, 1.0})
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<float> logits(n);
        for (float& x : logits) {
          x = nd(rng);
          if (trial == 1) x = std::round(x * 2.0f) / 2.0f;  // many ties
          if (trial == 2 && u(rng) < 0.2) x = u(rng) < 0.5 ? -INFINITY : std::numeric_limits<float>::quiet_NaN();
          if (trial == 3) x = -INFINITY;
        }
        if (trial == 3 && n > 5) logits[n - 3] = std::numeric_limits<float>::quiet_NaN();
        inferkit::TokenBitset mask(n);
        for (std::size_t i = 0; i < n; ++i)
          if (u(rng) < density) mask.set(static_cast<TokenId>(i));
        const TokenId want = naive_argmax(logits, mask);
        for (const MaskedArgmaxPath p : paths) {
          if (!inferkit::has_masked_argmax_path(p)) continue;
          INFO("n " << n << " density " << density << " trial " << trial << " path " << static_cast<int>(p));
          CHECK(inferkit::masked_argmax(logits, mask, p) == want);
          ++checked;
        }
      }
  CHECK(checked >= 144 * 2);  // at least the scalar path and kAuto
  // The largest allowed logit beats a larger masked one; the last id of a ragged vocabulary counts.
  std::vector<float> l(130, 0.0f);
  l[3] = 9.0f;
  l[129] = 5.0f;
  inferkit::TokenBitset m(130);
  m.set(10);
  m.set(129);
  for (const MaskedArgmaxPath p : paths)
    if (inferkit::has_masked_argmax_path(p)) CHECK(inferkit::masked_argmax(l, m, p) == 129);
  CHECK_THROWS_WITH(inferkit::masked_argmax(std::vector<float>(129), m), Catch::Contains("mask size"));
}
