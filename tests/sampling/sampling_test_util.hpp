#pragma once
// Helpers for sampling tests: random logits with ties and -inf entries.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "inferkit/sampling/reference.hpp"

namespace test {

/// Gaussian logits of scale sigma; with `ties`, values are rounded to multiples of 0.25 so many
/// tokens share a logit; `masked` of them (roughly) are -inf.
inline std::vector<float> random_logits(std::size_t n, unsigned seed, float sigma = 3.0f, bool ties = false,
                                        double masked = 0.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> x(n);
  for (auto& v : x) {
    v = d(rng);
    if (ties) v = std::round(v * 4.0f) / 4.0f;
    if (u(rng) < masked) v = -std::numeric_limits<float>::infinity();
  }
  if (masked > 0.0 && n > 0) x[n / 2] = 1.0f;  // keep at least one finite
  return x;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

/// Natural logs of probabilities (logits whose softmax is `p`; log 0 = -inf).
inline std::vector<float> log_probs(const std::vector<float>& p) {
  std::vector<float> x;
  for (float v : p) x.push_back(std::log(v));
  return x;
}

/// Softmax of the finite logits (fp64), 0 for -inf.
inline std::vector<double> softmax(const std::vector<float>& x) {
  double mx = -INFINITY, z = 0;
  for (float v : x) mx = std::max(mx, double(v));
  std::vector<double> p(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) z += (p[i] = std::exp(double(x[i]) - mx));
  for (double& v : p) v /= z;
  return p;
}

/// A distribution over a small vocabulary.
using Dist = std::vector<float>;

/// Normalizes nonnegative weights to a float distribution.
inline Dist normalized(std::vector<double> w) {
  double s = 0;
  for (double x : w) s += x;
  Dist d(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) d[i] = static_cast<float>(w[i] / s);
  return d;
}

/// Gamma(0.7) weights, a fraction of them zero, never all zero.
inline Dist random_dist(std::size_t v, std::mt19937& rng, double zero_fraction = 0.0) {
  std::gamma_distribution<double> g(0.7, 1.0);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> w(v);
  for (auto& x : w) x = u(rng) < zero_fraction ? 0.0 : g(rng);
  w[rng() % v] += 0.5;  // never all zero
  return normalized(w);
}

/// Inverse-CDF draw from d with uniform u (an independent reference sampler).
inline inferkit::TokenId draw(const Dist& d, double u) {
  double c = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    c += d[i];
    if (u < c) return static_cast<inferkit::TokenId>(i);
  }
  for (std::size_t i = d.size(); i-- > 0;)
    if (d[i] > 0) return static_cast<inferkit::TokenId>(i);
  return 0;
}

// Chi-square statistic of counts against expected probabilities (cells with p = 0 must be empty).
inline double chi_square(const std::vector<long>& counts, const std::vector<double>& p, long n, bool& impossible) {
  double chi = 0;
  impossible = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      impossible = impossible || counts[i] > 0;
      continue;
    }
    const double e = p[i] * double(n);
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return chi;
}

// Upper 0.1% quantile of chi-square with df degrees of freedom (Wilson-Hilferty).
inline double chi2_critical(int df) {
  const double z = 3.0902;  // standard normal, p = 0.001
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

}  // namespace test
