#pragma once
// Shared helpers of the steering tests: random rows and fp64 references.

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

namespace steering_test {

/// Lengths that hit every SIMD tail (widths 1, 4, 8, 16; two vectors per step) and a model width.
inline const std::vector<std::size_t> kDims = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 65, 100, 257, 4099};

inline std::vector<float> normal(std::size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  long double s = 0;  // products of floats are exact in long double too
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return static_cast<double>(s);
}
inline double norm(const std::vector<float>& a) { return std::sqrt(dot(a, a)); }
inline double abs_dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(double(a[i]) * b[i]);
  return s;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr double kEps = 1.0 / (1 << 24);  // unit roundoff of float

}  // namespace steering_test
