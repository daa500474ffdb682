// Top-n-sigma, epsilon, eta, dynamic temperature, Mirostat's truncation and top_p = 0: the
// published vectors of llama.cpp and Hugging Face, closed forms, the sort-based references on
// random rows (dense and list paths) and bad parameters.
#include "sampling/sampling_test_util.hpp"

#include <functional>

#include "inferkit/sampling/dynamic_temperature.hpp"
#include "inferkit/sampling/epsilon_cutoff.hpp"
#include "inferkit/sampling/eta_cutoff.hpp"
#include "inferkit/sampling/mirostat.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_n_sigma.hpp"
#include "inferkit/sampling/top_p.hpp"
#include "inferkit/sampling/xtc.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

using test::log_probs;
using test::softmax;

namespace {

// The sort-based references rank the whole row, so the 128k vocabulary runs for a few parameter
// combinations only (`large`), keeping the binary fast in the asan and scalar presets.
const std::size_t kVocabs[] = {1, 2, 37, 5000, 128256};

Index kept(const std::vector<float>& x) {
  return std::count_if(x.begin(), x.end(), [](float v) { return v > -INFINITY; });
}

// HF's "ramp" rows: arange(10) - 5, and the same times 100.
std::vector<float> ramp(float scale) {
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[static_cast<std::size_t>(i)] = (float(i) - 5.0f) * scale;
  return x;
}

// Applies `fast` (on Candidates, after an optional top-k that makes them a list) and `ref` (on a
// row) to the same random logits and compares bit for bit.
template <class Fast, class Ref>
void check_against_reference(Fast fast, Ref ref, unsigned& seed, Index list_k = 0, bool large = false) {
  for (std::size_t n : kVocabs)
    for (float sigma : {1.0f, 3.0f, 8.0f}) {
      if (n > 5000 && !large) continue;
      INFO("V = " << n << ", sigma = " << sigma << ", list_k = " << list_k);
      auto x = test::random_logits(n, seed++, sigma, sigma == 3.0f, sigma == 8.0f ? 0.3 : 0.0);
      auto r = x;
      inferkit::Candidates c(x);
      if (list_k > 0) inferkit::apply_top_k(c, list_k);
      fast(c);
      c.materialize();
      if (list_k > 0) inferkit::reference::top_k(r, list_k);
      ref(r);
      CHECK(test::same_bits(x, r));
    }
}

}  // namespace

TEST_CASE("top-n-sigma reproduces llama.cpp's test vectors", "[sampling][top_n_sigma]") {
  // test_top_n_sigma: probs .1 .2 .3 .4; n = 1 keeps .3 and .4; n = 0 (off since llama.cpp PR
  // 13345) and n = 3 keep all.
  auto x = log_probs({0.1f, 0.2f, 0.3f, 0.4f});
  inferkit::apply_top_n_sigma(x, 1.0f);
  const auto p = softmax(x);
  CHECK(p[0] == 0.0);
  CHECK(p[1] == 0.0);
  CHECK(p[2] == Approx(0.428571).margin(1e-5));
  CHECK(p[3] == Approx(0.571429).margin(1e-5));
  for (float n : {0.0f, -1.0f, 3.0f}) {
    auto y = log_probs({0.1f, 0.2f, 0.3f, 0.4f});
    inferkit::apply_top_n_sigma(y, n);
    CHECK(kept(y) == 4);
  }
  CHECK_THROWS_WITH(inferkit::apply_top_n_sigma(x, NAN), Contains("top_n_sigma"));
}

TEST_CASE("top-n-sigma equals the definition and ignores temperature", "[sampling][top_n_sigma]") {
  unsigned seed = 100;
  for (float n : {0.5f, 1.0f, 2.0f, 4.0f}) {
    check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_top_n_sigma(c, n); },
                            [&](std::vector<float>& r) { inferkit::reference::top_n_sigma(r, n); }, seed, 0, n == 1.0f);
    check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_top_n_sigma(c, n); },
                            [&](std::vector<float>& r) { inferkit::reference::top_n_sigma(r, n); }, seed, 50);
  }
  // The kept set is the same before and after a temperature (max and sigma scale alike).
  auto x = test::random_logits(20000, 7, 2.0f);
  auto hot = x;
  for (float& v : hot) v /= 0.5f;
  inferkit::apply_top_n_sigma(x, 1.5f);
  inferkit::apply_top_n_sigma(hot, 1.5f);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE((x[i] > -INFINITY) == (hot[i] > -INFINITY));
}

TEST_CASE("epsilon and eta reproduce Hugging Face's test vectors", "[sampling][epsilon][eta]") {
  // test_epsilon_dist_warper: epsilon 0.1.
  auto a = log_probs({0.87f, 0.099f, 0.001f, 0.03f});
  inferkit::apply_epsilon_cutoff(a, {.epsilon = 0.1f});
  CHECK(kept(a) == 1);
  CHECK(a[0] > -INFINITY);
  auto b = log_probs({0.4f, 0.299f, 0.101f, 0.2f});
  inferkit::apply_epsilon_cutoff(b, {.epsilon = 0.1f});
  CHECK(kept(b) == 4);
  // Ramps with min_tokens_to_keep = 2: 3 and 2 tokens.
  auto r1 = ramp(1.0f), r2 = ramp(100.0f);
  inferkit::apply_epsilon_cutoff(r1, {.epsilon = 5e-2f, .min_keep = 2});
  inferkit::apply_epsilon_cutoff(r2, {.epsilon = 5e-2f, .min_keep = 2});
  CHECK(kept(r1) == 3);
  CHECK(kept(r2) == 2);
  // test_eta_dist_warper: epsilon 0.0625; cutoffs min(0.0625, 0.1320) and min(0.0625, 0.1644).
  auto c = log_probs({0.0f, 0.1f, 0.8f, 0.1f});
  inferkit::apply_eta_cutoff(c, {.epsilon = 0.0625f});
  CHECK((c[0] == -INFINITY && c[1] > -INFINITY && c[2] > -INFINITY && c[3] > -INFINITY));
  auto d = log_probs({0.01f, 0.04f, 0.9f, 0.05f});
  inferkit::apply_eta_cutoff(d, {.epsilon = 0.0625f});
  CHECK(kept(d) == 1);
  CHECK(d[2] > -INFINITY);
  CHECK(std::sqrt(0.0625) * std::exp(-inferkit::reference::entropy(log_probs({0.01f, 0.04f, 0.9f, 0.05f}))) ==
        Approx(0.1644).margin(1e-4));
  r1 = ramp(1.0f);
  r2 = ramp(100.0f);
  inferkit::apply_eta_cutoff(r1, {.epsilon = 0.1f, .min_keep = 2});
  inferkit::apply_eta_cutoff(r2, {.epsilon = 0.1f, .min_keep = 2});
  CHECK(kept(r1) == 2);
  CHECK(kept(r2) == 2);
}

TEST_CASE("epsilon and eta equal the sort-based definitions, ties at the min_keep-th logit included",
          "[sampling][epsilon][eta]") {
  unsigned seed = 300;
  for (float eps : {3e-4f, 3e-3f, 0.05f, 0.5f})
    for (Index min_keep : {1, 3}) {
      const inferkit::EpsilonCutoff e{eps, min_keep};
      const inferkit::EtaCutoff h{eps, min_keep};
      for (Index list_k : {0, 60}) {
        const bool large = list_k == 0 && min_keep == 1 && (eps == 3e-4f || eps == 0.05f);
        check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_epsilon_cutoff(c, e); },
                                [&](std::vector<float>& r) { inferkit::reference::epsilon_cutoff(r, e); }, seed, list_k,
                                large);
        check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_eta_cutoff(c, h); },
                                [&](std::vector<float>& r) { inferkit::reference::eta_cutoff(r, h); }, seed, list_k,
                                large);
      }
    }
  // A flat row: no token reaches epsilon, all are tied at the max, so Hugging Face keeps them all.
  std::vector<float> flat(50000, 0.25f);
  inferkit::apply_epsilon_cutoff(flat, {.epsilon = 1e-3f});
  CHECK(kept(flat) == 50000);
  // The entropy identity the fast path uses, against -sum p log p.
  for (float sigma : {0.5f, 3.0f, 12.0f}) {
    auto x = test::random_logits(30000, 9, sigma, false, 0.1);
    inferkit::Candidates c(x);
    const auto m = inferkit::detail::candidate_mass(c, c.summary().max, true);
    CHECK(m.entropy() == Approx(inferkit::reference::entropy(x)).epsilon(1e-6));
  }
}

// Epsilon, eta, Mirostat v2 and XTC take Z from a float-block pass and fall back to the exact
// double pass only when a weight lies within the pass's error bound of the threshold
// (detail/mass_threshold.hpp). Here one token's logit is walked float by float across the
// threshold (the row's other weights fixed), so some steps put its weight inside that bound:
// every step must keep what the reference keeps with its sequential double Z. (Deciding those
// steps on the float-block Z alone fails this test.)
TEST_CASE("probability floors keep the exact set when a weight sits at the threshold",
          "[sampling][epsilon][eta][mirostat][xtc]") {
  using inferkit::reference::mass;
  using inferkit::reference::ranked;
  const auto weight = [](const std::vector<float>& x, TokenId id) {
    return inferkit::exp_weight(x[static_cast<std::size_t>(id)], *std::max_element(x.begin(), x.end()));
  };
  const auto z_of = [](const std::vector<float>& x) {
    return mass(x, ranked(x), *std::max_element(x.begin(), x.end()));
  };
  const auto entropy_of = [](const std::vector<float>& x) {  // the reference's log Z - sum w (l - max) / Z
    const float max = *std::max_element(x.begin(), x.end());
    double z = 0.0, wl = 0.0;
    for (TokenId id : ranked(x)) {
      const double w = inferkit::exp_weight(x[static_cast<std::size_t>(id)], max);
      z += w;
      if (w > 0.0) wl += w * double(x[static_cast<std::size_t>(id)] - max);
    }
    return std::log(z) - wl / z;
  };
  // Each rule: its fast in-place call, the reference, and the float threshold the reference uses.
  struct Rule {
    const char* name;
    std::function<void(std::vector<float>&)> fast, ref;
    std::function<float(const std::vector<float>&)> threshold;
  };
  // Parameters put the threshold near weight 0.2 of a N(0, 1) row of 4,096 (Z about 200), where
  // one float step of a logit near 2 moves its weight by about 2.4e-7: within the bound.
  const float eps = 1e-3f, mu = 10.0f, xtc_threshold = 1e-3f;
  const inferkit::Xtc xtc{xtc_threshold, 1.0f, 1};
  const std::vector<Rule> rules = {
      {"epsilon",
       [&](std::vector<float>& x) {
         inferkit::apply_epsilon_cutoff(std::span<float>(x), {eps, 1});
       },
       [&](std::vector<float>& x) {
         inferkit::reference::epsilon_cutoff(x, {eps, 1});
       },
       [&](const std::vector<float>& x) { return static_cast<float>(double(eps) * z_of(x)); }},
      {"eta",
       [&](std::vector<float>& x) {
         inferkit::apply_eta_cutoff(std::span<float>(x), {0.5f, 1});
       },
       [&](std::vector<float>& x) {
         inferkit::reference::eta_cutoff(x, {0.5f, 1});
       },
       [&](const std::vector<float>& x) {
         return static_cast<float>(std::min(0.5, std::sqrt(0.5) * std::exp(-entropy_of(x))) * z_of(x));
       }},
      {"mirostat v2", [&](std::vector<float>& x) { inferkit::apply_mirostat(std::span<float>(x), {.version = 2}, mu); },
       [&](std::vector<float>& x) { inferkit::reference::mirostat(x, {.version = 2}, mu); },
       [&](const std::vector<float>& x) { return static_cast<float>(z_of(x) * std::exp2(-double(mu))); }},
      {"xtc", [&](std::vector<float>& x) { inferkit::apply_xtc(std::span<float>(x), xtc, inferkit::CounterRng(1), 0); },
       [&](std::vector<float>& x) { inferkit::reference::xtc(x, xtc, 0.0); },
       [&](const std::vector<float>& x) { return static_cast<float>(double(xtc_threshold) * z_of(x)); }},
  };
  for (const Rule& rule : rules)
    for (unsigned seed = 1; seed <= 6; ++seed) {
      INFO(rule.name << ", seed " << seed);
      auto x = test::random_logits(4096, 900 + seed, 1.0f);
      const TokenId probe = 5;
      const float max = *std::max_element(x.begin(), x.end());
      for (int it = 0; it < 6; ++it) x[probe] = max + std::log(rule.threshold(x));  // Z depends on the probe
      REQUIRE(x[probe] < max);
      const float centre = x[probe];
      int below = 0, at_or_above = 0;
      for (int step = -24; step <= 24; ++step) {
        float l = centre;
        for (int k = 0; k < std::abs(step); ++k) l = std::nextafter(l, step > 0 ? INFINITY : -INFINITY);
        x[probe] = l;
        (weight(x, probe) >= rule.threshold(x) ? at_or_above : below) += 1;
        auto a = x, r = x;
        rule.fast(a);
        rule.ref(r);
        CHECK(test::same_bits(a, r));
      }
      CHECK(below > 0);  // the walk crossed the threshold
      CHECK(at_or_above > 0);
    }
}

TEST_CASE("epsilon and eta reject bad parameters", "[sampling][epsilon][eta][errors]") {
  auto x = log_probs({0.5f, 0.5f});
  CHECK_THROWS_WITH(inferkit::apply_epsilon_cutoff(x, {.epsilon = 0.0f}), Contains("epsilon_cutoff = 0"));
  CHECK_THROWS_WITH(inferkit::apply_epsilon_cutoff(x, {.epsilon = 1.0f}), Contains("epsilon_cutoff = 1"));
  CHECK_THROWS_WITH(inferkit::apply_eta_cutoff(x, {.epsilon = -0.5f}), Contains("eta_cutoff = -0.5"));
  CHECK_THROWS_WITH(inferkit::apply_eta_cutoff(x, {.epsilon = 0.1f, .min_keep = 0}), Contains("min_keep = 0"));
}

TEST_CASE("dynamic temperature: llama.cpp's vectors, closed forms and the reference", "[sampling][dynatemp]") {
  // test_temp_ext: delta 0 is the plain rule (T = 1 unchanged, T = 0 greedy).
  auto a = log_probs({0.1f, 0.2f, 0.3f, 0.4f});
  inferkit::apply_dynamic_temperature(a, {1.0f, 0.0f, 1.0f});
  CHECK(test::same_bits(a, log_probs({0.1f, 0.2f, 0.3f, 0.4f})));
  inferkit::apply_dynamic_temperature(a, {0.0f, 0.0f, 1.0f});
  CHECK(kept(a) == 1);
  CHECK(a[3] > -INFINITY);
  // .1 .2 .3 .4 with T 1, delta .5, exponent 1: T_dyn = .5 + 1 * H / ln 4.
  const std::vector<double> p{0.1, 0.2, 0.3, 0.4};
  double h = 0;
  for (double v : p) h -= v * std::log(v);
  for (float e : {1.0f, 0.5f, 2.0f}) {
    const double t = 0.5 + std::pow(h / std::log(4.0), double(e));
    auto x = log_probs({0.1f, 0.2f, 0.3f, 0.4f});
    inferkit::apply_dynamic_temperature(x, {1.0f, 0.5f, e});
    for (std::size_t i = 0; i < 4; ++i) CHECK(x[i] == Approx(std::log(p[i]) / t).epsilon(1e-6));
  }
  // Uniform: normalized entropy 1, T + delta. One dominant token: entropy 0, max(0, T - delta)
  // = 0 is greedy.
  std::vector<float> u(1000, 2.0f);
  inferkit::apply_dynamic_temperature(u, {0.7f, 0.3f, 1.0f});
  CHECK(u[0] == Approx(2.0 / 1.0).epsilon(1e-6));
  std::vector<float> peak(1000, -200.0f);
  peak[17] = 0.0f;
  inferkit::apply_dynamic_temperature(peak, {0.5f, 0.5f, 1.0f});
  CHECK(kept(peak) == 1);
  CHECK(peak[17] > -INFINITY);
  // Random rows: within float rounding of the reference, which computes -sum p log p directly.
  unsigned seed = 700;
  for (std::size_t n : kVocabs)
    for (float sigma : {0.5f, 2.0f, 6.0f}) {
      INFO("V = " << n << ", sigma = " << sigma);
      const inferkit::DynamicTemperature q{0.8f, 0.6f, seed % 2 ? 1.0f : 1.7f};
      auto x = test::random_logits(n, seed++, sigma, false, 0.1);
      auto r = x;
      inferkit::apply_dynamic_temperature(x, q);
      inferkit::reference::dynamic_temperature(r, q);
      for (std::size_t i = 0; i < n; ++i) {
        if (r[i] == -INFINITY) {
          REQUIRE(x[i] == -INFINITY);
        } else {
          REQUIRE(x[i] == Approx(r[i]).epsilon(1e-5));
        }
      }
    }
  CHECK_THROWS_WITH(inferkit::apply_dynamic_temperature(u, {1.0f, -0.1f, 1.0f}), Contains("dynatemp_range = -0.1"));
  CHECK_THROWS_WITH(inferkit::apply_dynamic_temperature(u, {1.0f, 0.5f, -1.0f}), Contains("dynatemp_exponent = -1"));
  CHECK_THROWS_WITH(inferkit::apply_dynamic_temperature(u, {-1.0f, 0.5f, 1.0f}), Contains("temperature = -1"));
}

TEST_CASE("Mirostat v1 estimates a Zipf exponent exactly and keeps the closed-form k", "[sampling][mirostat]") {
  // Zipf logits l_i = -s ln(i + 1): every b_i = s t_i, so the estimate is s and k follows the paper.
  const std::size_t n = 32000;
  for (double s : {0.7, 1.0, 1.1, 1.6})
    for (float mu : {3.0f, 6.0f, 10.0f}) {
      INFO("s = " << s << ", mu = " << mu);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(-s * std::log(double(i + 1)));
      const double eps = s - 1.0;
      const double k = std::abs(eps) < 1e-12
                           ? std::pow(std::exp2(mu) / std::log(double(n)), 1.0 / s)
                           : std::pow(eps * std::exp2(mu) / (1.0 - std::pow(double(n), -eps)), 1.0 / s);
      inferkit::apply_mirostat(x, {.version = 1, .tau = 5.0f}, mu);
      const auto expect = static_cast<Index>(std::clamp(std::floor(k), 1.0, double(n)));
      // float logits make the estimate s(1 + ~1e-7): k can only move across an integer by that.
      CHECK(std::abs(kept(x) - expect) <= 1);
      CHECK(x[0] > -INFINITY);
    }
}

TEST_CASE("Mirostat's truncation equals the sort-based definition", "[sampling][mirostat]") {
  unsigned seed = 900;
  for (int version : {1, 2})
    for (float mu : {0.5f, 4.0f, 10.0f, 30.0f})
      for (Index list_k : {0, 200}) {
        const inferkit::Mirostat q{version, 5.0f, 0.1f, 100};
        check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_mirostat(c, q, mu); },
                                [&](std::vector<float>& r) { inferkit::reference::mirostat(r, q, mu); }, seed, list_k,
                                list_k == 0 && (mu == 4.0f || mu == 10.0f));
      }
  // v2 keeps exactly the tokens with surprise <= mu: probabilities 1/2, 1/4, 1/8, 1/8 have
  // surprises 1, 2, 3, 3 bits.
  for (auto [mu, count] : std::vector<std::pair<float, Index>>{{0.5f, 1}, {1.0f, 1}, {2.5f, 2}, {3.01f, 4}}) {
    auto x = log_probs({0.125f, 0.5f, 0.25f, 0.125f});
    inferkit::apply_mirostat(x, {.version = 2}, mu);
    CHECK(kept(x) == count);
    CHECK(x[1] > -INFINITY);
  }
  auto x = log_probs({0.5f, 0.5f});
  CHECK_THROWS_WITH(inferkit::apply_mirostat(x, {.version = 3}, 1.0f), Contains("mirostat = 3"));
  CHECK_THROWS_WITH(inferkit::apply_mirostat(x, {.tau = 0.0f}, 1.0f), Contains("mirostat_tau = 0"));
  CHECK_THROWS_WITH(inferkit::apply_mirostat(x, {.eta = -1.0f}, 1.0f), Contains("mirostat_eta = -1"));
  CHECK_THROWS_WITH(inferkit::apply_mirostat(x, {.version = 1, .m = 1}, 1.0f), Contains("mirostat_m = 1"));
  CHECK_THROWS_WITH(inferkit::apply_mirostat(x, {}, NAN), Contains("mirostat_mu"));
}

TEST_CASE("top_p = 0 keeps the min_keep most probable, as llama.cpp and Hugging Face", "[sampling][top_p]") {
  // llama.cpp test_top_p({.1, .2, .3, .4}, {1.0}, 0): the top token alone.
  auto x = log_probs({0.1f, 0.2f, 0.3f, 0.4f});
  inferkit::apply_top_p(x, 0.0f);
  CHECK(kept(x) == 1);
  CHECK(x[3] > -INFINITY);
  unsigned seed = 1200;
  for (Index min_keep : {1, 2, 50})
    for (Index list_k : {0, 100})
      check_against_reference([&](inferkit::Candidates& c) { inferkit::apply_top_p(c, 0.0f, min_keep); },
                              [&](std::vector<float>& r) { inferkit::reference::top_p(r, 0.0f, min_keep); }, seed,
                              list_k, list_k == 0 && min_keep == 2);
}
