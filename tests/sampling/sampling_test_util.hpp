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

}  // namespace test
